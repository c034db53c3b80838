"""KernelDistances' verdict: a learned kernel's neighbors against the observed
distances it was given, by leave-one-out 1-NN on the labelled fit objects."""

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import FixedKernelLearner as Forgetful
from conftest import clustered_pair_table
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import ShuffleSplit, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

import megkernel._objects_verdict as verdict_module
from megkernel import (
    DefiniteBoostKernel,
    KernelDistances,
    MEGKernelRegressor,
    NoImprovementWarning,
)
from megkernel._objects_given import GivenSquaredDistances, _table_matrix
from megkernel._objects_verdict import (
    WORSE_Z,
    loo_nearest_correct,
    neighbour_verdict,
)
from megkernel.objects import KernelLearnerMixin, clear_cache


def _clustered(n=40, seed=0, fraction=0.5):
    """Points in 4 tight clusters: a pair table of a part of their squared distances."""
    ids, labels, points, table = clustered_pair_table(
        n, seed, fraction, spread=0.3, separation=4.0)
    return ids, labels, table


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _naive_loo(D, labels):
    """Leave-one-out 1-NN by a loop: missing (NaN) never nearer; first of ties."""
    right = []
    for i in range(len(D)):
        best, best_j = None, None
        for j in range(len(D)):
            if j == i:
                continue
            d = 1e300 if np.isnan(D[i, j]) else D[i, j]
            if best is None or d < best:
                best, best_j = d, j
        right.append(labels[best_j] == labels[i])
    return np.array(right)


def test_loo_matches_a_loop_with_ties_and_missing():
    rng = np.random.default_rng(3)
    D = rng.integers(0, 4, size=(30, 30)).astype(float)  # many ties
    D = (D + D.T) / 2
    D[rng.random(D.shape) < 0.3] = np.nan
    D = np.where(np.isnan(D) | np.isnan(D.T), np.nan, D)
    labels = rng.integers(0, 3, 30)
    assert_array_equal(loo_nearest_correct(D, labels), _naive_loo(D, labels))


def test_verdict_counts_the_objects_the_two_disagree_on():
    labels = np.array([0, 0, 1, 1, 2, 2])
    good = np.where(labels[:, None] == labels[None], 1.0, 5.0)
    bad = np.where(labels[:, None] == labels[None], 5.0, 1.0)
    v = neighbour_verdict(bad, good, labels)
    assert v["learned"] == 0.0 and v["observed"] == 1.0 and v["n_objects"] == 6
    assert v["z"] == pytest.approx(-6 / np.sqrt(6)) and v["worse"]
    v = neighbour_verdict(good, bad, labels)
    assert v["z"] == pytest.approx(np.sqrt(6)) and not v["worse"]
    tie = neighbour_verdict(good, good, labels)
    assert tie["z"] == 0.0 and not tie["worse"]
    single = neighbour_verdict(good[:1, :1], good[:1, :1], labels[:1])
    assert np.isnan(single["learned"]) and np.isnan(single["observed"]) and not single["worse"]
    alone = neighbour_verdict(good, None, labels)
    assert alone["learned"] == 1.0 and np.isnan(alone["observed"]) and not alone["worse"]
    # one object lost out of one disagreement: 1 standard error, the threshold
    one = good.copy()
    one[0, 1] = 9.0  # object 0 alone loses its neighbor
    v = neighbour_verdict(one, good, labels)
    assert v["z"] == pytest.approx(-1.0) and not v["worse"]  # one standard error: not more
    one[2, 3] = 9.0  # a second loss: 1.4 standard errors
    assert neighbour_verdict(one, good, labels)["worse"] == (np.sqrt(2) > WORSE_Z)


def test_given_distances_block_is_the_table_matrix_restricted():
    ids, _, table = _clustered(30)
    doubled = pd.concat([table, table.rename(columns={"a": "b", "b": "a"})
                         .assign(sq=table["sq"] * 1.5)])  # repeated, reversed: averaged
    full, objects = _table_matrix(doubled[["a", "b"]], doubled["sq"], ids)
    position = {name: k for k, name in enumerate(objects)}
    a = doubled["a"].map(position).to_numpy()
    b = doubled["b"].map(position).to_numpy()
    given = GivenSquaredDistances(len(objects), a, b, doubled["sq"].to_numpy())
    rows, cols = np.array([3, 0, 17, 29, 8]), np.array([8, 1, 3, 3])
    expected = full[np.ix_(rows, cols)]
    expected[rows[:, None] == cols[None, :]] = np.nan  # no pair of one object
    assert_allclose(given.block(rows, cols), expected, equal_nan=True)
    assert given.n_pairs == len(doubled)
    # the table in another row order (and repeats of three values): the same bits
    tripled = pd.concat([doubled, table.assign(sq=table["sq"] * 0.7)])
    args = [tripled[name].to_numpy() for name in ("a", "b", "sq")]
    shuffled = np.random.default_rng(5).permutation(len(tripled))
    one = GivenSquaredDistances(len(objects), *(np.vectorize(position.get)(args[k])
                                                for k in (0, 1)), args[2])
    other = GivenSquaredDistances(len(objects), *(np.vectorize(position.get)(args[k][shuffled])
                                                  for k in (0, 1)), args[2][shuffled])
    everything = np.arange(len(objects))
    assert_array_equal(one.block(everything, everything), other.block(everything, everything))


def _learned_with_given(step, table, ids, squared, first=False):
    """The naive hybrid: the learned kernel's squared distances, the table's where given
    (``first``: the others beyond the largest given one), each object at 0 from itself."""
    K = step.kernel_
    position = {name: k for k, name in enumerate(step.objects_)}
    diag = np.diag(K)
    sq = diag[:, None] + diag[None, :] - 2.0 * K
    sums, counts = np.zeros_like(sq), np.zeros_like(sq)
    for a, b, value in table.itertuples(index=False):
        i, j = position[a], position[b]
        sums[i, j] += value
        sums[j, i] += value
        counts[i, j] += 1
        counts[j, i] += 1
    offset = table["sq"].max() if first else 0.0
    sq = np.where(counts > 0, sums / np.maximum(counts, 1), np.maximum(sq, 0.0) + offset)
    np.fill_diagonal(sq, 0.0)  # an object is at 0 from itself
    rows = [position[name] for name in ids]
    block = sq[np.ix_(rows, rows)]
    return block if squared else np.sqrt(block)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("mode", ["where_given", "first"])
def test_keep_given_returns_the_given_distances_where_given(squared, mode):
    ids, labels, table = _clustered()
    table = pd.concat([table, table.iloc[:5].assign(sq=table["sq"].iloc[:5] * 2.0)])
    learner = MEGKernelRegressor(objects=ids, random_state=0)
    step = KernelDistances(given_squared=True,
                           learner=learner, pairs=table[["a", "b"]], targets=table["sq"],
                           keep_given=mode, squared=squared).fit(ids)
    assert step.keeps_given_ == mode
    assert_allclose(step.transform(ids),
                    _learned_with_given(step, table, ids, squared, first=mode == "first"),
                    rtol=1e-9, atol=1e-9)
    plain = KernelDistances(given_squared=True,
                            learner=learner, pairs=table[["a", "b"]], targets=table["sq"],
                            keep_given="never", squared=squared).fit(ids)
    assert plain.keeps_given_ == "never"
    given = ~np.isnan(_table_matrix(table[["a", "b"]], table["sq"], ids)[0])
    np.fill_diagonal(given, False)
    if mode == "where_given":  # the same kernel; only the given pairs differ
        assert_allclose(plain.transform(ids)[~given], step.transform(ids)[~given],
                        rtol=1e-12)
    else:  # every given pair nearer than every other
        assert step.transform(ids)[given].max() <= step.transform(ids)[~given & ~np.eye(
            len(ids), dtype=bool)].min()
    assert not np.allclose(plain.transform(ids)[given], step.transform(ids)[given])


def test_keep_given_auto_follows_the_labels():
    ids, labels, table = _clustered()
    # the identity kernel knows nothing: keeping the given distances wins
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"])
    with pytest.warns(NoImprovementWarning):
        step.fit(ids, labels)
    assert step.keeps_given_ == step.verdict_["keep_given"] != "never"
    assert step.verdict_[step.keeps_given_] > step.verdict_["learned"]
    # a kernel as good as the distances: ties keep the learned kernel
    good = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(objects=ids, random_state=0),
                           pairs=table[["a", "b"]], targets=table["sq"]).fit(ids, labels)
    assert good.verdict_["learned"] == 1.0 and good.keeps_given_ == "never"
    # no labels to decide by: the blend of the given and the learned distances
    assert KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"]).fit(ids).keeps_given_ == "blend"


def test_keep_given_true_without_distances_is_refused_before_any_change():
    ids, labels, table = _clustered()
    signs = np.where(table["sq"] < np.median(table["sq"]), 1, -1)
    step = KernelDistances(learner=DefiniteBoostKernel(objects=ids), pairs=table[["a", "b"]],
                           targets=signs, keep_given="where_given")
    with pytest.raises(ValueError, match="keep_given='where_given' keeps the distances"):
        step.fit(ids, labels)
    assert not hasattr(step, "objects_")
    calls = []

    def stream():  # a stream is read by the learner only: nothing to keep
        calls.append(1)
        yield table[["a", "b"]].to_numpy(), table["sq"].to_numpy()

    step = KernelDistances(learner=MEGKernelRegressor(objects=ids, solver="online"),
                           pairs=stream, keep_given="first")
    with pytest.raises(ValueError, match="keep_given='first' keeps the distances"):
        step.fit(ids)
    assert not calls  # refused before the stream was read, or anything learned


def test_a_kernel_worse_than_its_distances_warns_with_both_figures():
    ids, labels, table = _clustered()
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"])
    with pytest.warns(NoImprovementWarning, match=r"leave-one-out 1-NN accuracy is "
                      r"0\.\d+ against 1\.000 for the observed distances"):
        step.fit(ids, labels)
    v = step.verdict_
    assert v["worse"] and v["observed"] == 1.0 and v["learned"] < 0.5
    assert v["n_objects"] == len(ids)
    # the step kept the given distances, and the warning says so
    with pytest.warns(NoImprovementWarning, match=r"keeps the given distance .*"
                      r"leave-one-out 1\.000"):
        step.fit(ids, labels)
    with pytest.warns(NoImprovementWarning) as caught:
        step.set_params(keep_given="never").fit(ids, labels)
    assert "keeps the given" not in str(caught[0].message)
    step.set_params(keep_given="auto")
    # a Pipeline passes the labels: one warning per fit of a split
    pipe = Pipeline([("kernel", step), ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    with pytest.warns(NoImprovementWarning) as caught:
        cross_val_score(pipe, ids, labels, cv=ShuffleSplit(3, test_size=0.5, random_state=0))
    assert sum(isinstance(w.message, NoImprovementWarning) for w in caught) == 3


def test_the_warning_as_an_error_leaves_the_step_as_it_was():
    ids, labels, table = _clustered()
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"]).fit(ids[:10])
    before = pickle.dumps(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoImprovementWarning)
        with pytest.raises(NoImprovementWarning):
            step.fit(ids, labels)
    assert pickle.dumps(step) == before


def test_a_kernel_that_learned_does_not_warn():
    ids, labels, table = _clustered(fraction=0.15)
    step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(objects=ids, random_state=0),
                           pairs=table[["a", "b"]], targets=table["sq"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoImprovementWarning)
        step.fit(ids, labels)
    v = step.verdict_
    # 0.825 against 0.725 on these 40 objects (0.85 before the batch fit's power-of-two
    # steps): better by more than two objects
    assert not v["worse"] and v["learned"] > v["observed"] + 0.05


def test_no_labels_no_verdict_and_labels_checked():
    ids, labels, table = _clustered()
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"])
    assert step.fit(ids).verdict_ is None
    assert step.fit(ids, np.linspace(0, 1, len(ids))).verdict_ is None  # not classes
    with pytest.raises(ValueError, match="one label per object of X"):
        step.fit(ids, labels[:-1])
    assert step.fit(ids, np.column_stack([labels, labels])).verdict_ is None  # 2 outputs
    with pytest.warns(NoImprovementWarning):  # string labels are judged too
        named = step.fit(ids, pd.Series([f"family {k}" for k in labels], index=ids))
    assert named.verdict_["worse"] is True
    without = KernelDistances(pairs=table[["a", "b"]], targets=table["sq"], objects=ids)
    assert without.fit(ids, labels).verdict_ is None  # no learner: nothing to judge


def test_pair_labels_have_no_observed_distances():
    ids, labels, table = _clustered()
    close = table.nsmallest(60, "sq")
    step = KernelDistances(learner=DefiniteBoostKernel(objects=ids, random_state=0,
                                                       validation_fraction=None),
                           pairs=close[["a", "b"]], targets=np.ones(len(close)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoImprovementWarning)
        step.fit(ids, labels)
    assert np.isnan(step.verdict_["observed"]) and not step.verdict_["worse"]
    assert 0.0 <= step.verdict_["learned"] <= 1.0


def test_distance_matrix_source_in_another_object_order():
    ids, labels, table = _clustered()
    full, _ = _table_matrix(table[["a", "b"]], table["sq"], ids)
    D = pd.DataFrame(np.sqrt(full), index=ids, columns=ids)
    reversed_ids = ids[::-1].copy()
    step = KernelDistances(learner=Forgetful(objects=reversed_ids), distances=D)
    with pytest.warns(NoImprovementWarning):
        step.fit(ids, labels)
    assert step.verdict_["observed"] == 1.0


def test_many_objects_are_sampled(monkeypatch):
    monkeypatch.setattr(verdict_module, "VERDICT_OBJECTS", 24)
    ids, labels, table = _clustered()
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"])
    with pytest.warns(NoImprovementWarning, match="a sample of them"):
        step.fit(ids, labels)
    assert step.verdict_["n_objects"] == 24


class Faithful(KernelLearnerMixin, RegressorMixin, BaseEstimator):
    """A 'learner' whose kernel reproduces given points exactly (its distances
    are the observed ones wherever observed)."""

    def __init__(self, objects=None, points=None):
        self.objects = objects
        self.points = points

    def fit(self, pairs, targets):
        self.objects_ = np.asarray(self.objects, dtype=object)
        self.kernel_ = self.points @ self.points.T
        return self


def _points_and_table(n=30, seed=0, fraction=0.6):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    points = rng.normal(size=(n, 2)) + 2.5 * np.eye(3)[labels][:, :2]
    ids = np.array([f"p{i}" for i in range(n)], dtype=object)
    a, b = np.triu_indices(n, 1)
    keep = rng.random(len(a)) < fraction
    sq = ((points[a[keep]] - points[b[keep]]) ** 2).sum(axis=1)
    return ids, labels, points, pd.DataFrame({"a": ids[a[keep]], "b": ids[b[keep]], "sq": sq})


def test_repeated_fit_ids_do_not_bias_the_verdict():
    """A bootstrap sample repeats ids: each copy is at distance 0 from the
    others under both, so a learner reproducing the distances ties them."""
    ids, labels, points, table = _points_and_table(fraction=1.0)
    boot = np.random.default_rng(0).choice(len(ids), len(ids))
    for step in (KernelDistances(given_squared=True,
                                 learner=Faithful(ids, points), pairs=table[["a", "b"]],
                                 targets=table["sq"]),
                 KernelDistances(learner=Faithful(ids, points), distances=pd.DataFrame(
                     np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1)),
                     index=ids, columns=ids))):
        step.fit(ids[boot], labels[boot])
        v = step.verdict_
        assert v["learned"] == v["observed"] and v["z"] == 0.0, v


def test_a_learner_over_more_objects_than_the_distance_matrix():
    """The learner may declare objects the user's matrix lacks: their
    observed distances are missing, not an error."""
    ids, labels, points, _ = _points_and_table()
    D = pd.DataFrame(np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1)),
                     index=ids, columns=ids)
    more = np.r_[ids, ["extra1", "extra2"]].astype(object)
    learner = Faithful(more, np.r_[points, [[9.0, 9.0], [-9.0, 9.0]]])
    step = KernelDistances(learner=learner, distances=D)
    step.fit(np.r_[ids[:20], ["extra1"]].astype(object), np.r_[labels[:20], [0]])
    assert step.verdict_["n_objects"] == 21 and not np.isnan(step.verdict_["observed"])


def test_column_labels_and_no_learner_leave_the_labels_alone():
    ids, labels, points, table = _points_and_table()
    step = KernelDistances(given_squared=True,
                           learner=Faithful(ids, points), pairs=table[["a", "b"]],
                           targets=table["sq"])
    assert step.fit(ids, labels[:, None]).verdict_["n_objects"] == len(ids)
    fixed = KernelDistances(kernel=points @ points.T, objects=ids)
    assert fixed.fit(ids, labels[:-1]).verdict_ is None  # y ignored without a learner


def test_the_warning_points_at_the_callers_line_inside_a_pipeline():
    ids, labels, table = _clustered()
    pipe = Pipeline([("kernel", KernelDistances(given_squared=True, learner=Forgetful(objects=ids),
                                                pairs=table[["a", "b"]],
                                                targets=table["sq"])),
                     ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    with pytest.warns(NoImprovementWarning) as caught:
        pipe.fit(ids, labels)
    assert all(w.filename == __file__ for w in caught if w.category is NoImprovementWarning)


def test_exactly_as_many_objects_as_compared_is_no_sample(monkeypatch):
    monkeypatch.setattr(verdict_module, "VERDICT_OBJECTS", 40)
    ids, labels, table = _clustered(40)
    step = KernelDistances(given_squared=True,
                           learner=Forgetful(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"])
    with pytest.warns(NoImprovementWarning) as caught:
        step.fit(ids, labels)
    assert not step.verdict_["sampled"]
    assert all("sample" not in str(w.message) for w in caught)


def test_a_weak_kernels_comparison_starts_from_the_given_distances_first():
    # the learned distances know the classes, "first" does not: from "never"
    # the kernel is kept; started at "first" (the learner found its kernel
    # weak), the modes that trust it more are no candidates
    from megkernel._objects_verdict import neighbour_verdict

    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 20)
    points = labels[:, None] * 10.0 + rng.normal(size=(60, 2))
    learned = ((points[:, None] - points[None]) ** 2).sum(-1)
    noise = rng.random((60, 60))
    noise = noise + noise.T
    combined = {"where_given": learned, "first": noise}
    plain = neighbour_verdict(learned, noise, labels, combined=combined)
    assert plain["keep_given"] == "never"
    weak = neighbour_verdict(learned, noise, labels, combined=combined, start="first")
    assert weak["keep_given"] == "first"
    assert weak["where_given"] == plain["where_given"] == 1.0  # scored, not a candidate
