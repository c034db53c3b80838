"""Spectral numerics: every matrix function in megkernel goes through here.

One eigh-based operator (:func:`spectral_apply`) sits behind the matrix
logarithm, exponential and the trace-normalized exponential of eq. 7 of
Tsuda, Raetsch & Warmuth (2004); validation of symmetric / positive definite
inputs lives here once.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .._warnings import warn_user
from .validation import check_real

__all__ = [
    "kernel_distance_block",
    "power_of_four_scale",
    "warn_if_not_psd",
    "check_symmetric",
    "check_positive_definite",
    "eigh_symmetric",
    "spectral_apply",
    "logm_spd",
    "expm_symmetric",
    "normalized_expm",
    "normalized_exp_weights",
    "log_trace_exp",
    "von_neumann_divergence",
    "induced_sq_distances",
]

_SYMMETRY_RTOL = 1e-10


def check_symmetric(matrix, *, name="matrix"):
    """Return ``matrix`` as a finite, square, symmetric float array.

    Raises
    ------
    ValueError
        If the input is not a finite square matrix or is not symmetric to a
        relative tolerance of 1e-10 (in Frobenius norm), or is complex with
        nonzero imaginary parts (a complex Hermitian matrix is no real
        symmetric one: its imaginary part would be dropped).
    """
    matrix = check_real(matrix, name=name, kind="matrix")  # complex refused by name
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"{name} must be a square 2-D matrix, got shape {matrix.shape}."
        )
    if matrix.shape[0] == 0:
        raise ValueError(f"{name} must not be empty.")
    if not np.all(np.isfinite(matrix)):
        raise ValueError(f"{name} contains NaN or infinite entries.")
    magnitude = np.abs(matrix).max()
    if magnitude > 0:  # norms of the scaled matrix: no overflow near 1e308
        scaled = matrix / magnitude
        asym = np.linalg.norm(scaled - scaled.T) / np.linalg.norm(scaled)
        if asym > _SYMMETRY_RTOL:
            raise ValueError(f"{name} is not symmetric (relative asymmetry {asym:.2e}).")
    return 0.5 * matrix + 0.5 * matrix.T


def eigh_symmetric(matrix, *, name="matrix", check=True):
    """Eigendecomposition ``matrix = V diag(lam) V^T`` (ascending ``lam``).

    LAPACK sees the matrix scaled to largest entry 1 (no overflow or
    underflow inside it for entries anywhere in the float range), and never
    a non-finite one: ``check=False`` skips the symmetry test, not that.
    """
    if check:
        matrix = check_symmetric(matrix, name=name)
    magnitude = np.abs(matrix).max() if matrix.size else 0.0
    if not np.isfinite(magnitude):
        raise ValueError(
            f"{name} has non-finite entries: the arithmetic overflowed (a learning "
            "rate, target or prior too large for double precision).")
    if magnitude == 0:
        return np.zeros(matrix.shape[0]), np.eye(matrix.shape[0])
    # divide and conquer (LAPACK's ?syevd, as numpy.linalg.eigh): 15-25 %
    # faster than scipy's default ?syevr from d = 150 on (one thread)
    lam, vecs = linalg.eigh(matrix / magnitude, check_finite=False, driver="evd")
    return lam * magnitude, vecs


def check_positive_definite(matrix, *, name="matrix", rtol=1e-12):
    """Validate a symmetric positive definite matrix; return ``(M, lam, V)``.

    The smallest eigenvalue must exceed ``rtol`` times the largest.
    """
    matrix = check_symmetric(matrix, name=name)
    lam, vecs = eigh_symmetric(matrix, name=name, check=False)
    if lam[-1] <= 0 or lam[0] <= rtol * lam[-1]:
        raise ValueError(
            f"{name} is not positive definite (smallest eigenvalue "
            f"{lam[0]:.3e}, largest {lam[-1]:.3e})."
        )
    return matrix, lam, vecs


def spectral_apply(func, lam, vecs):
    """``V diag(func(lam)) V^T``: a function applied through the spectrum."""
    values = func(lam)
    return (vecs * values) @ vecs.T


def logm_spd(matrix, *, name="matrix"):
    """Compute the matrix logarithm of a symmetric positive definite matrix.

    Parameters
    ----------
    matrix : array-like of shape (d, d)
        Symmetric positive definite matrix.
    name : str, default="matrix"
        Name of ``matrix`` in error messages.

    Returns
    -------
    ndarray of shape (d, d)
        ``log(matrix)``, symmetric, computed through the spectrum.
    """
    _, lam, vecs = check_positive_definite(matrix, name=name)
    return spectral_apply(np.log, lam, vecs)


#: ``exp`` of a larger number overflows double precision.
_EXP_MAX = np.log(np.finfo(float).max)


def expm_symmetric(matrix, *, name="matrix"):
    """Compute the matrix exponential of a symmetric matrix.

    Parameters
    ----------
    matrix : array-like of shape (d, d)
        Symmetric matrix.
    name : str, default="matrix"
        Name of ``matrix`` in error messages.

    Returns
    -------
    ndarray of shape (d, d)
        ``exp(matrix)``, symmetric positive definite, computed through the
        spectrum.

    Raises
    ------
    ValueError
        If an eigenvalue exceeds ``log(max float)`` (about 709.78): the
        result is not representable (:func:`normalized_expm` is).
    """
    lam, vecs = eigh_symmetric(matrix, name=name)
    if lam[-1] > _EXP_MAX:
        raise ValueError(
            f"exp({name}) overflows: its largest eigenvalue {lam[-1]:.6g} exceeds "
            f"{_EXP_MAX:.6g}; normalized_expm gives exp({name}) / tr exp({name}).")
    return spectral_apply(np.exp, lam, vecs)


def normalized_exp_weights(lam):
    """Eigenvalues of ``exp(A) / tr exp(A)`` given those of ``A``.

    Uses the max-eigenvalue shift of eq. 7, so it never overflows:
    ``exp(lam - max lam) / sum(exp(lam - max lam))``.
    """
    weights = np.exp(lam - lam.max())
    weights /= weights.sum()
    return weights


def log_trace_exp(lam):
    """``log tr exp(A) = log sum exp(lam)``, computed without overflow."""
    top = lam.max()
    return top + np.log(np.exp(lam - top).sum())


def normalized_expm(matrix, *, name="matrix"):
    """Compute ``exp(A) / tr exp(A)`` for a symmetric ``A`` (eq. 7, stable).

    Parameters
    ----------
    matrix : array-like of shape (d, d)
        Symmetric matrix ``A``.
    name : str, default="matrix"
        Name of ``matrix`` in error messages.

    Returns
    -------
    ndarray of shape (d, d)
        ``exp(A) / tr exp(A)``, of trace one, computed with the largest
        eigenvalue shifted out so that it never overflows.
    """
    lam, vecs = eigh_symmetric(matrix, name=name)
    return spectral_apply(lambda _: normalized_exp_weights(lam), lam, vecs)


def von_neumann_divergence(U, W, *, rtol=1e-12):
    r"""Von Neumann divergence :math:`\Delta(U, W)` (eq. 1).

    .. math:: \Delta(U, W) = \mathrm{tr}(U \log U - U \log W - U + W)

    Parameters
    ----------
    U, W : array-like of shape (d, d)
        Symmetric positive semidefinite matrices (any trace).
    rtol : float, default=1e-12
        Eigenvalues below ``rtol * max eigenvalue`` count as zero.

    Returns
    -------
    float
        The divergence, ``0 log 0 = 0``; ``+inf`` when ``U`` is not supported
        inside the range of ``W``.
    """
    U = check_symmetric(U, name="U")
    W = check_symmetric(W, name="W")
    if U.shape != W.shape:
        raise ValueError(f"U and W differ in shape: {U.shape} vs {W.shape}.")
    mu, P = eigh_symmetric(U, check=False)
    nu, Q = eigh_symmetric(W, check=False)
    for label, vals in (("U", mu), ("W", nu)):
        if vals[0] < -rtol * max(abs(vals[-1]), 1.0) * 1e3:
            raise ValueError(
                f"{label} is not positive semidefinite (eigenvalue {vals[0]:.3e})."
            )
    mu_top = max(mu[-1], 0.0)
    nu_top = max(nu[-1], 0.0)
    mu_pos = mu > rtol * mu_top
    nu_pos = nu > rtol * nu_top
    u_log_u = np.sum(mu[mu_pos] * np.log(mu[mu_pos]))
    # weight of U on each eigenvector of W: sum_i mu_i (p_i . q_j)^2
    overlap = ((Q.T @ P[:, mu_pos]) ** 2) @ mu[mu_pos]
    outside = overlap[~nu_pos].sum()
    if outside > 1e3 * rtol * max(mu_top, np.finfo(float).tiny) * len(mu):
        return np.inf
    u_log_w = np.sum(overlap[nu_pos] * np.log(nu[nu_pos]))
    trace_u = mu[mu_pos].sum()
    trace_w = nu[nu_pos].sum()
    return float(max(u_log_u - u_log_w - trace_u + trace_w, 0.0))


def induced_sq_distances(kernel_rows, row_diagonal=None, column_diagonal=None, *,
                         clip=False):
    """``K_ii + K_jj - 2 K_ij``: the squared distances a kernel induces.

    The one home of kernel -> distances: distance matrices, blocks of them
    and the distances of a kernel's objects all go through here.

    Parameters
    ----------
    kernel_rows : ndarray of shape (n_rows, n_columns)
        ``K_ij`` between row objects ``i`` and column objects ``j``; with
        neither diagonal given, the whole (square, symmetric) kernel.
    row_diagonal, column_diagonal : ndarray of shape (n_rows,), (n_columns,), optional
        ``K_ii`` of the row objects, ``K_jj`` of the column objects. Both
        omitted: ``kernel_rows`` is the whole kernel, both are its
        diagonal, and every object is at distance exactly 0 from itself
        (also where ``2 K_ii`` would overflow).
    clip : bool, default=False
        Clip at 0 (round-off of coinciding objects, or an indefinite
        kernel). Not clipped, negative entries are the caller's to judge.

    Returns
    -------
    ndarray of shape (n_rows, n_columns)
    """
    whole = row_diagonal is None and column_diagonal is None
    if whole:
        row_diagonal = column_diagonal = np.diagonal(kernel_rows)
    elif row_diagonal is None or column_diagonal is None:
        raise ValueError("Give both diagonals (a block of the kernel) or neither "
                         "(the whole kernel).")
    squared = row_diagonal[:, None] + column_diagonal[None, :] - 2.0 * kernel_rows
    if clip:
        np.maximum(squared, 0.0, out=squared)
    if whole:
        np.fill_diagonal(squared, 0.0)
    return squared


def power_of_four_scale(magnitude):
    """Return a power of four near ``magnitude`` (1 for 0).

    Dividing a kernel by it is exact and brings its largest entry near 1, so
    that its distances are finite anywhere in the float range (the square
    root of a power of four is exact too).

    Parameters
    ----------
    magnitude : float
        The kernel's largest absolute entry.

    Returns
    -------
    scale : float
        ``4**k`` with ``k`` in ``[-511, 511]``.
    """
    magnitude = float(magnitude) or 1.0
    exponent = min(max(round(np.log2(magnitude) / 2), -511), 511)
    return float(np.ldexp(1.0, 2 * exponent))


def kernel_distance_block(kernel, rows, cols, *, scale, squared):
    """Return the distances between objects ``rows`` and ``cols`` under ``kernel``.

    Computed on ``kernel / scale`` (``scale`` a power of four,
    :func:`power_of_four_scale`) and scaled back exactly; negative squared
    distances (round-off) are clipped at 0.

    Parameters
    ----------
    kernel : ndarray of shape (n, n)
        The kernel.
    rows, cols : ndarray of int
        Object indices.
    scale : float
        A power of four near the kernel's largest entry.
    squared : bool
        Return squared distances.

    Returns
    -------
    distances : ndarray of shape (len(rows), len(cols))
        (Squared) distances.
    """
    diagonal = np.diag(kernel) / scale
    sq = np.maximum(induced_sq_distances(kernel[np.ix_(rows, cols)] / scale,
                                         diagonal[rows], diagonal[cols]), 0.0)
    return sq * scale if squared else np.sqrt(sq) * np.sqrt(scale)


def warn_if_not_psd(kernel, diagonal, squared, *, name="The training kernel"):
    """Warn when a kernel cannot be positive semidefinite.

    That is when some induced squared distance ``K_ii + K_jj - 2 K_ij``, or
    some ``K_ii``, is clearly negative (``O(n^2)``, no eigendecomposition).

    Parameters
    ----------
    kernel : ndarray
        The kernel (or a block of it).
    diagonal : ndarray
        Its ``K_ii``.
    squared : ndarray
        Its induced squared distances.
    name : str, default="The training kernel"
        What to call the kernel in the warning.
    """
    scale = max(float(np.abs(kernel).max(initial=0.0)), np.finfo(float).tiny)
    worst = min(float(squared.min(initial=0.0)), float(diagonal.min(initial=0.0)))
    if worst < -1e-8 * scale:
        warn_user(
            f"{name} is not positive semidefinite (an induced squared "
            f"distance K_ii + K_jj - 2 K_ij or a K_ii is {worst:.3g}); the neighbors "
            "of such a 'kernel' are not those of any embedding of the objects.",
            UserWarning)


#: Pairs gathered per block by :func:`kernel_pair_sq_distances` (three
#: fancy-indexed arrays of this length at a time, whatever the pair count).
_PAIR_BLOCK = 1 << 18


def kernel_pair_sq_distances(kernel, a, b):
    """``K_aa + K_bb - 2 K_ab`` for listed pairs: :func:`induced_sq_distances` per pair.

    The pair-indexed twin of :func:`induced_sq_distances` (the one home of
    kernel -> distances): the squared distances of the pairs ``(a_t, b_t)``
    of a whole kernel, gathered in blocks so that memory stays bounded by
    the block, not by the number of pairs.

    Parameters
    ----------
    kernel : ndarray of shape (d, d)
        Symmetric kernel.
    a, b : ndarray of int, shape (n,)
        The pairs' objects.

    Returns
    -------
    ndarray of shape (n,)
        Not clipped (an indefinite kernel's negative entries are the
        caller's to judge); exactly 0 where ``a_t == b_t``.
    """
    a = np.asarray(a, dtype=np.intp)
    b = np.asarray(b, dtype=np.intp)
    diagonal = np.diagonal(kernel)
    out = np.empty(len(a))
    for start in range(0, len(a), _PAIR_BLOCK):
        ia, ib = a[start:start + _PAIR_BLOCK], b[start:start + _PAIR_BLOCK]
        out[start:start + _PAIR_BLOCK] = diagonal[ia] + diagonal[ib] - 2.0 * kernel[ia, ib]
    out[a == b] = 0.0
    return out


#: Entries (pairs x columns) gathered per block by
#: :func:`factor_pair_sq_distances`: 512 KB, in cache. Larger blocks are
#: slower, markedly so inside an iterative solver that calls this at every
#: step: temporaries above malloc's threshold are mapped and their pages
#: faulted in again at every call (timings: the benchmarks page).
_FACTOR_BLOCK_ENTRIES = 1 << 16

#: :func:`factor_pair_sq_distances` forms ``F F^T`` for factors of at least this
#: many columns, at most :data:`_KERNEL_MAX_ENTRIES` entries (32 MB), when there
#: are at least ``d^2 / 64`` pairs.
_KERNEL_FROM_COLUMNS, _KERNEL_MAX_ENTRIES = 128, 1 << 22


def factor_pair_sq_distances(factor, a, b):
    """``||F[a_t] - F[b_t]||^2`` for listed pairs: the distances of ``K = F F^T``.

    The factor form of :func:`kernel_pair_sq_distances` (``O(n r)`` for
    ``n`` pairs and ``r`` columns, never forming ``K``), gathered in blocks
    of about :data:`_FACTOR_BLOCK_ENTRIES` entries.

    Parameters
    ----------
    factor : ndarray of shape (d, r)
        ``F`` (rows: objects).
    a, b : ndarray of int, shape (n,)
        The pairs' objects.

    Returns
    -------
    ndarray of shape (n,)
        Nonnegative; exactly 0 where ``a_t == b_t``.
    """
    a = np.asarray(a, dtype=np.intp)
    b = np.asarray(b, dtype=np.intp)
    d, r = factor.shape
    if r >= _KERNEL_FROM_COLUMNS and d * d <= _KERNEL_MAX_ENTRIES and 64 * len(a) >= d * d:
        # many pairs of wide rows: one product F F^T (a BLAS call) and three
        # entries per pair beat gathering 2 r entries per pair; for narrow
        # factors the gather wins (timings: the benchmarks page)
        return kernel_pair_sq_distances(factor @ factor.T, a, b)
    out = np.empty(len(a))
    block = max(1, _FACTOR_BLOCK_ENTRIES // max(r, 1))
    for start in range(0, len(a), block):
        diff = factor[a[start:start + block]] - factor[b[start:start + block]]
        out[start:start + block] = np.einsum("ij,ij->i", diff, diff)
    return out
