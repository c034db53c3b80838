"""metric-learn's API contracts, checked on our four metric learners.

Written from metric-learn's documented API (``BaseMetricLearner``,
``MahalanobisMixin``, ``_PairsClassifierMixin``): ``preprocessor``,
``get_metric``, ``pair_distance``, ``pair_score`` (minus the distance),
``score_pairs`` (deprecated), the pair learners' ``decision_function``,
``predict``, ``set_threshold``, ``calibrate_threshold`` and
``calibration_params``. Each calibration strategy is checked against a brute
force over every threshold.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.metrics import fbeta_score
from sklearn.preprocessing import StandardScaler

from megkernel import (
    DefiniteBoostMetric,
    DefiniteBoostPairMetric,
    MEGMetric,
    MEGPairMetric,
    draw_pairs,
)

#: Short fixed lengths: the contracts, not the validation, are under test.
FAST = {MEGMetric: {"n_epochs": 1, "from_labels": "random"},
        MEGPairMetric: {"n_epochs": 1},
        DefiniteBoostMetric: {"max_iter": 30, "init": "euclidean"},
        DefiniteBoostPairMetric: {"max_iter": 30, "init": "euclidean"}}
LEARNERS = list(FAST)
PAIR_LEARNERS = [MEGPairMetric, DefiniteBoostPairMetric]


def _data():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    pairs, signs = draw_pairs(y, 60, random_state=0)
    return X, y, pairs, signs


def _fit(Learner, **params):
    """Return a fitted learner and the data: points and labels, or pairs of points."""
    X, y, pairs, signs = _data()
    model = Learner(random_state=0, **FAST[Learner], **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if Learner in PAIR_LEARNERS:
            model.fit(X[pairs], signs)
        else:
            model.fit(X, y)
    return model, X, pairs, signs


@pytest.mark.parametrize("Learner", LEARNERS)
def test_pair_distance_score_and_get_metric_agree(Learner):
    model, X, pairs, _ = _fit(Learner)
    Z = model.transform(X)
    expected = np.linalg.norm(Z[pairs[:, 0]] - Z[pairs[:, 1]], axis=1)
    distances = model.pair_distance(X[pairs])
    np.testing.assert_allclose(distances, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(model.pair_score(X[pairs]), -distances)
    M = model.get_mahalanobis_matrix()
    diffs = X[pairs[:, 0]] - X[pairs[:, 1]]
    np.testing.assert_allclose(distances**2, np.einsum("ij,jk,ik->i", diffs, M, diffs),
                               rtol=1e-9)
    metric = model.get_metric()
    for (a, b), d in zip(pairs[:10], distances[:10]):
        assert metric(X[a], X[b]) == pytest.approx(d, rel=1e-10, abs=1e-12)
        assert metric(X[a], X[b], squared=True) == pytest.approx(d**2, rel=1e-10, abs=1e-12)
    with pytest.raises(ValueError, match="1-D"):
        metric(X[:2], X[2:4])
    # as metric-learn's validate_vector: lists and (1, d) rows are points
    assert metric(X[:1], X[1:2].tolist()) == metric(X[0], X[1])
    with pytest.raises(ValueError, match="the 4 features the metric was fitted with, got 3"):
        metric(X[0, :3], X[1, :3])


@pytest.mark.parametrize("Learner", LEARNERS)
def test_get_metric_is_independent_of_a_later_fit(Learner):
    model, X, pairs, _ = _fit(Learner)
    metric = model.get_metric()
    before = metric(X[0], X[1])
    model.components_ = 2 * model.components_  # as a refit would change them
    assert metric(X[0], X[1]) == before


@pytest.mark.parametrize("Learner", LEARNERS)
def test_score_pairs_is_deprecated_for_pair_distance(Learner):
    model, X, pairs, _ = _fit(Learner)
    with pytest.warns(FutureWarning, match="pair_score.*pair_distance"):
        scores = model.score_pairs(X[pairs])
    np.testing.assert_array_equal(scores, model.pair_distance(X[pairs]))


@pytest.mark.parametrize("Learner", LEARNERS)
def test_transform_is_the_linear_map_of_components(Learner):
    """transform(x) = (x - mean_) @ components_.T: differences of embeddings are
    metric-learn's linear map of the differences (the shift is documented)."""
    model, X, pairs, _ = _fit(Learner)
    Z = model.transform(X)
    np.testing.assert_allclose(Z[pairs[:, 0]] - Z[pairs[:, 1]],
                               (X[pairs[:, 0]] - X[pairs[:, 1]]) @ model.components_.T,
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("Learner", LEARNERS)
@pytest.mark.parametrize("kind", ["array", "callable"])
def test_preprocessor_resolves_indices_as_the_points_themselves(Learner, kind):
    X, y, pairs, signs = _data()
    preprocessor = X if kind == "array" else (lambda indices: X[indices])
    plain = Learner(random_state=0, **FAST[Learner])
    indexed = Learner(random_state=0, preprocessor=preprocessor, **FAST[Learner])
    assert "preprocessor" in indexed.get_params()
    assert clone(indexed).get_params()["preprocessor"] is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if Learner in PAIR_LEARNERS:
            plain.fit(X[pairs], signs)
            indexed.fit(pairs, signs)
        else:
            plain.fit(X, y)
            indexed.fit(np.arange(len(X)), y)
    np.testing.assert_array_equal(indexed.components_, plain.components_)
    assert indexed.preprocessor_ is preprocessor
    np.testing.assert_array_equal(indexed.pair_distance(pairs), plain.pair_distance(X[pairs]))
    np.testing.assert_array_equal(indexed.transform(np.arange(5)), plain.transform(X[:5]))
    np.testing.assert_array_equal(indexed.transform(X[:5]), plain.transform(X[:5]))
    if Learner in PAIR_LEARNERS:
        np.testing.assert_array_equal(indexed.predict(pairs), plain.predict(X[pairs]))
        assert indexed.score(pairs, signs) == plain.score(X[pairs], signs)


def test_an_array_preprocessor_refuses_indices_outside_it():
    X, y, _, _ = _data()
    model = MEGMetric(preprocessor=X, **FAST[MEGMetric])
    with pytest.raises(ValueError, match="outside the preprocessor's 150 rows"):
        model.fit(np.array([0, 1, 150]), [0, 1, 1])
    with pytest.raises(ValueError, match="integer indices"):
        model.fit(np.array([0.5, 1.0, 2.0]), [0, 1, 1])
    assert not hasattr(model, "components_")


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_pair_decision_function_predict_and_set_threshold(Learner):
    model, X, pairs, signs = _fit(Learner)
    scores = model.decision_function(X[pairs])
    np.testing.assert_array_equal(scores, model.pair_score(X[pairs]))
    np.testing.assert_array_equal(model.predict(X[pairs]),
                                  np.where(-scores <= model.threshold_, 1, -1))
    assert set(np.unique(model.predict(X[pairs]))) <= {-1, 1}
    median = float(np.median(-scores))
    assert model.set_threshold(median) is model and model.threshold_ == median
    assert np.mean(model.predict(X[pairs]) == 1) >= 0.5
    model.set_threshold(-1.0)  # below every distance: nothing similar
    assert np.all(model.predict(X[pairs]) == -1)
    for bad in ["0.5", None, [1.0]]:
        with pytest.raises(ValueError, match="threshold must be a real number"):
            model.set_threshold(bad)
    del model.threshold_
    with pytest.raises(AttributeError, match="set_threshold or calibrate_threshold"):
        model.predict(X[pairs])


def _brute_force(distances, signs, criterion):
    """Best value of ``criterion(predicted, signs)`` over every threshold."""
    cuts = np.r_[distances.min() - 1.0, np.unique(distances)]
    return max(criterion(np.where(distances <= cut, 1, -1), signs) for cut in cuts)


def _rates(predicted, signs):
    tpr = np.mean(predicted[signs > 0] == 1)
    tnr = np.mean(predicted[signs < 0] == -1)
    return tpr, tnr


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
@pytest.mark.parametrize("strategy, params", [
    ("accuracy", {}), ("f_beta", {"beta": 1.0}), ("f_beta", {"beta": 0.3}),
    ("max_tpr", {"min_rate": 0.8}), ("max_tnr", {"min_rate": 0.9})])
def test_calibrate_threshold_maximises_its_criterion(Learner, strategy, params):
    model, X, pairs, signs = _fit(Learner)
    rng = np.random.default_rng(1)
    noisy = np.where(rng.random(len(signs)) < 0.15, -signs, signs)  # not separable
    model.calibrate_threshold(X[pairs], noisy, strategy=strategy, **params)
    distances = model.pair_distance(X[pairs])
    predicted = model.predict(X[pairs])
    if strategy == "accuracy":
        def criterion(p, s):
            return np.mean(p == s)
    elif strategy == "f_beta":
        def criterion(p, s):
            return fbeta_score(s, p, beta=params["beta"], zero_division=0.0)
    elif strategy == "max_tpr":
        def criterion(p, s):
            tpr, tnr = _rates(p, s)
            return tpr if tnr >= params["min_rate"] else -np.inf
    else:
        def criterion(p, s):
            tpr, tnr = _rates(p, s)
            return tnr if tpr >= params["min_rate"] else -np.inf
    assert criterion(predicted, noisy) == pytest.approx(
        _brute_force(distances, noisy, criterion), abs=1e-12)


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_calibration_params_in_fit_are_calibrate_threshold_after_fit(Learner):
    params = {"strategy": "max_tnr", "min_rate": 0.7}
    X, _, pairs, signs = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Learner(random_state=0, **FAST[Learner]).fit(
            X[pairs], signs, calibration_params=params)
        reference = Learner(random_state=0, **FAST[Learner]).fit(X[pairs], signs)
    reference.calibrate_threshold(X[pairs], signs, **params)
    assert model.threshold_ == reference.threshold_


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
@pytest.mark.parametrize("params, message", [
    ({"strategy": "roc"}, "strategy must be"),
    ({"strategy": "max_tpr"}, "min_rate must be a number in"),
    ({"strategy": "max_tnr", "min_rate": 1.5}, "min_rate must be a number in"),
    ({"strategy": "f_beta", "beta": "one"}, "beta must be a finite real number"),
    ({"strategy": "f_beta", "beta": float("nan")}, "beta must be a finite real number")])
def test_bad_calibration_params_are_refused_before_the_fit(Learner, params, message):
    X, _, pairs, signs = _data()
    model = Learner(**FAST[Learner])
    with pytest.raises(ValueError, match=message):
        model.fit(X[pairs], signs, calibration_params=params)
    assert not hasattr(model, "components_")
    model, X, pairs, signs = _fit(Learner)
    with pytest.raises(ValueError, match=message):
        model.calibrate_threshold(X[pairs], signs, **params)


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_a_dissimilar_pair_of_identical_points_is_left_out_with_a_warning(Learner):
    X, _, pairs, signs = _data()
    pairs_of_points = X[pairs]
    pairs_of_points[0, 1] = pairs_of_points[0, 0]
    signs = signs.copy()
    signs[0] = -1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Dropped")
        warnings.filterwarnings("ignore", category=UserWarning,
                                message="(?!1 dissimilar pairs join)")
        with pytest.warns(UserWarning, match="1 dissimilar pairs join a point to itself"):
            model = Learner(random_state=0, **FAST[Learner]).fit(pairs_of_points, signs)
    assert model.predict(pairs_of_points[:1])[0] == 1  # distance 0: as similar as can be


@pytest.mark.parametrize("Learner", [DefiniteBoostMetric, DefiniteBoostPairMetric])
def test_definiteboost_init_options_of_metric_learn(Learner):
    """'identity' is the Euclidean prior; 'covariance', 'random' and an array start
    from their linear map L: with the prior kept (max_iter=1 barely moves it),
    the learned distances are close to ||L (x - x')||, and exactly L's when no
    projection runs (a fold validation choosing 0 is not needed: compare at 1)."""
    X, y, pairs, signs = _data()
    centred = X - X.mean(axis=0)
    U, s, Vt = np.linalg.svd(centred, full_matrices=False)
    covariance_map = np.sqrt(len(X) - 1) * Vt / s[:, None]
    given = np.random.default_rng(5).normal(size=(3, 4))
    fits = {}
    for init in ["euclidean", "identity", "covariance", "random", given]:
        model = Learner(init=init, max_iter=1, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if Learner is DefiniteBoostPairMetric:
                model.fit(X[pairs], signs)
            else:
                model.fit(X, y)
        key = init if isinstance(init, str) else "given"
        fits[key] = model
        assert model.init_ == ("euclidean" if key == "identity" else key)
    np.testing.assert_array_equal(fits["identity"].components_, fits["euclidean"].components_)
    new = np.random.default_rng(2).normal(size=(8, 4))
    all_pairs = np.argwhere(np.ones((8, 8), bool))
    for key, linear in [("covariance", covariance_map), ("given", given)]:
        # the projections keep the trace: compare the distances' shape, up to a scale
        learned = fits[key].pair_distance(new[all_pairs])
        expected = np.linalg.norm((new[all_pairs[:, 0]] - new[all_pairs[:, 1]]) @ linear.T,
                                  axis=1)
        ratio = learned[expected > 0] / expected[expected > 0]
        assert np.std(ratio) / np.mean(ratio) < 0.2  # one projection: close to L's metric
    assert fits["given"].n_components_ <= 3
    with pytest.raises(ValueError, match=r"init as an array is the prior's linear map"):
        DefiniteBoostMetric(init=np.ones((2, 3))).fit(X, y)
    with pytest.raises(ValueError, match="init contains NaN"):
        DefiniteBoostMetric(init=np.full((2, 4), np.nan)).fit(X, y)


@pytest.mark.parametrize("Learner", LEARNERS)
def test_transform_embeds_points_and_names_pairs_given_instead(Learner):
    """As metric-learn's MahalanobisMixin.transform: points (or 1-D indices
    through a preprocessor) for every learner, the pair learners included;
    pairs of points are refused with a message saying what to do."""
    model, X, pairs, _ = _fit(Learner)
    expected = (X[:5] - model.mean_) @ model.components_.T
    np.testing.assert_allclose(model.transform(X[:5]), expected, rtol=1e-12, atol=1e-12)
    indexed, *_ = _fit(Learner, preprocessor=X)
    np.testing.assert_allclose(indexed.transform(np.arange(5)), indexed.transform(X[:5]),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"pairs of points.*pair_distance.*fit\(X, y\)"):
        model.transform(X[pairs[:3]])


def test_a_learner_of_points_goes_before_a_knn_classifier_in_a_pipeline():
    """The documented pipeline (metric-learn's *_Supervised place): MEGMetric
    learns from the labels the pipeline is fitted with; the k-NN classifier
    sees the embedding."""
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    X, y, _, _ = _data()
    pipeline = make_pipeline(MEGMetric(random_state=0, **FAST[MEGMetric]),
                             KNeighborsClassifier(n_neighbors=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline.fit(X[::2], y[::2])
    metric = pipeline.steps[0][1]
    knn = KNeighborsClassifier(n_neighbors=1).fit(metric.transform(X[::2]), y[::2])
    np.testing.assert_array_equal(pipeline.predict(X[1::2]),
                                  knn.predict(metric.transform(X[1::2])))


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_pair_learners_are_classifiers_so_cross_validation_stratifies(Learner):
    """As metric-learn's pair learners (ClassifierMixin): cross_val_score with an
    integer cv stratifies the pairs, so pairs listed by kind (as draw_pairs
    gives them) still leave both kinds in every fold."""
    from sklearn.base import is_classifier
    from sklearn.model_selection import cross_val_score

    X, _, pairs, signs = _data()
    assert signs[0] == 1 and signs[-1] == -1  # listed by kind: plain folds hold one kind
    assert is_classifier(Learner())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        scores = cross_val_score(Learner(random_state=0, **FAST[Learner]), X[pairs], signs,
                                 cv=3, scoring="roc_auc")
    assert np.all(np.isfinite(scores))


@pytest.mark.parametrize("Learner", LEARNERS)
def test_a_callable_preprocessor_is_called_with_1d_indicators_as_in_metric_learn(Learner):
    """metric-learn calls a callable preprocessor with a 1-D array of indicators
    (once per column of index pairs): a loader that iterates over names, as in
    its documentation, works unchanged; index pairs without a preprocessor are
    refused with a message naming it."""
    X, y, pairs, signs = _data()
    names = np.array([f"img{i}.png" for i in range(len(X))])

    def load(indicators):
        return np.array([X[int(name[3:-4])] for name in indicators])

    plain = _fit(Learner)[0]
    named = Learner(random_state=0, preprocessor=load, **FAST[Learner])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if Learner in PAIR_LEARNERS:
            named.fit(names[pairs], signs)
        else:
            named.fit(names, y)
    np.testing.assert_allclose(named.components_, plain.components_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(named.pair_distance(names[pairs]), plain.pair_distance(X[pairs]),
                               rtol=1e-12, atol=1e-14)
    if Learner in PAIR_LEARNERS:
        np.testing.assert_array_equal(named.predict(names[pairs]), plain.predict(X[pairs]))
    for given in (pairs, names[pairs]):
        with pytest.raises(ValueError, match="need a preprocessor"):
            plain.pair_distance(given)
    broken = Learner(preprocessor=lambda names: np.ones((len(names), 2, 2)))
    with pytest.raises(ValueError, match="one point per indicator of (pairs|X)"):
        if Learner in PAIR_LEARNERS:
            broken.fit(pairs, signs)
        else:
            broken.fit(np.arange(len(X)), y)


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
@pytest.mark.parametrize("params, message", [
    ({"strategy": "accuracy", "min_rte": 0.5}, r"unknown keys \['min_rte'\]"),
    ([("strategy", "accuracy")], "calibration_params must be a dict"),
    ({"strategy": "max_tpr", "min_rate": float("nan")}, "min_rate must be a number in")])
def test_calibration_params_of_fit_are_refused_by_name_before_the_fit(Learner, params, message):
    """A misspelt key or a list in fit's calibration_params: a ValueError in the
    user's terms before any state changes (not a TypeError naming a private
    function)."""
    X, _, pairs, signs = _data()
    model = Learner(**FAST[Learner])
    with pytest.raises(ValueError, match=message):
        model.fit(X[pairs], signs, calibration_params=params)
    assert not hasattr(model, "components_")


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_set_threshold_needs_a_fitted_learner_and_a_number(Learner):
    """As metric-learn's: NotFittedError before a fit, a 0-d array is a number;
    NaN (which would predict every pair dissimilar) is refused."""
    from sklearn.exceptions import NotFittedError

    unfitted = Learner()
    with pytest.raises(NotFittedError):
        unfitted.set_threshold(0.5)
    assert "threshold_" not in vars(unfitted)
    model = _fit(Learner)[0]
    assert model.set_threshold(np.array(0.75)).threshold_ == 0.75
    assert model.set_threshold(np.float32(0.5)).threshold_ == 0.5
    with pytest.raises(ValueError, match="threshold must be a real number, got NaN"):
        model.set_threshold(float("nan"))
    assert model.threshold_ == 0.5


@pytest.mark.parametrize("Learner", [MEGMetric, MEGPairMetric])
def test_partial_fit_resolves_indices_through_the_preprocessor(Learner):
    """Our on-line extra speaks the preprocessor's convention too: 1-D indices of
    points (a chunk with class labels) and, for the pair learner, index pairs
    (as its fit)."""
    X, y, pairs, signs = _data()
    plain = _fit(Learner)[0]
    indexed = _fit(Learner, preprocessor=X)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain.partial_fit(X[pairs[:10]], signs[:10])
        plain.partial_fit(X[::3], y[::3])
        if Learner is MEGPairMetric:
            indexed.partial_fit(pairs[:10], signs[:10])
        else:
            indexed.partial_fit(X[pairs[:10]], signs[:10])
        indexed.partial_fit(np.arange(0, len(X), 3), y[::3])
    assert indexed.n_pairs_seen_ == plain.n_pairs_seen_
    np.testing.assert_allclose(indexed.components_, plain.components_, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_messages_name_a_single_pair_and_a_pair_kind_missing(Learner):
    """One pair given as a 2-D array is told how to pass it; max_tnr on labels
    without a similar pair says so (no threshold has a true positive rate)."""
    model, X, pairs, signs = _fit(Learner)
    with pytest.raises(ValueError, match=r"one pair of points is X\[np.newaxis\]"):
        model.pair_distance(X[pairs[0]])
    with pytest.raises(ValueError, match=r"got shape \(10, \d+\)\.$"):  # points: no hint
        model.predict(X[:10])
    threshold = model.threshold_
    with pytest.raises(ValueError, match="y holds no similar pair"):
        model.calibrate_threshold(X[pairs], -np.ones(len(pairs)), strategy="max_tnr",
                                  min_rate=0.5)
    assert model.threshold_ == threshold


def test_an_array_preprocessor_is_indexed_without_copying_it():
    """Index pairs with a preprocessor are metric-learn's memory-light form: only
    the rows named are read (a float32 table is not converted whole per call)."""
    import tracemalloc

    X, y, pairs, signs = _data()
    table = np.zeros((200_000, 4), dtype=np.float32)
    table[:len(X)] = X
    model = _fit(MEGMetric)[0].set_params(preprocessor=table)
    tracemalloc.start()
    try:
        distances = model.pair_distance(pairs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(distances, model.pair_distance(table[pairs].astype(float)),
                               rtol=1e-12)
    assert peak < table.nbytes / 10


@pytest.mark.parametrize("Learner", PAIR_LEARNERS)
def test_thresholds_and_rates_take_any_real_number(Learner):
    """A Fraction (a numbers.Real numpy's isnan cannot take) is a threshold, a beta
    and a min_rate like the float it equals."""
    from fractions import Fraction

    model, X, pairs, signs = _fit(Learner)
    assert model.set_threshold(Fraction(1, 2)).threshold_ == 0.5
    for strategy, params in [("f_beta", {"beta": Fraction(1, 2)}),
                             ("max_tpr", {"min_rate": Fraction(1, 2)})]:
        as_float = {key: float(value) for key, value in params.items()}
        expected = model.calibrate_threshold(X[pairs], signs, strategy=strategy,
                                             **as_float).threshold_
        assert model.calibrate_threshold(X[pairs], signs, strategy=strategy,
                                         **params).threshold_ == expected
