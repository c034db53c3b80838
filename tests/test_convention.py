"""One plain-or-squared convention per Pipeline, one rule for a missing distance.

``KernelDistances(given_squared=...)`` is the one switch: it reads every
distance it is given by it and tells its learner (``learn_kernel(...,
squared=True)``), so a learner and the no-learner baseline read one table
alike. A NaN distance is a missing pair everywhere, left out and counted.
Errors about a value name its row, in the user's convention.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from megkernel import DefiniteBoostKernel, KernelDistances, MEGKernelRegressor
from megkernel.objects import clear_cache


def _table(n=18, seed=0):
    """Plain distances of points in 3 clusters, for a random half of the pairs."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    points = rng.normal(size=(n, 3)) * 0.5 + 3.0 * np.eye(3)[labels]
    ids = np.array([f"o{i:02d}" for i in range(n)], dtype=object)
    rows, cols = np.triu_indices(n, 1)
    keep = rng.random(rows.size) < 0.6
    rows, cols = rows[keep], cols[keep]
    distance = np.sqrt(((points[rows] - points[cols]) ** 2).sum(-1))
    table = pd.DataFrame({"a": ids[rows], "b": ids[cols], "distance": distance})
    return ids, labels, table


def _meg(**params):
    return MEGKernelRegressor(early_stopping=False, random_state=0, **params)


def _kernel(step, ids):
    return step.fit(ids).kernel_


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


# -- item 1: one switch -----------------------------------------------------------------
def test_plain_distances_reach_the_learner_squared_when_given_squared_is_false():
    ids, _, table = _table()
    step = KernelDistances(learner=_meg(objects=ids), pairs=table[["a", "b"]],
                           targets=table["distance"], given_squared=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        kernel = _kernel(step, ids)
    direct = _meg(objects=ids).fit(table[["a", "b"]], table["distance"] ** 2).kernel_
    assert_allclose(kernel, direct, rtol=1e-10, atol=1e-12)
    as_squared = _meg(objects=ids).fit(table[["a", "b"]], table["distance"]).kernel_
    assert not np.allclose(kernel, as_squared, rtol=1e-3)  # what the learner read before


def test_the_switch_wins_over_the_learners_own_convention_no_fourth_powers():
    ids, _, table = _table()
    squares = table["distance"] ** 2
    direct = _meg(objects=ids).fit(table[["a", "b"]], squares).kernel_
    # squared targets, a learner set to plain distances: told, it does not square again
    step = KernelDistances(learner=_meg(objects=ids, squared=False), pairs=table[["a", "b"]],
                           targets=squares, given_squared=True)
    assert_allclose(_kernel(step, ids), direct, rtol=1e-10, atol=1e-12)
    # a matrix of plain distances and a learner of plain distances: squares, not fourth powers
    n = len(ids)
    position = {key: i for i, key in enumerate(ids)}
    D = np.full((n, n), np.nan)
    a, b = table["a"].map(position), table["b"].map(position)
    D[a, b] = D[b, a] = table["distance"]
    np.fill_diagonal(D, 0.0)
    matrix = KernelDistances(learner=_meg(squared=False), distances=D, objects=ids,
                             given_squared=False).fit(ids)
    upper = np.triu_indices(n, 1)
    seen = ~np.isnan(D[upper])
    pairs = np.column_stack([ids[upper[0][seen]], ids[upper[1][seen]]])
    alone = _meg(objects=ids).fit(pairs, D[upper][seen] ** 2)
    assert_allclose(matrix.kernel_, alone.kernel_, rtol=1e-10, atol=1e-12)


def test_unset_keeps_the_old_reading_and_says_what_changes():
    ids, _, table = _table()
    squares = table["distance"] ** 2
    step = KernelDistances(learner=_meg(objects=ids), pairs=table[["a", "b"]], targets=squares)
    with pytest.warns(FutureWarning, match="given_squared is not set") as caught:
        kernel = _kernel(step, ids)
    message = str(caught[0].message)
    assert "read its targets as squared distances" in message        # the old behaviour
    assert "would be read as plain distances" in message              # the new one
    assert "given_squared=True" in message and "given_squared=False" in message
    direct = _meg(objects=ids).fit(table[["a", "b"]], squares).kernel_
    assert_allclose(kernel, direct, rtol=1e-10, atol=1e-12)          # no result changed
    with pytest.warns(FutureWarning, match="given_squared is not set"):
        step.fit(ids)                                                # once per fit (cached)


def test_unset_with_a_learner_of_plain_distances_says_nothing():
    ids, _, table = _table()
    step = KernelDistances(learner=_meg(objects=ids, squared=False), pairs=table[["a", "b"]],
                           targets=table["distance"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        kernel = _kernel(step, ids)
    told = KernelDistances(learner=_meg(objects=ids), pairs=table[["a", "b"]],
                           targets=table["distance"], given_squared=False)
    assert_allclose(kernel, _kernel(told, ids), rtol=1e-10, atol=1e-12)


def test_definiteboost_follows_the_switch_and_never_guesses_silently():
    ids, _, table = _table()
    params = dict(objects=ids, random_state=0, max_iter=200, validation_fraction=None)
    step = KernelDistances(learner=DefiniteBoostKernel(**params), pairs=table[["a", "b"]],
                           targets=table["distance"], given_squared=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        kernel = _kernel(step, ids)
        alone = DefiniteBoostKernel(y_kind="distances", **params).fit(
            table[["a", "b"]], table["distance"])
    assert_allclose(kernel, alone.kernel_, rtol=1e-9, atol=1e-12)
    # alone, y_kind="auto" on floats says which reading it took and how to choose
    with pytest.warns(FutureWarning, match="y_kind='sq_distances'.*y_kind='distances'"):
        guessed = DefiniteBoostKernel(**params).fit(table[["a", "b"]], table["distance"])
    assert guessed.y_kind_ == "sq_distances"


def test_a_stream_follows_the_switch():
    ids, _, table = _table()
    pairs = table[["a", "b"]].to_numpy()
    plain, squares = table["distance"].to_numpy(), table["distance"].to_numpy() ** 2

    def stream_of(values):
        return lambda: iter([(pairs[:40], values[:40]), (pairs[40:], values[40:])])
    learner = MEGKernelRegressor(solver="online", objects=ids)
    told_plain = KernelDistances(learner=learner, pairs=stream_of(plain), given_squared=False)
    told_squared = KernelDistances(learner=learner, pairs=stream_of(squares),
                                   given_squared=True)
    assert_allclose(_kernel(told_plain, ids), _kernel(told_squared, ids), rtol=1e-9)
    with pytest.raises(ValueError, match="Chunk 1 of the stream: targets holds a negative "
                                         "distance at row 0"):
        bad = plain.copy()
        bad[40] = -1.0
        KernelDistances(learner=learner, pairs=stream_of(bad), given_squared=False).fit(ids)
    with pytest.warns(FutureWarning, match="given_squared is not set"):
        KernelDistances(learner=learner, pairs=stream_of(squares)).fit(ids)


def test_messages_speak_the_users_convention():
    ids, _, table = _table()
    targets = table["distance"].copy()
    targets.index = [f"r{i}" for i in range(len(targets))]
    targets.iloc[3] = -0.5
    pairs = table[["a", "b"]].set_axis(targets.index)
    with pytest.raises(ValueError, match=r"negative distance \(-0.5\) at row 'r3'") as caught:
        KernelDistances(learner=_meg(), pairs=pairs, targets=targets,
                        given_squared=False).fit(ids)
    assert "squared" not in str(caught.value).split("(")[0]
    with pytest.raises(ValueError, match=r"negative squared distance \(-0.5\) at row 'r3'"):
        KernelDistances(learner=_meg(), pairs=pairs, targets=targets,
                        given_squared=True).fit(ids)
    with pytest.raises(ValueError, match=r"holds a negative distance \(-0.5\) at row 3") as caught:
        MEGKernelRegressor(squared=False).fit(table[["a", "b"]], targets.to_numpy())
    assert "squared distances" not in str(caught.value)


def test_new_distances_are_read_by_the_switch():
    ids, _, table = _table()
    first = table["a"].iloc[0]
    known = table[(table["a"] == first) | (table["b"] == first)]
    others = np.where(known["a"] == first, known["b"], known["a"])
    new_pairs = np.column_stack([np.full(len(others), "copy", dtype=object), others])
    step = KernelDistances(learner=_meg(objects=ids), pairs=table[["a", "b"]],
                           targets=table["distance"], given_squared=False, keep_given="never",
                           new_pairs=new_pairs, new_distances=known["distance"].to_numpy())
    step.fit(ids)
    out = step.transform(["copy", first])
    # a copy of a known object, given its plain distances, lands where that object is
    assert_allclose(out[0], out[1], atol=0.25 * np.median(out[1]))


# -- item 5: one rule for a missing distance; errors name the place -----------------------
def test_a_nan_distance_is_a_missing_pair_everywhere_counted():
    ids, _, table = _table()
    with_nan = table["distance"].copy()
    with_nan.iloc[[2, 5]] = np.nan
    complete = ~with_nan.isna()
    direct = _meg(objects=ids).fit(table[["a", "b"]][complete], with_nan[complete] ** 2)
    with pytest.warns(UserWarning, match=r"MEGKernelRegressor: 2 of \d+ pairs have no "
                                         r"distance \(NaN, the first at row 2\)"):
        alone = _meg(objects=ids).fit(table[["a", "b"]], with_nan ** 2)
    assert_allclose(alone.kernel_, direct.kernel_, rtol=1e-10, atol=1e-12)
    with pytest.warns(UserWarning, match="KernelDistances: 2 of .* left out as missing"):
        step = KernelDistances(learner=_meg(objects=ids), pairs=table[["a", "b"]],
                               targets=with_nan, given_squared=False).fit(ids)
    assert_allclose(step.kernel_, direct.kernel_, rtol=1e-10, atol=1e-12)
    with pytest.warns(UserWarning, match="KernelDistances: 2 of .* left out as missing"):
        KernelDistances(pairs=table[["a", "b"]], targets=with_nan).fit(ids)  # the baseline
    with pytest.warns(UserWarning, match="DefiniteBoostKernel: 2 of .* left out as missing"):
        DefiniteBoostKernel(objects=ids, y_kind="distances", max_iter=50, validation_fraction=None,
                            random_state=0).fit(table[["a", "b"]], with_nan)
    labels = np.where(np.arange(len(table)) % 2, 1.0, -1.0)
    labels[4] = np.nan
    with pytest.raises(ValueError, match="no label at row 4"):
        DefiniteBoostKernel(objects=ids).fit(table[["a", "b"]], labels)
    with pytest.raises(ValueError, match="every one of the"):
        _meg().fit(table[["a", "b"]], np.full(len(table), np.nan))


def test_partial_fit_leaves_out_a_missing_distance_too():
    pairs = np.array([[0, 1], [1, 2], [0, 2], [2, 3]])
    y = np.array([1.0, np.nan, 2.0, 1.0])
    with pytest.warns(UserWarning, match="1 of 4 pairs have no distance"):
        model = MEGKernelRegressor(n_objects=4, trace=1.0).partial_fit(pairs, y / 4)
    assert model.n_updates_ == 3


def test_text_in_a_table_is_named_by_its_row():
    ids, _, table = _table()
    labels = pd.Series([1, -1, "n/a", 1] + [1] * (len(table) - 4), dtype=object)
    with pytest.raises(ValueError, match="the text 'n/a' at row 2"):
        DefiniteBoostKernel(objects=ids).fit(table[["a", "b"]], labels)
    targets = table["distance"].astype(object)
    targets.iloc[2] = "n/a"
    with pytest.raises(ValueError, match="row 2 holds the text 'n/a'"):
        KernelDistances(learner=_meg(), pairs=table[["a", "b"]], targets=targets,
                        given_squared=False).fit(ids)


def test_a_square_matrix_given_as_pairs_says_what_was_passed():
    D = np.abs(np.subtract.outer(np.arange(5.0), np.arange(5.0)))
    with pytest.raises(ValueError, match=r"X has shape \(5, 5\).*square matrix"):
        MEGKernelRegressor().fit(D)
    with pytest.raises(ValueError, match=r"got shape \(5, 5\).*square matrix"):
        DefiniteBoostKernel().fit(D)
    with pytest.raises(ValueError, match="square matrix: give it as distances="):
        KernelDistances(pairs=D, targets=np.ones(5)).fit([0, 1])


# -- item 2: the on-line solver's default rate from the data, and its own warning ---------
def _clustered_table(n=120, seed=2):
    """A user's table: squared distances of 4 clusters, a quarter of the pairs, string ids."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    points = rng.normal(size=(n, 5)) + 2.5 * np.eye(5)[labels]
    ids = np.array([f"u{i:03d}" for i in range(n)], dtype=object)
    rows, cols = np.triu_indices(n, 1)
    keep = rng.random(rows.size) < 0.25
    rows, cols = rows[keep], cols[keep]
    table = pd.DataFrame({"a": ids[rows], "b": ids[cols],
                          "sq": ((points[rows] - points[cols]) ** 2).sum(-1)})
    return ids, labels, table


def _loo_1nn(model, labels):
    K = model.kernel_
    diag = np.diag(K)
    D = diag[:, None] + diag[None, :] - 2 * K
    np.fill_diagonal(D, np.inf)
    return float(np.mean(labels[np.argmin(D, axis=1)] == labels))


def test_online_default_rate_is_chosen_from_the_data_and_learns():
    from megkernel import NoImprovementWarning, meg_learning_rate

    ids, labels, table = _clustered_table(n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # learning: nothing to say
        model = MEGKernelRegressor(solver="online", objects=ids).fit(table[["a", "b"]],
                                                                     table["sq"])
    # trace="auto" from the identity prior: the targets' mean is 2/d in trace-one units
    assert model.learning_rate_ == pytest.approx(len(ids) / 8, rel=1e-9)
    bound = meg_learning_rate(2.0)
    with pytest.warns(NoImprovementWarning, match="predicted little better than the prior"):
        worst_case = MEGKernelRegressor(solver="online", objects=ids,
                                        learning_rate=bound).fit(table[["a", "b"]], table["sq"])
    assert _loo_1nn(model, labels) > 0.75                     # 4 clusters: chance 0.25
    assert _loo_1nn(model, labels) > _loo_1nn(worst_case, labels) + 0.4


def test_the_rate_of_a_stream_is_that_of_its_one_shot_fit():
    ids, _, table = _clustered_table(n=200)
    pairs, y = table[["a", "b"]].to_numpy(), table["sq"].to_numpy()
    one_shot = MEGKernelRegressor(solver="online", objects=ids).fit(pairs, y)
    half = len(y) // 2
    step = KernelDistances(learner=MEGKernelRegressor(solver="online", objects=ids),
                           pairs=lambda: iter([(pairs[:half], y[:half]),
                                               (pairs[half:], y[half:])]),
                           given_squared=True).fit(ids)
    assert_allclose(step.kernel_, one_shot.kernel_, rtol=1e-9,
                    atol=1e-12 * np.trace(one_shot.kernel_))


def test_text_anywhere_is_named_by_its_row_and_column():
    ids = ["a", "b", "c", "d"]
    frame = pd.DataFrame(np.eye(4) + 1.0, index=ids, columns=ids).astype(object)
    frame.iloc[1, 2] = "n/a"
    with pytest.raises(ValueError, match="kernel must be a numeric matrix: row 'b', column 'c' "
                                         "holds 'n/a'"):
        KernelDistances(kernel=frame).fit(ids)
    with pytest.raises(ValueError, match="init must be a numeric matrix: row 'b', column 'c'"):
        MEGKernelRegressor(init=frame).fit([["a", "b"], ["c", "d"]], [1.0, 2.0])
    table = pd.DataFrame({"a": ["a", "a", "b", "c"], "b": ["b", "c", "c", "d"],
                          "distance": pd.Series([1.0, 2.0, "n/a", 1.5], dtype=object)})
    model = MEGKernelRegressor(early_stopping=False).fit(table[["a", "b"]].iloc[[0, 1, 3]],
                                                         [1.0, 2.0, 1.5])
    with pytest.raises(ValueError, match="holds the text 'n/a' at row 2"):
        model.score(table[["a", "b"]], table["distance"])
    with pytest.raises(ValueError, match="holds the text 'n/a' at row 2"):
        DefiniteBoostKernel(y_kind="distances").fit(table[["a", "b"]], table["distance"])
    with pytest.raises(ValueError, match="Chunk 0 of the stream: targets must be numbers; row 2 "
                                         "holds 'n/a'"):
        KernelDistances(learner=MEGKernelRegressor(solver="online"), given_squared=False,
                        pairs=lambda: iter([(table[["a", "b"]].to_numpy(),
                                             table["distance"].to_numpy())])).fit(ids)


def test_a_negative_target_in_a_series_is_named_by_its_label():
    y = pd.Series([1.0, -2.0, 3.0], index=["p", "q", "r"])
    pairs = [["a", "b"], ["b", "c"], ["a", "c"]]
    with pytest.raises(ValueError, match=r"negative distance \(-2\) at row 'q'"):
        MEGKernelRegressor(squared=False).fit(pairs, y)
    with pytest.raises(ValueError, match=r"negative squared distance \(-2\) at row 'q'"):
        MEGKernelRegressor().fit(pairs, y)


def _filtered(value):
    """The table after a row filter (an int64 index, not a RangeIndex), one value bad."""
    ids, _, table = _table()
    table = table.drop(index=[0, 2, 3])  # as table[table.distance.notna()] may leave it
    assert not isinstance(table.index, pd.RangeIndex)
    table["distance"] = table["distance"].astype(object if isinstance(value, str) else float)
    table.loc[table.index[2], "distance"] = value
    return ids, table, int(table.index[2])


@pytest.mark.parametrize("fit, value", [
    (lambda ids, t: KernelDistances(pairs=t[["a", "b"]], targets=t["distance"]).fit(ids),
     -1.0),
    (lambda ids, t: KernelDistances(learner=_meg(), pairs=t[["a", "b"]],
                                    targets=t["distance"], given_squared=False).fit(ids),
     -1.0),
    (lambda ids, t: KernelDistances(learner=_meg(), pairs=t[["a", "b"]],
                                    targets=t["distance"], given_squared=False).fit(ids),
     np.inf),
    (lambda ids, t: _meg(squared=False).fit(t[["a", "b"]], t["distance"]), -1.0),
    (lambda ids, t: _meg(squared=False).fit(t[["a", "b"]], t["distance"]), np.inf),
    (lambda ids, t: DefiniteBoostKernel().fit(t[["a", "b"]], t["distance"]), "n/a"),
])
def test_a_row_is_named_by_its_label_as_the_user_wrote_it(fit, value):
    # numpy's repr of an int64 label ("np.int64(3)") is not how the user wrote the row
    ids, table, label = _filtered(value)
    with pytest.raises(ValueError) as caught:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            fit(ids, table)
    assert f"row {label}" in str(caught.value) and "np.int64" not in str(caught.value)


def test_a_new_objects_row_is_named_by_its_label_as_the_user_wrote_it():
    ids, _, table = _table()
    known = table[(table["a"] != "o00") & (table["b"] != "o00")]
    new = table[table["a"] == "o00"].iloc[[0, 2, 3]].copy()
    assert not isinstance(new.index, pd.RangeIndex)
    new.iloc[1, 2] = -1.0
    step = KernelDistances(pairs=known[["a", "b"]], targets=known["distance"],
                           objects=ids[1:]).fit(ids[1:])
    step.set_params(new_pairs=new[["a", "b"]], new_distances=new["distance"])
    with pytest.raises(ValueError, match=f"at row {new.index[1]};") as caught:
        step.transform(["o00"])
    assert "np.int64" not in str(caught.value)


@pytest.mark.parametrize("params", [dict(), dict(trace=50.0), dict(solver="online")])
def test_a_self_pair_with_a_distance_is_named_in_the_users_convention(params):
    # the object and the value as the user gave them (plain under squared=False), once
    ids, _, table = _table()
    table.loc[4, ["a", "b", "distance"]] = ["o03", "o03", 2.0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _meg(squared=False, **params).fit(table[["a", "b"]], table["distance"])
    said = [str(w.message) for w in caught if "join an object with itself" in str(w.message)]
    assert len(said) == 1, said
    assert said[0].startswith("1 of ")  # as filters match it
    assert "positive distance (the first: 'o03' at 2;" in said[0], said[0]
    assert "Set them to 0, or leave those pairs out" in said[0]


@pytest.mark.parametrize("container", [list, np.asarray])
def test_a_bad_target_after_a_missing_one_is_named_by_its_row_as_given(container):
    # the NaN row left out before the check would shift a list's positions by one
    pairs = [["a", "b"], ["b", "c"], ["a", "c"], ["c", "d"]]
    y = container([np.nan, 1.0, np.inf, 2.0])
    with pytest.raises(ValueError, match=r"y holds an infinite squared distance \(inf\) "
                                         r"at row 2"):
        MEGKernelRegressor().fit(pairs, y)
    with pytest.raises(ValueError, match=r"targets holds an infinite squared distance "
                                         r"\(inf\) at row 2"):
        KernelDistances(learner=MEGKernelRegressor(), pairs=pairs, targets=y,
                        given_squared=True).fit(["a", "b", "c", "d"])
