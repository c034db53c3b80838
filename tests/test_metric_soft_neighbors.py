"""MEG on the stochastic-neighbour objective (MEGMetric's from_labels="soft-neighbors")."""

import warnings

import numpy as np
import pytest
from conftest import standardised_halves

from megkernel import MEGMetric, neighbor_pairs
from megkernel._solvers.metric_meg import MetricExponent, embedding, whiten
from megkernel._solvers.metric_soft_neighbors import (
    SoftNeighborAscent,
    prior_temperature,
    soft_neighbor_probabilities,
)
from megkernel.metric._base import content_order_of_points


def _data(seed=0, n=60, noise=4):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    informative = labels[:, None] * 1.5 + rng.normal(scale=0.6, size=(n, 1))
    X = np.hstack([informative, rng.normal(scale=2.0, size=(n, noise))])
    return X, labels


def _naive_objective(points, labels, M, temperature):
    """(1/n) sum_i sum_{j in C_i} p_ij by plain loops over the points."""
    n, total = len(points), 0.0
    for i in range(n):
        weights = np.array([0.0 if k == i else np.exp(
            -(points[i] - points[k]) @ M @ (points[i] - points[k]) / temperature)
            for k in range(n)])
        total += weights[labels == labels[i]].sum() / weights.sum()
    return total / n


def _start(X, labels):
    coordinates, scales, _, trace = whiten(X - X.mean(axis=0))
    prior = scales**2 / trace
    return coordinates, prior, prior_temperature(coordinates, prior)


def test_objective_equals_a_plain_loop_and_the_gradient_its_finite_difference():
    X, labels = _data()
    coordinates, prior, temperature = _start(X, labels)
    ascent = SoftNeighborAscent(coordinates, labels, prior, temperature).advance(2)
    M = ascent.exponent.density()
    assert ascent.objective == pytest.approx(
        _naive_objective(coordinates, labels, M, temperature), rel=1e-10)
    rng = np.random.default_rng(1)
    direction = rng.normal(size=M.shape)
    direction = direction + direction.T
    h = 1e-6
    plus, minus = (_naive_objective(coordinates, labels, M + s * h * direction, temperature)
                   for s in (1, -1))
    assert np.sum(ascent.gradient() * direction) == pytest.approx(
        (plus - minus) / (2 * h), rel=1e-5)


def test_the_ascent_is_monotone_and_keeps_a_density_matrix():
    X, labels = _data(seed=2)
    coordinates, prior, temperature = _start(X, labels)
    ascent = SoftNeighborAscent(coordinates, labels, prior, temperature).advance(25)
    assert ascent.n_iter >= 5
    assert np.all(np.diff(ascent.objectives) > 0)
    weights = ascent.exponent.weights  # M's eigenvalues: exp of the exponent's, normalised
    assert weights.sum() == pytest.approx(1.0) and weights.min() >= 0
    assert np.trace(ascent.exponent.density()) == pytest.approx(1.0)


def test_the_prior_temperature_is_the_mean_nearest_neighbour_distance():
    X, labels = _data(seed=3, n=20)
    coordinates, prior, temperature = _start(X, labels)
    trace = np.sum((X - X.mean(axis=0)) ** 2)
    sq = np.sum((X[:, None] - X[None]) ** 2, axis=-1)
    np.fill_diagonal(sq, np.inf)
    assert temperature * trace == pytest.approx(sq.min(axis=1).mean(), rel=1e-10)
    duplicated = np.repeat(coordinates[:3], 2, axis=0)  # every nearest distance 0
    assert prior_temperature(duplicated, prior) > 0


def test_probabilities_rows_sum_to_one_without_self():
    rng = np.random.default_rng(0)
    P, p, same = soft_neighbor_probabilities(rng.normal(size=(10, 3)), rng.integers(0, 2, 10),
                                             0.5)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.all(np.diag(P) == 0)
    np.testing.assert_allclose(p, np.sum(P * same, axis=1))


def test_it_finds_the_informative_direction():
    """One informative feature among four of noise twice its spread: the metric
    moves its weight onto it, and held-out 1-NN rises above the Euclidean."""
    from sklearn.neighbors import KNeighborsClassifier

    X, labels = _data(seed=4, n=240)
    train, test = slice(0, 120), slice(120, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGMetric(from_labels="soft-neighbors", random_state=0).fit(X[train],
                                                                            labels[train])
    A = model.get_mahalanobis_matrix()
    assert A[0, 0] / np.trace(A) > 0.5  # Euclidean: 1.5^2-ish of 1.5^2 + 4 * 4
    learned = KNeighborsClassifier(1).fit(model.transform(X[train]), labels[train]).score(
        model.transform(X[test]), labels[test])
    euclid = KNeighborsClassifier(1).fit(X[train], labels[train]).score(X[test], labels[test])
    assert learned > euclid + 0.05
    first, last = model.soft_neighbor_objective_
    assert last > first and model.n_iter_ >= 1


def test_scale_and_permutation_leave_the_fit_unchanged():
    X, labels = _data(seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = MEGMetric(from_labels="soft-neighbors", n_epochs=8).fit(X, labels)
        scaled = MEGMetric(from_labels="soft-neighbors", n_epochs=8).fit(1e3 * X, labels)
        order = np.random.default_rng(0).permutation(len(X))
        permuted = MEGMetric(from_labels="soft-neighbors", n_epochs=8).fit(X[order],
                                                                         labels[order])
    new = np.random.default_rng(9).normal(size=(6, X.shape[1]))
    d = base.pair_sq_distances(new, [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_allclose(scaled.pair_sq_distances(1e3 * new, [[0, 1], [2, 3], [4, 5]]),
                               1e6 * d, rtol=1e-7)
    np.testing.assert_allclose(permuted.pair_sq_distances(new, [[0, 1], [2, 3], [4, 5]]), d,
                               rtol=1e-7)


def test_soft_neighbors_refuses_what_it_cannot_take(monkeypatch):
    import megkernel.metric._base as base

    X, labels = _data(seed=6, n=30)
    with pytest.raises(ValueError, match="n_constraints=10 counts random pairs"):
        MEGMetric(from_labels="soft-neighbors", n_constraints=10).fit(X, labels)
    monkeypatch.setattr(base, "SOFT_NEIGHBORS_MAX_POINTS", 20)
    model = MEGMetric(from_labels="soft-neighbors")
    with pytest.raises(ValueError, match="at most 20 training points"):
        model.fit(X, labels)
    assert not hasattr(model, "components_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = MEGMetric(random_state=0).fit(X, labels)  # auto leaves it out
    assert auto.from_labels_ == "random"  # the fallback alone
    assert "from_labels" not in auto.validation_
    with pytest.raises(ValueError, match="from_labels"):
        from megkernel import DefiniteBoostMetric
        DefiniteBoostMetric(from_labels="soft-neighbors").fit(X, labels)


def test_metric_exponent_assign_refuses_non_finite():
    exponent = MetricExponent.from_prior(np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="overflowed"):
        exponent.assign(np.array([[np.inf, 0.0], [0.0, 1.0]]))
    assert embedding(np.eye(2), exponent).shape == (2, 2)


def test_far_pairs_and_a_tiny_temperature_leave_every_probability_finite():
    """Squared distances over the temperature beyond a double's range (whitened
    points lie within the unit ball; a subnormal temperature): clipped, so no row
    of logits is all -inf (a NaN row)."""
    embedded = np.array([[0.0], [1e-3], [0.5], [1.0]])
    P, p, _ = soft_neighbor_probabilities(embedded, np.array([0, 1, 0, 1]), 1e-310)
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(p))
    np.testing.assert_allclose(P.sum(axis=1), 1.0)


def _naive_pair_objective(points, pairs, signs, M, temperature):
    """Mean over the paired points of the probability that a neighbour drawn
    among its partners by softmax of -d^2/T is a similar partner (plain loops)."""
    partners = {}
    for (a, b), sign in zip(pairs, signs):
        for i, j in ((a, b), (b, a)):
            partners.setdefault(int(i), {})[int(j)] = max(partners.get(int(i), {}).get(
                int(j), -1), sign)
    total = 0.0
    for i, mine in partners.items():
        weights = {j: np.exp(-(points[i] - points[j]) @ M @ (points[i] - points[j])
                             / temperature) for j in mine}
        total += sum(w for j, w in weights.items() if mine[j] > 0) / sum(weights.values())
    return total / len(partners)


def test_the_pairs_objective_is_the_soft_neighbour_pick_among_partners():
    """SoftNeighborAscent.of_pairs: the objective is each paired point's
    probability of drawing a similar partner among its partners (checked by
    loops), and the ascent raises it."""
    from megkernel._solvers.metric_soft_neighbors import SoftNeighborAscent, prior_temperature

    rng = np.random.default_rng(3)
    points = rng.normal(size=(12, 3))
    pairs = np.array([[0, 1], [0, 2], [1, 3], [4, 5], [4, 6], [7, 8], [9, 10], [2, 9],
                      [5, 11], [1, 2]])
    signs = np.array([1, -1, 1, -1, 1, 1, -1, 1, -1, -1])
    prior = np.array([0.5, 0.3, 0.2])
    ascent = SoftNeighborAscent.of_pairs(points, pairs, signs, prior, 0.7)
    used = np.unique(pairs)
    temperature = ascent.temperature
    sq = np.array([[(points[a] - points[b]) ** 2 @ prior for b in used] for a in used])
    index = {p: k for k, p in enumerate(used)}
    nearest = [min(sq[index[a], index[b]] for pair in pairs for x, b in (pair, pair[::-1])
                   if x == a) for a in used]
    assert temperature == pytest.approx(0.7 * np.mean(nearest), rel=1e-12)
    assert prior_temperature(points[used], prior) < np.mean(nearest)  # partners: farther
    expected = _naive_pair_objective(points, pairs, signs, np.diag(prior), temperature)
    assert ascent.objective == pytest.approx(expected, rel=1e-10)
    ascent.advance(5)
    M = ascent.exponent.density()
    assert ascent.objective == pytest.approx(
        _naive_pair_objective(points, pairs, signs, M, temperature), rel=1e-9)
    assert ascent.objective > expected


def test_given_pairs_are_learned_as_pairs_not_only_as_rebuilt_classes():
    """fit_pairs validates the given pairs' own soft-neighbour objective (each
    point's neighbour drawn among its partners) first, the classes rebuilt from
    the similar pairs' components beside it, and, where neither shows a gain,
    MEG's pair loss; the pairs' objective is always validated, so fit_pairs is not
    fit from those classes' labels."""
    from megkernel import draw_pairs
    from megkernel._solvers.holdout import pair_components

    X, labels = _data(seed=7, n=90)
    pairs, signs = draw_pairs(labels, 300, random_state=0)
    components = pair_components(len(X), pairs, signs)
    assert components is not None and np.all(components >= 0)  # they are the classes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGMetric(random_state=0).fit_pairs(X, pairs, signs)
        from_labels = MEGMetric(random_state=0).fit(X, components)
    assert model.from_labels_ is None
    assert set(model.validation_["from_labels"]) <= {"soft-pairs", "pair-classes", "pairs"}
    assert {"soft-pairs", "pair-classes"} <= set(model.validation_["from_labels"])
    if model.validation_["kept"] == "soft-pairs":  # not the fit of the classes' labels
        assert not np.allclose(model.get_mahalanobis_matrix(),
                               from_labels.get_mahalanobis_matrix(), rtol=1e-3, atol=1e-6)
    sparse = np.array([[0, 1], [2, 3], [0, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = MEGMetric(random_state=0).fit_pairs(X, sparse, [1, 1, 1])  # one kind
    assert alone.validation_ is None or "from_labels" not in alone.validation_


@pytest.mark.parametrize("at_call", [1, 3])
def test_an_interrupt_inside_the_ascent_leaves_a_fitted_model_unchanged(at_call, monkeypatch):
    """A KeyboardInterrupt inside the soft-neighbour ascent (in a validation fold,
    or later) leaves the fitted model byte-identical."""
    import pickle

    X, labels = _data(seed=8, n=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGMetric(from_labels="soft-neighbors", random_state=0).fit(X, labels)
    before = pickle.dumps(model)
    real, calls = SoftNeighborAscent.advance, []

    def interrupted(self, n_more):
        calls.append(1)
        if len(calls) == at_call:
            raise KeyboardInterrupt
        return real(self, n_more)

    monkeypatch.setattr(SoftNeighborAscent, "advance", interrupted)
    with warnings.catch_warnings(), pytest.raises(KeyboardInterrupt):
        warnings.simplefilter("ignore")
        model.fit(X + 0.5, labels[::-1])
    assert pickle.dumps(model) == before


# -- the temperature (issue 20: validated among TEMPERATURES) ----------------------------


def _moons(seed, n=300, noise_features=8):
    """Two noisy moons (local classes) beside Gaussian noise features."""
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=n, noise=0.2, random_state=seed)
    rng = np.random.default_rng(seed)
    return np.hstack([X, rng.normal(size=(n, noise_features))]), y


def test_a_fixed_temperature_scales_the_prior_temperature():
    """The final fit is the ascent at temperature x prior_temperature, nothing else."""
    X, labels = _data(seed=3)
    model = MEGMetric(from_labels="soft-neighbors", n_epochs=4, temperature=0.5).fit(
        X, labels)
    order = content_order_of_points(X, labels)  # the fit's order of the points
    coordinates, prior, temperature = _start(X[order], labels[order])
    ascent = SoftNeighborAscent(coordinates, labels[order], prior,
                                0.5 * temperature).advance(4)
    assert model.temperature_ == 0.5
    np.testing.assert_allclose(model.exponent_.density(), ascent.exponent.density(),
                               atol=1e-12)
    assert model.soft_neighbor_objective_[1] == pytest.approx(ascent.objective, rel=1e-12)


def test_without_validation_the_temperature_is_one_and_pairs_have_none():
    X, labels = _data(seed=4)
    fixed = MEGMetric(from_labels="soft-neighbors", n_epochs=2).fit(X, labels)
    assert fixed.temperature_ == 1.0
    pairs = MEGMetric(from_labels="random", random_state=0).fit(X, labels)
    assert pairs.temperature_ is None and pairs.soft_neighbor_objective_ is None


def test_the_validated_temperature_is_the_best_held_out_and_uses_the_same_folds():
    """Kept: the highest held-out (accuracy, margin); its run is the single run's."""
    from megkernel._solvers.metric_pairs import ClassPairs
    from megkernel._solvers.metric_validation import validate_soft_neighbors

    X, labels = _moons(seed=5, n=160)
    coordinates, prior, _ = _start(X, labels)
    pairs, signs = neighbor_pairs(X, labels)  # the folds learn from their own points
    classes = ClassPairs(labels, "soft-neighbors", None, pairs, signs)
    rng = np.random.default_rng(0)
    iterations, log = validate_soft_neighbors(coordinates, pairs, signs, prior,
                                              classes=classes, rng=rng, max_iter=64)
    table = log["temperatures"]
    assert set(table) == {1.0, 0.5} and np.all(np.isfinite(list(table.values())))
    best = max(table, key=lambda t: (*table[t], t))  # ties: the broadest
    assert log["temperature"] == best
    alone_rng = np.random.default_rng(0)
    alone, alone_log = validate_soft_neighbors(coordinates, pairs, signs, prior,
                                               classes=classes, rng=alone_rng, max_iter=64,
                                               temperatures=(best,))
    assert alone == iterations and alone_log["scores"] == log["scores"]
    assert alone_rng.bit_generator.state == rng.bit_generator.state


def test_local_classes_get_a_sharper_temperature_and_a_better_held_out_1nn():
    """Noisy moons (seed unused elsewhere): validated temperature < 1, and held-out
    1-NN at least that of the broad soft neighbourhood (temperature=1)."""
    X, y = _moons(seed=11, n=400)
    X_train, _, y_train, _, held_out = standardised_halves(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = MEGMetric(random_state=0).fit(X_train, y_train)
        broad = MEGMetric(random_state=0, temperature=1.0).fit(X_train, y_train)
    assert auto.from_labels_ == "soft-neighbors" and auto.temperature_ < 1.0
    assert auto.validation_["temperatures"][auto.temperature_][0] > (
        auto.validation_["temperatures"][1.0][0])
    assert held_out(auto) >= held_out(broad) + 0.02


@pytest.mark.parametrize("temperature", [0, -1.0, np.inf, "sharp"])
def test_a_bad_temperature_is_refused_before_fitting(temperature):
    X, labels = _data()
    model = MEGMetric(temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        model.fit(X, labels)
    assert not hasattr(model, "components_")


def test_definiteboost_folds_refit_their_prior_at_the_prior_temperature(monkeypatch):
    """DefiniteBoostMetric's validation folds refit the soft-neighbour prior at the
    temperature its own validation chose (not at 1)."""
    import megkernel._solvers.metric_definiteboost as db_module
    from megkernel import DefiniteBoostMetric

    bases, used = [], []
    real_base, real_ascent = db_module.prior_temperature, db_module.SoftNeighborAscent

    def base(*args, **kwargs):
        bases.append(real_base(*args, **kwargs))
        return bases[-1]

    def ascent(coordinates, codes, prior, temperature):
        used.append(temperature)
        return real_ascent(coordinates, codes, prior, temperature)

    monkeypatch.setattr(db_module, "prior_temperature", base)
    monkeypatch.setattr(db_module, "SoftNeighborAscent", ascent)
    X, y = _moons(seed=13, n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostMetric(random_state=0).fit(X, y)
    assert model.init_ == "soft-neighbors"
    chosen = model.prior_temperature_
    assert used and len(used) == len(bases)  # one ascent per fold, at its own points' scale
    np.testing.assert_allclose(used, [chosen * b for b in bases], rtol=1e-15)


def test_only_the_kept_temperature_s_warnings_are_shown(monkeypatch):
    """Each temperature's validation warns; only the kept temperature's warning is shown."""
    from sklearn.exceptions import ConvergenceWarning

    import megkernel._solvers.metric_validation as epochs_module

    original = epochs_module.validate_length

    def validate_length(*args, **kwargs):
        temperature = args[3].__defaults__[0]  # make_path's bound temperature
        warnings.warn(f"from temperature {temperature}", ConvergenceWarning, stacklevel=2)
        return original(*args, **kwargs)

    monkeypatch.setattr(epochs_module, "validate_length", validate_length)
    X, labels = _data(seed=6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = MEGMetric(random_state=0, from_labels="soft-neighbors").fit(X, labels)
    shown = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert shown == [f"from temperature {model.temperature_}"]


def test_a_refit_at_the_validated_choice_is_the_same_metric_without_validating(monkeypatch):
    """The user guide's recipe: kind, length and temperature fixed (any seed)
    give the validated fit's metric, and no validation runs."""
    import megkernel._solvers.metric_validation as meg_epochs

    X, y = _moons(seed=13, n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGMetric(random_state=0).fit(X, y)
    assert model.from_labels_ == "soft-neighbors" and model.n_epochs_ > 0

    def no_validation(*args, **kwargs):
        raise AssertionError("validated although every choice was fixed")

    monkeypatch.setattr(meg_epochs, "validate_length", no_validation)
    refit = MEGMetric(from_labels=model.from_labels_, n_epochs=model.n_epochs_,
                      temperature=model.temperature_, random_state=7).fit(X, y)
    np.testing.assert_allclose(refit.components_, model.components_, rtol=0, atol=1e-12)
    assert refit.temperature_ == model.temperature_ and refit.validation_ is None


def _race(monkeypatch, n, temperatures):
    """Validate the temperatures; return the log and the longest ascent of each."""
    import megkernel._solvers.metric_validation as module
    from megkernel._solvers.metric_pairs import ClassPairs

    X, labels = _moons(seed=5, n=n)
    coordinates, prior, _ = _start(X, labels)
    pairs, signs = neighbor_pairs(X, labels)  # the folds learn from their own points
    classes = ClassPairs(labels, "soft-neighbors", None, pairs, signs)
    paths = []
    real_init = module._SoftNeighborPath.__init__

    def recording(self, scorer, coordinates, codes, prior, temperature=1.0, **options):
        real_init(self, scorer, coordinates, codes, prior, temperature, **options)
        paths.append((temperature, self))

    monkeypatch.setattr(module._SoftNeighborPath, "__init__", recording)
    iterations, log = module.validate_soft_neighbors(
        coordinates, pairs, signs, prior, classes=classes, rng=np.random.default_rng(0),
        max_iter=64, temperatures=temperatures)
    reached = {}
    for temperature, path in paths:
        reached.setdefault(temperature, []).append(path.ascent.n_iter)
    assert len({len(r) for r in reached.values()}) == 1  # one path per fold, never rebuilt
    monkeypatch.undo()
    alone, alone_log = module.validate_soft_neighbors(
        coordinates, pairs, signs, prior, classes=classes, rng=np.random.default_rng(0),
        max_iter=64, temperatures=(log["temperature"],))
    assert alone == iterations and alone_log["scores"] == log["scores"]
    return log, {temperature: max(r) for temperature, r in reached.items()}


def test_a_temperature_race_continues_only_the_leader(monkeypatch):
    """Successive halving: both temperatures run to RACE_ITERATIONS; only the
    leader goes on, its validation the one it has alone."""
    import megkernel._solvers.metric_validation as module

    log, longest = _race(monkeypatch, 160, (1.0, 0.5))
    dropped = 1.0 if log["temperature"] == 0.5 else 0.5
    assert longest[dropped] <= module.RACE_ITERATIONS < longest[log["temperature"]]
    # the dropped one's entry is its choice within the race
    assert set(log["temperatures"]) == {1.0, 0.5}


@pytest.mark.slow
def test_a_clearly_worse_temperature_stops_at_the_race():
    """300 noisy moons, temperatures 1 and 1/20: the broad one is the less
    accurate at 4 iterations and stops there; the sharp one is kept."""
    import megkernel._solvers.metric_validation as module

    monkeypatch = pytest.MonkeyPatch()
    log, longest = _race(monkeypatch, 300, (1.0, 0.05))
    assert log["temperature"] == 0.05
    assert longest[1.0] <= module.RACE_ITERATIONS < longest[0.05]


def test_a_pair_of_a_point_with_itself_is_no_pick_among_partners():
    """A point paired only with itself has no partner to pick (a row of the
    softmax with nothing allowed): it is left out, with no RuntimeWarning;
    without any other pair the ascent stays at the prior."""
    from megkernel._solvers.metric_soft_neighbors import SoftNeighborAscent

    prior = np.full(3, 1 / 3)
    alone = SoftNeighborAscent.of_pairs(np.eye(3), np.array([[2, 2]]), np.array([1]), prior, 1.0)
    assert alone.converged and alone.advance(3).n_iter == 0
    np.testing.assert_allclose(alone.exponent.density(), np.diag(prior), atol=1e-12)
    points = np.random.default_rng(0).normal(size=(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        mixed = SoftNeighborAscent.of_pairs(points, np.array([[0, 1], [2, 2], [0, 3]]),
                                            np.array([1, 1, -1]), prior, 1.0)
        mixed.advance(2)
    assert len(mixed.coordinates) == 3 and np.isfinite(mixed.objective)
