"""KernelDistances(keep_given="paths"): the chance of one class from the given
distances and the shared given partners, against a computation by loops."""

import numpy as np
import pandas as pd
import pytest
from conftest import FixedKernelLearner as Fixed
from conftest import clustered_pair_table, new_object_pairs
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.isotonic import IsotonicRegression

from megkernel import KernelDistances
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


def _naive_paths(ids, labels, table):
    """-log P(one class) by loops: the isotonic chance of each given pair, naive Bayes over
    the direct pair and every two-step path; pairs without evidence at NO_EVIDENCE."""
    n = len(ids)
    pos = {name: k for k, name in enumerate(ids)}
    i = table["a"].map(pos).to_numpy()
    j = table["b"].map(pos).to_numpy()
    sq = table["sq"].to_numpy()
    same = (labels[i] == labels[j]).astype(float)
    iso = IsotonicRegression(increasing=False, out_of_bounds="clip").fit(sq, same)
    p = np.clip(iso.predict(sq), PATH_CLIP, 1 - PATH_CLIP)
    freq = np.bincount(labels) / n
    s = np.sum(freq**2)
    q = np.sum(freq * (s - freq**2)) / np.sum(freq * (1 - freq) ** 2)
    prior = same.mean()
    path_prior = prior**2 + (1 - prior) ** 2 * q
    chance = np.full((n, n), np.nan)
    for a, b, v in zip(i, j, p):
        chance[a, b] = chance[b, a] = v
    out = np.full((n, n), NO_EVIDENCE)
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            score, evidence = _logit(s), False
            if not np.isnan(chance[a, b]):
                score += _logit(chance[a, b]) - _logit(prior)
                evidence = True
            for k in range(n):
                if k in (a, b) or np.isnan(chance[a, k]) or np.isnan(chance[k, b]):
                    continue
                u, v = chance[a, k], chance[k, b]
                path = np.clip(u * v + (1 - u) * (1 - v) * q, PATH_CLIP, 1 - PATH_CLIP)
                score += _logit(path) - _logit(path_prior)
                evidence = True
            if evidence:
                out[a, b] = np.logaddexp(0.0, -score)
    return out


def test_paths_give_the_naive_bayes_chance_of_one_class():
    ids, labels, table = _table()
    step = KernelDistances(learner=Fixed(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True, keep_given="paths",
                           squared=True).fit(ids, labels)
    assert step.keeps_given_ == "paths"
    expected = _naive_paths(ids, labels, table)
    off = ~np.eye(len(ids), dtype=bool)
    # the identity kernel's squared distances (2) break ties at TIE_BREAK
    assert_allclose(step.transform(ids)[off], expected[off] + 2.0 * TIE_BREAK,
                    rtol=1e-9, atol=1e-9)
    assert (expected[off] < NO_EVIDENCE).mean() > 0.3  # the paths reach beyond the table


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


def test_a_new_object_is_placed_by_its_given_partners_and_their_paths():
    ids, labels, table = _table(n=44, fraction=0.3)
    known, new = ids[:40], ids[40:]
    inside = table["a"].isin(known) & table["b"].isin(known)
    across, new_pairs = new_object_pairs(table, new)
    step = KernelDistances(learner=Fixed(objects=known), pairs=table.loc[inside, ["a", "b"]],
                           targets=table.loc[inside, "sq"], given_squared=True,
                           keep_given="paths", squared=True, new_pairs=new_pairs,
                           new_distances=across["sq"].to_numpy()).fit(known, labels[:40])
    got = step.transform([new[0]])[0]
    # by loops, with the fit's chance map and the new object's own given distances
    paths = step._paths
    pos = {name: k for k, name in enumerate(known)}
    mine = new_pairs["new"] == new[0]
    partner = {pos[k]: v for k, v in zip(new_pairs["known"][mine],
                                         across["sq"].to_numpy()[mine.to_numpy()])}

    def chance(sq):
        return 1.0 / (1.0 + np.exp(-paths.levels[paths._level(np.array([sq]))][0]))

    tab_i = table.loc[inside, "a"].map(pos).to_numpy()
    tab_j = table.loc[inside, "b"].map(pos).to_numpy()
    edge = {}
    for a, b, v in zip(tab_i, tab_j, table.loc[inside, "sq"]):
        edge[(a, b)] = edge[(b, a)] = chance(v)
    expected = np.full(len(known), NO_EVIDENCE)
    for b in range(len(known)):
        score, evidence = _logit(paths.base), False
        if b in partner:
            score += _logit(chance(partner[b])) - _logit(paths.prior)
            evidence = True
        for k, v in partner.items():
            if (k, b) in edge:
                u, w = chance(v), edge[(k, b)]
                path = np.clip(u * w + (1 - u) * (1 - w) * paths.q, PATH_CLIP, 1 - PATH_CLIP)
                score += _logit(path) - _logit(paths.path_prior)
                evidence = True
        if evidence:
            expected[b] = np.logaddexp(0.0, -score)
    assert_allclose(got, expected + 2.0 * TIE_BREAK, rtol=1e-9, atol=1e-9)
