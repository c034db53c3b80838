"""Low-rank mode of MEGKernelRegressor and DefiniteBoostKernel."""

import pickle
import tracemalloc
import warnings

import numpy as np
import pytest

from megkernel import DefiniteBoostKernel, MEGKernelRegressor, meg_learning_rate
from megkernel._engines import ENGINES
from megkernel._numerics.state import ExponentState

ENGINES = sorted(ENGINES)


def _distance_trials(d=12, n=400, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(d, 3))
    K = features @ features.T
    K /= np.trace(K)
    pairs = rng.integers(0, d, size=(n, 2))
    a, b = pairs.T
    return pairs, K[a, a] + K[b, b] - 2 * K[a, b]


def _constraints(d=15, n=40, seed=0):
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, d, size=(n, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs, np.where(rng.random(len(pairs)) < 0.5, 1, -1)


@pytest.mark.parametrize("method", ENGINES)
def test_identity_factor_reproduces_dense_meg(method):
    pairs, y = _distance_trials()
    dense = MEGKernelRegressor(solver="online", n_objects=12, method=method).fit(pairs, y)
    low = MEGKernelRegressor(solver="online", init_factor=np.eye(12), method=method).fit(pairs, y)
    assert dense.learning_rate_ == pytest.approx(low.learning_rate_, rel=1e-12)
    np.testing.assert_allclose(low.kernel_, dense.kernel_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(low.losses_, dense.losses_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(low.predict(pairs), dense.predict(pairs), rtol=0, atol=1e-12)


def test_rotating_the_factor_changes_nothing():
    pairs, y = _distance_trials()
    rng = np.random.default_rng(1)
    F = rng.normal(size=(12, 4))
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    a = MEGKernelRegressor(solver="online", init_factor=F, n_epochs=2).fit(pairs, y)
    b = MEGKernelRegressor(solver="online", init_factor=F @ Q, n_epochs=2).fit(pairs, y)
    assert a.learning_rate_ == pytest.approx(b.learning_rate_, rel=1e-12)
    np.testing.assert_allclose(a.kernel_, b.kernel_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.losses_, b.losses_, rtol=0, atol=1e-12)


def test_low_rank_kernel_stays_in_the_prior_range():
    pairs, y = _distance_trials()
    F = np.random.default_rng(2).normal(size=(12, 3))
    model = MEGKernelRegressor(solver="online", init_factor=F, trace=2.0).fit(pairs, y)
    K = model.kernel_
    projector = F @ np.linalg.pinv(F)
    np.testing.assert_allclose(projector @ K @ projector, K, atol=1e-12)
    assert np.trace(K) == pytest.approx(2.0, rel=1e-12)
    assert model.rank_ == 3 and model.kernel_factor_.shape == (12, 3)
    np.testing.assert_allclose(model.kernel_factor_ @ model.kernel_factor_.T, K, atol=1e-12)
    rows, cols = [0, 5, 7], [1, 2]
    np.testing.assert_allclose(model.kernel_entries(rows, cols), K[np.ix_(rows, cols)],
                               atol=1e-15)
    a, b = pairs.T
    np.testing.assert_allclose(model.predict(pairs), K[a, a] + K[b, b] - 2 * K[a, b],
                               atol=1e-12)


@pytest.mark.filterwarnings(  # the rate's formula is tested here, not the fit
    "ignore:MEGKernelRegressor. the on-line fit diverged:sklearn.exceptions.ConvergenceWarning")
def test_auto_rate_uses_the_restricted_range():
    pairs, y = _distance_trials()
    F = np.random.default_rng(3).normal(size=(12, 3))
    model = MEGKernelRegressor(solver="online", init_factor=F).fit(pairs, y)
    basis = model.state_.basis
    rho = max(np.sum((basis[a] - basis[b]) ** 2) for a, b in pairs)
    # learning_rate="auto": max(2 / rho^2, 1 / (2 rho m)), m the mean target over the trace
    moving = pairs[:, 0] != pairs[:, 1]
    m = y[moving].mean() / model.trace_
    assert model.learning_rate_ == pytest.approx(max(meg_learning_rate(rho), 1 / (2 * rho * m)),
                                                 rel=1e-12)
    assert rho < 2
    fixed = MEGKernelRegressor(solver="online", init_factor=F, learning_rate=0.3).fit(pairs, y)
    assert fixed.learning_rate_ == 0.3


def test_partial_fit_and_pickle_in_low_rank_mode():
    pairs, y = _distance_trials()
    F = np.random.default_rng(4).normal(size=(12, 5))
    full = MEGKernelRegressor(solver="online", trace=1.0, init_factor=F).fit(pairs, y)
    online = MEGKernelRegressor(solver="online", trace=1.0, init_factor=F)
    online.partial_fit(pairs[:150], y[:150])
    online = pickle.loads(pickle.dumps(online))
    online.partial_fit(pairs[150:], y[150:])
    # the rate is set by the first call's pairs: force the same rate
    same = MEGKernelRegressor(solver="online",
                              trace=1.0, init_factor=F, learning_rate=online.learning_rate_)
    np.testing.assert_allclose(same.fit(pairs, y).kernel_factor_ @ same.kernel_factor_.T,
                               online.kernel_, atol=1e-12)
    np.testing.assert_allclose(full.predict(pairs), full.trace * full.state_.pair_sq_distances(
        pairs[:, 0], pairs[:, 1]), atol=1e-15)


def test_rank_deficient_factor_is_truncated():
    F = np.random.default_rng(5).normal(size=(12, 2))
    state = ExponentState.from_factor(np.hstack([F, F @ [[1.0], [2.0]]]))
    assert state.size == 2
    assert np.trace(state.matrix()) == pytest.approx(1.0)


@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_identity_factor_reproduces_dense_definiteboost(projection):
    pairs, labels = _constraints()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dense = DefiniteBoostKernel(n_objects=15, trace=1.0, projection=projection).fit(
            pairs, labels)
        low = DefiniteBoostKernel(init_factor=np.eye(15), trace=1.0, projection=projection).fit(
            pairs, labels)
    assert dense.n_iter_ == low.n_iter_
    np.testing.assert_allclose(low.kernel_, dense.kernel_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(low.alphas_, dense.alphas_, rtol=1e-10)
    assert low.dropped_constraints_.size == 0


def test_never_satisfiable_dissimilar_pairs_are_dropped_and_reported():
    pairs, labels = _constraints()
    features = np.random.default_rng(6).normal(size=(15, 3))
    features -= features.mean(axis=0)
    basis = np.linalg.svd(features, full_matrices=False)[0]
    sq_norms = np.sum((basis[pairs[:, 0]] - basis[pairs[:, 1]]) ** 2, axis=1)
    middle = np.sort(sq_norms[labels < 0])[4:6]
    gamma_d = float(middle.mean())
    expected = np.flatnonzero((labels < 0) & (sq_norms <= gamma_d))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = DefiniteBoostKernel(init_factor=features, trace=1.0, gamma_dissimilar=gamma_d,
                                    gamma=gamma_d / 10).fit(pairs, labels)
    assert any(f"Dropped {expected.size} of {len(pairs)}" in str(w.message) for w in caught)
    assert expected.size > 0
    np.testing.assert_array_equal(model.dropped_constraints_, expected)
    assert model.n_constraints_ == len(pairs) - expected.size
    assert not np.isin(model.chosen_constraints_, expected).any()


def test_all_dissimilar_pairs_never_satisfiable_is_an_error():
    pairs, labels = _constraints()
    features = np.random.default_rng(7).normal(size=(15, 2))
    with pytest.raises(ValueError, match="can never"):
        DefiniteBoostKernel(init_factor=features, trace=1.0, gamma_dissimilar=1.9).fit(
            pairs[labels < 0], -np.ones(np.sum(labels < 0)))


@pytest.mark.parametrize("Estimator", [MEGKernelRegressor, DefiniteBoostKernel])
def test_bad_low_rank_inputs(Estimator):
    pairs, _ = _constraints()
    y = np.ones(len(pairs))
    F = np.ones((15, 2)) + np.eye(15, 2)
    with pytest.raises(ValueError, match="not both"):
        Estimator(init=np.eye(15), init_factor=F).fit(pairs, y)
    with pytest.raises(ValueError, match="does not match"):
        Estimator(n_objects=14, init_factor=F).fit(pairs, y)
    with pytest.raises(ValueError, match="2-D"):
        Estimator(init_factor=np.ones(15)).fit(pairs, y)
    with pytest.raises(ValueError, match="NaN"):
        Estimator(init_factor=np.full((15, 2), np.nan)).fit(pairs, y)
    with pytest.raises(ValueError, match="rank 0"):
        Estimator(init_factor=np.zeros((15, 2))).fit(pairs, y)
    with pytest.raises(ValueError, match="out of range"):
        Estimator(init_factor=F[:10]).fit(pairs, y)


@pytest.mark.filterwarnings(  # ten trials over 6000 objects: the storage is tested
    "ignore:MEGKernelRegressor. the on-line trials predicted:megkernel.NoImprovementWarning")
def test_kernel_is_not_formed_for_many_objects():
    d = 6000
    rng = np.random.default_rng(8)
    model = MEGKernelRegressor(solver="online", init_factor=rng.normal(size=(d, 2)))
    model.fit(rng.integers(0, d, size=(10, 2)), np.full(10, 1e-4))
    with pytest.raises(ValueError, match="kernel_factor_"):
        model.kernel_
    assert model.kernel_entries([0, 1], [2]).shape == (2, 1)
    with pytest.raises(ValueError, match="out of range"):
        model.kernel_entries([d])


@pytest.mark.slow
# about memory: 2000 trials on 100,000 objects learn little, and the fit says so
@pytest.mark.filterwarnings(
    "ignore:MEGKernelRegressor. the on-line trials predicted:megkernel.NoImprovementWarning")
def test_no_quadratic_allocation_at_one_hundred_thousand_objects():
    d, r = 100_000, 20
    rng = np.random.default_rng(9)
    factor = rng.normal(size=(d, r))
    pairs = rng.integers(0, d, size=(2000, 2))
    y = np.full(len(pairs), 2.0 * r / d)
    tracemalloc.start()
    model = MEGKernelRegressor(solver="online", init_factor=factor).fit(pairs, y)
    model.predict(pairs)
    model.kernel_entries(np.arange(100), np.arange(50))
    model.kernel_factor_
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 * d * r * 8  # O(d r); d^2 floats would be 80 GB


def test_slack_caps_the_multipliers_and_converges():
    pairs, labels = _constraints(d=15, n=120, seed=3)
    features = np.random.default_rng(10).normal(size=(15, 3))
    features -= features.mean(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hard = DefiniteBoostKernel(init_factor=features).fit(pairs, labels)
        soft = DefiniteBoostKernel(init_factor=features, slack=0.5).fit(pairs, labels)
    assert not hard.converged_  # infeasible as hard constraints
    assert soft.converged_
    basis = soft.state_.basis
    kept = np.setdiff1d(np.arange(len(pairs)), soft.dropped_constraints_)
    sq_norms = np.sum((basis[pairs[kept, 0]] - basis[pairs[kept, 1]]) ** 2, axis=1)
    totals = np.zeros(len(pairs))
    np.add.at(totals, soft.chosen_constraints_, soft.alphas_)
    assert np.all(totals[kept] * sq_norms <= 0.5 * (1 + 1e-12))
    assert np.any(np.isclose(totals[kept] * sq_norms, 0.5))  # some keep their slack


@pytest.mark.parametrize("n_pairs", [5, 400])
def test_constraint_values_by_points_and_by_pairs_equal_the_dense_formula(n_pairs, monkeypatch):
    """PairConstraints.values in low-rank mode: with more pairs than points
    through the points' factor (one n x r product, a gather per pair), else
    through each pair's r coordinates, in blocks; both equal
    ``s (v^T P M P^T v - gamma)`` formed densely, whatever the block size."""
    from megkernel._solvers import definiteboost_projections as projections

    rng = np.random.default_rng(n_pairs)
    factor = rng.normal(size=(60, 7))
    state = ExponentState.from_factor(factor)
    for _ in range(3):  # a few rank-one steps away from the prior
        state.add_pair_outer(int(rng.integers(60)), int(rng.integers(60)), 0.3)
        state.refresh()
    a, b = rng.integers(0, 60, (2, n_pairs))
    signs = rng.choice([-1.0, 1.0], n_pairs)
    thresholds = rng.random(n_pairs)
    constraints = projections.PairConstraints(a, b, signs, thresholds, state)
    W = state.basis @ state.matrix() @ state.basis.T
    expected = signs * (W[a, a] + W[b, b] - 2 * W[a, b] - thresholds)
    np.testing.assert_allclose(constraints.values(state), expected, rtol=1e-10, atol=1e-14)
    subset = np.arange(0, n_pairs, 2)
    np.testing.assert_allclose(constraints.values(state, subset), expected[subset],
                               rtol=1e-10, atol=1e-14)
    monkeypatch.setattr(projections, "_VALUES_BLOCK_ENTRIES", 10)
    np.testing.assert_allclose(constraints.values(state, subset), expected[subset],
                               rtol=1e-10, atol=1e-14)
