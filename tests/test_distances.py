"""The compiled pair-distance loop against the naive dense formula."""

import numpy as np
import pytest

from megkernel._engines._distances import factor_rows_sq_distances, pair_sq_distances
from megkernel._engines.rank_one import pair_update
from megkernel._numerics.state import ExponentState


@pytest.mark.parametrize("d", [1, 3, 7, 50])
def test_pair_sq_distances_match_the_dense_formula(d):
    rng = np.random.default_rng(d)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    state = ExponentState.from_prior((Q * rng.uniform(0.1, 2.0, d)) @ Q.T)
    for a_, b_ in rng.integers(0, d, (3, 2)):
        if d >= 3 and a_ != b_:
            pair_update(state, a_, b_, rng.normal())  # eigenvectors kept transposed
    a, b = rng.integers(0, d, (2, 4 * d + 3))
    W = state.matrix()
    expected = W[a, a] + W[b, b] - 2 * W[a, b]
    got = pair_sq_distances(state, a, b)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert np.all(got[a == b] == 0.0)


@pytest.mark.parametrize("r", [0, 1, 3, 4, 7, 64])
def test_factor_rows_sq_distances_match_the_kernel_formula(r):
    """``||F[a] - F[b]||^2`` by the compiled loop (four partial sums) against
    the distances of ``K = F F^T``; any layout of the factor; 0 on a == b."""
    rng = np.random.default_rng(r)
    F = rng.standard_normal((30, r)) * np.exp(rng.uniform(-3, 3, r))
    a, b = rng.integers(0, 30, (2, 500))
    K = F @ F.T
    expected = K[a, a] + K[b, b] - 2 * K[a, b]
    scale = max(np.abs(K).max(), 1e-300)
    for layout in (F, np.asfortranarray(F), F[:, ::-1][:, ::-1]):
        got = factor_rows_sq_distances(layout, a, b)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12 * scale)
        assert np.all(got >= 0) and np.all(got[a == b] == 0.0)
