"""KernelDistances with new objects: ids the fit never saw, placed from new_pairs."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from megkernel import DefiniteBoostKernel, KernelDistances, MEGKernelRegressor
from megkernel.objects import MISSING_DISTANCE


def _clusters(n=60, n_new=12, seed=0):
    """Two clusters in the plane: known ids k.., new ids n.., their distances."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n + n_new) % 2
    points = rng.normal(scale=0.4, size=(n + n_new, 2)) + 3.0 * labels[:, None]
    ids = np.array([f"k{i}" for i in range(n)] + [f"n{i}" for i in range(n_new)],
                   dtype=object)
    distances = np.sqrt(np.sum((points[:, None] - points[None]) ** 2, axis=2))
    return ids, labels, points, distances


def _new_table(ids, distances, n, m=None, seed=1, *, squared=False):
    rng = np.random.default_rng(seed)
    rows = []
    for new in range(n, len(ids)):
        olds = np.arange(n) if m is None else rng.choice(n, m, replace=False)
        rows += [(ids[new], ids[old], distances[new, old] ** (2 if squared else 1))
                 for old in olds]
    table = pd.DataFrame(rows, columns=["new", "known", "distance"])
    return table[["new", "known"]], table["distance"]


def _fit_table(ids, distances, n, fraction=0.5, seed=2):
    rng = np.random.default_rng(seed)
    a, b = np.triu_indices(n, 1)
    pick = rng.random(a.size) < fraction
    return (pd.DataFrame({"a": ids[a[pick]], "b": ids[b[pick]]}),
            pd.Series(distances[a[pick], b[pick]]))


def test_a_fixed_kernel_places_new_objects_at_their_distances():
    ids, _, points, distances = _clusters()
    kernel = points[:60] @ points[:60].T
    pairs, given = _new_table(ids, distances, 60)
    step = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=pairs,
                           new_distances=given).fit(ids[:60])
    got = step.transform(ids[60:])
    # the ridge (a tenth of the mean squared distance, 6.4, as noise) blurs the
    # smallest distances a little; the nearest known objects stay the nearest
    assert np.abs(got - distances[60:, :60]).max() < 0.3
    nearest = np.argmin(distances[60:, :60], axis=1)
    assert np.all(distances[60:, :60][np.arange(12), np.argmin(got, axis=1)]
                  <= distances[60:, :60][np.arange(12), nearest] + 0.1)
    # known ids alongside new ones: their rows as before
    mixed = step.transform(np.array(["k3", "n0", "k5"], dtype=object))
    np.testing.assert_array_equal(mixed[[0, 2]], step.transform(["k3", "k5"]))
    np.testing.assert_array_equal(mixed[1], got[0])


def test_a_learned_kernel_in_a_pipeline_predicts_labels_of_new_objects():
    ids, labels, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    new_pairs, new_distances = _new_table(ids, distances, 60, m=5)
    pipe = make_pipeline(
        KernelDistances(learner=MEGKernelRegressor(squared=False, random_state=0),
                        pairs=pairs, targets=targets),
        KNeighborsClassifier(1, metric="precomputed"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(ids[:60], labels[:60])
    # the new objects' table is set after the fit: no refit
    pipe.set_params(kerneldistances__new_pairs=new_pairs,
                    kerneldistances__new_distances=new_distances)
    assert pipe.score(ids[60:], labels[60:]) == 1.0
    assert set(pipe[0].objects_.tolist()) == set(ids[:60].tolist())  # nothing added


def test_the_units_of_a_learner_of_plain_or_squared_distances_are_its_targets():
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    out = []
    for squared in (False, True):
        new_pairs, new_distances = _new_table(ids, distances, 60, squared=squared)
        learner = MEGKernelRegressor(squared=squared, random_state=0)
        step = KernelDistances(learner=learner, pairs=pairs,
                               targets=targets**2 if squared else targets,
                               given_squared=squared, new_pairs=new_pairs,
                               new_distances=new_distances)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(step.fit(ids[:60]).transform(ids[60:]))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-6)
    np.testing.assert_allclose(out[0], distances[60:, :60], atol=0.5)


def test_without_a_learner_new_objects_have_their_given_distances():
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    new_pairs, new_distances = _new_table(ids, distances, 60, m=4)
    step = KernelDistances(pairs=pairs, targets=targets, new_pairs=new_pairs,
                           new_distances=new_distances).fit(ids[:60])
    got = step.transform(["n0"])[0]
    given = dict(zip(new_pairs["known"][new_pairs["new"] == "n0"],
                     new_distances[new_pairs["new"] == "n0"]))
    for j, key in enumerate(ids[:60]):
        assert got[j] == pytest.approx(given.get(key, MISSING_DISTANCE))


def test_a_learner_of_pair_labels_places_new_objects_in_the_kernel_units():
    ids, labels, _, distances = _clusters()
    a, b = np.triu_indices(60, 1)
    close = distances[a, b] < np.quantile(distances[a, b], 0.1)
    pairs = np.column_stack([ids[a[close]], ids[b[close]]])
    new_pairs, new_distances = _new_table(ids, distances, 60, m=10)
    pipe = make_pipeline(
        KernelDistances(learner=DefiniteBoostKernel(random_state=0, objects=ids[:60]),
                        pairs=pairs, new_pairs=new_pairs, new_distances=new_distances),
        KNeighborsClassifier(1, metric="precomputed"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(ids[:60], labels[:60])
    assert pipe.score(ids[60:], labels[60:]) >= 0.9


def test_row_order_of_the_new_table_changes_nothing():
    ids, _, points, distances = _clusters()
    kernel = points[:60] @ points[:60].T
    pairs, given = _new_table(ids, distances, 60, m=7)
    order = np.random.default_rng(5).permutation(len(pairs))
    one = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=pairs,
                          new_distances=given).fit(ids[:60]).transform(ids[60:])
    two = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=pairs.iloc[order],
                          new_distances=given.iloc[order]).fit(ids[:60]).transform(ids[60:])
    np.testing.assert_array_equal(one, two)


def _step(**params):
    ids, _, points, distances = _clusters()
    kernel = points[:60] @ points[:60].T
    pairs, given = _new_table(ids, distances, 60, m=5)
    params = {"new_pairs": pairs, "new_distances": given, **params}
    return KernelDistances(kernel=kernel, objects=ids[:60], **params).fit(ids[:60]), given


def test_an_id_neither_known_nor_given_distances_is_named():
    step, _ = _step()
    with pytest.raises(ValueError, match="neither known.*'stranger'"):
        step.transform(["k1", "stranger"])
    step, _ = _step(new_pairs=None, new_distances=None)
    with pytest.raises(ValueError, match="'n0'.*new_pairs= and new_distances="):
        step.transform(["n0"])


def test_a_new_object_without_a_distance_to_a_known_one_is_named():
    ids, _, points, _ = _clusters()
    kernel = points[:60] @ points[:60].T
    pairs = pd.DataFrame({"new": ["n0", "n1", "n1"], "known": ["n1", "k0", "k2"]})
    step = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=pairs,
                           new_distances=[1.0, 1.0, np.nan]).fit(ids[:60])
    with pytest.warns(UserWarning, match="only one known object"):
        step.transform(["n1"])  # one distance is placed (at the centre), with a warning
    with pytest.raises(ValueError, match="new object 'n0' has no distance to any known"):
        step.transform(["n0"])
    step.set_params(new_distances=[1.0, np.nan, np.nan])
    with pytest.raises(ValueError, match="new object 'n1' has no distance"):
        step.transform(["n1"])


@pytest.mark.parametrize("bad, word", [(-1.0, "negative"), (np.inf, "infinite")])
def test_a_bad_new_distance_names_its_row(bad, word):
    step, given = _step()
    given = given.copy()
    given.index = [f"r{i}" for i in range(len(given))]
    given.iloc[7] = bad
    step.set_params(new_distances=given)
    with pytest.raises(ValueError, match=f"{word} distance .* at row 'r7'"):
        step.transform(["n1"])
    with pytest.raises(ValueError, match="must hold numbers.*row 'r2' holds the text"):
        step.set_params(new_distances=given.astype(object).where(given.index != "r2", "1.0"))
        step.transform(["n1"])


def test_new_pairs_and_distances_of_other_shapes_are_refused():
    step, given = _step()
    step.set_params(new_distances=given[:-1])
    with pytest.raises(ValueError, match="new_distances must have shape"):
        step.transform(["n1"])
    step.set_params(new_distances=None)
    with pytest.raises(ValueError, match="new_pairs needs new_distances"):
        step.transform(["n1"])
    step.set_params(new_pairs=np.zeros((3, 3)), new_distances=np.ones(3))
    with pytest.raises(ValueError, match="new_pairs must be a table of object pairs"):
        step.transform(["n1"])


def test_distances_in_other_units_are_refused_or_warned_about():
    step, given = _step()
    new_ids = [f"n{i}" for i in range(12)]
    step.set_params(new_distances=1000.0 * given)
    with pytest.raises(ValueError, match="other units than the fit's"):
        step.transform(new_ids)
    step.set_params(new_distances=20.0 * given)
    with pytest.warns(UserWarning, match="check that they are in the fit's units"):
        step.transform(new_ids)
    step.set_params(new_distances=3.0 * given)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step.transform(new_ids)
    # squared distances where plain ones are expected, in units where it shows
    ids, _, points, distances = _clusters()
    kernel = (100 * points[:60]) @ (100 * points[:60]).T
    pairs, given = _new_table(ids, 100 * distances, 60, m=5, squared=True)
    step = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=pairs,
                           new_distances=given).fit(ids[:60])
    with pytest.raises(ValueError, match="squared\\s+where plain distances are expected"):
        step.transform(ids[60:])
    step.set_params(given_squared=True)
    step.fit(ids[:60]).transform(ids[60:])


def test_a_failed_transform_changes_nothing():
    step, given = _step()
    before = step.transform(["n2"])
    step.set_params(new_distances=-given)
    with pytest.raises(ValueError):
        step.transform(["n2"])
    step.set_params(new_distances=given)
    np.testing.assert_array_equal(step.transform(["n2"]), before)


def test_kept_given_distances_are_kept_for_new_objects_too():
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    new_pairs, new_distances = _new_table(ids, distances, 60, m=6)
    out = {}
    for keep in ("where_given", "never"):
        step = KernelDistances(learner=MEGKernelRegressor(squared=False, random_state=0),
                               pairs=pairs, targets=targets, keep_given=keep,
                               new_pairs=new_pairs, new_distances=new_distances)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[keep] = step.fit(ids[:60]).transform(["n3"])[0]
    given = new_pairs["new"] == "n3"
    columns = [list(ids[:60]).index(key) for key in new_pairs["known"][given]]
    np.testing.assert_allclose(out["where_given"][columns], new_distances[given], rtol=1e-9)
    others = np.setdiff1d(np.arange(60), columns)
    np.testing.assert_array_equal(out["where_given"][others], out["never"][others])
    assert not np.allclose(out["never"][columns], new_distances[given], rtol=1e-6)


def test_a_copy_of_a_known_object_given_all_its_distances_is_placed_on_it():
    ids, _, points, distances = _clusters()
    kernel = points[:60] @ points[:60].T + 1.0
    copy = pd.DataFrame({"new": ["copy of k7"] * 60, "known": ids[:60]})
    step = KernelDistances(kernel=kernel, objects=ids[:60], new_pairs=copy,
                           new_distances=distances[7, :60]).fit(ids[:60])
    placed, original = step.transform(["copy of k7", "k7"])
    # the ridge's shrinkage only (a tenth of the mean squared distance as noise)
    assert np.abs(placed - original).max() < 0.05 * distances.max()
    assert np.argsort(placed)[:5].tolist() == np.argsort(original)[:5].tolist()


def test_a_learner_taught_a_distance_matrix_places_new_objects_in_its_units():
    ids, labels, _, distances = _clusters()
    matrix = pd.DataFrame(distances[:60, :60], index=ids[:60], columns=ids[:60])
    rng = np.random.default_rng(3)
    hidden = np.triu(rng.random((60, 60)) < 0.5, 1)
    matrix = matrix.mask(hidden | hidden.T)  # half the pairs missing
    new_pairs, new_distances = _new_table(ids, distances, 60, m=8)
    step = KernelDistances(learner=MEGKernelRegressor(random_state=0), distances=matrix,
                           keep_given="never", new_pairs=new_pairs,
                           new_distances=new_distances)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.fit(ids[:60])
    assert step._extension["unit"] == pytest.approx(1.0, rel=0.1)  # MEG: its targets' units
    got = step.transform(ids[60:])
    assert np.corrcoef(got.ravel(), distances[60:, :60].ravel())[0, 1] > 0.95


def test_without_a_learner_new_distances_in_other_units_are_refused_too():
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    new_pairs, new_distances = _new_table(ids, distances, 60)
    step = KernelDistances(pairs=pairs, targets=targets, new_pairs=new_pairs,
                           new_distances=1000 * new_distances).fit(ids[:60])
    with pytest.raises(ValueError, match="other units than the fit's"):
        step.transform(ids[60:])


def test_squared_output_for_new_objects_is_the_square_of_the_plain_one():
    plain, _ = _step()
    squared, _ = _step(squared=True)
    np.testing.assert_allclose(squared.transform(["n0", "k1"]),
                               plain.transform(["n0", "k1"]) ** 2, rtol=1e-12)


@pytest.mark.parametrize("learner_squared", [True, False])
def test_new_distances_are_read_as_the_learner_read_its_table(learner_squared):
    """A table of plain distances (KernelDistances' default) taught to MEG reading them as
    squared (its default) or as plain: the new objects' distances are read the same way,
    so a copy of a known object lands on it, without a units warning."""
    ids, _, _, distances = _clusters()
    distances = 250.0 * distances  # the user's units, far from 1
    pairs, targets = _fit_table(ids, distances, 60)
    copy_of = 7
    new_pairs = pd.DataFrame({"new": ["copy"] * 59, "known": np.delete(ids[:60], copy_of)})
    new_distances = np.delete(distances[copy_of, :60], copy_of)
    step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(squared=learner_squared, random_state=0),
                           pairs=pairs, targets=targets, new_pairs=new_pairs,
                           new_distances=new_distances, keep_given="never")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no units warning (nor any other)
        warnings.simplefilter("ignore", ConvergenceWarning)
        row = step.fit(ids[:60]).transform(["copy"])[0]
        known = step.transform(ids[:60])
    assert np.argmin(row) == copy_of
    # its distances to the others as the original's, within the placement's error
    others = np.delete(np.arange(60), copy_of)
    assert np.corrcoef(row[others], known[copy_of, others])[0, 1] > 0.95


@pytest.mark.parametrize("given_squared", [None, True])
def test_a_new_distance_beyond_the_library_s_range_names_its_row(given_squared):
    """One huge distance among ordinary ones: the call's median passes the units check,
    but its square is beyond what the placement computes with (it gave rows of NaN)."""
    step, given = _step(given_squared=given_squared)
    given = given.copy()
    given.index = [f"r{i}" for i in range(len(given))]
    step.set_params(new_distances=given)
    before = step.transform(["n0"])
    huge = given.copy()
    huge.iloc[3] = 1e200
    step.set_params(new_distances=huge)
    with pytest.raises(ValueError, match="1e\\+200 at row 'r3' .*squared distances up to "
                       "1e\\+100"):
        step.transform(["n0"])
    step.set_params(new_distances=given)
    np.testing.assert_array_equal(step.transform(["n0"]), before)


def test_the_largest_new_distance_the_library_takes_is_placed_without_overflow():
    step, given = _step(given_squared=True)
    given = (given**2).copy()
    given.iloc[0] = 1e100  # the largest squared distance computed with
    step.set_params(new_distances=given)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(step.transform(["n0"])).all()


@pytest.mark.parametrize("given_squared", [None, True])
def test_without_a_learner_a_repeated_new_pair_is_averaged_as_a_known_one(given_squared):
    """The docs: repeated pairs, in either order, are averaged (a known pair's repeats
    are); a new pair's repeats gave the largest of them."""
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    other = ~pairs.isin(["k0", "k1"]).all(axis=1)  # k0-k1 only as the repeats below
    pairs, targets = pairs[other], targets[other]
    repeats = [["x", "k0"], ["k0", "x"], ["k0", "k1"], ["k1", "k0"], ["x", "k5"]]
    step = KernelDistances(
        pairs=pd.concat([pairs, pd.DataFrame(repeats[2:4], columns=["a", "b"])]),
        targets=pd.concat([targets, pd.Series([1.0, 3.0])]), given_squared=given_squared,
        new_pairs=[repeats[1], repeats[0], repeats[4]], new_distances=[3.0, 1.0, 2.0],
    ).fit(ids[:60])
    known = step.transform(["k0"])[0, 1]
    new = step.transform(["x"])[0]
    mean = np.sqrt(2.0) if given_squared else 2.0  # in the table's convention
    assert known == pytest.approx(mean)
    assert new[0] == pytest.approx(known)
    assert new[5] == pytest.approx(np.sqrt(2.0) if given_squared else 2.0)


def test_without_units_from_the_fit_a_new_object_s_row_does_not_depend_on_its_batch():
    """A learner of pair labels gives the kernel no units: the new distances' median is
    matched to the kernel's typical distance. That median was the call's, so a new
    object's row changed with the other ids of the same transform (a k-NN's predict of
    one object against a batch); it is the table's."""
    ids, _, _, distances = _clusters()
    a, b = np.triu_indices(60, 1)
    close = distances[a, b] < np.quantile(distances[a, b], 0.1)
    new_pairs, new_distances = _new_table(ids, distances, 60, m=10)
    step = KernelDistances(learner=DefiniteBoostKernel(random_state=0, objects=ids[:60]),
                           pairs=np.column_stack([ids[a[close]], ids[b[close]]]),
                           new_pairs=new_pairs, new_distances=new_distances)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.fit(ids[:60])
    batch = step.transform(ids[60:])
    for i in (0, 5):
        np.testing.assert_array_equal(step.transform([ids[60 + i]])[0], batch[i])
    np.testing.assert_array_equal(step.transform(["n3", "k2"])[0], batch[3])


def test_a_missing_id_in_new_pairs_is_named_by_its_row():
    """A None or NaN id was dropped while grouping the rows: asked for, it 'has no
    distance to any known object' (it had one); not asked for, its row went unseen."""
    for missing in (None, np.nan):
        step, _ = _step(new_pairs=pd.DataFrame({"new": ["x", missing], "known": ["k0", "k1"]},
                                               index=["p", "q"]),
                        new_distances=[1.0, 2.0])
        with pytest.raises(ValueError, match="new_pairs has a missing id .* row 'q', "
                           "column 'new'"):
            step.transform(["x"])


def test_new_ids_of_another_kind_than_the_fit_s_are_refused_naming_both():
    """Known ids 0..59 and a new table read from text ('3'): the known partner '3' is
    no id of the fit, so the new object seemed paired only with other new ones."""
    _, _, points, distances = _clusters()
    step = KernelDistances(kernel=points[:60] @ points[:60].T,
                           new_pairs=[["x", "3"], ["x", "7"]],
                           new_distances=[1.0, 2.0]).fit(np.arange(60))
    with pytest.raises(ValueError, match="new_pairs names str ids .*'x'.* the fit's "
                       "objects are number ids .*0"):
        step.transform(["x"])
    step.set_params(new_pairs=[["x", 3], ["x", 7]])
    with pytest.raises(ValueError, match="new_pairs mixes kinds of object ids"):
        step.transform(["x"])
    step.set_params(new_pairs=[[100, 3], [100, 7]])
    assert step.transform([100]).shape == (1, 60)


def test_fitting_on_a_new_object_says_that_new_objects_are_placed_not_fitted():
    """cross_val_score over known and new ids: a split fits on new ids. The refusal
    named only objects_ and a learner's objects=, not new_pairs, which the user set."""
    ids, labels, _, _ = _clusters()
    step, _ = _step()
    with pytest.raises(ValueError, match="'n0'.*new_pairs are placed by transform and "
                       "predict, never fitted"):
        step.fit(ids, labels)
    assert step.objects_.tolist() == ids[:60].tolist()  # the earlier fit stands
    # an id in none of new_pairs (a typo) is not told it is placed
    with pytest.raises(ValueError) as refused:
        step.fit([*ids[:3].tolist(), "typo"])
    assert "'typo'" in str(refused.value) and "never fitted" not in str(refused.value)


def test_a_new_object_with_one_known_partner_is_placed_at_the_centre_and_warned_about():
    """One distance does not locate an object: the placement's unknown norm absorbs it,
    so the object lands on the known objects' centre whoever its partner and whatever
    the distance (a copy of k7, at distance 0 from it, is not nearest to k7). The docs
    said any m >= 1 places an object; it now warns, naming it."""
    ids, _, points, _ = _clusters()
    kernel = points[:60] @ points[:60].T
    step = KernelDistances(kernel=kernel, objects=ids[:60],
                           new_pairs=[["copy of k7", "k7"], ["copy of k7", "k7"],
                                      ["other", "k30"], ["two", "k7"], ["two", "k8"]],
                           new_distances=[0.0, 0.0, 0.0, 0.0, 1.0]).fit(ids[:60])
    with pytest.warns(UserWarning, match="2 of the 3 new objects .*'copy of k7'.* only "
                      "one known object") as caught:
        rows = step.transform(["copy of k7", "other", "two"])
    assert len(caught) == 1
    np.testing.assert_array_equal(rows[0], rows[1])  # the same place, whoever the partner
    assert np.argmin(rows[0]) != 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step.transform(["two", "k3"])  # two partners: no warning


class _Chunks:
    """A re-iterable stream of (pairs, targets) chunks of a pair table."""

    def __init__(self, pairs, targets, size=200):
        self.pairs, self.targets, self.size = pairs, targets, size

    def __call__(self):
        for start in range(0, len(self.targets), self.size):
            yield (self.pairs[start:start + self.size], self.targets[start:start + self.size])


def test_a_stream_s_new_distances_are_read_as_its_targets_are():
    """given_squared unset: MEG reads a stream's targets as squared distances (as alone,
    with a FutureWarning); the new distances, in the same table's convention, were read
    as plain ones and squared again, so a copy of a known object given its squared
    distances to all the others was placed as if they were fourth powers. Read as the
    fit read its own, the placement is given_squared=True's."""
    ids, _, _, distances = _clusters()
    pairs, targets = _fit_table(ids, distances, 60)
    stream = _Chunks(pairs.to_numpy(dtype=object), targets.to_numpy() ** 2)
    copy_of = 7
    others = np.delete(np.arange(60), copy_of)
    new_pairs = pd.DataFrame({"new": "copy", "known": ids[others]})
    rows = {}
    for given_squared in (None, True):
        step = KernelDistances(learner=MEGKernelRegressor(random_state=0), pairs=stream,
                               given_squared=given_squared, new_pairs=new_pairs,
                               new_distances=distances[copy_of, others] ** 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows[given_squared] = step.fit(ids[:60]).transform(["copy"])[0]
    np.testing.assert_allclose(rows[None], rows[True], rtol=1e-9)


@pytest.mark.parametrize("small", [0.0, 1e-160])
def test_without_units_from_the_fit_a_table_of_zero_distances_is_refused(small):
    """A learner of pair labels: the new distances' median is matched to the kernel's
    typical distance. A table whose median is 0 (most new objects copies of known
    ones), or whose median squares below double precision, gave rows of NaN; it is
    refused, naming the median."""
    ids, _, _, distances = _clusters()
    a, b = np.triu_indices(60, 1)
    close = distances[a, b] < np.quantile(distances[a, b], 0.1)
    step = KernelDistances(learner=DefiniteBoostKernel(random_state=0, objects=ids[:60]),
                           pairs=np.column_stack([ids[a[close]], ids[b[close]]]),
                           new_pairs=[["x", f"k{i}"] for i in range(5)],
                           new_distances=[small, small, small, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.fit(ids[:60])
    with pytest.raises(ValueError, match="median of new_distances .* cannot be matched"):
        step.transform(["x"])


def test_new_pairs_of_tuple_ids_and_of_three_columns():
    """Tuple ids ((plate, well)) in a list of new pairs were split by numpy into a third
    dimension and refused as a table of another shape; a DataFrame of three columns
    is refused for its shape, before its ids are looked at."""
    rng = np.random.default_rng(0)
    points = rng.normal(size=(6, 2))
    objects = np.empty(6, dtype=object)
    objects[:] = [("p1", i) for i in range(6)]
    step = KernelDistances(kernel=points @ points.T, objects=objects,
                           new_pairs=[[("p2", 0), ("p1", 1)], [("p2", 0), ("p1", 3)]],
                           new_distances=[1.0, 2.0]).fit(objects)
    as_frame = step.transform([("p2", 0)])
    step.set_params(new_pairs=pd.DataFrame({"new": [("p2", 0)] * 2,
                                            "known": [("p1", 1), ("p1", 3)]}))
    np.testing.assert_array_equal(step.transform([("p2", 0)]), as_frame)
    step.set_params(new_pairs=pd.DataFrame({"new": ["x"] * 2, "known": ["k0", "k1"],
                                            "batch": [1, 2]}))
    with pytest.raises(ValueError, match="new_pairs must be a table of object pairs"):
        step.transform(["x"])


@pytest.mark.parametrize("new_pairs", [[[float("nan"), 0], [7, 1], [7, 2]],
                                       [[7, 1], [7, 2], [float("nan"), 0]]])
def test_a_missing_id_in_a_plain_list_of_new_pairs_is_refused_by_its_row(new_pairs):
    # a list of numbers: NaN is no id (it became an object of its own, or a garbled message)
    rng = np.random.default_rng(0)
    points = rng.normal(size=(6, 2))
    step = KernelDistances(kernel=points @ points.T, new_pairs=new_pairs,
                           new_distances=[1.0, 2.0, 1.0]).fit(list(range(6)))
    row = next(i for i, pair in enumerate(new_pairs) if pair[0] != pair[0])
    with pytest.raises(ValueError, match=fr"new_pairs has a missing id \(nan\) at row {row}"):
        step.transform([7])
