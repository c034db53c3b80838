"""MEG on-line kernel learning, square loss (Section 3, eqs. 2-7).

Pure solver functions: arrays in, arrays and a log out. They know nothing of
scikit-learn; :class:`megkernel.MEGKernelRegressor` wraps them.

Conventions
-----------
A distance example ``(a, b, y)`` states ``||x_a - x_b||^2 = y``. Its instance
matrix is ``X_t = u u^T`` with ``u = e_a - e_b``, so ``tr(W X_t)`` is the
squared distance itself, the eigenvalue range is ``r = 2`` and the
realizable bound-optimal learning rate is ``eta = 2 / r^2 = 1/2``. (The paper
uses half of this ``X_t``, ``r = 1`` and ``eta = 2``; both give the same
sequence of kernels.)

A kernel of trace ``tau`` is ``tau W`` with ``tr W = 1``. The update runs in
trace-one units, ``W <- exp(log W - 2 eta (yhat - y) / tau * X) / Z``, so the
learning rate does not depend on the scale of the distances: fitting
``tau * y`` with ``trace=tau`` gives ``tau`` times the kernel learned from
``y`` with ``trace=1``. Losses are reported in the user's units.
"""

from __future__ import annotations

import numpy as np

from ._exponent import ExponentState
from ._spectral import check_symmetric
from ._validation import check_pair_indices, check_squared_distances

__all__ = ["meg", "meg_general", "run_pair_trials", "PAIR_ENGINES"]


def _pair_trials_eigh(state, a, b, y, learning_rate, trace):
    """Reference engine: one ``eigh`` of the exponent per trial (eq. 7)."""
    predictions = np.empty(len(y))
    basis = state.basis
    for t in range(len(y)):
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
            state.add_pair_outer(a[t], b[t], scale)
            state.refresh()
    return predictions


#: Engines running MEG trials over distance pairs; each takes
#: ``(state, a, b, y, learning_rate, trace)``, updates ``state`` in place and
#: returns the predictions ``yhat_t`` made before each update.
PAIR_ENGINES = {"eigh": _pair_trials_eigh}


#: "auto" runs dense-mode states of at least this size by the Lanczos engine
#: (measured faster than rank-one from d = 100 on, 10x at d = 200 from a
#: generic prior; see benchmarks/bench_speed.py).
AUTO_LANCZOS_FROM = 200

#: ... and only for calls of at least this many trials: a Lanczos call ends
#: with one ``eigh``, worth 6-8 rank-one trials at d = 200-2000 (measured: at
#: d = 500, 64 trials in calls of 1 / 4 / 8 trials cost 27.1 / 7.2 / 3.6 ms
#: per trial by Lanczos and 6.2 / 6.8 / 6.1 ms by rank-one), so on-line use,
#: one trial per ``partial_fit``, stays with the rank-one engine.
AUTO_LANCZOS_MIN_TRIALS = 8


def select_engine(method, size, state=None, n_trials=None):
    """The engine for ``method`` ("auto" picks the fastest available)."""
    if method == "auto":
        method = "rank-one" if "rank-one" in PAIR_ENGINES and size > 2 else "eigh"
        if (size >= AUTO_LANCZOS_FROM and "lanczos" in PAIR_ENGINES
                and (state is None or state.basis is None)
                and (n_trials is None or n_trials >= AUTO_LANCZOS_MIN_TRIALS)):
            method = "lanczos"
    try:
        return PAIR_ENGINES[method]
    except KeyError:
        raise ValueError(
            f"Unknown method {method!r}; available: {sorted(PAIR_ENGINES)}."
        ) from None


def run_pair_trials(state, a, b, y, *, learning_rate, trace=1.0, method="auto"):
    """Run on-line MEG trials over distance pairs, updating ``state`` in place.

    Parameters
    ----------
    state : ExponentState
        Current exponent (``log W_t`` up to a multiple of the identity).
    a, b : ndarray of int, shape (n,)
        Object indices of each trial.
    y : ndarray of shape (n,)
        Squared distances, in the units of a kernel of trace ``trace``.
    learning_rate : float
        ``eta`` in eq. 4 (trace-one units; ``1/2`` is bound-optimal in the
        realizable case).
    trace : float, default=1.0
        Trace ``tau`` of the kernel ``tau W``.
    method : {"auto", "eigh", "rank-one", "lanczos"}
        Engine; all give the same result up to round-off.

    Returns
    -------
    predictions : ndarray of shape (n,)
        ``yhat_t = tau tr(W_t X_t)``, each made before its update.
    """
    engine = select_engine(method, state.size, state, n_trials=len(y))
    a = np.ascontiguousarray(a, dtype=np.intp)
    b = np.ascontiguousarray(b, dtype=np.intp)
    y = np.ascontiguousarray(y, dtype=float)
    return engine(state, a, b, y, float(learning_rate), float(trace))


def _prior_state(n_objects, prior):
    if prior is None:
        if n_objects is None:
            raise ValueError("Give n_objects or a prior matrix.")
        return ExponentState.identity(n_objects)
    return ExponentState.from_prior(prior, name="prior")


def meg(pairs, y, *, n_objects=None, prior=None, learning_rate=0.5, trace=1.0,
        method="auto"):
    """MEG on-line learning of a kernel from distance examples (eq. 4).

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Objects ``(a_t, b_t)`` of each trial, in order.
    y : ndarray of shape (n,)
        Squared distances ``||x_a - x_b||^2``.
    n_objects : int, optional
        Number of objects ``d`` when ``prior`` is not given (prior ``I/d``).
    prior : ndarray of shape (d, d), optional
        Symmetric positive definite ``W_1`` (scaled to trace one).
    learning_rate, trace, method
        See :func:`run_pair_trials`.

    Returns
    -------
    kernel : ndarray of shape (d, d)
        ``tau W_{n+1}``.
    log : dict
        ``predictions``, ``losses`` ((yhat_t - y_t)^2), ``cumulative_loss``
        (``L_MEG(S)``) and the final ``state``.
    """
    state = _prior_state(n_objects, prior)
    pairs = check_pair_indices(pairs, state.n_objects, name="pairs")
    y = check_squared_distances(y, len(pairs))
    predictions = run_pair_trials(
        state, pairs[:, 0], pairs[:, 1], y,
        learning_rate=learning_rate, trace=trace, method=method,
    )
    losses = (predictions - y) ** 2
    log = {"predictions": predictions, "losses": losses,
           "cumulative_loss": float(losses.sum()), "state": state}
    return trace * state.matrix(), log


def meg_general(instances, y, *, prior, learning_rate, trace=1.0):
    """MEG for general symmetric instance matrices ``X_t`` (eqs. 4 and 7).

    Parameters
    ----------
    instances : ndarray of shape (n, d, d)
        Symmetric instance matrices.
    y : ndarray of shape (n,)
        Labels; the prediction is ``yhat_t = tau tr(W_t X_t)``.
    prior : ndarray of shape (d, d)
        Symmetric positive definite ``W_1`` (scaled to trace one).
    learning_rate : float
        ``eta``; Lemma 3.2's rate is :func:`megkernel.meg_learning_rate`.
    trace : float, default=1.0

    Returns
    -------
    kernel : ndarray of shape (d, d)
    log : dict
        ``predictions``, ``losses``, ``cumulative_loss``, ``state``.
    """
    state = ExponentState.from_prior(prior, name="prior")
    instances = [check_symmetric(X, name=f"instances[{t}]")
                 for t, X in enumerate(instances)]
    y = np.asarray(y, dtype=float)
    predictions = np.empty(len(y))
    for t, X in enumerate(instances):
        W = state.matrix()
        predictions[t] = trace * np.sum(W * X)
        scale = -2.0 * learning_rate * (predictions[t] - y[t]) / trace
        state.add_symmetric(X, scale)
    losses = (predictions - y) ** 2
    log = {"predictions": predictions, "losses": losses,
           "cumulative_loss": float(losses.sum()), "state": state}
    return trace * state.matrix(), log


from . import _rank_one  # noqa: E402,F401  (registers the "rank-one" engine)
from . import _lanczos  # noqa: E402,F401  (registers the "lanczos" engine)
