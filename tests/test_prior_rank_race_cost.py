"""The rank race's cost in the subspace form: a raced run's ``d x d`` state is
made only for the run kept, and it is the run's own kernel."""

import numpy as np
import pytest
from test_prior_rank_race import _fit, _table

import megkernel._solvers.meg_batch as meg_batch
from megkernel._numerics.state import SubspaceState


@pytest.fixture
def counted(monkeypatch):
    """Fits in the subspace form from 50 objects on, counting dense states and runs."""
    monkeypatch.setattr(meg_batch, "SUBSPACE_FROM", 50)
    calls = {"dense": 0, "runs": 0}
    dense, minimize = SubspaceState.dense, meg_batch.minimize_pair_loss

    def counting_dense(self):
        calls["dense"] += 1
        return dense(self)

    def counting_minimize(*args, **kwargs):
        calls["runs"] += 1
        return minimize(*args, **kwargs)

    monkeypatch.setattr(SubspaceState, "dense", counting_dense)
    monkeypatch.setattr(meg_batch, "minimize_pair_loss", counting_minimize)
    return calls


@pytest.mark.parametrize("seed", [1, 3])  # a rival kept; the chosen rank kept
def test_a_raced_runs_dense_state_is_made_only_for_the_run_kept(counted, seed):
    """Rivals are fitted on the training pairs (more runs than the chosen
    rank's and the refit), yet only two ``d x d`` states are made: the
    kept run's and the refit's. The fit is the one at the winning rank
    alone, bit for bit, and the kept run's state is its subspace kernel
    ``P (B - alpha I) P^T + alpha I`` (naive dense formula)."""
    d, pairs, y = _table(seed=seed, d=100, fraction=0.05, noise=0.3)
    fit = _fit(d, pairs, y)
    assert fit.subspace is not None and fit.training.subspace is not None
    assert counted["runs"] >= 3  # the chosen rank's run, a rival's, the refit
    assert counted["dense"] == 2
    alone = _fit(d, pairs, y, ranks=(fit.prior_rank,))
    assert np.array_equal(fit.state.exponent, alone.state.exponent)
    assert np.array_equal(fit.training.state.exponent, alone.training.state.exponent)
    assert np.array_equal(fit.training.state.eigenvectors, alone.training.state.eigenvectors)
    assert fit.trace == alone.trace
    subspace = fit.training.subspace
    k = subspace.size - 1
    basis, block, alpha = subspace.basis, subspace.exponent[:k, :k], subspace.exponent[k, k]
    values, vectors = np.linalg.eigh(block)
    outside = np.eye(d) - basis @ basis.T
    expected = basis @ vectors @ np.diag(np.exp(values)) @ vectors.T @ basis.T
    expected += np.exp(alpha) * outside
    expected /= np.trace(expected)
    np.testing.assert_allclose(fit.training.state.matrix(), expected, atol=1e-12)
