"""SubspaceState: DefiniteBoost's projections within a subspace plus its complement.

Checked against the dense matrices the state stands for: ``W = P M P^T +
mu (I - P P^T)`` (log-partition, pair distances, entry sum, smallest
eigenvalue), a pair update = the dense exponent plus ``s E(v v^T)`` (``E``
the trace-preserving projection onto the algebra), and a whole greedy run
= the dense run with the general constraints ``E(C_j)``.
"""

import numpy as np
import pytest

from megkernel import DefiniteBoostKernel
from megkernel._numerics.state import ExponentState, SubspaceState
from megkernel._solvers import meg_batch
from megkernel._solvers.definiteboost_projections import (
    MatrixConstraints,
    PairConstraints,
    _Settings,
    run_definiteboost,
)


def _state(d=12, k=4, seed=0):
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(d, k)))
    block = rng.normal(size=(k, k))
    exponent = np.zeros((k + 1, k + 1))
    exponent[:k, :k] = 0.5 * (block + block.T)
    exponent[k, k] = -0.7
    return SubspaceState(exponent, basis=basis)


def _project(basis, X):
    """``E(X)``: the trace-preserving projection of X onto the algebra."""
    d, k = basis.shape
    inside = basis @ basis.T
    outside = np.eye(d) - inside
    return inside @ X @ inside + np.trace(outside @ X) / (d - k) * outside


def _pair_matrix(d, a, b):
    v = np.zeros(d)
    v[a], v[b] = 1.0, -1.0
    return np.outer(v, v)


def test_views_equal_those_of_the_dense_matrix():
    state = _state()
    dense = state.dense()
    d = state.n_objects
    W = dense.matrix()
    assert state.log_partition() == pytest.approx(dense.log_partition(), rel=1e-12)
    a, b = np.triu_indices(d, 1)
    expected = W[a, a] + W[b, b] - 2 * W[a, b]
    np.testing.assert_allclose(state.pair_sq_distances(a, b), expected, rtol=1e-10)
    assert state.entry_sum() == pytest.approx(W.sum(), rel=1e-10)
    assert state.density_eigenvalues().min() == pytest.approx(
        np.linalg.eigvalsh(W).min(), rel=1e-10)
    # the largest eigenvalue of E(v v^T), which bounds the constraints' range
    for j in range(0, len(a), 7):
        top = np.linalg.eigvalsh(_project(state.basis, _pair_matrix(d, a[j], b[j])))[-1]
        assert state.pair_sq_norms(a[j], b[j])[0] == pytest.approx(top, rel=1e-10)


def test_a_pair_update_is_the_projected_dense_update():
    state = _state(seed=1)
    before = state.dense().exponent
    state.add_pair_outer(2, 9, 0.8)
    state.refresh()
    expected = before + 0.8 * _project(state.basis, _pair_matrix(state.n_objects, 2, 9))
    np.testing.assert_allclose(state.dense().exponent, expected, atol=1e-12)


@pytest.mark.parametrize("corrective", [False, True])
def test_greedy_run_equals_the_dense_run_on_projected_constraints(corrective):
    state = _state(d=14, k=5, seed=2)
    d = state.n_objects
    rng = np.random.default_rng(3)
    a, b = rng.choice(d, size=(2, 20))
    keep = a != b
    a, b = a[keep], b[keep]
    signs = np.where(np.arange(len(a)) % 3 == 0, -1.0, 1.0)
    mean = 2.0 * (d - state.entry_sum()) / (d * (d - 1))
    thresholds = np.where(signs > 0, 0.3 * mean, 1.5 * mean)
    settings = _Settings(max_iter=40, tol=1e-9, keep="last", corrective=corrective)
    dense = state.dense()
    matrices = [s * (_project(state.basis, _pair_matrix(d, i, j)) - g * np.eye(d))
                for i, j, s, g in zip(a, b, signs, thresholds)]
    dense_log = run_definiteboost(MatrixConstraints(matrices), dense, settings)
    sub_log = run_definiteboost(PairConstraints(a, b, signs, thresholds, state), state,
                                settings, method="eigh")
    assert sub_log["n_iter"] == dense_log["n_iter"] > 5
    np.testing.assert_array_equal(sub_log["constraint"], dense_log["constraint"])
    np.testing.assert_allclose(sub_log["alpha"], dense_log["alpha"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(sub_log["dual_objective"], dense_log["dual_objective"],
                               rtol=1e-9)
    np.testing.assert_allclose(state.dense().matrix(), dense.matrix(), atol=1e-10)
    # the dual objective never increases (Theorem 4.1)
    assert np.all(np.diff(sub_log["dual_objective"]) <= 1e-12)


def test_the_subspace_takes_pair_updates_only():
    state = _state()
    with pytest.raises(NotImplementedError):
        state.add_symmetric(np.eye(5), 1.0)
    with pytest.raises(NotImplementedError):
        state.matrix()
    with pytest.raises(ValueError, match="k < d"):
        SubspaceState(np.zeros((3, 3)), basis=np.eye(2))


def _family(n_per=12, n_families=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_families, 5)) * 3.0
    points = np.repeat(centres, n_per, axis=0) + rng.normal(size=(n_per * n_families, 5))
    labels = np.repeat(np.arange(n_families), n_per)
    a, b = np.triu_indices(len(points), 1)
    take = rng.random(len(a)) < 0.5
    a, b = a[take], b[take]
    return np.column_stack([a, b]), ((points[a] - points[b]) ** 2).sum(axis=1), labels


@pytest.mark.slow  # two estimator fits with their MEG priors (~2.4 s)
def test_definiteboost_continues_a_subspace_prior_in_its_subspace(monkeypatch):
    """From SUBSPACE_FROM objects the distance prior is a subspace fit; DefiniteBoost
    then projects within it, and returns a dense, valid kernel."""
    from megkernel._solvers import definiteboost_rules

    pairs, sq, _ = _family()
    monkeypatch.setattr(meg_batch, "SUBSPACE_FROM", 10)
    monkeypatch.setattr(meg_batch, "SUBSPACE_START", 8)
    seen = []
    original = definiteboost_rules.working_state

    def spy(state, subspace, method, projection):
        state = original(state, subspace, method, projection)
        seen.append(type(state))
        return state

    monkeypatch.setattr("megkernel._solvers.definiteboost_fit.working_state", spy)
    model = DefiniteBoostKernel(random_state=0, y_kind="sq_distances",  # no verdict:
                                validation_fraction=None).fit(pairs, sq)  # too few pairs
    assert seen and all(kind is SubspaceState for kind in seen)
    assert type(model.state_) is ExponentState and model.state_.basis is None
    K = model.kernel_
    assert np.allclose(K, K.T) and np.linalg.eigvalsh(K).min() > 0
    assert np.trace(K) == pytest.approx(model.trace_, rel=1e-9)
    assert model.n_iter_ > 0
    # the exact projection needs a dense state
    seen.clear()
    DefiniteBoostKernel(random_state=0, projection="exact", max_iter=50, y_kind="sq_distances",
                        validation_fraction=None).fit(pairs, sq)
    assert seen and all(kind is ExponentState for kind in seen)
