"""KernelDistances(keep_given="blend"): the given and the learned distances averaged
on one scale, and the choice without labels."""

import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import FixedKernelLearner as Fixed
from conftest import clustered_pair_table, new_object_pairs
from numpy.testing import assert_allclose, assert_array_equal

from megkernel import KernelDistances, MEGKernelRegressor
from megkernel._objects_verdict import TIE_BREAK, scale_map
from megkernel.objects import clear_cache


def _clustered(n=40, seed=0, fraction=0.5):
    """Points in 4 clusters, a part of their squared distances as a pair table."""
    ids, labels, points, table = clustered_pair_table(
        n, seed, fraction, spread=0.8, separation=3.0)
    return ids, labels, points, table


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _pool_adjacent_violators(x, y):
    """Least-squares non-decreasing fit of y on x, by a loop (each x once, its mean)."""
    xs = np.unique(x)
    blocks = [[float(np.mean(y[x == v])), float(np.sum(x == v)), 1] for v in xs]
    i = 0
    while i < len(blocks) - 1:
        if blocks[i][0] > blocks[i + 1][0]:
            (m1, w1, c1), (m2, w2, c2) = blocks[i], blocks.pop(i + 1)
            blocks[i] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2]
            i = max(i - 1, 0)
        else:
            i += 1
    fitted = np.concatenate([[m] * c for m, _, c in blocks])
    return xs, fitted


def _naive_blend(kernel, objects, table, ids):
    """The learned squared distances mapped by the isotonic fit through the origin,
    averaged with the table's (mean of repeats) where given: by loops."""
    position = {name: k for k, name in enumerate(objects)}
    diag = np.diag(kernel)
    learned = np.maximum(diag[:, None] + diag[None, :] - 2.0 * kernel, 0.0)
    i = table["a"].map(position).to_numpy()
    j = table["b"].map(position).to_numpy()
    xs, fitted = _pool_adjacent_violators(learned[i, j], table["sq"].to_numpy())
    if xs[0] > 0:
        xs, fitted = np.r_[0.0, xs], np.r_[0.0, fitted]
    mapped = np.interp(learned, xs, fitted) + TIE_BREAK * learned
    sums, counts = np.zeros_like(learned), np.zeros_like(learned)
    for a, b, value in zip(i, j, table["sq"]):
        sums[a, b] += value
        sums[b, a] += value
        counts[a, b] += 1
        counts[b, a] += 1
    out = np.where(counts > 0, 0.5 * (sums / np.maximum(counts, 1) + mapped), mapped)
    np.fill_diagonal(out, 0.0)
    rows = [position[name] for name in ids]
    return out[np.ix_(rows, rows)]


@pytest.mark.parametrize("squared", [False, True])
def test_blend_is_the_mean_of_the_given_and_the_mapped_learned_distances(squared):
    ids, _, _, table = _clustered()
    table = pd.concat([table, table.iloc[:5].assign(sq=table["sq"].iloc[:5] * 2.0)])
    step = KernelDistances(learner=MEGKernelRegressor(objects=ids, random_state=0),
                           pairs=table[["a", "b"]], targets=table["sq"],
                           given_squared=True, keep_given="blend", squared=squared).fit(ids)
    assert step.keeps_given_ == "blend"
    expected = _naive_blend(step.kernel_, step.objects_, table, ids)
    assert_allclose(step.transform(ids), expected if squared else np.sqrt(expected),
                    rtol=1e-9, atol=1e-12)
    assert_array_equal(np.diag(step.transform(ids)), 0.0)


def test_a_kernel_that_reproduces_the_distances_is_returned_as_it_is():
    ids, _, points, table = _clustered()
    kernel = points @ points.T
    step = KernelDistances(learner=Fixed(objects=ids, kernel=kernel),
                           pairs=table[["a", "b"]], targets=table["sq"],
                           given_squared=True, keep_given="blend", squared=True).fit(ids)
    exact = ((points[:, None] - points[None]) ** 2).sum(-1)
    inside = exact <= table["sq"].max()  # beyond the given range the map is flat
    assert_allclose(step.transform(ids)[inside], exact[inside], rtol=1e-7, atol=1e-9)


def test_a_kernel_that_knows_nothing_never_outranks_a_measured_pair_below_the_mean():
    ids, _, _, table = _clustered()
    step = KernelDistances(learner=Fixed(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True, keep_given="blend",
                           squared=True).fit(ids)
    D = step.transform(ids)
    position = {name: k for k, name in enumerate(ids)}
    given = np.zeros(D.shape, dtype=bool)
    i, j = table["a"].map(position).to_numpy(), table["b"].map(position).to_numpy()
    given[i, j] = given[j, i] = True
    unmeasured = ~given & ~np.eye(len(ids), dtype=bool)
    # every learned distance is the same: mapped to the mean given one
    assert_allclose(D[unmeasured], table["sq"].mean(), rtol=1e-7)
    near = np.zeros(D.shape, dtype=bool)
    near[i, j] = near[j, i] = table["sq"].to_numpy() < table["sq"].mean()
    assert D[near].max() < D[unmeasured].min()


def test_the_map_is_non_decreasing_through_the_origin():
    rng = np.random.default_rng(1)
    learned = rng.random(300) * 5.0
    given = learned + rng.normal(size=300)
    mapped = scale_map(learned, np.maximum(given, 0.0))
    grid = np.linspace(0.0, 6.0, 500)
    values = mapped(grid)
    assert values[0] == 0.0
    assert np.all(np.diff(values) > 0.0)  # strictly: ties broken by the learned distance


def test_the_table_in_another_row_order_gives_the_same_bits():
    ids, _, _, table = _clustered()
    swapped = table.rename(columns={"a": "b", "b": "a"})[["a", "b", "sq"]]
    other = pd.concat([table.iloc[::2], swapped.iloc[1::2]]).sample(
        frac=1.0, random_state=3)
    out = []
    for t in (table, other):
        step = KernelDistances(learner=Fixed(objects=ids, kernel=np.cov(
            np.random.default_rng(0).normal(size=(len(ids), 60)))),
            pairs=t[["a", "b"]], targets=t["sq"], given_squared=True,
            keep_given="blend").fit(ids)
        out.append(step.transform(ids))
    assert_array_equal(out[0], out[1])


def test_auto_blends_without_labels_and_weighs_the_blend_with_them():
    ids, labels, _, table = _clustered()
    side = dict(pairs=table[["a", "b"]], targets=table["sq"], given_squared=True)
    unlabelled = KernelDistances(learner=Fixed(objects=ids), **side).fit(ids)
    assert unlabelled.keeps_given_ == "blend" and unlabelled.verdict_ is None
    blended = KernelDistances(learner=Fixed(objects=ids), keep_given="blend", **side).fit(ids)
    assert_array_equal(unlabelled.transform(ids), blended.transform(ids))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the identity kernel's verdict warns
        labelled = KernelDistances(learner=Fixed(objects=ids), **side).fit(ids, labels)
    assert 0.0 <= labelled.verdict_["blend"] <= 1.0
    # told "never", nothing is kept whatever the labels
    never = KernelDistances(learner=Fixed(objects=ids), keep_given="never", **side).fit(ids)
    assert never.keeps_given_ == "never"
    assert_allclose(never.transform(ids)[~np.eye(len(ids), dtype=bool)], np.sqrt(2.0))


def test_a_new_object_keeps_its_given_distances_in_the_blend():
    ids, _, points, table = _clustered(n=44)
    known, new = ids[:40], ids[40:]
    inside = table["a"].isin(known) & table["b"].isin(known)
    across, new_pairs = new_object_pairs(table, new)
    out = {}
    for keep in ("blend", "never"):
        step = KernelDistances(learner=MEGKernelRegressor(objects=known, random_state=0),
                               pairs=table.loc[inside, ["a", "b"]],
                               targets=table.loc[inside, "sq"], given_squared=True,
                               keep_given=keep, squared=True, new_pairs=new_pairs,
                               new_distances=across["sq"].to_numpy()).fit(known)
        out[keep] = step.transform([new[0]])[0]
        if keep == "blend":
            mapped = step._scale_map
    given = new_pairs["new"] == new[0]
    columns = [list(known).index(key) for key in new_pairs["known"][given]]
    expected = mapped(out["never"])
    expected[columns] = 0.5 * (across["sq"].to_numpy()[given.to_numpy()] + expected[columns])
    assert_allclose(out["blend"], expected, rtol=1e-9)


def test_the_labels_choose_the_blend_when_it_ranks_neighbours_better():
    from megkernel._objects_verdict import neighbour_verdict

    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(4), 10)
    same = labels[:, None] == labels[None, :]
    good = np.where(same, 1.0, 5.0) + rng.random((40, 40)) * 0.1
    good = good + good.T
    noise = rng.random((40, 40))
    noise = noise + noise.T
    combined = {"where_given": noise, "first": noise + 1.0, "blend": good}
    verdict = neighbour_verdict(noise, noise, labels, combined=combined)
    assert verdict["blend"] == 1.0 and verdict["keep_given"] == "blend"
    # as good as the kernel alone: the earlier mode is kept
    tie = neighbour_verdict(good, noise, labels, combined=combined)
    assert tie["keep_given"] == "never"
