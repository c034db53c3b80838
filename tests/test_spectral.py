"""Spectral numerics against scipy's dense matrix functions (eq. 1, eq. 7)."""

import numpy as np
import pytest
from conftest import random_spd
from numpy.testing import assert_allclose
from scipy import linalg

from megkernel import (
    expm_symmetric,
    logm_spd,
    normalized_expm,
    von_neumann_divergence,
)


def _sym(d, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)) * scale
    return A + A.T


def _orthogonal(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def _dense_divergence(U, W):
    """tr(U log U - U log W - U + W) with scipy's logm (both full rank)."""
    value = np.trace(U @ linalg.logm(U) - U @ linalg.logm(W) - U + W)
    return float(np.real(value))


# -- matrix functions ---------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_logm_matches_scipy(seed):
    M = random_spd(7, seed)
    L = logm_spd(M)
    assert_allclose(L, np.real(linalg.logm(M)), atol=1e-10)
    assert_allclose(L, L.T, atol=1e-13)
    assert_allclose(expm_symmetric(L), M, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_expm_matches_scipy(seed):
    A = _sym(6, seed)
    assert_allclose(expm_symmetric(A), linalg.expm(A), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_normalized_expm_matches_scipy(seed):
    A = _sym(6, seed)
    E = linalg.expm(A)
    W = normalized_expm(A)
    assert_allclose(W, E / np.trace(E), rtol=1e-10, atol=1e-14)
    assert np.trace(W) == pytest.approx(1.0, abs=1e-14)


def test_normalized_expm_is_shift_invariant_and_never_overflows():
    A = _sym(6, 3)
    W = normalized_expm(A)
    # exp(A + 1000 I) overflows; the eq. 7 shift must not
    for shift in (1000.0, -1000.0, 1e6):
        with np.errstate(over="raise", invalid="raise"):
            shifted = normalized_expm(A + shift * np.eye(6))
        assert_allclose(shifted, W, rtol=1e-8, atol=1e-12)
    # a huge spread: the result is the projector on the top eigenvector
    lam, V = np.linalg.eigh(A)
    big = normalized_expm(1e4 * A)
    assert np.all(np.isfinite(big))
    assert_allclose(big, np.outer(V[:, -1], V[:, -1]), atol=1e-12)


# -- von Neumann divergence ---------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_divergence_matches_dense_formula(seed):
    # different traces: the -tr U + tr W terms matter
    U = random_spd(6, seed, trace=1.0)
    W = random_spd(6, seed + 100, trace=2.5)
    expected = _dense_divergence(U, W)
    assert von_neumann_divergence(U, W) == pytest.approx(expected, rel=1e-10, abs=1e-10)
    # trace-one case: tr(U log U - U log W)
    W1 = W / np.trace(W)
    expected1 = _dense_divergence(U, W1)
    assert von_neumann_divergence(U, W1) == pytest.approx(expected1, rel=1e-10, abs=1e-10)


def test_divergence_zero_on_diagonal_and_positive_elsewhere():
    U = random_spd(5, 0, trace=1.0)
    assert von_neumann_divergence(U, U) == pytest.approx(0.0, abs=1e-12)
    W = random_spd(5, 1, trace=1.0)
    assert von_neumann_divergence(U, W) > 1e-3


def test_divergence_to_uniform_is_log_d_minus_entropy():
    d = 6
    U = random_spd(d, 2, trace=1.0)
    mu = np.linalg.eigvalsh(U)
    expected = np.log(d) + np.sum(mu * np.log(mu))
    assert von_neumann_divergence(U, np.eye(d) / d) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("rank", [1, 3])
def test_divergence_singular_comparator_uses_zero_log_zero(rank):
    d = 6
    U = random_spd(d, 4, rank=rank, trace=1.0)          # singular first argument
    W = random_spd(d, 5, trace=1.0)
    mu = np.linalg.eigvalsh(U)
    mu_pos = mu[mu > 1e-12]
    assert len(mu_pos) == rank
    expected = (np.sum(mu_pos * np.log(mu_pos))
                - np.trace(U @ np.real(linalg.logm(W))) - np.trace(U) + np.trace(W))
    value = von_neumann_divergence(U, W)
    assert np.isfinite(value)
    assert value == pytest.approx(expected, rel=1e-10, abs=1e-10)


def test_divergence_infinite_outside_range():
    d = 5
    Q = _orthogonal(d, 6)
    W = Q @ np.diag([0.5, 0.3, 0.2, 0.0, 0.0]) @ Q.T      # rank 3
    inside = Q @ np.diag([0.2, 0.3, 0.5, 0.0, 0.0]) @ Q.T
    outside = Q @ np.diag([0.2, 0.3, 0.4, 0.1, 0.0]) @ Q.T
    assert von_neumann_divergence(outside, W) == np.inf
    # a full-rank U is never inside a singular W's range
    assert von_neumann_divergence(np.eye(d) / d, W) == np.inf
    # supported inside the range: finite, the formula on the common range
    expected = (0.2 * np.log(0.2 / 0.5) + 0.3 * np.log(0.3 / 0.3)
                + 0.5 * np.log(0.5 / 0.2))
    assert von_neumann_divergence(inside, W) == pytest.approx(expected, rel=1e-10)


# -- validation ---------------------------------------------------------------

_NON_SYMMETRIC = np.array([[1.0, 0.5], [0.0, 1.0]])
_WITH_NAN = np.array([[1.0, np.nan], [np.nan, 1.0]])
_WITH_INF = np.array([[np.inf, 0.0], [0.0, 1.0]])
_INDEFINITE = np.array([[1.0, 2.0], [2.0, 1.0]])
_SINGULAR = np.array([[1.0, 1.0], [1.0, 1.0]])


@pytest.mark.parametrize("func", [logm_spd, expm_symmetric, normalized_expm])
@pytest.mark.parametrize(
    "matrix, message",
    [
        (_NON_SYMMETRIC, "not symmetric"),
        (_WITH_NAN, "NaN or infinite"),
        (_WITH_INF, "NaN or infinite"),
        (np.ones((2, 3)), "square"),
        (np.ones(3), "square"),
        (np.ones((2, 2, 2)), "square"),
        (np.empty((0, 0)), "empty"),
    ],
)
def test_matrix_functions_reject_bad_matrices(func, matrix, message):
    with pytest.raises(ValueError, match=message):
        func(matrix)


@pytest.mark.parametrize("matrix", [_INDEFINITE, _SINGULAR, -np.eye(3), np.zeros((3, 3))])
def test_logm_rejects_non_positive_definite(matrix):
    with pytest.raises(ValueError, match="not positive definite"):
        logm_spd(matrix)


def test_divergence_validation():
    U = np.eye(3) / 3
    with pytest.raises(ValueError, match="U is not symmetric"):
        von_neumann_divergence(np.array([[1.0, 0.2, 0], [0, 1, 0], [0, 0, 1]]), U)
    with pytest.raises(ValueError, match="W contains NaN"):
        von_neumann_divergence(U, np.full((3, 3), np.nan))
    with pytest.raises(ValueError, match="differ in shape"):
        von_neumann_divergence(U, np.eye(4) / 4)
    with pytest.raises(ValueError, match="W must be a square"):
        von_neumann_divergence(U, np.ones((3, 2)))
    with pytest.raises(ValueError, match="U is not positive semidefinite"):
        von_neumann_divergence(np.diag([1.0, 0.5, -0.5]), U)
    with pytest.raises(ValueError, match="W is not positive semidefinite"):
        von_neumann_divergence(U, np.diag([1.0, 0.5, -0.5]))


# -- kernel -> distances -------------------------------------------------------
def test_induced_sq_distances_of_a_gram_kernel_are_squared_euclidean():
    from scipy.spatial.distance import cdist

    from megkernel._numerics.spectral import induced_sq_distances

    X = np.random.default_rng(0).normal(size=(7, 3))
    K = X @ X.T
    assert_allclose(induced_sq_distances(K), cdist(X, X, "sqeuclidean"), atol=1e-12)
    rows, cols = np.array([4, 0, 4]), np.array([1, 4, 6, 2])
    block = induced_sq_distances(K[np.ix_(rows, cols)], np.diag(K)[rows], np.diag(K)[cols])
    assert_allclose(block, cdist(X[rows], X[cols], "sqeuclidean"), atol=1e-12)
    assert block[0, 1] == 0.0 and block[2, 1] == 0.0  # object 4 with itself


def test_induced_sq_distances_clip_and_self_distances():
    from megkernel._numerics.spectral import induced_sq_distances

    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])  # K_00 + K_11 - 2 K_01 = -2
    assert_allclose(induced_sq_distances(indefinite), [[0.0, -2.0], [-2.0, 0.0]])
    assert_allclose(induced_sq_distances(indefinite, clip=True), np.zeros((2, 2)))
    huge = np.diag([1e308, 1.0])  # 2 K_00 overflows, yet an object is at 0 from itself
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, then set to 0
        squared = induced_sq_distances(huge)
    assert squared[0, 0] == 0.0 and squared[1, 1] == 0.0 and squared[0, 1] == 1e308 + 1
    with pytest.raises(ValueError, match="both diagonals"):
        induced_sq_distances(indefinite, np.diag(indefinite))


def test_pair_distances_of_a_kernel_are_the_matrix_entries():
    """kernel_pair_sq_distances (pairs, in blocks) == induced_sq_distances (matrix)."""
    from megkernel._numerics import spectral

    rng = np.random.default_rng(3)
    F = rng.normal(size=(9, 4))
    K = F @ F.T
    a, b = rng.integers(0, 9, size=(2, 1000))
    a[:5] = b[:5]  # self-pairs: exactly 0
    D = spectral.induced_sq_distances(K)
    old_block = spectral._PAIR_BLOCK
    try:
        for block in (old_block, 7):  # one block and many
            spectral._PAIR_BLOCK = block
            out = spectral.kernel_pair_sq_distances(K, a, b)
            np.testing.assert_allclose(out, D[a, b], rtol=1e-12, atol=1e-12)
            assert np.all(out[:5] == 0.0)
            # against the features themselves (independent of the kernel formula)
            np.testing.assert_allclose(out, ((F[a] - F[b]) ** 2).sum(axis=1),
                                       rtol=1e-10, atol=1e-10)
    finally:
        spectral._PAIR_BLOCK = old_block


@pytest.mark.parametrize("columns", [3, 130])
def test_factor_pair_distances_both_routes(columns, monkeypatch):
    """||F[a] - F[b]||^2 gathered in blocks or through F F^T: the same values."""
    from megkernel._numerics import spectral

    rng = np.random.default_rng(4)
    F = rng.normal(size=(40, columns))
    a, b = rng.integers(0, 40, size=(2, 500))
    a[:3] = b[:3]
    direct = ((F[a] - F[b]) ** 2).sum(axis=1)
    monkeypatch.setattr(spectral, "_FACTOR_BLOCK_ENTRIES", 7 * columns)  # many blocks
    gathered = spectral.factor_pair_sq_distances(F, a, b)
    monkeypatch.setattr(spectral, "_KERNEL_FROM_COLUMNS", 1)  # F F^T for any width
    through_kernel = spectral.factor_pair_sq_distances(F, a, b)
    for out in (gathered, through_kernel):
        np.testing.assert_allclose(out, direct, rtol=1e-12, atol=1e-10)
        assert np.all(out[:3] == 0.0)
