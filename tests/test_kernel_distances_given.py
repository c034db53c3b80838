"""KernelDistances on the user's own distances (a matrix or a pair table, with
missing entries): the no-learning baseline in the same Pipeline and grid."""


import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, ShuffleSplit
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline

from megkernel import (
    DefiniteBoostKernel,
    KernelDistances,
    MEGKernelRegressor,
    NoImprovementWarning,
)
from megkernel.objects import MISSING_DISTANCE, clear_cache


def _points(n=24, seed=0):
    """Points in 3 clusters, their distances, labels and string ids."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    points = rng.normal(size=(n, 2)) * 0.4 + 3.0 * np.eye(3)[labels][:, :2]
    D = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    names = np.array([f"obj{i:02d}" for i in range(n)], dtype=object)
    return points, D, labels, names


def _with_missing(D, fraction=0.3, seed=1):
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random(D.shape) < fraction, 1)
    observed = D.copy()
    observed[upper | upper.T] = np.nan
    return observed


def _nearest_observed(D, train, test, labels):
    """1-NN by hand: the nearest training object among the measured ones."""
    predictions = []
    for t in test:
        row = D[t, train]
        measured = ~np.isnan(row)
        if measured.any():
            candidates = np.flatnonzero(measured)
            predictions.append(labels[train[candidates[np.argmin(row[candidates])]]])
        else:
            predictions.append(None)
    return predictions


def test_transform_gives_the_observed_distances_and_missing_ones_as_the_marker():
    _, D, _, names = _points()
    observed = _with_missing(D)
    step = KernelDistances(distances=observed, objects=names).fit(names[:10])
    out = step.transform(names[10:])
    block = observed[10:, :10]
    assert_array_equal(out[~np.isnan(block)], block[~np.isnan(block)])
    assert np.all(out[np.isnan(block)] == MISSING_DISTANCE)
    assert step.kernel_ is None
    assert_array_equal(step.objects_, names)
    # the objects' own distances are 0, and distances_ is the whole matrix
    assert_array_equal(np.diag(step.transform(names[:10])), 0.0)
    full = step.distances_
    assert_array_equal(full[~np.isnan(observed)], observed[~np.isnan(observed)])
    assert np.all(full[np.isnan(observed)] == MISSING_DISTANCE)


def test_one_triangle_suffices_and_a_frame_names_its_objects():
    _, D, _, names = _points(10)
    upper = np.triu(D)
    upper[np.tril_indices(10, -1)] = np.nan
    from_upper = KernelDistances(distances=upper, objects=names).fit(names).distances_
    assert_allclose(from_upper, D, rtol=0, atol=0)
    order = np.random.default_rng(0).permutation(10)
    frame = pd.DataFrame(D, index=names, columns=names).iloc[:, order]  # columns shuffled
    step = KernelDistances(distances=frame).fit(names[[3, 1]])
    assert_array_equal(step.objects_, names)
    assert_array_equal(step.transform(names[[0, 5]]), D[np.ix_([0, 5], [3, 1])])


@pytest.mark.parametrize("given_squared", [False, True])
@pytest.mark.parametrize("squared", [False, True])
def test_given_and_returned_units(given_squared, squared):
    _, D, _, names = _points(8)
    observed = _with_missing(D, 0.4, seed=3)
    given = observed ** 2 if given_squared else observed
    out = KernelDistances(distances=given, objects=names, given_squared=given_squared,
                          squared=squared).fit(names).transform(names)
    expected = observed ** 2 if squared else observed
    known = ~np.isnan(observed)
    assert_allclose(out[known], expected[known], rtol=1e-15)
    assert np.all(out[~known] == MISSING_DISTANCE)


def test_pair_table_without_learner_is_the_observed_distances_averaged():
    names = np.array(["a", "b", "c", "d"], dtype=object)
    table = pd.DataFrame({"x": ["a", "b", "c", "b", "a"], "y": ["b", "a", "d", "c", "a"],
                          "d": [1.0, 3.0, 5.0, np.nan, 0.0]})
    with pytest.warns(UserWarning, match="1 of 5 pairs have no distance"):  # a missing pair
        step = KernelDistances(pairs=table[["x", "y"]], targets=table["d"]).fit(names)
    expected = np.full((4, 4), MISSING_DISTANCE)
    np.fill_diagonal(expected, 0.0)
    expected[0, 1] = expected[1, 0] = 2.0           # (a, b) and (b, a): 1 and 3
    expected[2, 3] = expected[3, 2] = 5.0
    assert_array_equal(step.objects_, names)        # sorted distinct ids
    assert_array_equal(step.transform(names), expected)
    # integer indices: objects 0..max, as the learners take them
    indexed = KernelDistances(pairs=[[0, 2]], targets=[4.0], given_squared=True).fit([0, 1, 2])
    assert_array_equal(indexed.transform([1, 2]), [[MISSING_DISTANCE, 0.0, MISSING_DISTANCE],
                                                   [2.0, MISSING_DISTANCE, 0.0]])
    # declared objects: an object in no pair is all missing but known
    declared = KernelDistances(pairs=[["a", "b"]], targets=[1.0],
                               objects=["a", "b", "z"]).fit(["a", "z"])
    assert_array_equal(declared.transform(["b"]), [[1.0, MISSING_DISTANCE]])


def test_missing_pairs_are_never_neighbours_and_never_crash_knn():
    _, D, labels, names = _points(30, seed=2)
    observed = _with_missing(D, 0.6, seed=4)
    observed[0, 1:] = observed[1:, 0] = np.nan      # an object nobody measured
    step = KernelDistances(distances=observed, objects=names)
    cv = ShuffleSplit(6, test_size=0.5, random_state=0)
    for train, test in cv.split(names):
        knn = Pipeline([("d", step), ("knn", KNeighborsClassifier(1, metric="precomputed"))])
        predicted = knn.fit(names[train], labels[train]).predict(names[test])
        by_hand = _nearest_observed(observed, train, test, labels)
        for got, expected in zip(predicted, by_hand):
            if expected is not None:
                assert got == expected
    for weights in ("uniform", "distance"):
        for model in (KNeighborsClassifier(5, weights=weights, metric="precomputed"),
                      KNeighborsRegressor(5, weights=weights, metric="precomputed")):
            pipe = Pipeline([("d", step), ("knn", model)])
            target = labels if isinstance(model, KNeighborsClassifier) else labels + 1e-3
            predicted = pipe.fit(names[1:], target[1:]).predict(names[:1])
            assert np.all(np.isfinite(predicted))


def test_learned_and_raw_in_one_grid():
    clear_cache()
    points, D, labels, names = _points(24, seed=5)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 24, (2, 400))
    table = pd.DataFrame({"a": names[a], "b": names[b], "sq": D[a, b] ** 2})
    step = KernelDistances(learner=MEGKernelRegressor(solver="online", objects=names),
                           pairs=table[["a", "b"]], targets=table["sq"], given_squared=True)
    pipe = Pipeline([("distances", step), ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    cv = ShuffleSplit(4, test_size=0.5, random_state=0)
    grid = [{"distances__learner": [None]},
            {"distances__learner__learning_rate": [0.5, 2.0]}]
    with warnings.catch_warnings():  # beside the point: the on-line kernels' verdicts
        warnings.filterwarnings("ignore", category=NoImprovementWarning)
        search = GridSearchCV(pipe, grid, cv=cv).fit(names, labels)
    raw = search.cv_results_["split0_test_score"][0]
    # the raw candidate: the observed distances of the table, 1-NN among the measured
    measured = np.full((24, 24), np.nan)
    measured[a, b] = measured[b, a] = D[a, b]
    np.fill_diagonal(measured, 0.0)
    train, test = next(cv.split(names))
    by_hand = _nearest_observed(measured, train, test, labels)
    known = [p is not None for p in by_hand]
    reference = Pipeline([("d", KernelDistances(distances=measured, objects=names)),
                          ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    assert raw == reference.fit(names[train], labels[train]).score(names[test], labels[test])
    predicted = reference.predict(names[test])
    assert all(p == h for p, h, k in zip(predicted, by_hand, known) if k)
    assert len(search.cv_results_["params"]) == 3


def test_a_learner_learns_from_the_observed_entries_of_a_matrix():
    _, D, _, names = _points(12, seed=6)
    observed = _with_missing(D, 0.5, seed=7)
    few = "on-line trials predicted no better"  # 33 trials over 12 objects: said
    with pytest.warns(NoImprovementWarning, match=few):
        step = KernelDistances(learner=MEGKernelRegressor(solver="online"), distances=observed,
                               objects=names).fit(names)
    i, j = np.triu_indices(12, 1)
    keep = ~np.isnan(observed[i, j])
    with pytest.warns(NoImprovementWarning, match=few):
        direct = MEGKernelRegressor(solver="online", objects=names).fit(
            np.column_stack([names[i[keep]], names[j[keep]]]), observed[i[keep], j[keep]] ** 2)
    assert_allclose(step.kernel_, direct.kernel_, rtol=1e-12, atol=1e-15)
    assert_array_equal(step.objects_, names)


# -- hostile input ---------------------------------------------------------------

_D = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.5], [2.0, 1.5, 0.0]])


def _edit(matrix, i, j, value, both=True):
    matrix = matrix.copy()
    matrix[i, j] = value
    if both:
        matrix[j, i] = value
    return matrix


@pytest.mark.parametrize("params, X, message", [
    (dict(distances=_edit(_D, 0, 1, -1.0)), [0, 1], r"negative distance \(-1, between 0 and 1"),
    (dict(distances=_edit(_D, 0, 1, 1.2, both=False)), [0, 1], "not symmetric.*1.2.*but"),
    (dict(distances=_D[:, :2]), [0, 1], r"square matrix .* shape \(3, 2\)"),
    (dict(distances=_edit(_D, 0, 1, np.inf)), [0, 1], "infinite distances.*NaN"),
    (dict(distances=_edit(_D, 1, 1, 0.5, both=False)), [0, 1], "distance 0.5 to itself"),
    (dict(distances=[["a", "b"], ["c", "d"]]), [0, 1], "must hold numbers"),
    (dict(distances=_D, objects=["a", "b"]), ["a"], "2 ids for distances between 3"),
    (dict(distances=_D, objects=["a", "b", "a"]), ["a"], "'a' repeats"),
    (dict(distances=_D, objects=["a", "b", "c"]), ["a", "q"], "'q'.*not one of"),
    (dict(distances=pd.DataFrame(_D, index=list("abc"), columns=list("abd"))), ["a"],
     "'[cd]' is in one and not the other"),
    (dict(distances=pd.DataFrame(_D, index=list("abc"), columns=list("abc")),
          objects=["c", "b", "a"]), ["a"], "index names the objects"),
    (dict(distances=1e300 * _D), [0], "no room for the missing"),
    (dict(distances=1e160 * _D, squared=True), [0], "no room for the missing"),
    (dict(distances=_D, pairs=[[0, 1]], targets=[1.0]), [0], "not distances and pairs"),
    (dict(distances=_D, kernel=np.eye(3)), [0], "not kernel and distances"),
    (dict(kernel=np.eye(3), learner=MEGKernelRegressor(solver="online")), [0], "not both"),
    (dict(pairs=[[0, 1]]), [0], "without a learner need targets"),
    (dict(pairs=[[0, 1], [1, 2]], targets=[1.0]), [0], r"shape \(2,\) like pairs"),
    (dict(pairs=[[0, 1, 2]], targets=[1.0]), [0], r"shape \(n_pairs, 2\)"),
    (dict(pairs=[[0, 1]], targets=[-2.0]), [0], r"negative distance \(-2, for the pair 0, 1"),
    (dict(pairs=[[1, 1]], targets=[2.0]), [0], "distance 2 to itself"),
    (dict(pairs=[[0, 1]], targets=[np.inf]), [0], "infinite"),
    (dict(pairs=[["a", "b"]], targets=[1.0], objects=["a", "c"]), ["a"], "'b'.*not one of"),
    (dict(pairs=[[0, 10**7]], targets=[1.0]), [0], "object index 10000000"),
    (dict(learner=MEGKernelRegressor(solver="online"), distances=np.full((3, 3), np.nan)), [0],
     "no observed pair"),
    (dict(distances=_D, memory=3), [0], "memory"),
    (dict(learner=DefiniteBoostKernel(), distances=_D), [0],
     "DefiniteBoostKernel is not one: give it pairs= and targets="),
])
def test_hostile_given_distances_are_refused_before_any_change(params, X, message,
                                                              assert_unchanged_on_error):
    step = KernelDistances(**params)
    with pytest.raises(ValueError, match=message):
        step.fit(X)
    assert not hasattr(step, "objects_")
    # a fitted instance stays exactly as it was
    fitted = KernelDistances(distances=_D).fit([0, 1])
    fitted.set_params(**{"distances": None, **params})
    with assert_unchanged_on_error(fitted, ValueError, match=message):
        fitted.fit(X)


def test_refit_replaces_every_fitted_attribute():
    step = KernelDistances(kernel=np.eye(3) + 1.0).fit([0, 1])
    assert step.kernel_ is not None
    step.set_params(kernel=None, distances=_D).fit([2])
    assert step.kernel_ is None
    assert_array_equal(step.transform([0]), [[2.0]])
    step.set_params(distances=None, kernel=np.eye(3)).fit([0, 2])
    assert_allclose(step.transform([1]), np.sqrt([[2.0, 2.0]]))


def test_given_distances_are_read_only_and_copied():
    D = _D.copy()
    step = KernelDistances(distances=D).fit([0, 1, 2])
    D[0, 1] = D[1, 0] = 99.0                      # the user's array later changes
    assert step.transform([0])[0, 1] == 1.0
    out = step.transform([0])
    out[0, 1] = 5.0                                # outputs are the caller's own
    assert step.transform([0])[0, 1] == 1.0


def test_ids_of_mixed_kinds_are_refused_not_converted():
    ids = [1, "1", 2.5]                           # never cast to strings
    for params in (dict(kernel=np.eye(3) + 1.0), dict(distances=_D)):
        step = KernelDistances(objects=ids, **params)
        with pytest.raises(ValueError, match="mixes kinds of object ids"):
            step.fit([1, "1"])
        assert not hasattr(step, "objects_")


def _cosine_like(n=12, seed=3):
    """Distances sqrt(2 - 2 cos) of random directions, computed as a user would, and the
    same with the round-off left on the diagonal (1e-8 and -1e-16 scale)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    D = np.sqrt(np.clip(2 - 2 * X @ X.T, 0, None))
    D = (D + D.T) / 2
    exact = D.copy()
    np.fill_diagonal(exact, 0.0)
    rough = exact.copy()
    rough[np.diag_indices(n)] = np.where(np.arange(n) % 2, 1.49e-8, -2.2e-16)
    return exact, rough


def test_round_off_on_the_diagonal_is_a_zero_self_distance():
    exact, rough = _cosine_like()
    ids = [f"o{k}" for k in range(len(exact))]
    want = KernelDistances(distances=exact, objects=ids).fit(ids[:6]).transform(ids)
    got = KernelDistances(distances=rough, objects=ids).fit(ids[:6]).transform(ids)
    assert_array_equal(got, want)
    # the same round-off on the self-pairs of a long table (a matrix melted, diagonal and all)
    a, b = np.meshgrid(np.arange(len(ids)), np.arange(len(ids)), indexing="ij")
    pairs = np.array(ids, dtype=object)[np.c_[a.ravel(), b.ravel()]]
    table = KernelDistances(pairs=pairs, targets=rough.ravel(), objects=ids)
    assert_array_equal(table.fit(ids[:6]).transform(ids), want)


@pytest.mark.parametrize("value, message", [
    (1e-6, "distance 1e-06 to itself against 1.9"),
    (-1e-6, r"negative distance \(-1e-06"),
])
def test_a_self_distance_beyond_round_off_is_still_refused(value, message):
    exact, _ = _cosine_like()
    ids = [f"o{k}" for k in range(len(exact))]
    with pytest.raises(ValueError, match=message):
        KernelDistances(distances=_edit(exact, 2, 2, value), objects=ids).fit(ids)
    with pytest.raises(ValueError, match=message.replace("against 1.9", "")):
        KernelDistances(pairs=[["o2", "o2"], ["o0", "o1"]], targets=[value, 1.0],
                        objects=ids).fit(ids)


@pytest.mark.parametrize("learner", [
    MEGKernelRegressor(random_state=0),
    DefiniteBoostKernel(random_state=0, y_kind="distances"),
])
def test_a_learner_is_taught_round_off_self_pairs_as_zero(learner):
    # a melted matrix, diagonal and all, through a learner: the same kernel as from the
    # exact zeros (the learners alone would warn of, or refuse, a positive self-distance)
    exact, rough = _cosine_like(n=16)
    ids = np.array([f"o{k}" for k in range(len(exact))], dtype=object)
    a, b = np.meshgrid(np.arange(len(ids)), np.arange(len(ids)), indexing="ij")
    pairs = pd.DataFrame({"a": ids[a.ravel()], "b": ids[b.ravel()]})
    kernels = []
    for matrix in (exact, rough):
        step = KernelDistances(learner=clone(learner), pairs=pairs,
                               targets=pd.Series(matrix.ravel()), given_squared=False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*too few to hold out")
            kernels.append(step.fit(ids).transform(ids))
    assert_array_equal(kernels[1], kernels[0])


@pytest.mark.parametrize("keep_given", ["where_given", "blend"])
def test_a_missing_distance_leaves_definiteboost_taught_the_distances(keep_given):
    # one NaN in DefiniteBoostKernel's table (y_kind="auto") is a missing pair, not a sign
    # that the targets are pair labels: the step keeps the given distances as without it
    _, D, _, names = _points(24, seed=8)
    a, b = np.triu_indices(24, 1)
    table = pd.DataFrame({"a": names[a], "b": names[b], "distance": D[a, b]})
    holed = table.copy()
    holed.loc[5, "distance"] = np.nan
    out = []
    for given in (table.drop(index=5), holed):
        step = KernelDistances(learner=DefiniteBoostKernel(objects=names, random_state=0),
                               pairs=given[["a", "b"]], targets=given["distance"],
                               given_squared=False, keep_given=keep_given)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(no distance|prior)")
            out.append(step.fit(names).transform(names))
        assert step.keeps_given_ == keep_given
    assert_array_equal(out[1], out[0])


@pytest.mark.parametrize("value, message", [
    (-2.0, r"negative distance \(-2, for the pair 'obj03', 'obj07'\) at row 'r5'"),
    (np.inf, r"infinite distance \(inf, for the pair 'obj03', 'obj07'\) at row 'r5'"),
    ("self", r"'obj03' a distance 2 to itself at row 'r5'"),
])
def test_the_observed_distances_name_the_row_of_a_bad_one(value, message):
    # without a learner as with one: the row as the user's table labels it
    _, D, _, names = _points(12, seed=9)
    a, b = np.triu_indices(12, 1)
    table = pd.DataFrame({"a": names[a], "b": names[b], "distance": D[a, b]},
                         index=[f"r{i}" for i in range(len(a))])
    bad = ["obj03", "obj03", 2.0] if value == "self" else ["obj03", "obj07", value]
    table.loc["r5", ["a", "b", "distance"]] = bad
    with pytest.raises(ValueError, match=message):
        KernelDistances(pairs=table[["a", "b"]], targets=table["distance"]).fit(names)
    # in the table's convention: given_squared=True names squared distances
    squared = message.replace("distance", "squared distance")
    with pytest.raises(ValueError, match=squared):
        KernelDistances(pairs=table[["a", "b"]], targets=table["distance"],
                        given_squared=True).fit(names)


@pytest.mark.parametrize("learner", [MEGKernelRegressor, DefiniteBoostKernel])
@pytest.mark.parametrize("bad, message", [
    ("obj99", r"pairs names the object 'obj99' \(row 'r4', column 'b'\), which is not one "
              r"of the 12 objects {} declares"),
    (None, r"pairs has a missing id \(nan\) at row 'r4', column 'b'"),
])
def test_a_learners_pairs_are_named_as_the_step_was_given_them(learner, bad, message,
                                                              assert_unchanged_on_error):
    # the step's pairs, by their row and column, not the learner's X
    _, D, _, names = _points(12, seed=10)
    a, b = np.triu_indices(12, 1)
    table = pd.DataFrame({"a": names[a], "b": names[b], "distance": D[a, b]},
                         index=[f"r{i}" for i in range(len(a))])
    table.loc["r4", "b"] = bad
    step = KernelDistances(learner=learner(objects=names, random_state=0),
                           pairs=table[["a", "b"]], targets=table["distance"],
                           given_squared=False)
    with pytest.raises(ValueError, match=message.format(learner.__name__)):
        step.fit(names)
    fitted = KernelDistances(distances=D, objects=names).fit(names)
    fitted.set_params(**{**step.get_params(deep=False), "distances": None})
    with assert_unchanged_on_error(fitted, ValueError, match="pairs"):
        fitted.fit(names)


def test_a_learners_refusal_for_another_reason_is_not_explained_as_a_self_distance():
    # MEG takes a table with a self-distance (it warns); refusing a parameter of its
    # own, its refusal reaches the user as it is, not "an object's distance to itself"
    table = pd.DataFrame({"a": ["x", "y", "z", "x", "w"], "b": ["y", "z", "x", "x", "y"],
                          "distance": [1.0, 2.0, 1.5, 0.3, 1.2]})
    step = KernelDistances(pairs=table[["a", "b"]], targets=table["distance"],
                           learner=MEGKernelRegressor(max_iter=-1), given_squared=True)
    with pytest.raises(ValueError, match="The 'max_iter' parameter of MEGKernelRegressor"):
        step.fit(["x", "y", "z", "w"])
    # a refusal of the table for another reason than the self-distance: the learner's
    learner = MEGKernelRegressor(random_state=0)  # trace="auto": all-zero targets refused
    zeros = table.assign(distance=[0.0, 0.0, 0.0, 0.3, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MEG's own word of the self-pair
        with pytest.raises(ValueError) as refused:
            learner.fit(zeros[["a", "b"]].to_numpy(dtype=object), zeros["distance"])
        with pytest.raises(ValueError) as through_step:
            KernelDistances(pairs=zeros[["a", "b"]], targets=zeros["distance"],
                            learner=learner, given_squared=True).fit(["x", "y", "z", "w"])
    assert "to itself is 0" not in str(through_step.value)
    assert str(refused.value) in str(through_step.value)


def test_a_learner_refusing_a_self_distance_is_explained_in_the_steps_terms():
    # DefiniteBoostKernel refuses an object at a positive distance from itself; the step
    # names it as without a learner: its row, its value as given (plain, not squared)
    _, D, _, names = _points(12, seed=11)
    a, b = np.triu_indices(12, 1)
    table = pd.DataFrame({"a": names[a], "b": names[b], "distance": D[a, b]},
                         index=[f"r{i}" for i in range(len(a))])
    table.loc["r1", "distance"] = np.nan  # a missing pair before it: rows as given
    table.loc["r5", ["a", "b", "distance"]] = ["obj03", "obj03", 2.0]
    message = r"targets gives 'obj03' a distance 2 to itself at row 'r5'"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the missing pair, counted
        with pytest.raises(ValueError, match=message):
            KernelDistances(pairs=table[["a", "b"]], targets=table["distance"]).fit(names)
        step = KernelDistances(learner=DefiniteBoostKernel(objects=names, y_kind="distances"),
                               pairs=table[["a", "b"]], targets=table["distance"],
                               given_squared=False)
        with pytest.raises(ValueError, match=message):
            step.fit(names)
