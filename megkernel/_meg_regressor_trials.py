"""The on-line trials of :class:`~megkernel.MEGKernelRegressor`, and a call's start.

A part of :mod:`megkernel.meg_regressor` (import from there): the trials
run by the solver's :func:`~megkernel._solvers.meg.run_meg_trials` under a
progress bar, the epochs of ``fit(solver="online")``
and the ``partial_fit`` fast path, as functions of the estimator (its
methods call them); and what every call, batch too, starts from: the
validated pairs, prior, trace and learning rate (:class:`_Start`; the
``"auto"`` rules are the solver's), the warning for targets no
kernel of the trace reaches.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from ._numerics.validation import MAX_STEP, check_meg_step, check_n_trials
from ._pair_estimator import initial_state, unchanged_on_error
from ._progress import bar as progress_bar
from ._progress import detail as progress_detail
from ._progress import note_compiling
from ._solvers.meg import auto_learning_rate, auto_trace, run_meg_trials, trial_engine
from ._warnings import warn_user

#: Trials between two updates of the progress bar when ``verbose``.
_PROGRESS_EVERY = 10_000

#: ``verbose=1`` draws a bar for calls of at least this many trials (shorter
#: ones end before a bar says anything; on-line use, one pair per
#: ``partial_fit``, would otherwise print a bar per call); ``verbose=2``
#: draws one for every call.
_BAR_FROM = 1000


class _Start(NamedTuple):
    """What a call runs: validated pairs, the state it works on, the units."""

    pairs: np.ndarray
    y: np.ndarray
    index: object
    state: object
    trace: float
    learning_rate: float


def _r2(loss, z):
    """``R^2`` of predictions with mean square error ``loss`` on targets ``z``."""
    variance = float(np.var(z)) if len(z) else 0.0
    return 1.0 - loss / variance if variance > 0 else np.nan


def _warn_unreachable(pairs, y, trace, *, beyond_trace=True):
    """One warning per call for targets no kernel of this trace can meet."""
    loops = (pairs[:, 0] == pairs[:, 1]) & (y > 0)
    if loops.any():
        warn_user(
            f"{np.count_nonzero(loops)} of {len(y)} pairs join an object with itself "
            f"but have a positive squared distance (up to {y[loops].max():.4g}); the "
            "distance of an object to itself is always 0.", UserWarning)
    beyond = y > 2.0 * trace
    if beyond_trace and beyond.any():
        warn_user(
            f"{np.count_nonzero(beyond)} of {len(y)} targets (up to {y.max():.4g}) "
            f"exceed 2 * trace = {2.0 * trace:.4g}, the largest squared distance a "
            f"kernel of trace {trace:.4g} has: give the trace in the targets' units.",
            UserWarning)


def _start(model, X, y):
    """Validate a first call and make its prior, trace and learning rate."""
    pairs, y, index = model._validate_trials(X, y, reset=True)
    state = initial_state(model, pairs, index)
    trace = (auto_trace(state, pairs, y) if model.trace == "auto"
             else float(model.trace))
    learning_rate = (auto_learning_rate(state, pairs[:, 0], pairs[:, 1])
                     if model.learning_rate == "auto" else float(model.learning_rate))
    start = _Start(pairs, y, index, state, trace, learning_rate)
    _check_targets(start)
    return start


#: Pairs of distinct objects from which a first ``partial_fit`` call's
#: ``trace="auto"`` (a mean of squared distances) is taken without a
#: warning: with a coefficient of variation near 1, the mean of ``k`` is
#: within ``1 / sqrt(k)`` (18 % at 30), and later chunks never change it.
MIN_TRACE_PAIRS = 30


def warn_short_first_chunk(model, start):
    """Warn when ``partial_fit``'s first chunk sets ``trace="auto"`` from few pairs."""
    n_moving = int(np.count_nonzero(start.pairs[:, 0] != start.pairs[:, 1]))
    if model.trace == "auto" and n_moving < MIN_TRACE_PAIRS:
        warn_user(
            f"trace='auto' is set by the first partial_fit call from {n_moving} pairs of "
            f"distinct objects (fewer than {MIN_TRACE_PAIRS}), and later calls keep it "
            f"(trace_={start.trace:.4g}). Give the trace, a larger first chunk, or "
            "stream through KernelDistances (a first pass over the whole stream sets "
            "it).", UserWarning)


def _check_targets(start):
    """Warn about targets out of reach; refuse a step beyond double precision."""
    _warn_unreachable(start.pairs, start.y, start.trace)
    check_meg_step(start.learning_rate, start.trace, start.y)


def _fast_call(model, X, y):
    """Whether a ``partial_fit`` call may skip scikit-learn's validation.

    A later call on plain integer index arrays, with every parameter the
    very object validated by the previous call (``set_params`` makes new
    ones), no feature names and no ids to map: the checks that matter
    (shape, indices, targets, step bound) still run, before any change.
    """
    params = model.__dict__.get("_validated_params")
    return (params is not None and type(X) is np.ndarray and type(y) is np.ndarray
            and X.ndim == 2 and X.shape[1] == 2 and len(X) > 0
            and X.dtype.kind in "iu" and y.ndim == 1 and y.dtype.kind == "f"
            and not model.verbose
            and model.__dict__.get("_object_index") is None
            and "feature_names_in_" not in model.__dict__
            and all(now is then for now, then in zip(model._param_values(), params)))


def _fit_online(model, X, y):
    """Return the attributes of ``solver="online"``'s fit (not yet stored)."""
    start = model._start(X, y)
    # losses_ keeps each trial's loss; each epoch's order is drawn when it starts
    check_n_trials(model.n_epochs, len(start.y), bytes_per_trial=8,
                   record="its on-line loss in losses_")
    rng = check_random_state(model.random_state)
    orders = (rng.permutation(len(start.y)) if model.shuffle
              else np.arange(len(start.y)) for _ in range(model.n_epochs))
    prior = start.state.copy()
    losses = [model._run(start.state, start.pairs[order], start.y[order],
                         start.learning_rate, start.trace, epoch=epoch,
                         done=epoch * len(start.y))
              for epoch, order in enumerate(orders)]
    fitted = model._fitted(start, np.concatenate(losses))
    a, b = start.pairs.T
    z = start.y / start.trace  # trace-one units: no overflow in any units of y
    prior_loss = np.mean((prior.pair_sq_distances(a, b) - z) ** 2)
    final_loss = np.mean((start.state.pair_sq_distances(a, b) - z) ** 2)
    fitted.update(
        n_iter_=model.n_epochs, converged_=True, prior_rank_=None,
        prior_imputations_=None,
        loss_curve_=start.trace * np.sqrt([prior_loss, final_loss]),
        validation_scores_=np.zeros(0), validation_score_=np.nan,
        prior_score_=np.nan,
        _verdict=None,
        _diverged=(final_loss > prior_loss and final_loss > 0, _r2(prior_loss, z),
                   _r2(final_loss, z), start.learning_rate))
    return fitted


def _partial_fit_fast(model, X, y):
    """Run one pass over plain, clean examples.

    Anything unusual (a bad index or target, a self-pair, a target out
    of reach, a step near overflow) goes to the validated path, which
    raises or warns exactly as always.
    """
    learning_rate = (model.learning_rate_ if model.learning_rate == "auto"
                     else float(model.learning_rate))
    trace = model.trace_
    if len(y) != len(X) or X.min() < 0 or X.max() >= model.n_objects_:
        return model._partial_fit(X, y)
    y = y.astype(float, copy=False)  # float32 targets: no float32 arithmetic below
    low, high = float(y.min()), float(y.max())  # NaN fails every comparison below
    if not (low >= 0 and high <= 2.0 * trace
            and 8.0 * learning_rate * (1.0 + high / trace) <= MAX_STEP
            and not (X[:, 0] == X[:, 1]).any()):
        return model._partial_fit(X, y)
    pairs = X.astype(np.intp, copy=False)
    with unchanged_on_error(model):
        start = _Start(pairs, y, None, model.state_.copy(), trace, learning_rate)
        losses = model._run(start.state, pairs, y, learning_rate, trace,
                            epoch=None, done=model.n_updates_)
        model._commit(start, losses, first=False)
        return model  # inside the block: an interrupt up to here restores the model


def _run(model, state, pairs, y, learning_rate, trace, *, epoch, done):
    """Run the trials on ``state`` (a copy the call owns); return the losses.

    ``verbose=1``: a progress bar (stderr) for calls of at least
    ``_BAR_FROM`` trials; ``verbose=2``: a bar for every call, and a
    detail line every ``_PROGRESS_EVERY`` trials.
    """
    n = len(y)
    show = bool(model.verbose) and (model.verbose >= 2 or n >= _BAR_FROM)
    if show:
        note_compiling([trial_engine(model.method, state, n)])
    where = (f" epoch {epoch + 1}/{model.n_epochs}"
             if epoch is not None and model.n_epochs > 1 else "")
    clock = time.perf_counter()
    with progress_bar(total=n, desc=f"MEGKernelRegressor{where}", unit="trial",
                      enabled=show) as trials:

        def report(stop, predictions):
            """Advance the bar; at ``verbose=2``, the chunk's loss."""
            trials.update(len(predictions))
            if model.verbose >= 2:
                chunk_loss = ((predictions - y[stop - len(predictions):stop]) ** 2).sum()
                progress_detail(
                    f"[MEGKernelRegressor]{where} trial {done + stop}: loss of the "
                    f"last {len(predictions)} trials {chunk_loss:.6g}, "
                    f"{time.perf_counter() - clock:.1f} s")

        predictions = run_meg_trials(
            state, pairs, y, learning_rate=learning_rate, trace=trace,
            method=model.method, chunk=_PROGRESS_EVERY if show else None,
            callback=report if show else None)
    return (predictions - y) ** 2
