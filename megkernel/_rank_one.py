"""Exact rank-one eigen-updates of the exponent: the fast MEG engine.

A distance trial changes the exponent by ``s v v^T``. With ``A = V diag(lam)
V^T`` and ``z = V^T v``, the new eigenpairs are those of ``diag(lam) + s z
z^T`` (``lam' , Q``) rotated by ``V <- V Q``: ``O(d^2)`` for the secular
equation (Bunch, Nielsen & Sorensen; LAPACK's deflation and Gu & Eisenstat's
orthogonal eigenvectors) and one GEMM over the eigenvectors that did not
deflate. The exponent itself is updated exactly alongside, and every
:data:`REFRESH_EVERY` updates the eigendecomposition is re-anchored on
``eigh(A)``, so round-off never accumulates beyond that many updates.

The compiled kernels need numba; without it (or with :data:`USE_COMPILED`
set to False) the same engine runs on numpy, taking the eigendecomposition
of the small ``diag(lam) + s z z^T`` matrix with ``eigh`` instead.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from threadpoolctl import ThreadpoolController

from ._meg import PAIR_ENGINES
from ._spectral import normalized_exp_weights

try:
    from . import _rank_one_compiled as _compiled
except ImportError:  # numba is optional
    _compiled = None

__all__ = [
    "rank_one_eig",
    "rank_one_update_state",
    "pair_sq_distance_after",
    "REFRESH_EVERY",
]

#: Run the compiled kernels (False forces the numpy fallback).
USE_COMPILED = _compiled is not None

#: Updates between two re-anchorings of the eigendecomposition on the exact
#: exponent.
REFRESH_EVERY = 1000

#: Exponents smaller than this run with the BLAS pinned to one thread.
SINGLE_THREAD_BELOW = 1000

_controller = None


def _blas_threads(size):
    """Context pinning the BLAS to one thread for small exponents."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    limit = 1 if size < SINGLE_THREAD_BELOW else None
    return _controller.limit(limits=limit, user_api="blas")


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
    z = np.ascontiguousarray(z, dtype=float)
    if USE_COMPILED:
        rows = np.eye(lam.size)
        if _compiled_update(lam, rows, z, float(s)) is not None:
            return lam, rows.T
    return linalg.eigh(np.diag(lam) + s * np.outer(z, z), check_finite=False)


def _compiled_update(lam, rows, z, s):
    """Compiled update of ``lam`` and the eigenvector ``rows`` in place.

    Returns ``rows`` on success and None if the root finder failed (the
    arguments are then spoiled).
    """
    n, m = rows.shape
    spare = np.empty_like(rows)
    swapped, info = _compiled.rank_one_update(
        lam, rows, spare, z, s, _compiled.make_workspace(n, m)
    )
    if info != 0:
        return None
    if swapped:
        rows[...] = spare
    return rows


# -- updates of an ExponentState --------------------------------------------
def rank_one_update_state(state, a, b, scale):
    """``A <- A + scale v v^T`` for the pair ``(a, b)``, eigenpairs included.

    The exponent is updated exactly (:meth:`ExponentState.add_pair_outer`);
    the eigendecomposition by a rank-one update, re-anchored on ``eigh(A)``
    every :data:`REFRESH_EVERY` updates. DefiniteBoost's step is
    ``scale = -alpha``.
    """
    if scale == 0.0:
        return
    z = state.pair_coordinates(a, b)[0]
    state.add_pair_outer(a, b, scale)
    with _blas_threads(state.size):
        _update_eigenpairs(state, z, scale)


def _update_eigenpairs(state, z, scale):
    """Rank-one update of the eigenpairs, then the refresh policy."""
    updated = False
    if USE_COMPILED:
        lam = np.array(state.eigenvalues, dtype=float)
        rows = np.ascontiguousarray(state.eigenvectors.T)
        if _compiled_update(lam, rows, z, scale) is not None:
            state.eigenvalues, state.eigenvectors = lam, rows.T
            updated = True
    else:
        lam, Q = linalg.eigh(np.diag(state.eigenvalues) + scale * np.outer(z, z),
                             check_finite=False)
        state.eigenvalues, state.eigenvectors = lam, state.eigenvectors @ Q
        updated = True
    state.updates_since_refresh += 1
    if not updated or state.updates_since_refresh >= REFRESH_EVERY:
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
def _pair_trials_rank_one(state, a, b, y, learning_rate, trace):
    """MEG trials by exact rank-one eigen-updates (same results as eigh)."""
    with _blas_threads(state.size):
        if USE_COMPILED:
            return _pair_trials_compiled(state, a, b, y, learning_rate, trace)
        return _pair_trials_numpy(state, a, b, y, learning_rate, trace)


def _pair_trials_compiled(state, a, b, y, learning_rate, trace):
    predictions = np.empty(len(y))
    basis = np.zeros((0, 0)) if state.basis is None else np.ascontiguousarray(
        state.basis, dtype=float)
    state.exponent = np.ascontiguousarray(state.exponent)
    work = _compiled.make_workspace(state.size, state.size)
    t = 0
    while t < len(y):
        if state.updates_since_refresh >= REFRESH_EVERY:
            state.refresh()
        lam = np.array(state.eigenvalues, dtype=float)
        rows = np.ascontiguousarray(state.eigenvectors.T)
        t, updates, rows, _, info = _compiled.pair_trials(
            lam, rows, np.empty_like(rows), state.exponent, basis, a, b, y,
            learning_rate, trace, predictions, t,
            REFRESH_EVERY - state.updates_since_refresh, work,
        )
        state.eigenvalues, state.eigenvectors = lam, rows.T
        state.updates_since_refresh += updates
        if info != 0:
            state.refresh()
    return predictions


def _pair_trials_numpy(state, a, b, y, learning_rate, trace):
    predictions = np.empty(len(y))
    for t in range(len(y)):
        if state.updates_since_refresh >= REFRESH_EVERY:
            state.refresh()
        z = state.pair_coordinates(a[t], b[t])[0]
        weights = np.exp(state.eigenvalues - state.eigenvalues[-1])
        y_hat = trace * np.dot(z * z, weights) / weights.sum()
        predictions[t] = y_hat
        scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        if scale != 0.0:
            state.add_pair_outer(a[t], b[t], scale)
            _update_eigenpairs(state, z, scale)
    return predictions


PAIR_ENGINES["rank-one"] = _pair_trials_rank_one
