"""Exact rank-one eigen-updates of the exponent: the fast MEG engine.

A distance trial changes the exponent by ``s v v^T``. With ``A = V diag(lam)
V^T`` and ``z = V^T v``, the new eigenpairs are those of ``diag(lam) + s z
z^T`` (``lam' , Q``) rotated by ``V <- V Q``: ``O(d^2)`` for the secular
equation (Bunch, Nielsen & Sorensen; LAPACK's deflation and Gu & Eisenstat's
orthogonal eigenvectors, compiled in :mod:`._rank_one_kernels`) and one GEMM
over the eigenvectors that did not deflate. The exponent itself is updated
exactly alongside, and every :data:`REFRESH_EVERY` updates the
eigendecomposition is re-anchored on ``eigh(A)``, so round-off never
accumulates beyond that many updates. An update whose root finder fails, or
whose eigenvectors come out non-finite, is re-anchored at once: its exponent
is exact, and a NaN eigenpair would make the next prediction, and so the
next step of the exponent, NaN.
"""

from __future__ import annotations

import threading

import numpy as np
from scipy import linalg

from .._numerics.spectral import normalized_exp_weights
from . import _rank_one_kernels as kernels

__all__ = [
    "rank_one_eig",
    "pair_update",
    "pair_sq_distance_after",
    "pair_trials",
    "REFRESH_EVERY",
]

#: Updates between two re-anchorings of the eigendecomposition on the exact
#: exponent.
REFRESH_EVERY = 1000

#: Workspaces of single updates (:func:`pair_update`, :func:`rank_one_eig`)
#: with at most this many eigenvector entries (``n * m``) are kept for the
#: next update, one per thread: allocating one is a noticeable part of a
#: small update.
_KEEP_WORKSPACE_UP_TO = 1 << 16

_kept = threading.local()


def _workspace(n, m):
    """Scratch of one compiled update (:func:`~._rank_one_kernels.make_workspace`).

    The last one of this thread when its shape fits (its contents never
    matter: every buffer is written before it is read), else a new one.
    """
    if n * m > _KEEP_WORKSPACE_UP_TO:
        return kernels.make_workspace(n, m)
    kept = getattr(_kept, "workspace", None)
    if kept is None or kept[0] != (n, m):
        kept = (n, m), kernels.make_workspace(n, m)
        _kept.workspace = kept
    return kept[1]


#: Placeholders for the compiled kernel's unused arguments (one signature).
_NONE = np.empty(0)
_DENSE = np.zeros((0, 0))
_PAIR_A = np.array([0], dtype=np.intp)
_PAIR_B = np.array([1], dtype=np.intp)


def _run(lam, rows, exponent, basis, a, b, y, scales, learning_rate, trace,
         predictions, start, budget):
    """Run the compiled kernel on ``lam`` and the eigenvector ``rows`` (in place).

    Returns ``(next_trial, updates, rows, info)``: ``rows`` is the array
    now holding the eigenvectors (the kernel may have traded it for its
    buffer); ``info != 0``: the update failed (a root finder that did not
    converge, eigenvectors that are not finite) and the eigenpairs are
    spoiled.
    """
    spare = np.empty_like(rows)
    t, updates, swapped, info = kernels.pair_trials(
        lam, rows, spare, exponent, basis, a, b, y, scales, learning_rate, trace,
        predictions, start, budget, *_workspace(*rows.shape))
    return t, updates, (spare if swapped else rows), info


# -- one rank-one eigenproblem ----------------------------------------------
def rank_one_eig(lam, z, s):
    """Eigendecomposition of ``diag(lam) + s z z^T``.

    Parameters
    ----------
    lam : array-like of shape (n,)
        Ascending eigenvalues.
    z : array-like of shape (n,)
        Update vector.
    s : float
        Weight of the update, of either sign.

    Returns
    -------
    lam_new : ndarray of shape (n,)
        Ascending eigenvalues.
    Q : ndarray of shape (n, n)
        Orthogonal eigenvectors (columns).
    """
    lam = np.array(lam, dtype=float)
    z = np.asarray(z, dtype=float)
    n = lam.size
    # the kernel's low-rank mode with basis rows (z, 0) and V = I: v = z
    basis = np.zeros((2, n))
    basis[0] = z
    _, _, rows, info = _run(lam, np.eye(n), np.zeros((n, n)), basis, _PAIR_A, _PAIR_B,
                            _NONE, np.array([float(s)]), 0.0, 1.0, _NONE, 0, 1)
    if info == 0:
        return lam, rows.T
    # the root finder failed: the small eigenproblem directly
    return linalg.eigh(np.diag(lam) + s * np.outer(z, z), check_finite=False)


# -- updates of an ExponentState --------------------------------------------
def _basis(state):
    return _DENSE if state.basis is None else np.ascontiguousarray(state.basis,
                                                                   dtype=float)


def pair_update(state, a, b, scale):
    """Update ``A <- A + scale v v^T`` for the pair ``(a, b)``, eigenpairs included.

    The exponent is updated exactly (as :meth:`ExponentState.add_pair_outer`);
    the eigendecomposition by a rank-one update, re-anchored on ``eigh(A)``
    every :data:`REFRESH_EVERY` updates. DefiniteBoost's step is
    ``scale = -alpha``.
    """
    if scale == 0.0:
        return
    state.exponent = np.ascontiguousarray(state.exponent, dtype=float)
    lam = np.array(state.eigenvalues, dtype=float)
    rows = np.ascontiguousarray(state.eigenvectors.T)
    _, _, rows, info = _run(lam, rows, state.exponent, _basis(state),
                            np.array([a], dtype=np.intp), np.array([b], dtype=np.intp),
                            _NONE, np.array([float(scale)]), 0.0, 1.0, _NONE, 0, 1)
    state.eigenvalues, state.eigenvectors = lam, rows.T
    state.updates_since_refresh += 1
    if info != 0 or state.updates_since_refresh >= REFRESH_EVERY:
        state.refresh()


def pair_sq_distance_after(state, z, s):
    """``v^T W' v`` for ``W' = exp(A + s v v^T) / tr``, with ``z = V^T v``.

    The squared distance of a pair after a step ``s`` along its own
    rank-one direction, without changing ``state``: the exact line search
    of DefiniteBoost's projection (eq. 11) evaluates this.
    """
    lam_new, Q = rank_one_eig(state.eigenvalues, z, s)
    proj = Q.T @ np.asarray(z, dtype=float)
    return float((proj * proj) @ normalized_exp_weights(lam_new))


# -- the MEG engine ---------------------------------------------------------
def pair_trials(state, a, b, y, learning_rate, trace, predictions, start=0,
                stats=None):
    """MEG trials ``start, ..., n - 1`` by exact rank-one eigen-updates.

    Same results as the eigh engine up to round-off; writes the
    predictions into ``predictions`` and returns ``n``.
    """
    basis = _basis(state)
    state.exponent = np.ascontiguousarray(state.exponent, dtype=float)
    t = start
    while t < len(y):
        if state.updates_since_refresh >= REFRESH_EVERY:
            state.refresh()
        lam = np.array(state.eigenvalues, dtype=float)
        rows = np.ascontiguousarray(state.eigenvectors.T)
        t, updates, rows, info = _run(
            lam, rows, state.exponent, basis, a, b, y, _NONE, learning_rate, trace,
            predictions, t, REFRESH_EVERY - state.updates_since_refresh)
        state.eigenvalues, state.eigenvectors = lam, rows.T
        state.updates_since_refresh += updates
        if info != 0:
            state.refresh()
    if stats is not None:
        stats["trials"] = stats.get("trials", 0) + len(y) - start
    return len(y)
