"""KernelKNeighborsClassifier against scikit-learn's k-NN on induced distances."""

import numpy as np
import pytest
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.model_selection import GridSearchCV, ShuffleSplit, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import KernelCenterer
from sklearn.utils.estimator_checks import parametrize_with_checks

from megkernel.neighbors import KernelKNeighborsClassifier, kernel_distances


def _points(n=60, n_features=5, n_classes=3, seed=0):
    rng = np.random.RandomState(seed)
    labels = rng.randint(n_classes, size=n)
    features = rng.normal(size=(n, n_features)) + labels[:, None]
    return features, labels


def _precomputed_knn(**params):
    return KNeighborsClassifier(metric="precomputed", algorithm="brute", **params)


def _split(n, seed=1):
    order = np.random.RandomState(seed).permutation(n)
    return order[: n // 2], order[n // 2:]


def _full_distances(K):
    return kernel_distances(K, np.diag(K), np.diag(K))


@parametrize_with_checks([KernelKNeighborsClassifier(),
                          KernelKNeighborsClassifier(n_neighbors=3)])
def test_sklearn_estimator_checks(estimator, check):
    if getattr(check, "func", check).__name__ == "check_positive_only_tag_during_fit":
        # the check subtracts the mean from the kernel's entries, which leaves
        # it indefinite: fit says so
        with pytest.warns(UserWarning, match="training kernel is not positive semidefinite"):
            check(estimator)
    else:
        check(estimator)


@pytest.mark.parametrize("n_neighbors", [1, 3, 7])
def test_uniform_equals_sklearn_on_euclidean_distances(n_neighbors):
    features, labels = _points()
    K = features @ features.T
    D = euclidean_distances(features)
    train, test = _split(len(labels))
    ours = KernelKNeighborsClassifier(n_neighbors=n_neighbors).fit(
        K[np.ix_(train, train)], labels[train])
    ref = _precomputed_knn(n_neighbors=n_neighbors).fit(
        D[np.ix_(train, train)], labels[train])
    K_test, D_test = K[np.ix_(test, train)], D[np.ix_(test, train)]
    np.testing.assert_array_equal(ours.predict(K_test), ref.predict(D_test))
    np.testing.assert_array_equal(ours.predict_proba(K_test), ref.predict_proba(D_test))


@pytest.mark.parametrize("n_neighbors", [1, 4])
def test_exact_ties_broken_as_sklearn(n_neighbors):
    # Identity kernel: all distances equal. Block kernel: many exact ties,
    # duplicated objects at distance zero. Labels alternate so ties matter.
    blocks = np.kron(np.eye(4), np.ones((5, 5))) + np.eye(20)
    for K in (np.eye(20) / 20, blocks, np.kron(np.ones((2, 2)), blocks)):
        labels_K = np.arange(len(K)) % 3
        train, test = _split(len(K))
        D = _full_distances(K)
        ours = KernelKNeighborsClassifier(n_neighbors=n_neighbors).fit(
            K[np.ix_(train, train)], labels_K[train])
        ref = _precomputed_knn(n_neighbors=n_neighbors).fit(
            D[np.ix_(train, train)], labels_K[train])
        np.testing.assert_array_equal(ours.predict(K[np.ix_(test, train)]),
                                      ref.predict(D[np.ix_(test, train)]))


def test_distance_weights_need_test_diagonal():
    features, labels = _points(seed=2)
    K = features @ features.T
    train, test = _split(len(labels))
    clf = KernelKNeighborsClassifier(n_neighbors=5, weights="distance").fit(
        K[np.ix_(train, train)], labels[train])
    with pytest.raises(ValueError, match="test_diagonal"):
        clf.predict(K[np.ix_(test, train)])
    with pytest.raises(ValueError, match="test_diagonal"):
        clf.predict_proba(K[np.ix_(test, train)])

    D = _full_distances(K)
    ref = _precomputed_knn(n_neighbors=5, weights="distance").fit(
        D[np.ix_(train, train)], labels[train])
    test_diagonal = np.diag(K)[test]
    np.testing.assert_array_equal(
        clf.predict_proba(K[np.ix_(test, train)], test_diagonal=test_diagonal),
        ref.predict_proba(D[np.ix_(test, train)]))


def test_test_diagonal_with_uniform_weights_gives_same_prediction():
    features, labels = _points(seed=3)
    K = features @ features.T
    train, test = _split(len(labels))
    clf = KernelKNeighborsClassifier(n_neighbors=3).fit(
        K[np.ix_(train, train)], labels[train])
    K_test = K[np.ix_(test, train)]
    np.testing.assert_array_equal(
        clf.predict(K_test), clf.predict(K_test, test_diagonal=np.diag(K)[test]))


def test_cross_val_score_slices_kernel_like_sklearn_slices_distances():
    features, labels = _points(n=80, seed=4)
    K = features @ features.T
    cv = ShuffleSplit(n_splits=6, test_size=0.5, random_state=0)
    ours = cross_val_score(KernelKNeighborsClassifier(n_neighbors=3), K, labels, cv=cv)
    ref = cross_val_score(_precomputed_knn(n_neighbors=3),
                          euclidean_distances(features), labels, cv=cv)
    np.testing.assert_array_equal(ours, ref)


def test_pipeline_with_kernel_centering_keeps_predictions():
    # Centering in feature space does not move distances; under pairwise
    # slicing it shifts each test row's ranking by a constant.
    features, labels = _points(n=70, seed=5)
    K = features @ features.T
    cv = ShuffleSplit(n_splits=5, test_size=0.4, random_state=1)
    plain = cross_val_score(KernelKNeighborsClassifier(), K, labels, cv=cv)
    centred = cross_val_score(
        make_pipeline(KernelCenterer(), KernelKNeighborsClassifier()), K, labels, cv=cv)
    np.testing.assert_array_equal(plain, centred)


@pytest.mark.slow
def test_grid_search_over_n_neighbors_matches_sklearn():
    features, labels = _points(n=90, seed=6)
    K = features @ features.T
    grid = {"n_neighbors": [1, 3, 5, 9]}
    cv = ShuffleSplit(n_splits=4, test_size=0.5, random_state=2)
    ours = GridSearchCV(KernelKNeighborsClassifier(), grid, cv=cv, n_jobs=2).fit(K, labels)
    ref = GridSearchCV(_precomputed_knn(), grid, cv=cv).fit(
        euclidean_distances(features), labels)
    np.testing.assert_array_equal(ours.cv_results_["mean_test_score"],
                                  ref.cv_results_["mean_test_score"])
    assert ours.best_params_ == ref.best_params_


@pytest.mark.parametrize(
    ("X", "match"),
    [
        (np.ones((4, 3)), "square"),
        (np.array([[1.0, 0.5, 0], [0.4, 1, 0], [0, 0, 1]]), "symmetric"),
        (np.array([[1.0, np.nan, 0], [np.nan, 1, 0], [0, 0, 1]]), "NaN"),
    ],
)
def test_fit_rejects_bad_kernels(X, match):
    with pytest.raises(ValueError, match=match):
        KernelKNeighborsClassifier().fit(X, np.arange(len(X)) % 2)


def test_predict_rejects_bad_shapes():
    clf = KernelKNeighborsClassifier().fit(np.eye(4), [0, 0, 1, 1])
    with pytest.raises(ValueError, match="features"):
        clf.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        clf.predict(np.ones((2, 4)), test_diagonal=np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(np.ones((2, 4)), test_diagonal=[1.0, np.nan])


def test_more_neighbors_than_training_objects_are_refused():
    # values outside the parameter constraints: test_contracts.py
    with pytest.raises(ValueError, match="n_neighbors"):
        KernelKNeighborsClassifier(n_neighbors=5).fit(np.eye(3), [0, 1, 1]).predict(
            np.eye(3))


# -- kernels near the float limits and indefinite ones (issue 22) -----------------

_HUGE = 0.9 * np.finfo(float).max


def _gram(seed=0):
    features, labels = _points(n=12, seed=seed)
    return features @ features.T, labels


@pytest.mark.parametrize("factor", [_HUGE, 1e-300])
def test_kernel_to_distances_at_any_scale_is_the_scaled_unit_answer(factor):
    from megkernel.neighbors import kernel_to_distances

    K, _ = _gram()
    K = K / np.abs(K).max()  # largest entry 1: the reference, computed directly
    expected = euclidean_distances(np.linalg.cholesky(K + 1e-12 * np.eye(len(K))))
    D = kernel_to_distances(factor * K)
    assert np.all(np.isfinite(D))
    np.testing.assert_allclose(D / np.sqrt(factor), expected, rtol=1e-6, atol=1e-6)


def test_kernel_to_distances_squared_beyond_the_float_range_is_refused():
    from megkernel.neighbors import kernel_to_distances

    K = _HUGE * np.array([[1.0, -1.0], [-1.0, 1.0]])  # squared distance 4 x max
    assert np.isfinite(kernel_to_distances(K)).all()
    with pytest.raises(ValueError, match="exceeds the float range"):
        kernel_to_distances(K, squared=True)


def test_kernel_to_distances_warns_on_an_indefinite_kernel_like_the_classifier():
    from megkernel.neighbors import kernel_to_distances

    K = np.array([[1.0, 2.0], [2.0, 1.0]])  # squared distance 1 + 1 - 4 = -2
    with pytest.warns(UserWarning, match="The kernel K is not positive semidefinite"):
        D = kernel_to_distances(K)
    np.testing.assert_array_equal(D, 0.0)  # clipped, as documented
    with pytest.warns(UserWarning, match="The training kernel is not positive"):
        KernelKNeighborsClassifier().fit(K, [0, 1])


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_on_a_kernel_near_the_float_maximum(weights):
    """The whole kernel at the float maximum: the same votes as at unit scale."""
    K, labels = _gram()
    K = K / np.abs(K).max()
    train, test = _split(len(K))
    votes = []
    for factor in (1.0, _HUGE):
        model = KernelKNeighborsClassifier(n_neighbors=3, weights=weights).fit(
            factor * K[np.ix_(train, train)], labels[train])
        votes.append(model.predict_proba(factor * K[np.ix_(test, train)],
                                         test_diagonal=factor * np.diag(K)[test]))
        if weights == "uniform":
            votes.append(model.predict_proba(factor * K[np.ix_(test, train)]))
    assert np.all(np.isfinite(votes))
    for vote in votes[1:]:
        np.testing.assert_allclose(vote, votes[0])


def test_classifier_on_test_rows_far_larger_than_the_training_kernel():
    """Test rows near the float maximum after a training kernel near 1e-200
    (no kernel has both, but nothing stops a user passing them): finite
    rankings and votes, never NaN (they were NaN: inf - inf)."""
    K, labels = _gram()
    K = K / np.abs(K).max()
    train, test = _split(len(K))
    model = KernelKNeighborsClassifier(n_neighbors=3).fit(
        1e-200 * K[np.ix_(train, train)], labels[train])
    rows = _HUGE * K[np.ix_(test, train)]
    assert np.all(np.isfinite(model._query_distances(rows, None)))
    assert np.all(np.isfinite(model.predict_proba(rows)))
