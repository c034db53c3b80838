"""The reference engine: one ``eigh`` of the exponent per trial (eq. 7).

``O(d^3)`` per trial. Every other engine is tested against this one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pair_trials", "pair_update"]


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
    """``A <- A + scale v v^T`` for the pair ``(a, b)``, then ``eigh(A)``."""
    state.add_pair_outer(a, b, scale)
    state.refresh()
