"""Users' own data: object ids of any kind, distances in any units."""

import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import GridSearchCV, ShuffleSplit, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from megkernel import (
    DefiniteBoostKernel,
    KernelDistances,
    MEGKernelRegressor,
    NoImprovementWarning,
    kernel_to_distances,
    nearest_neighbor_error,
)
from megkernel.datasets import load_wine_kernel
from megkernel.objects import cache_info, clear_cache


def _table(d=8, n=400, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(d, 3))
    a, b = rng.integers(0, d, n), rng.integers(0, d, n)
    y = np.sum((features[a] - features[b]) ** 2, axis=1)
    return a, b, y


NAMES = np.array(["P0A7Z4", "Q9HV16", "A0A0B1", "B7MCJ2", "C3TQN8", "D5EXK1",
                  "E1W2R3", "F8G6H4"])


def test_string_ids_give_the_kernel_of_their_indices():
    a, b, y = _table()
    order = np.argsort(NAMES)                      # objects_ are the sorted ids
    rank = np.empty(len(NAMES), int)
    rank[order] = np.arange(len(NAMES))
    table = pd.DataFrame({"protein_a": NAMES[a], "protein_b": NAMES[b], "dist": y})
    by_id = MEGKernelRegressor(solver="online",
                               trace=40.0).fit(table[["protein_a", "protein_b"]], table["dist"])
    by_index = MEGKernelRegressor(solver="online", trace=40.0, n_objects=8).fit(
        np.column_stack([rank[a], rank[b]]), y)
    assert_array_equal(by_id.objects_, np.sort(NAMES))
    assert_allclose(by_id.kernel_, by_index.kernel_, rtol=1e-12, atol=1e-15)
    assert list(by_id.feature_names_in_) == ["protein_a", "protein_b"]
    assert_allclose(by_id.predict(table[["protein_a", "protein_b"]]),
                    by_index.predict(np.column_stack([rank[a], rank[b]])), rtol=1e-12)
    block = by_id.kernel_entries(["Q9HV16", "P0A7Z4"], ["F8G6H4"])
    rows = [rank[1], rank[0]]
    assert_allclose(block, by_index.kernel_[np.ix_(rows, [rank[7]])], rtol=1e-12)


def test_declared_objects_fix_the_order_and_unknown_ids_are_refused_named(
        assert_unchanged_on_error):
    a, b, y = _table()
    model = MEGKernelRegressor(solver="online", objects=NAMES, trace=40.0)
    model.partial_fit(np.column_stack([NAMES[a[:100]], NAMES[b[:100]]]), y[:100])
    assert_array_equal(model.objects_, NAMES)       # the declared order
    reference = MEGKernelRegressor(solver="online", n_objects=8, trace=40.0).partial_fit(
        np.column_stack([a[:100], b[:100]]), y[:100])
    assert_allclose(model.kernel_, reference.kernel_, rtol=1e-12, atol=1e-15)
    with assert_unchanged_on_error(model, ValueError,
                                   match="'Z9Z9Z9'.*not one of the model's 8 objects"):
        model.partial_fit([["P0A7Z4", "Z9Z9Z9"]], [0.5])
    with pytest.raises(ValueError, match="distinct ids.*'Q9HV16' repeats"):
        MEGKernelRegressor(solver="online", objects=["P0A7Z4", "Q9HV16", "Q9HV16"]).fit(
            [["P0A7Z4", "Q9HV16"]], [1.0])


def test_categorical_pairs_use_their_categories_and_integer_ids_may_be_named():
    a, b, y = _table()
    categories = list("hgfedcba")
    table = pd.DataFrame({"a": pd.Categorical(np.array(categories)[a], categories=categories),
                          "b": pd.Categorical(np.array(categories)[b], categories=categories)})
    model = MEGKernelRegressor(solver="online", trace=40.0).fit(table, y)
    assert list(model.objects_) == categories
    reference = MEGKernelRegressor(solver="online",
                                   n_objects=8, trace=40.0).fit(np.column_stack([a, b]), y)
    assert_allclose(model.kernel_, reference.kernel_, rtol=1e-12, atol=1e-15)
    # integer ids that are not 0..d-1 (e.g. database keys), declared
    keys = np.arange(8) * 1000 + 17
    keyed = MEGKernelRegressor(solver="online",
                               objects=keys, trace=40.0).fit(np.column_stack([keys[a], keys[b]]), y)
    assert_allclose(keyed.kernel_, reference.kernel_, rtol=1e-12, atol=1e-15)


def test_definiteboost_takes_ids_too():
    pairs = np.array([["x", "y"], ["y", "z"], ["u", "v"]])
    model = DefiniteBoostKernel(validation_fraction=None).fit(pairs, [1, 1, 0])
    assert_array_equal(model.objects_, ["u", "v", "x", "y", "z"])
    reference = DefiniteBoostKernel(n_objects=5, validation_fraction=None).fit(
        [[2, 3], [3, 4], [0, 1]], [1, 1, -1])
    assert_allclose(model.kernel_, reference.kernel_, rtol=1e-12, atol=1e-15)
    assert_array_equal(model.predict([["x", "y"], ["u", "v"]]), reference.predict([[2, 3], [0, 1]]))


@pytest.mark.parametrize("factor", [1e-6, 1.0, 1e6, 1e60])
def test_auto_trace_makes_the_units_irrelevant(factor):
    a, b, y = _table(d=12, n=3000, seed=3)
    pairs = np.column_stack([a, b])
    base = MEGKernelRegressor(solver="online", n_objects=12).fit(pairs, y)
    scaled = MEGKernelRegressor(solver="online", n_objects=12).fit(pairs, factor * y)
    assert scaled.trace_ == pytest.approx(factor * base.trace_, rel=1e-12)
    assert_allclose(scaled.kernel_, factor * base.kernel_, rtol=1e-9,
                    atol=1e-12 * factor * np.abs(base.kernel_).max())
    assert_allclose(scaled.predict(pairs[:50]), factor * base.predict(pairs[:50]), rtol=1e-9)
    assert scaled.score(pairs, factor * y) == pytest.approx(base.score(pairs, y), abs=1e-9)


def test_auto_trace_is_the_prior_at_the_targets_mean_distance():
    a, b, y = _table(d=12, n=500, seed=4)
    model = MEGKernelRegressor(solver="online", n_objects=12).fit(np.column_stack([a, b]), y)
    moving = a != b
    assert model.trace_ == pytest.approx(12 * y[moving].mean() / 2, rel=1e-12)
    assert np.trace(model.kernel_) == pytest.approx(model.trace_, rel=1e-12)
    # a fixed trace is used as given, and unreachable targets are named once
    with pytest.warns(NoImprovementWarning, match="on-line trials predicted"), \
            pytest.warns(UserWarning, match=r"targets \(up to .*\) exceed 2 \* trace"):
        MEGKernelRegressor(solver="online", n_objects=12, trace=1.0, learning_rate=1e-3).fit(
            np.column_stack([a, b]), 100 * y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MEGKernelRegressor(solver="online", n_objects=12).fit(np.column_stack([a, b]), 100 * y)


# -- the learned kernel in scikit-learn's own k-NN --------------------------------

def test_kernel_to_distances_feeds_sklearn_precomputed_knn():
    wine = load_wine_kernel(40, random_state=0)
    D = kernel_to_distances(wine.kernel)
    K = wine.kernel
    expected = np.sqrt(np.maximum(np.diag(K)[:, None] + np.diag(K)[None, :] - 2 * K, 0))
    np.fill_diagonal(expected, 0)
    assert_allclose(D, expected, rtol=0, atol=1e-15)
    assert_allclose(kernel_to_distances(K, squared=True), expected ** 2, atol=1e-15)
    cv = ShuffleSplit(10, test_size=0.5, random_state=0)
    ids = np.arange(40)
    pipe = Pipeline([("distances", KernelDistances(kernel=K)),
                     ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    errors = 1 - cross_val_score(pipe, ids, wine.labels, cv=cv)
    reference = nearest_neighbor_error(K, wine.labels, random_state=0)
    assert_allclose(errors, reference.errors, atol=1e-12)


def test_distance_weights_work_under_cross_validation():
    wine = load_wine_kernel(40, random_state=1)
    names = np.array([f"wine-{i}" for i in range(40)])
    pipe = Pipeline([("distances", KernelDistances(kernel=wine.kernel, objects=names)),
                     ("knn", KNeighborsClassifier(3, weights="distance", metric="precomputed"))])
    cv = ShuffleSplit(5, test_size=0.5, random_state=0)
    scores = cross_val_score(pipe, names, wine.labels, cv=cv)
    assert np.all(np.isfinite(scores))
    D = kernel_to_distances(wine.kernel)
    for (train, test), score in zip(cv.split(names), scores):
        knn = KNeighborsClassifier(3, weights="distance", metric="precomputed")
        knn.fit(D[np.ix_(train, train)], wine.labels[train])
        assert score == knn.score(D[np.ix_(test, train)], wine.labels[test])


def test_grid_search_learns_each_kernel_once_without_the_labels():
    clear_cache()
    wine = load_wine_kernel(30, random_state=2)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 30, (2, 1500))
    K = wine.kernel
    y = K[a, a] + K[b, b] - 2 * K[a, b]
    names = np.array([f"w{i:02d}" for i in range(30)])
    learner = MEGKernelRegressor(solver="online", objects=names)
    side = dict(pairs=np.c_[names[a], names[b]], targets=1e3 * y)
    # keep_given="never": the distances are the kernel's alone, compared below
    pipe = Pipeline([("distances", KernelDistances(learner=learner, keep_given="never",
                                                   given_squared=True, **side)),
                     ("knn", KNeighborsClassifier(metric="precomputed"))])
    grid = {"distances__learner__learning_rate": [0.5, 5.0], "knn__n_neighbors": [1, 3]}
    cv = ShuffleSplit(10, test_size=0.5, random_state=0)
    search = GridSearchCV(pipe, grid, cv=cv).fit(names, wine.labels)
    # 2 learning rates: 2 fits, whatever the 40 fits of the search (and the refit)
    assert cache_info()["misses"] == 2
    best = search.best_estimator_.named_steps["distances"]
    rate = search.best_params_["distances__learner__learning_rate"]
    direct = MEGKernelRegressor(solver="online", objects=names, learning_rate=rate).fit(
        np.c_[names[a], names[b]], 1e3 * y)
    assert_allclose(best.kernel_, direct.kernel_, rtol=1e-12)
    assert_allclose(best.distances_, direct.distances_, rtol=1e-12, atol=1e-15)
    assert 0 <= search.best_score_ <= 1


def test_kernel_distances_speak_pandas_and_refuse_unknown_ids():
    wine = load_wine_kernel(10, random_state=3)
    names = [f"o{i}" for i in range(10)]
    step = KernelDistances(kernel=wine.kernel, objects=names).set_output(transform="pandas")
    frame = step.fit(pd.Series(names[:4])).transform(names[4:6])
    assert list(frame.columns) == [f"distance_to_o{i}" for i in range(4)]
    assert frame.shape == (2, 4)
    with pytest.raises(ValueError, match="'zz'.*not one of"):
        step.transform(["zz"])
    with pytest.raises(ValueError, match="either kernel .* distances, or pairs"):
        KernelDistances().fit(names)


@pytest.mark.parametrize("params, X, message", [
    (dict(kernel=np.full((3, 3), np.nan)), [0, 1], "NaN"),
    (dict(kernel=np.array([[1.0, 2.0], [0.0, 1.0]])), [0, 1], "symmetric"),
    (dict(kernel=np.eye(3), objects=["a", "b"]), ["a"], "2 ids for a kernel over 3"),
    (dict(kernel=np.eye(3)), np.zeros((2, 2)), "one object id per row"),
    (dict(kernel=np.eye(3)), [], "no object ids"),
    (dict(kernel=np.eye(3)), [0, 7], "object 7"),
    (dict(learner=MEGKernelRegressor(solver="online")), [0, 1], "side information"),
    (dict(learner=MEGKernelRegressor(solver="online"), pairs=[[0, 1]], targets=[np.nan]),
     [0, 1], "NaN"),
])
def test_kernel_distances_refuse_bad_input_clearly(params, X, message):
    step = KernelDistances(**params)
    with pytest.raises(ValueError, match=message):
        step.fit(X)
    assert not hasattr(step, "kernel_")


# -- issue 22: the fixed kernel by the rule for kernels from the user ----------------

@pytest.mark.parametrize("largest", [1.0, 1e-300, 1e200, 1.7e308])
def test_a_fixed_kernel_anywhere_in_the_float_range_gives_finite_distances(largest):
    """Distances at the kernel's power-of-four scale, as kernel_to_distances and
    the k-NN classifier compute them (near the float maximum they were NaN and
    inf, with RuntimeWarnings)."""
    rng = np.random.default_rng(0)
    F = rng.normal(size=(5, 3))
    K = F @ F.T
    K *= largest / np.abs(K).max()
    step = KernelDistances(kernel=K).fit(np.arange(5))
    D = step.transform(np.arange(5))
    assert np.isfinite(D).all()
    assert_array_equal(D, kernel_to_distances(K))
    assert_array_equal(step.distances_, kernel_to_distances(K))
    if largest == 1.0:  # a kernel at scale 1: the distances computed as before
        diagonal = np.diag(K)
        assert_array_equal(D, np.sqrt(np.maximum(
            diagonal[:, None] + diagonal[None, :] - 2 * K, 0.0)))


def test_squared_distances_beyond_the_float_range_are_refused():
    K = np.array([[1.7e308, -1.7e308], [-1.7e308, 1.7e308]])  # squared distance 6.8e308
    assert np.isfinite(KernelDistances(kernel=K).fit_transform([0, 1])).all()
    with pytest.raises(ValueError, match="exceeds the float range; use squared=False"):
        KernelDistances(kernel=K, squared=True).fit([0, 1])


def test_an_indefinite_fixed_kernel_is_named():
    """As the k-NN classifier and kernel_to_distances warn (it was accepted
    without a word); a positive semidefinite one is not."""
    with pytest.warns(UserWarning, match="not positive semidefinite.*-2"):
        KernelDistances(kernel=np.array([[1.0, 2.0], [2.0, 1.0]])).fit([0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KernelDistances(kernel=np.array([[2.0, 1.0], [1.0, 2.0]])).fit([0, 1])


@pytest.mark.parametrize("learner", [MEGKernelRegressor, DefiniteBoostKernel])
def test_a_learner_class_instead_of_an_instance_is_refused_by_name(learner):
    """A class has ``fit`` (the parameter check passes it), but not bound: it
    failed deep in the cache key (get_params() missing 'self')."""
    step = KernelDistances(given_squared=True,
                           learner=learner, pairs=[[0, 1], [1, 2]], targets=[1.0, 1.0])
    with pytest.raises(ValueError, match=rf"instance, e.g. {learner.__name__}\(\), not the "
                                         "class"):
        step.fit([0, 1])
    assert not hasattr(step, "kernel_")


@pytest.mark.parametrize("missing", [None, pd.NA])
def test_a_missing_id_in_a_pair_table_is_named_where_it_is(missing):
    """The pair table's own row and column (it was reported as a row of the
    distinct ids, under the name 'objects')."""
    table = pd.DataFrame({"u": pd.array(["x", "y", missing], dtype="string"),
                          "v": ["y", "z", "x"]})
    with pytest.raises(ValueError, match="pairs has a missing id .* at row 2, column 'u'"):
        KernelDistances(pairs=table, targets=[1.0, 2.0, 3.0]).fit(["x", "y"])
