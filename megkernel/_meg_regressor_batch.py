"""The batch fit of :class:`~megkernel.MEGKernelRegressor`.

A part of :mod:`megkernel.meg_regressor` (import from there): the held-out
split, the units of the targets, the prior (the spectral one, in the
subspace from ``SUBSPACE_FROM`` objects on), the minimisation of the total
loss and the refit on every pair, as functions of the estimator (its
``_fit_batch`` calls :func:`_fit_batch`). The subspace's settings are read
from :mod:`megkernel._solvers.meg_batch` when a fit runs.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sklearn.utils import check_random_state

from ._meg_regressor_trials import _r2, _Start, _warn_unreachable
from ._numerics.limits import MAX_SCALE, MIN_SCALE
from ._numerics.validation import check_trace
from ._pair_estimator import initial_state
from ._progress import bar as progress_bar
from ._progress import detail as progress_detail
from ._solvers import meg_batch
from ._solvers.meg import auto_learning_rate, auto_trace
from ._solvers.meg_batch import PairLoss, SubspacePairLoss, minimize_pair_loss, spectral_prior
from ._warnings import warn_user

#: Fewest held-out pairs for early stopping and the verdict; with fewer,
#: ``fit`` trains on every pair and says so.
MIN_VALIDATION_PAIRS = 10


def _check_batch_units(y, unit, what):
    """Refuse targets whose squared errors leave double precision in the batch fit's units.

    ``unit`` is the targets' mean, then the trace.
    """
    if not (np.isfinite(unit) and MIN_SCALE <= unit <= MAX_SCALE):
        raise ValueError(
            f"{what[0].upper() + what[1:]} is {unit:.4g}, outside [{MIN_SCALE:g}, "
            f"{MAX_SCALE:g}] where squared distances and their squared errors stay in "
            "double precision: give the targets in other units.")
    largest = float(np.max(y, initial=0.0))
    if largest > MAX_SCALE * unit:
        raise ValueError(
            f"y reaches {largest:.4g}, more than {MAX_SCALE:g} times {what} "
            f"({unit:.4g}): its squared error leaves double precision. Check the units "
            "of the targets (and of the trace).")


def _split(model, n_pairs):
    """Training and held-out pair indices (held-out ``None``: no split)."""
    everything = np.arange(n_pairs)
    if not model.early_stopping:
        return everything, None
    n_held = int(round(model.validation_fraction * n_pairs))
    if n_held < MIN_VALIDATION_PAIRS or n_pairs - n_held < MIN_VALIDATION_PAIRS:
        fraction = model.validation_fraction
        if n_held < MIN_VALIDATION_PAIRS:  # too few held out
            short = (f"too few to hold out {MIN_VALIDATION_PAIRS} at validation_fraction="
                     f"{fraction} (it takes about "
                     f"{int(np.ceil(MIN_VALIDATION_PAIRS / fraction))})")
        else:  # too few left to train on
            short = (f"too few to keep {MIN_VALIDATION_PAIRS} for training at "
                     f"validation_fraction={fraction}, which holds out {n_held} (it "
                     f"takes about {int(np.ceil(MIN_VALIDATION_PAIRS / (1.0 - fraction)))}"
                     "; or a smaller validation_fraction)")
        warn_user(
            f"MEGKernelRegressor: {n_pairs} pairs are {short}; training on every pair "
            "without early stopping and with no verdict (validation_score_ and "
            "prior_score_ are NaN). Give more pairs, or early_stopping=False to silence "
            "this.", UserWarning)
        return everything, None
    order = check_random_state(model.random_state).permutation(n_pairs)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


def _fit_batch(model, X, y):
    """Return the attributes of ``solver="batch"``'s fit (not yet stored)."""
    pairs, y, index = model._validate_trials(X, y, reset=True)
    state = initial_state(model, pairs, index)
    _warn_unreachable(pairs, y, 1.0, beyond_trace=False)
    train, held = _split(model, len(y))
    a, b = pairs[train].T
    a_val, b_val = pairs[held].T if held is not None else (a[:0], b[:0])
    # work in units of the targets' mean (the result does not depend on them)
    moving = a != b
    with np.errstate(over="ignore"):  # a mean beyond the float range: refused below
        unit = float(np.mean(y[train][moving])) if moving.any() else 0.0
    unit = unit if unit > 0 else 1.0
    _check_batch_units(y, unit, "the mean target of the training pairs of distinct "
                       "objects")
    y_train = y[train] / unit
    y_val = y[held] / unit if held is not None else np.zeros(0)
    prior_rank = prior_imputations = None
    subspace = _subspace(model, state.n_objects)
    if _spectral_init(model):
        prior = spectral_prior(state.n_objects, a, b, y_train,
                               *((a_val, b_val, y_val) if held is not None else ()),
                               subspace=subspace)
        trace, prior_rank = prior.trace, prior.rank
        state = prior.exponent if subspace is not None else prior.state
        prior_imputations = prior.imputations
    else:
        trace = auto_trace(state, pairs[train], y_train)
    # the on-line fit's range of traces, [1e-100, 1e100], and targets in its reach
    if model.trace != "auto":
        trace = check_trace(model.trace) / unit
        _warn_unreachable(pairs, y, float(model.trace))
        _check_batch_units(y, float(model.trace), "the trace")
    else:
        check_trace(trace * unit)
    if subspace is not None:
        train_loss = SubspacePairLoss(prior.basis, a, b, y_train / trace)
        validation = (SubspacePairLoss(prior.basis, a_val, b_val, y_val / trace)
                      if held is not None else None)
    else:
        train_loss = PairLoss(state, a, b, y_train / trace)
        validation = (PairLoss(state, a_val, b_val, y_val / trace) if held is not None
                      else None)
    learning_rate = ("auto" if model.learning_rate == "auto"
                     else float(model.learning_rate))
    with _batch_progress(model) as callback:
        result = minimize_pair_loss(
            state, train_loss, validation=validation, learning_rate=learning_rate,
            max_iter=model.max_iter, tol=model.tol,
            n_iter_no_change=model.n_iter_no_change,
            early_stopping=validation is not None, callback=callback,
            grow=meg_batch.SUBSPACE_GROWTH)
    if held is not None and result.best_iter > 0:
        # the held-out pairs chose the rank and the number of iterations;
        # the kernel returned learns from every pair (as LassoCV refits)
        state, trace, loss = _refit_prior(model, pairs, y / unit, index, prior_rank,
                                      prior_imputations, trace, result.state.n_objects,
                                      subspace)
        refit = minimize_pair_loss(
            state, loss,
            grow=meg_batch.SUBSPACE_GROWTH, grow_at=result.growth,
            learning_rate=learning_rate, max_iter=result.best_iter, tol=0.0,
            n_iter_no_change=result.best_iter + 1)
        result = result._replace(state=refit.state, loss_curve=refit.loss_curve,
                                 n_iter=result.n_iter + refit.n_iter,
                                 subspace=refit.subspace)
    trace_ = trace * unit
    start = _Start(pairs, y, index, result.state, trace_,
                   auto_learning_rate(result.state, pairs[:, 0], pairs[:, 1]))
    fitted = model._fitted(start, np.zeros(0))
    z_val = validation.z if validation is not None else np.zeros(0)
    scores = np.array([_r2(loss, z_val) for loss in result.validation_curve]) \
        if validation is not None else np.zeros(0)
    fitted.update(
        n_iter_=result.n_iter, converged_=bool(result.converged),
        loss_curve_=trace_ * np.sqrt(result.loss_curve),
        validation_scores_=scores,
        validation_score_=scores[result.best_iter] if len(scores) else np.nan,
        prior_score_=scores[0] if len(scores) else np.nan,
        prior_rank_=prior_rank, prior_imputations_=prior_imputations,
        _verdict=validation is not None, _diverged=None,
        _subspace=result.subspace)  # DefiniteBoost's prior continues in it
    return fitted


def _refit_prior(model, pairs, y, index, prior_rank, prior_imputations, trace,
                 n_objects, subspace):
    """Return the prior, trace and loss of the refit on every pair.

    ``y`` is in the fit's unit.
    """
    a, b = pairs.T
    if prior_rank is None:
        state = initial_state(model, pairs, index)
        if model.trace == "auto":
            trace = auto_trace(state, pairs, y)
        return state, trace, PairLoss(state, a, b, y / trace)
    prior = spectral_prior(n_objects, a, b, y, a, b, y, ranks=(prior_rank,),
                           n_imputations=prior_imputations, fixed=True,
                           subspace=subspace)
    trace = prior.trace if model.trace == "auto" else trace
    if subspace is not None:
        return prior.exponent, trace, SubspacePairLoss(prior.basis, a, b, y / trace)
    return prior.state, trace, PairLoss(prior.state, a, b, y / trace)


def _spectral_init(model):
    """Whether the prior is the spectral one (``init="auto"``)."""
    return (isinstance(model.init, str) and model.init == "auto"
            and model.init_factor is None)


def _subspace(model, n_objects):
    """Dimension of the subspace the batch fit learns in (``None``: every direction)."""
    if not _spectral_init(model) or n_objects < meg_batch.SUBSPACE_FROM:
        return None
    return meg_batch.subspace_dimension(n_objects)


@contextmanager

def _batch_progress(model):
    """Yield the batch iterations' ``callback``: a progress bar when ``verbose``."""
    show = bool(model.verbose)
    with progress_bar(total=model.max_iter, desc="MEGKernelRegressor (batch)",
                      unit="iter", enabled=show) as bar:
        def callback(iteration, train_loss, validation_loss, step):
            bar.update(1)
            if model.verbose >= 2:
                progress_detail(
                    f"[MEGKernelRegressor] iteration {iteration}: training loss "
                    f"{train_loss:.6g}, held-out loss {validation_loss:.6g}, "
                    f"step {step:.3g} (trace-one units)")
        yield callback if show else None
