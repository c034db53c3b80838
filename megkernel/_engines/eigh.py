"""The reference engine: one ``eigh`` of the exponent per trial (eq. 7).

``O(d^3)`` per trial. Every other engine is tested against this one.
"""

from __future__ import annotations

import numpy as np

from .._numerics.spectral import eigh_symmetric, normalized_exp_weights

__all__ = ["pair_trials", "pair_update", "pair_sq_distance_after"]


def pair_trials(state, a, b, y, learning_rate, trace, predictions, start=0,
                stats=None):
    """MEG trials ``start, ..., n - 1`` on ``state`` (in place).

    Writes ``yhat_t = tau tr(W_t X_t)``, made before each update, into
    ``predictions`` and returns ``n`` (every trial run).
    """
    basis = state.basis
    for t in range(start, len(y)):
        lam = state.eigenvalues
        vecs = state.eigenvectors
        if basis is None:
            z = vecs[a[t]] - vecs[b[t]]
        else:
            z = (basis[a[t]] - basis[b[t]]) @ vecs
        weights = np.exp(lam - lam[-1])
        y_hat = trace * np.dot(z * z, weights) / weights.sum()
        predictions[t] = y_hat
        scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        if scale != 0.0:
            pair_update(state, a[t], b[t], scale)
    if stats is not None:
        stats["trials"] = stats.get("trials", 0) + len(y) - start
    return len(y)


def pair_update(state, a, b, scale):
    """Update ``A <- A + scale v v^T`` for the pair ``(a, b)``, then ``eigh(A)``."""
    state.add_pair_outer(a, b, scale)
    state.refresh()


def pair_sq_distance_after(state, z, scale):
    """``v^T W' v`` for ``W' = exp(A + scale v v^T) / tr``, with ``z = V^T v``.

    In the eigenbasis of ``A`` the step is ``diag(lam) + scale z z^T``: one
    ``eigh`` of that matrix (``O(r^3)``); ``state`` is not changed.
    """
    z = np.asarray(z, dtype=float)
    lam_new, vecs = eigh_symmetric(np.diag(state.eigenvalues) + scale * np.outer(z, z),
                                   name="the exponent after the step", check=False)
    proj = vecs.T @ z
    return float((proj * proj) @ normalized_exp_weights(lam_new))
