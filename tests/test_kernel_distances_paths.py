"""KernelDistances(keep_given="paths"): an object's chance of each class from its
given distances to labelled partners and to unlabelled ones (through their own
labelled partners), against a computation by loops."""

import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import FixedKernelLearner as Fixed
from conftest import clustered_pair_table, new_object_pairs
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.isotonic import IsotonicRegression
from sklearn.model_selection import ShuffleSplit, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from megkernel import KernelDistances, NoImprovementWarning
from megkernel._objects_paths import NO_EVIDENCE, PATH_CLIP
from megkernel._objects_verdict import TIE_BREAK
from megkernel.objects import clear_cache


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _table(n=40, fraction=0.15, seed=0):
    ids, labels, _, table = clustered_pair_table(n, seed, fraction, spread=1.5,
                                                 separation=2.0)
    return ids, labels, table


def _logit(p):
    return np.log(p / (1 - p))


def _class_chances(n, edges, label, freq, ratio, me):
    """Log-chances of each class of object ``me`` by loops (naive Bayes over its partners;
    an unlabelled partner passes on its chances from its own labelled partners, ``me``'s
    label left out)."""
    score = np.log(freq).copy()
    for k, d in edges[me].items():
        r = ratio(d)
        if label[k] >= 0:
            score[label[k]] += r
            continue
        belief = np.log(freq).copy()
        for m, e in edges[k].items():
            if label[m] >= 0 and m != me:
                belief[label[m]] += ratio(e)
        belief = np.exp(belief - belief.max())
        belief /= belief.sum()
        score += np.log(1 + belief * (np.exp(r) - 1))
    return score - np.log(np.sum(np.exp(score)))


def _naive_paths(ids, fit, labels, table):
    """-log P(the class of each fit object) for every object, by loops."""
    n = len(ids)
    pos = {name: k for k, name in enumerate(ids)}
    i = table["a"].map(pos).to_numpy()
    j = table["b"].map(pos).to_numpy()
    sq = table["sq"].to_numpy()
    label = np.full(n, -1)
    label[[pos[f] for f in fit]] = np.unique(labels, return_inverse=True)[1]
    both = (label[i] >= 0) & (label[j] >= 0)
    same = (label[i][both] == label[j][both]).astype(float)
    iso = IsotonicRegression(increasing=False, out_of_bounds="clip").fit(sq[both], same)
    freq = np.unique(labels, return_counts=True)[1] / len(labels)
    prior = np.sum(freq**2)  # two fit objects drawn at random

    def ratio(d):
        return _logit(np.clip(iso.predict([d])[0], PATH_CLIP, 1 - PATH_CLIP)) - _logit(prior)

    edges = [dict() for _ in range(n)]
    for a, b, d in zip(i, j, sq):
        edges[a][b] = edges[b][a] = d
    cols = [pos[f] for f in fit]
    out = np.full((n, len(cols)), NO_EVIDENCE)
    for a in range(n):
        if edges[a]:
            out[a] = -_class_chances(n, edges, label, freq, ratio, a)[label[cols]]
    return out


def test_paths_give_the_naive_bayes_chance_of_each_class():
    ids, labels, table = _table()
    fit = ids[::3]  # the others: unlabelled partners
    step = KernelDistances(learner=Fixed(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True, keep_given="paths",
                           squared=True).fit(fit, labels[::3])
    assert step.keeps_given_ == "paths"
    expected = _naive_paths(ids, fit, labels[::3], table)
    got = step.transform(ids)
    itself = ids[:, None] == fit[None, :]
    # the identity kernel's squared distances (2) break ties at TIE_BREAK
    assert_allclose(got[~itself], expected[~itself] + 2.0 * TIE_BREAK, rtol=1e-9, atol=1e-9)
    assert_array_equal(got[itself], 0.0)
    assert (expected < NO_EVIDENCE).mean() > 0.9


def test_paths_beat_the_given_distances_where_few_are_given():
    """Each object measured against a few others: its labelled partners' classes and its
    unlabelled partners' own partners rank its neighbours better than its nearest
    measured partner alone (held-out 1-NN, the same splits)."""
    ids, labels, _, table = clustered_pair_table(300, 1, 0.03, spread=1.0, separation=2.0)
    side = dict(pairs=table[["a", "b"]], targets=table["sq"], given_squared=True)

    def score(step):
        pipe = make_pipeline(step, KNeighborsClassifier(1, metric="precomputed"))
        cv = ShuffleSplit(5, test_size=0.5, random_state=0)
        return cross_val_score(pipe, ids, labels, cv=cv, error_score="raise").mean()

    observed = score(KernelDistances(objects=ids, **side))
    # the identity kernel knows nothing: the verdict says so, naming what the step keeps
    with pytest.warns(NoImprovementWarning, match="keep_given='paths'"):
        paths = score(KernelDistances(learner=Fixed(objects=ids), keep_given="paths", **side))
    assert paths > observed + 0.04, (paths, observed)


def test_the_table_in_another_row_order_gives_the_same_bits():
    ids, labels, table = _table()
    swapped = table.rename(columns={"a": "b", "b": "a"})[["a", "b", "sq"]]
    other = pd.concat([table.iloc[::2], swapped.iloc[1::2]]).sample(frac=1.0, random_state=3)
    out = []
    for t in (table, other):
        step = KernelDistances(learner=Fixed(objects=ids), pairs=t[["a", "b"]],
                               targets=t["sq"], given_squared=True,
                               keep_given="paths").fit(ids, labels)
        out.append(step.transform(ids))
    assert_array_equal(out[0], out[1])


def test_paths_need_labels():
    ids, _, table = _table()
    step = KernelDistances(learner=Fixed(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True, keep_given="paths")
    with pytest.raises(ValueError, match="keep_given='paths'.*class labels"):
        step.fit(ids)
    assert not hasattr(step, "keeps_given_")


def test_a_missing_label_is_refused_by_paths_before_any_warning(assert_unchanged_on_error):
    # "paths" reads the distances off the labels, so a missing one is an error, not the
    # verdict's "fitted as usual" warning followed by a refusal.
    ids, labels, table = _table()
    step = _paths_step(ids, table, keep_given="paths")
    y = pd.Series(labels.astype(float), index=[f"r{k}" for k in range(len(ids))])
    y.iloc[5] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with assert_unchanged_on_error(step, ValueError,
                                       match=r"keep_given='paths' needs a class label.*"
                                             r"1 missing.*row 'r5'"):
            step.fit(ids, y)
    y.index = 10 + np.arange(len(ids))  # an index of numbers: named as written
    with pytest.raises(ValueError, match=r"the first at row 15\.$"):
        step.fit(ids, y)


def test_a_new_object_is_placed_by_its_given_partners_and_their_paths():
    ids, labels, table = _table(n=44, fraction=0.3)
    known, new = ids[:40], ids[40:]
    inside = table["a"].isin(known) & table["b"].isin(known)
    across, new_pairs = new_object_pairs(table, new)
    fit = known[::3]
    step = KernelDistances(learner=Fixed(objects=known), pairs=table.loc[inside, ["a", "b"]],
                           targets=table.loc[inside, "sq"], given_squared=True,
                           keep_given="paths", squared=True, new_pairs=new_pairs,
                           new_distances=across["sq"].to_numpy()).fit(fit, labels[:40:3])
    got = step.transform([new[0]])[0]
    # by loops: the fit's chance map, the new object as one more (unlabelled) object
    mine = (across["a"] == new[0]) | (across["b"] == new[0])
    assert mine.sum() >= 3
    both = pd.concat([table.loc[inside], across.loc[mine]])
    everyone = np.concatenate([known, [new[0]]])
    pos = {name: k for k, name in enumerate(everyone)}
    label = np.full(len(everyone), -1)
    label[[pos[f] for f in fit]] = labels[:40:3]
    edges = [dict() for _ in everyone]
    for a, b, d in zip(both["a"].map(pos), both["b"].map(pos), both["sq"]):
        edges[a][b] = edges[b][a] = d
    paths = step._paths
    freq = np.bincount(labels[:40:3]) / len(fit)
    chances = _class_chances(len(everyone), edges, label, freq,
                             lambda d: paths.log_ratio(np.array([d]))[0], pos[new[0]])
    expected = -chances[label[[pos[f] for f in fit]]]
    # the placed object's learned squared distances, in the fit's unit, break ties
    unit = paths.learned_unit
    learned = step.set_params(keep_given="never").fit(fit, labels[:40:3]).transform([new[0]])
    assert_allclose(got, expected + TIE_BREAK * learned[0] / unit, rtol=1e-9, atol=1e-12)


def _noise_table(seed, n=120, fraction=0.04):
    rng = np.random.default_rng(seed)
    ids = np.array([f"o{i}" for i in range(n)], dtype=object)
    labels = rng.integers(0, 2, n)
    a, b = np.triu_indices(n, 1)
    keep = rng.random(len(a)) < fraction
    table = pd.DataFrame({"a": ids[a[keep]], "b": ids[b[keep]], "sq": rng.random(keep.sum())})
    return ids, labels, table


def _paths_step(ids, table, **params):
    return KernelDistances(learner=Fixed(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True, **params)


def test_the_leave_one_out_of_paths_does_not_see_the_objects_own_labels():
    # labels and distances of pure noise: the comparison's "paths" must score
    # about chance (a chance map fitted on the left-out object's own pairs
    # scored 0.61 on these ten tables, an honest leave-one-out 0.525)
    scores = []
    for seed in range(10):
        ids, labels, table = _noise_table(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoImprovementWarning)
            step = _paths_step(ids, table).fit(ids, labels)
        scores.append(step.verdict_["paths"])
    assert np.mean(scores) < 0.57


@pytest.mark.parametrize("scale", [1e-300, 1e-20, 1e12])
def test_paths_reads_given_distances_in_any_unit(scale):
    ids, labels, table = _table(n=60, fraction=0.2)
    fit = ids[::2]
    base = _paths_step(ids, table, keep_given="paths").fit(fit, labels[::2])
    scaled = table.assign(sq=table["sq"] * scale)
    other = _paths_step(ids, scaled, keep_given="paths").fit(fit, labels[::2])
    # the same ranking of the fit objects from every object (the learned tie-break aside)
    assert_array_equal(np.argsort(base.transform(ids), axis=1, kind="stable"),
                       np.argsort(other.transform(ids), axis=1, kind="stable"))


def test_the_learned_tie_break_never_outweighs_a_class_chance():
    # a learner in units of 1e12: its distances still only order objects of one class
    ids, labels, table = _table(n=60, fraction=0.2)
    fit = ids[::2]
    points = np.random.default_rng(3).normal(size=(len(ids), 3))
    kernel = points @ points.T

    def step(scale):
        return KernelDistances(learner=Fixed(objects=ids, kernel=scale * kernel),
                               pairs=table[["a", "b"]], targets=table["sq"],
                               given_squared=True, keep_given="paths").fit(fit, labels[::2])

    big, unit = step(1e12), step(1.0)
    assert_array_equal(np.argsort(big.transform(ids), axis=1, kind="stable"),
                       np.argsort(unit.transform(ids), axis=1, kind="stable"))


def test_an_object_fitted_twice_with_two_labels_is_refused(assert_unchanged_on_error):
    ids, labels, table = _table(n=40, fraction=0.3)
    step = _paths_step(ids, table)
    X = np.concatenate([ids[:20], ids[:1]])
    y = np.concatenate([labels[:20], [labels[0] + 1]])
    with assert_unchanged_on_error(step, ValueError, match=f"{ids[0]}.*different class"):
        step.fit(X, y)


def test_blocks_are_chunked_by_their_messages_not_only_by_rows():
    from megkernel._objects_paths import _chunks

    sizes = np.array([5, 5, 5, 50, 1, 1, 1, 1])
    runs = list(_chunks(sizes, budget=10, most=3))
    assert runs == [(0, 2), (2, 3), (3, 4), (4, 7), (7, 8)]
    assert [stop - start for start, stop in runs if start != 3] and all(
        sizes[start:stop].sum() <= 10 for start, stop in runs if stop - start > 1)
