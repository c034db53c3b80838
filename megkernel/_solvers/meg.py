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

from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from .._engines import run_pair_trials, select
from .._numerics.spectral import check_symmetric
from .._numerics.state import ExponentState, prior_state
from .._numerics.validation import (
    check_meg_step,
    check_n_trials,
    check_pair_indices,
    check_squared_distances,
)
from .._warnings import warn_user
from .bounds import meg_learning_rate
from .holdout import r2_score

__all__ = ["OnlineFit", "auto_learning_rate", "auto_trace", "data_learning_rate", "fit_online",
           "instance_range", "meg", "meg_general", "resolve_scale", "run_meg_trials",
           "trial_engine", "warn_unreachable"]

#: Relative size below which a pair's ``||P[a] - P[b]||^2`` is round-off.
_ROUND_OFF = 1e-12


def instance_range(state, a, b):
    """Return ``rho``, a bound on the eigenvalue range ``||v||^2`` of the pairs' instances.

    ``2`` in dense mode (every pair ``a != b``), the largest
    ``||P[a] - P[b]||^2`` over the given pairs in low-rank mode (about
    ``2 r / d``). When no given pair moves the model, the all-pairs bound
    ``min(2, 4 max_a ||P[a]||^2)``.
    """
    if state.basis is None:
        return 2.0
    # every ||P[a] - P[b]||^2 is at most 4 max_a ||P[a]||^2; norms below a
    # round-off fraction of that are zero (pairs the range cannot separate)
    all_pairs = min(2.0, 4.0 * np.einsum("ij,ij->i", state.basis, state.basis).max())
    rho = state.pair_sq_norms(a, b).max(initial=0.0)
    if rho <= _ROUND_OFF * all_pairs:
        rho = all_pairs
    return float(rho)


def data_learning_rate(rho, mean_target=None):
    """Return ``learning_rate="auto"``: Lemma 3.2's rate with the variance the targets have.

    Lemma 3.2's realizable rate ``2 / rho^2`` bounds the exponential of a
    step by the instance's eigenvalue range ``rho`` (Hoeffding: the
    eigenvalues of ``X_t = v v^T``, ``0`` and ``rho``, drawn by ``W_t``
    have variance at most ``rho^2 / 4``). That variance is in fact
    ``rho^2 p (1 - p) <= rho tr(W_t X_t)`` with ``p = tr(W_t X_t) / rho``,
    and a kernel that meets the targets predicts ``tr(W X_t) = y_t / tau``:
    with ``m`` the targets' mean in trace-one units, the same argument with
    the variance ``rho m`` gives ``1 / (2 rho m)``. The rate is the larger
    of the two, ``max(2 / rho^2, 1 / (2 rho m))``: ``d / 8`` for a user's
    table at ``trace="auto"`` from the identity prior (``m = 2 / d``), where
    ``1/2`` moves the kernel by about ``2 / d`` per trial and a fit of a few
    trials per object stays at its prior. Lemma 3.2's bound holds at
    ``2 / rho^2`` (``megkernel.meg_learning_rate``), which the paper's
    experiments pass explicitly.

    Parameters
    ----------
    rho : float
        The instances' eigenvalue range (:func:`instance_range`).
    mean_target : float or None, default=None
        ``m``, the mean target of the pairs of distinct objects over the
        trace; ``None`` (or not positive): the worst-case rate.

    Returns
    -------
    float
        ``eta``.
    """
    rate = meg_learning_rate(rho)
    if mean_target is not None and mean_target > 0:
        with np.errstate(over="ignore", divide="ignore"):
            data = 1.0 / (2.0 * rho * mean_target)
        if np.isfinite(data):
            rate = max(rate, float(data))
    return rate


def auto_learning_rate(state, a, b, y=None, trace=None):
    """Return ``learning_rate="auto"`` for the pairs ``(a, b)`` and their targets ``y``.

    :func:`data_learning_rate` at the pairs' :func:`instance_range` and the
    mean of ``y`` over the pairs of distinct objects divided by ``trace``
    (without ``y``: Lemma 3.2's ``2 / rho^2``).
    """
    rho = instance_range(state, a, b)
    mean_target = None
    if y is not None and trace is not None:
        moving = np.asarray(a) != np.asarray(b)
        if moving.any():
            mean_target = float(np.mean(np.asarray(y, dtype=float)[moving])) / float(trace)
    return data_learning_rate(rho, mean_target)


def auto_trace(state, pairs, y):
    """``trace="auto"``: the trace at which the prior meets the targets on average.

    ``tau = mean(y) / mean(v^T W_1 v)`` over the pairs of distinct objects:
    the prior ``tau W_1`` then has the targets' mean squared distance (for
    ``W_1 = I / d``, ``tau = d mean(y) / 2``). Scaling ``y`` by ``c`` scales
    ``tau`` by ``c``, so the learned kernel scales by ``c`` too: the units of
    the targets do not matter. ``1.0`` when no pair separates two objects or
    every target is 0.

    Parameters
    ----------
    state : ExponentState
        The prior ``W_1``.
    pairs : ndarray of int, shape (n, 2)
        The pairs' objects.
    y : ndarray of shape (n,)
        Their squared-distance targets.

    Returns
    -------
    trace : float
        ``tau``.
    """
    moving = pairs[:, 0] != pairs[:, 1]
    if not np.any(moving):
        return 1.0
    prior = state.pair_sq_distances(pairs[moving, 0], pairs[moving, 1]).mean()
    mean_target = float(np.mean(y[moving]))
    if not (prior > 0 and mean_target > 0):
        return 1.0
    with np.errstate(over="ignore"):  # overflow is caught just below
        trace = mean_target / prior
    if not np.isfinite(trace):
        raise ValueError(f"The targets' mean squared distance {mean_target:.3g} is too "
                         "large for double precision at this number of objects.")
    return float(trace)


def resolve_scale(state, pairs, y, *, trace="auto", learning_rate="auto"):
    """Return the units of an on-line fit: its trace and learning rate, ``"auto"`` resolved.

    The one place where the ``"auto"`` rules of the on-line trials are applied
    (:func:`auto_trace`, :func:`auto_learning_rate`).

    Parameters
    ----------
    state : ExponentState
        The prior ``W_1``.
    pairs : ndarray of int, shape (n, 2)
        The first call's pairs.
    y : ndarray of shape (n,)
        Their squared-distance targets.
    trace : float or "auto", default="auto"
        ``tau``.
    learning_rate : float or "auto", default="auto"
        ``eta`` in trace-one units.

    Returns
    -------
    trace : float
        ``tau``.
    learning_rate : float
        ``eta``.
    """
    trace = auto_trace(state, pairs, y) if trace == "auto" else float(trace)
    learning_rate = (auto_learning_rate(state, pairs[:, 0], pairs[:, 1], y, trace)
                     if learning_rate == "auto" else float(learning_rate))
    return trace, learning_rate


def warn_unreachable(pairs, y, trace):
    """Warn once about targets that no kernel of trace ``trace`` can meet.

    No squared distance exceeds ``2 * trace``. (A pair of an object with
    itself at a positive distance is named by the estimator, which knows
    its ids and the user's convention.)

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        The pairs' objects.
    y : ndarray of shape (n,)
        Their squared-distance targets.
    trace : float
        ``tau``, in the targets' units.
    """
    beyond = y > 2.0 * trace
    if beyond.any():
        warn_user(
            f"{np.count_nonzero(beyond)} of {len(y)} targets (up to {y.max():.4g}) "
            f"exceed 2 * trace = {2.0 * trace:.4g}, the largest squared distance a "
            f"kernel of trace {trace:.4g} has: give the trace in the targets' units.",
            UserWarning)


class OnlineFit(NamedTuple):
    """What :func:`fit_online` returns.

    Attributes
    ----------
    state : ExponentState
        ``W`` after the last trial (the prior is not changed).
    trace : float
        ``tau``.
    learning_rate : float
        ``eta`` (trace-one units).
    losses : ndarray
        ``(yhat_t - y_t)^2`` of every trial, each before its update.
    prior_loss, final_loss : float
        Mean square error (trace-one units) of the prior and of the final
        kernel over the pairs; NaN unless ``summary=True``.
    prior_r2, final_r2 : float
        The same as ``R^2`` of the pairs' squared distances.
    """

    state: ExponentState
    trace: float
    learning_rate: float
    losses: np.ndarray
    prior_loss: float = np.nan
    final_loss: float = np.nan
    prior_r2: float = np.nan
    final_r2: float = np.nan


def fit_online(pairs, y, *, prior, trace="auto", learning_rate="auto", n_epochs=1,
               shuffle=False, random_state=None, method="auto", chunk=None, callback=None,
               summary=False):
    """Run the paper's on-line trials from ``prior`` over ``n_epochs`` passes.

    The trace and learning rate are resolved (:func:`resolve_scale`), targets
    out of reach warned about (:func:`warn_unreachable`) and a step beyond
    double precision refused before the first trial.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Validated object indices, in order.
    y : ndarray of shape (n,)
        Validated squared-distance targets.
    prior : ExponentState
        The state the trials start from (not changed).
    trace : float or "auto", default="auto"
        ``tau``.
    learning_rate : float or "auto", default="auto"
        ``eta`` in trace-one units.
    n_epochs : int, default=1
        Passes over the pairs.
    shuffle : bool, default=False
        Draw each pass's order at its start.
    random_state : int, RandomState instance or None, default=None
        The orders' randomness.
    method : str, default="auto"
        Engine (see :data:`megkernel._engines.ENGINES`).
    chunk : int, optional
        Trials per engine call (see :func:`run_meg_trials`).
    callback : callable, optional
        ``callback(epoch, stop, losses)`` after each chunk: the epoch, the
        trials done in it so far and the chunk's losses (a progress bar).
    summary : bool, default=False
        Also compute the prior's and the final kernel's mean square error
        over the pairs (``prior_loss``, ``final_loss``).

    Returns
    -------
    fit : OnlineFit
        The final state, the units and the losses.
    """
    trace, learning_rate = resolve_scale(prior, pairs, y, trace=trace,
                                         learning_rate=learning_rate)
    warn_unreachable(pairs, y, trace)
    check_meg_step(learning_rate, trace, y)
    check_n_trials(n_epochs, len(y), bytes_per_trial=8,  # losses_ keeps each trial's loss
                   record="its on-line loss in losses_")
    rng = check_random_state(random_state)
    state = prior.copy()
    losses = []
    for epoch in range(n_epochs):
        order = rng.permutation(len(y)) if shuffle else np.arange(len(y))
        targets = y[order]
        step = None if callback is None else (
            lambda stop, predictions, epoch=epoch, targets=targets: callback(
                epoch, stop, (predictions - targets[stop - len(predictions):stop]) ** 2))
        predictions = run_meg_trials(state, pairs[order], targets,
                                     learning_rate=learning_rate, trace=trace,
                                     method=method, chunk=chunk, callback=step)
        losses.append((predictions - targets) ** 2)
    losses = np.concatenate(losses) if losses else np.zeros(0)
    if not summary:
        return OnlineFit(state, trace, learning_rate, losses)
    a, b = pairs.T
    z = y / trace  # trace-one units: no overflow in any units of y
    prior_loss = float(np.mean((prior.pair_sq_distances(a, b) - z) ** 2))
    final_loss = float(np.mean((state.pair_sq_distances(a, b) - z) ** 2))
    return OnlineFit(state, trace, learning_rate, losses, prior_loss, final_loss,
                     r2_score(prior_loss, z), r2_score(final_loss, z))


def trial_engine(method, state, n_trials):
    """Name of the engine ``method`` runs ``n_trials`` trials on ``state`` with.

    Parameters
    ----------
    method : str
        A ``method`` option of the engine registry (``"auto"`` included).
    state : ExponentState
        The state the trials start from.
    n_trials : int
        How many trials the call runs.

    Returns
    -------
    name : str
        The engine's registry name (for the progress bar's compile note).
    """
    return select(method, state, n_trials).name


def run_meg_trials(state, pairs, y, *, learning_rate, trace, method="auto",
                   chunk=None, callback=None):
    """Run MEG's trials (eq. 4) on ``state`` in place; the one path to the engines.

    Both :func:`meg` and :class:`megkernel.MEGKernelRegressor` (``partial_fit``
    and the on-line fit) run their trials here. The inputs are validated by
    the caller (indices in range, finite targets, a step within
    :func:`~megkernel._numerics.validation.check_meg_step`'s bound).

    Parameters
    ----------
    state : ExponentState
        ``W_t``, updated in place to ``W_{t+n}``.
    pairs : ndarray of int, shape (n, 2)
        Objects ``(a_t, b_t)`` of each trial, in order.
    y : ndarray of shape (n,)
        Squared-distance targets in the units of ``trace``.
    learning_rate : float
        ``eta`` (trace-one units).
    trace : float
        ``tau``.
    method : str, default="auto"
        Engine (see :data:`megkernel._engines.ENGINES`).
    chunk : int, optional
        Trials per engine call (all at once by default); the engine is chosen
        per chunk.
    callback : callable, optional
        ``callback(stop, predictions)`` after each chunk: the trials done so
        far in this call and the chunk's predictions ``yhat_t`` (a progress
        bar, a log).

    Returns
    -------
    predictions : ndarray of shape (n,)
        ``yhat_t = tau tr(W_t X_t)`` before each update.
    """
    n = len(y)
    predictions = np.empty(n)
    step = n if chunk is None else max(int(chunk), 1)
    for start in range(0, n, max(step, 1)):
        stop = min(start + step, n)
        predictions[start:stop] = run_pair_trials(
            state, pairs[start:stop, 0], pairs[start:stop, 1], y[start:stop],
            learning_rate=learning_rate, trace=trace, method=method,
        )
        if callback is not None:
            callback(stop, predictions[start:stop])
    return predictions


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
    learning_rate : float, default=0.5
        ``eta`` in eq. 4 (trace-one units; ``1/2`` is bound-optimal in the
        realizable case).
    trace : float, default=1.0
        Trace ``tau`` of the kernel ``tau W``; ``y`` is in its units.
    method : {"auto", "eigh", "rank-one", "lanczos"}, default="auto"
        Engine; all give the same result up to round-off.

    Returns
    -------
    kernel : ndarray of shape (d, d)
        ``tau W_{n+1}``.
    log : dict
        ``predictions``, ``losses`` ((yhat_t - y_t)^2), ``cumulative_loss``
        (``L_MEG(S)``) and the final ``state``.
    """
    state = prior_state(n_objects, prior)
    pairs = check_pair_indices(pairs, state.n_objects, name="pairs")
    y = check_squared_distances(y, len(pairs))
    learning_rate, trace = check_meg_step(learning_rate, trace, y)
    predictions = run_meg_trials(state, pairs, y, learning_rate=learning_rate,
                                 trace=trace, method=method)
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
        Trace ``tau`` of the learned kernel.

    Returns
    -------
    kernel : ndarray of shape (d, d)
        ``tau W`` after the last update, symmetric positive definite of
        trace ``tau``.
    log : dict
        ``predictions``, ``losses``, ``cumulative_loss``, ``state``.
    """
    state = ExponentState.from_prior(prior, name="prior")
    instances = [check_symmetric(X, name=f"instances[{t}]")
                 for t, X in enumerate(instances)]
    for t, X in enumerate(instances):
        if X.shape != state.exponent.shape:
            raise ValueError(f"instances[{t}] has shape {X.shape}, the prior "
                             f"{state.exponent.shape}.")
    y = np.asarray(y, dtype=float)
    if y.shape != (len(instances),):
        raise ValueError(f"y must have shape ({len(instances)},), one label per "
                         f"instance, got {y.shape}.")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite labels.")
    # the largest absolute row sum bounds each instance's spectral norm
    norm = max((np.abs(X).sum(axis=1).max() for X in instances), default=0.0)
    learning_rate, trace = check_meg_step(learning_rate, trace, y, instance_norm=norm)
    predictions = np.empty(len(y))
    for t, X in enumerate(instances):
        W = state.matrix()
        predictions[t] = trace * np.sum(W * X)
        if not np.any(X):  # a zero instance changes nothing (and its step is unbounded)
            continue
        # the step 2 eta (yhat - y) / tau X, formed as (2 eta) * (r ||X||) times
        # X / ||X||: check_meg_step bounds the product, but 2 eta (yhat - y) / tau
        # alone can overflow when the instance is tiny (eta 1e300, X 1e-323)
        instance_norm = np.abs(X).sum(axis=1).max()
        residual = (predictions[t] - y[t]) / trace
        state.add_symmetric(X / instance_norm,
                            -2.0 * learning_rate * (residual * instance_norm))
    losses = (predictions - y) ** 2
    log = {"predictions": predictions, "losses": losses,
           "cumulative_loss": float(losses.sum()), "state": state}
    return trace * state.matrix(), log

