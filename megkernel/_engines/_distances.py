"""Squared distances of many pairs under a dense state, without gathering rows.

``v^T W v`` for ``v = e_a - e_b`` is ``sum_l w_l (V[a, l] - V[b, l])^2``.
Gathering the rows ``V[a] - V[b]`` of all pairs first (an ``m x d`` array
read from scattered rows of the eigenvector matrix, which the engines keep
transposed) is memory-bound and dominates a DefiniteBoost iteration on a
large state. The compiled loop here walks the eigenvectors one at a time (a
contiguous row of ``V^T``, in cache) and adds each one's term to every
pair: the same ``O(d m)`` arithmetic, on cached data.
"""

from __future__ import annotations

import numpy as np

from .._numerics.jit import cached_njit

__all__ = ["factor_rows_sq_distances", "pair_sq_distances"]


@cached_njit(error_model="numpy")
def _pair_sq_distances(Vt, weights, a, b, out):
    """Set ``out[j] = sum_e weights[e] (Vt[e, a[j]] - Vt[e, b[j]])^2``.

    Summed over ascending ``e``.
    """
    m = a.size
    n = Vt.shape[0]
    for j in range(m):
        out[j] = 0.0
    e = 0
    while e + 4 <= n:  # four eigenvectors per pass over the pairs, same order
        r0 = Vt[e]
        r1 = Vt[e + 1]
        r2 = Vt[e + 2]
        r3 = Vt[e + 3]
        w0 = weights[e]
        w1 = weights[e + 1]
        w2 = weights[e + 2]
        w3 = weights[e + 3]
        for j in range(m):
            aj = a[j]
            bj = b[j]
            x0 = r0[aj] - r0[bj]
            x1 = r1[aj] - r1[bj]
            x2 = r2[aj] - r2[bj]
            x3 = r3[aj] - r3[bj]
            acc = out[j] + w0 * (x0 * x0)
            acc += w1 * (x1 * x1)
            acc += w2 * (x2 * x2)
            out[j] = acc + w3 * (x3 * x3)
        e += 4
    while e < n:
        row = Vt[e]
        w = weights[e]
        for j in range(m):
            x = row[a[j]] - row[b[j]]
            out[j] += w * (x * x)
        e += 1


def pair_sq_distances(state, a, b):
    """``v^T W v`` for the pairs ``(a[j], b[j])`` of a dense state (trace-one ``W``).

    Parameters
    ----------
    state : ExponentState
        Dense (``state.basis is None``).
    a, b : ndarray of intp, shape (m,)
        Object indices.

    Returns
    -------
    ndarray of shape (m,)
        The same as ``state.pair_sq_distances(a, b)`` up to round-off.
    """
    Vt = np.ascontiguousarray(state.eigenvectors.T)  # a view: the engines keep V^T
    out = np.empty(len(a))
    _pair_sq_distances(Vt, np.ascontiguousarray(state.density_eigenvalues()),
                       np.ascontiguousarray(a, dtype=np.intp),
                       np.ascontiguousarray(b, dtype=np.intp), out)
    return out


@cached_njit(error_model="numpy")
def _factor_rows_sq_distances(F, a, b, out):
    """Set ``out[j] = sum_k (F[a[j], k] - F[b[j], k])^2`` (four partial sums)."""
    r = F.shape[1]
    for j in range(a.size):
        fa = F[a[j]]
        fb = F[b[j]]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        k = 0
        while k + 4 <= r:
            x0 = fa[k] - fb[k]
            x1 = fa[k + 1] - fb[k + 1]
            x2 = fa[k + 2] - fb[k + 2]
            x3 = fa[k + 3] - fb[k + 3]
            s0 += x0 * x0
            s1 += x1 * x1
            s2 += x2 * x2
            s3 += x3 * x3
            k += 4
        while k < r:
            x0 = fa[k] - fb[k]
            s0 += x0 * x0
            k += 1
        out[j] = (s0 + s1) + (s2 + s3)


def factor_rows_sq_distances(factor, a, b):
    """``||F[a_j] - F[b_j]||^2`` for the pairs, by a compiled loop over them.

    The rows of a C-contiguous factor are read in place (no ``m x r``
    gathered temporaries), which for thousands of pairs is several times
    faster than gathering them with numpy.

    Parameters
    ----------
    factor : ndarray of shape (n, r)
    a, b : ndarray of int, shape (m,)

    Returns
    -------
    ndarray of shape (m,)
        Exactly 0 where ``a_j == b_j``.
    """
    out = np.empty(len(a))
    _factor_rows_sq_distances(np.ascontiguousarray(factor, dtype=float),
                              np.ascontiguousarray(a, dtype=np.intp),
                              np.ascontiguousarray(b, dtype=np.intp), out)
    return out
