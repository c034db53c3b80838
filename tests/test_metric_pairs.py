"""Pairs from class labels: neighbor_pairs (MEGMetric's default) and the from_labels rule."""

import warnings

import numpy as np
import pytest

from megkernel import DefiniteBoostMetric, MEGMetric, draw_pairs, neighbor_pairs
from megkernel.metric._base import content_order_of_points


def _brute_force(X, y, k):
    """Each point's k nearest of its class and of the others, by a plain loop."""
    found = set()
    for i in range(len(X)):
        d = np.sum((X - X[i]) ** 2, axis=1)
        same = np.flatnonzero((y == y[i]) & (np.arange(len(X)) != i))
        other = np.flatnonzero(y != y[i])
        for kind, members in ((1, same), (-1, other)):
            for j in members[np.argsort(d[members], kind="stable")[:k]]:
                found.add((min(i, j), max(i, j), kind))
    return found


def _as_set(pairs, signs):
    return {(int(a), int(b), int(s)) for (a, b), s in zip(pairs, signs)}


@pytest.mark.parametrize("k", [1, 3, 5])
def test_neighbor_pairs_equal_a_plain_loop(k):
    rng = np.random.default_rng(k)
    X, y = rng.normal(size=(90, 4)), rng.integers(0, 3, 90)
    pairs, signs = neighbor_pairs(X, y, k)
    assert _as_set(pairs, signs) == _brute_force(X, y, k)
    assert np.all(pairs[:, 0] < pairs[:, 1])
    assert len({tuple(p) for p in pairs.tolist()}) == len(pairs)  # each pair once
    same = y[pairs[:, 0]] == y[pairs[:, 1]]
    np.testing.assert_array_equal(same, signs > 0)
    assert np.all(np.diff(signs) <= 0)  # similar first


def test_neighbor_pairs_blocks_equal_one_block(monkeypatch):
    """The queries go in blocks of bounded memory; the result does not depend on them."""
    import megkernel._solvers.metric_pairs as module

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(120, 3)), rng.integers(0, 4, 120)
    whole = neighbor_pairs(X, y, 4)
    monkeypatch.setattr(module, "_BLOCK", 7)
    blocked = neighbor_pairs(X, y, 4)
    np.testing.assert_array_equal(whole[0], blocked[0])
    np.testing.assert_array_equal(whole[1], blocked[1])


def test_neighbor_pairs_invariances_with_tied_distances():
    """Iris measures on a 0.1 grid: many tied distances. Ties go to the lowest
    index after rounding to 1e-9 of the mean squared distance, so a scaled,
    rotated or shifted copy gives the same pairs (round-off aside); permuting
    the points permutes the pairs."""
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    pairs, signs = neighbor_pairs(X, y, 5)
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(4, 4)))
    for moved in (3.0 * X, 1e-6 * X, X @ Q + 7.0):
        other, other_signs = neighbor_pairs(moved, y, 5)
        np.testing.assert_array_equal(other, pairs)
        np.testing.assert_array_equal(other_signs, signs)
    X_distinct = X + 1e-3 * np.random.default_rng(1).normal(size=X.shape)  # no ties
    base = _as_set(*neighbor_pairs(X_distinct, y, 5))
    order = np.random.default_rng(2).permutation(len(X))
    permuted_pairs, permuted_signs = neighbor_pairs(X_distinct[order], y[order], 5)
    mapped = {(min(order[a], order[b]), max(order[a], order[b]), s)
              for (a, b), s in zip(permuted_pairs.tolist(), permuted_signs.tolist())}
    assert mapped == base


def test_neighbor_pairs_small_classes_and_bad_input():
    X = np.arange(12, dtype=float).reshape(6, 2)
    y = np.array([0, 0, 0, 1, 1, 2])  # class 2 has one point: no similar pair
    pairs, signs = neighbor_pairs(X, y, 10)  # more neighbours than exist: all of them
    similar = {tuple(p) for p in pairs[signs > 0].tolist()}
    assert similar == {(0, 1), (0, 2), (1, 2), (3, 4)}
    assert len(pairs[signs < 0]) == 3 * 3 + 2 * 1  # every other-class pair
    with pytest.raises(ValueError, match="n_neighbors"):
        neighbor_pairs(X, y, 0)
    with pytest.raises(ValueError, match="one row per label"):
        neighbor_pairs(X, y[:-1], 2)


def _pair_rows(pairs, signs):
    """A pair table's rows (label, lower, higher point) sorted: the table as a set."""
    rows = np.column_stack([signs, np.sort(pairs, axis=1)])
    return rows[np.lexsort(rows.T[::-1])]


def test_meg_metric_from_labels_learns_the_neighbourhood_pairs():
    """MEGMetric.fit(X, y, from_labels="neighbors") learns from neighbor_pairs
    of X; with n_constraints set it draws random pairs as before; both at once
    is refused before any change."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    model = MEGMetric(from_labels="neighbors", random_state=0).fit(X, y)
    pairs, signs = neighbor_pairs(X, y)
    # the same pairs, in an order of the points' content (the fit's own)
    np.testing.assert_array_equal(_pair_rows(model.pairs_, model.pair_labels_),
                                  _pair_rows(pairs, signs))
    assert model.from_labels_ == "neighbors" and "from_labels" not in model.validation_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        drawn = MEGMetric(n_constraints=30, random_state=0).fit(X, y)
    assert len(drawn.pairs_) == 60
    refused = MEGMetric(from_labels="neighbors", n_constraints=30, random_state=0)
    with pytest.raises(ValueError, match="n_constraints=30 counts random pairs"):
        refused.fit(X, y)
    assert not hasattr(refused, "components_")


def test_definiteboost_metric_draws_random_pairs_unless_told():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostMetric(max_iter=20, random_state=0).fit(X, y)
        neighbours = DefiniteBoostMetric(max_iter=20, from_labels="neighbors",
                                         random_state=0).fit(X, y)
    assert len(model.pairs_) == 2 * 20 * 3**2
    # iris has copies of points: which copy is a neighbour goes by the fit's order
    order = content_order_of_points(X, y)
    pairs, signs = neighbor_pairs(X[order], y[order])
    np.testing.assert_array_equal(_pair_rows(neighbours.pairs_, neighbours.pair_labels_),
                                  _pair_rows(order[pairs], signs))


def test_a_labeled_chunk_of_partial_fit_makes_neighbourhood_pairs():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    model = MEGMetric(random_state=0).partial_fit(X[::2], y[::2])
    assert model.n_pairs_seen_ == len(neighbor_pairs(X[::2], y[::2])[0])


def _two_informative_classes():
    rng = np.random.default_rng(4)
    X = np.hstack([rng.normal(size=(80, 2)) + np.repeat([[0, 0], [3, 0]], 40, axis=0),
                   rng.normal(scale=3.0, size=(80, 3))])
    return X, np.repeat([0, 1], 40)


def test_auto_learns_the_soft_neighbor_objective_when_its_gain_is_real(monkeypatch):
    """from_labels="auto": the labels' own objective first; when its validated
    gain over the Euclidean prior is real, no pairs are validated and the fit
    is the one with from_labels="soft-neighbors" (same folds, same length)."""
    import megkernel._solvers.metric_validation as meg_epochs

    X, y = _two_informative_classes()
    calls = []
    real = meg_epochs.validate_epochs
    monkeypatch.setattr(meg_epochs, "validate_epochs",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = MEGMetric(random_state=0).fit(X, y)
    assert auto.from_labels_ == "soft-neighbors"
    assert auto.validation_["gain_is_real"] and auto.n_epochs_ > 0
    assert set(auto.validation_["from_labels"]) == {"soft-neighbors"}
    assert calls == []  # the pairs were not validated
    fixed = MEGMetric(from_labels="soft-neighbors", random_state=0).fit(X, y)
    assert fixed.n_epochs_ == auto.n_epochs_
    np.testing.assert_array_equal(fixed.transform(X), auto.transform(X))


@pytest.mark.parametrize("random_wins", [True, False])
def test_auto_falls_back_to_random_pairs_when_soft_neighbors_show_no_gain(
        random_wins, monkeypatch):
    """With no real gain of the soft-neighbour objective, random pairs are
    validated on the same folds and kept if their held-out accuracy at their
    chosen length is the higher (else the prior, by the first kind)."""
    import megkernel._solvers.metric_validation as meg_epochs

    X, y = _two_informative_classes()
    real = meg_epochs.validate_length

    def rigged(*args, classes=None, **kwargs):
        epochs, log = real(*args, classes=classes, **kwargs)
        if classes.from_labels == "soft-neighbors":  # no gain: the prior kept
            log = {**log, "chosen": 0.0, "gain_is_real": False}
            return 0.0, log
        if not random_wins:
            log = {**log, "accuracies": [a - 10.0 for a in log["accuracies"]]}
        return epochs, log

    monkeypatch.setattr(meg_epochs, "validate_length", rigged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = MEGMetric(random_state=0).fit(X, y)
    assert set(auto.validation_["from_labels"]) == {"soft-neighbors", "random"}
    if not random_wins:
        assert auto.from_labels_ == "soft-neighbors" and auto.n_epochs_ == 0
        return
    assert auto.from_labels_ == "random"
    assert len(auto.pairs_) == 2 * 20 * 2**2
    fixed = MEGMetric(from_labels="random", random_state=0).fit(X, y)
    assert fixed.n_epochs_ == auto.n_epochs_
    np.testing.assert_array_equal(fixed.pairs_, auto.pairs_)
    # a RandomState instance draws in the same order either way (review: pairs
    # drawn lazily inside the validation came after the fit's own draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shared = MEGMetric(random_state=np.random.RandomState(0)).fit(X, y)
        alone = MEGMetric(from_labels="random",
                          random_state=np.random.RandomState(0)).fit(X, y)
    np.testing.assert_array_equal(shared.pairs_, alone.pairs_)
    np.testing.assert_array_equal(shared.transform(X), alone.transform(X))


def test_neighbor_pairs_of_points_near_the_double_range():
    """CI's hypothesis run: a labeled chunk of partial_fit with entries near 1e200
    overflowed the squared distances. Distances are taken in units of the largest
    entry: the same pairs as for the data scaled down, no overflow."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 3)), rng.integers(0, 3, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = neighbor_pairs(1e200 * X, y, 3)
    small = neighbor_pairs(X, y, 3)
    np.testing.assert_array_equal(huge[0], small[0])
    np.testing.assert_array_equal(huge[1], small[1])
    with pytest.raises(ValueError, match="NaN or infinite"):
        neighbor_pairs(np.r_[X[:-1], [[np.nan, 0, 0]]], y, 3)


def _noisy_moons(seed, n=200):
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=n, noise=0.2, random_state=seed)
    return np.hstack([X, np.random.default_rng(seed).normal(size=(n, 6))]), y


def test_definiteboost_fit_pairs_learns_its_prior_as_megmetric_learns_the_pairs():
    """Given pairs: DefiniteBoostMetric's prior is MEGMetric's fit of those pairs
    without the pair loss: the pairs' own soft-neighbour objective, and the classes
    rebuilt from the similar pairs' components as a second candidate on the same
    folds (pairs drawn from the noisy moons' classes): the prior is the kind
    MEGMetric keeps."""
    from megkernel._numerics.seeding import derived_seed
    from megkernel.metric import draw_pairs

    X, y = _noisy_moons(seed=21)
    pairs, signs = draw_pairs(y, 300, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostMetric(random_state=0).fit_pairs(X, pairs, signs)
        expected = MEGMetric(random_state=derived_seed(0)).fit_pairs(
            X - X.mean(axis=0), pairs, signs)
        euclidean = DefiniteBoostMetric(random_state=0, init="euclidean").fit_pairs(
            X, pairs, signs)
    assert model.init_ == expected.validation_["kept"] and model.from_labels_ is None
    assert set(model.prior_validation_["from_labels"]) == {"soft-pairs", "pair-classes"}
    assert expected.temperature_ == model.prior_temperature_
    np.testing.assert_allclose(model.prior_components_, expected.components_,
                               rtol=1e-10, atol=1e-12)
    assert euclidean.init_ == "euclidean" and euclidean.prior_components_ is None


def test_definiteboost_fit_pairs_keeps_euclidean_where_the_pairs_carry_no_signal():
    """Pair labels unrelated to the points: the pairs' objective is tried, and the
    fit claims no real gain over the Euclidean metric."""
    X, y = _noisy_moons(seed=22, n=120)
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 120, size=(400, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    signs = np.where(rng.random(len(pairs)) < 0.5, 1, -1)  # labels unrelated to y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostMetric(random_state=0).fit_pairs(X, pairs, signs)
    assert model.prior_components_ is not None  # tried
    assert not model.validation_["gain_is_real"]


def test_definiteboost_fit_pairs_keeps_every_direction_when_few_points_are_paired():
    """22 paired points in 30 dimensions: whatever prior the pairs give, the
    learned map keeps all 30 directions (no direction of X is dropped for every
    point)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 30))
    y = (X[:, 0] > 0).astype(int)
    chains = [np.flatnonzero(y == c)[:11] for c in (0, 1)]
    similar = np.vstack([np.column_stack([c[:-1], c[1:]]) for c in chains])
    dissimilar = np.column_stack([chains[0], chains[1]])
    pairs = np.vstack([similar, dissimilar])
    signs = np.r_[np.ones(len(similar)), -np.ones(len(dissimilar))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostMetric(random_state=0).fit_pairs(X, pairs, signs)
    assert model.n_components_ == 30
    assert np.linalg.matrix_rank(model.transform(X)) == 30


def test_definiteboost_fit_pairs_with_an_unused_pairs_prior_validates_as_euclidean():
    """A soft-pairs prior without a real gain (labels unrelated to X): the sweeps'
    validation is init="euclidean"'s to the digit (its
    folds' queries drawn from the same generator; 1000 points, so a fold subsamples
    its 400 queries)."""
    rng = np.random.default_rng(0)
    n = 1000
    X, y = rng.normal(size=(n, 1)), rng.integers(0, 2, n)
    similar = [pair for c in (0, 1) for pair in zip(np.flatnonzero(y == c)[:-1],
                                                    np.flatnonzero(y == c)[1:])]
    a, b = rng.integers(0, n, (2, 1500))
    other = a[y[a] != y[b]], b[y[a] != y[b]]
    pairs = np.array(similar + list(zip(*other)))
    signs = np.r_[np.ones(len(similar)), -np.ones(len(other[0]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = DefiniteBoostMetric(random_state=0).fit_pairs(X, pairs, signs)
        euclidean = DefiniteBoostMetric(random_state=0, init="euclidean").fit_pairs(
            X, pairs, signs)
    assert auto.prior_components_ is not None and auto.init_ == "euclidean"
    assert auto.validation_["scores"] == euclidean.validation_["scores"]
    assert auto.n_iter_ == euclidean.n_iter_


def test_fit_pairs_with_the_rebuilt_classes_kept_does_not_depend_on_the_order():
    """The rebuilt classes (codes numbered by the components' smallest point) give
    the same metric whatever the order of the pairs' rows or of their two ends, and
    with the points renumbered."""
    from sklearn.datasets import make_circles

    from megkernel.metric import draw_pairs

    X, y = make_circles(n_samples=200, noise=0.08, factor=0.5, random_state=0)
    X = np.hstack([X, np.random.default_rng(0).normal(size=(200, 4)) * 0.5])
    pairs, signs = draw_pairs(y, 200, random_state=0)
    rows = np.random.default_rng(1).permutation(len(pairs))
    renumber = np.random.default_rng(2).permutation(len(X))
    inverse = np.argsort(renumber)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGMetric(random_state=0).fit_pairs(X, pairs, signs)
        shuffled = MEGMetric(random_state=0).fit_pairs(X, pairs[rows, ::-1], signs[rows])
        moved = MEGMetric(random_state=0).fit_pairs(X[renumber], inverse[pairs], signs)
    assert model.validation_["kept"] == "pair-classes"
    for other in (shuffled, moved):
        assert other.validation_["kept"] == "pair-classes"
        np.testing.assert_allclose(other.get_mahalanobis_matrix(),
                                   model.get_mahalanobis_matrix(), rtol=1e-6, atol=1e-9)


def test_the_rebuilt_classes_are_tried_only_where_the_components_stand_in_for_classes():
    """pair_kinds: the rebuilt classes' candidate between the pairs' objective and
    the pair loss where the components stand in for classes; not with one giant
    component, with too few linked points in large components, or where the
    linked points do not span the features."""
    from megkernel._solvers.metric_meg_fit import pair_kinds

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 5))
    y = np.repeat([0, 1, 2], 40)
    pairs, signs = draw_pairs(y, 300, random_state=0)
    assert pair_kinds(X, pairs, signs) == ["soft-pairs", "pair-classes", None]
    chain = np.column_stack([np.arange(99), np.arange(1, 100)])  # points 0-99 linked
    outside = np.column_stack([np.arange(20), np.arange(100, 120)])
    one = (np.vstack([chain, outside]), np.r_[np.ones(99), -np.ones(20)])
    assert pair_kinds(X, *one) == ["soft-pairs", None]  # one giant component
    apart = np.column_stack([np.arange(0, 40), np.arange(40, 80)])
    inside = (np.vstack([chain, apart]), np.r_[np.ones(99), -np.ones(40)])
    assert pair_kinds(X, *inside) == ["soft-pairs", None]  # a dissimilar pair inside
    chains = np.column_stack([np.arange(0, 118, 2), np.arange(1, 119, 2)])  # pairs of two
    few = (np.vstack([chains, apart]), np.r_[np.ones(len(chains)), -np.ones(40)])
    assert pair_kinds(X, *few) == ["soft-pairs", None]
    flat = X.copy()
    flat[:80, 4] = 0.0  # the linked points (classes 0 and 1) span 4 of 5 directions
    two = y < 2
    inside = two[pairs[:, 0]] & two[pairs[:, 1]]
    assert pair_kinds(flat, pairs[inside], signs[inside]) == ["soft-pairs", None]
    assert pair_kinds(X, pairs[inside], signs[inside]) == ["soft-pairs", "pair-classes", None]
