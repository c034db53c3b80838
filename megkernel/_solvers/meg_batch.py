r"""Batch MEG: the kernel of least total square loss, by MEG updates on the whole loss.

The on-line algorithm (eq. 4) updates the exponent by the gradient of one
trial's loss. Applied to the *total* loss of all the pairs,

.. math:: L(W) = \frac{1}{n} \sum_t (v_t^T W v_t - z_t)^2, \qquad
          z_t = y_t / \tau,

the same update ``log W <- log W - eta grad L(W)`` followed by the
normalisation ``W = exp(A) / tr exp(A)`` (eq. 7) is mirror descent on the
density matrices (trace one, positive definite) with the von Neumann entropy
as mirror map. Its step needs no tuning: each trial step is accepted only if
it meets the relative-smoothness condition

.. math:: L(W_+) \le L(W) + \langle \nabla L(W), W_+ - W \rangle
          + \frac{1}{\eta} \Delta(W_+, W),

which guarantees a decrease of ``L`` at every accepted step (``Delta`` is the
von Neumann divergence of eq. 3; Bauschke, Bolte & Teboulle 2017, Lu, Freund
& Nesterov 2018). With ``A_+ = A - eta G`` the right-hand side is
``L(W) - <G, W> - (log Z_+ - log Z) / eta``: no extra matrix function is
needed. The first trial step of an iteration is the short Barzilai-Borwein
step of the exponent (``<s, g> / <g, g>``, ``s`` the last change of ``A``,
``g`` that of the gradient) rounded down to a power of two, kept within a
factor ``_BB_RANGE`` of the last accepted step. A rejected trial gives the
next one: the largest power of two at which its own divergences would have
passed the test, and at most half its step (:func:`_backtrack`).
``L`` is convex in ``W`` and the feasible set convex and compact, so the
iterates converge to the minimum loss.

The short step is accepted as it is at most iterations (one
eigendecomposition each, the cost of an iteration); the long one,
``<s, s> / <s, g>``, was halved about twice per iteration. The rounding to
a power of two keeps round-off in the data round-off in the kernel: the
step is a ratio of differences of iterates, and unrounded it carries a
change in the last bits of the targets into the next step, and on into the
iterations at which the tolerance is met (targets one ulp apart gave
kernels 1 % apart, their runs stopping in different places of a flat
valley). Rounded, the steps are locally constant functions of the data
(they change only where the ratio is within round-off of a power of two),
so each iterate is a smooth function of the targets and the stopping
rule's decisions are the same. A non-monotone line search (Grippo,
Lampariello & Lucidi 1986), which accepts the Barzilai-Borwein step nearly
always, saved a few more decompositions but its iterates' excursions
moved the held-out minimum to early, poorly converged iterates on noisy
tables (held-out 1-NN 0.48 against 0.65-0.71 on an 800-object family
table).

:func:`~megkernel._solvers.spectral_prior.spectral_prior` gives the fit a
data-driven start (``init="auto"``): classical scaling of the observed
distances, the missing ones filled by their mean, with its rank chosen on
held-out pairs. The loss and its subspace form are in
:mod:`megkernel._solvers.pair_loss`.

Everything in :func:`minimize_pair_loss` is in trace-one units
(``z = y / tau``); the caller converts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._numerics.limits import MAX_SCALE, MIN_SCALE
from .._numerics.state import ExponentState, SubspaceState
from .._numerics.threads import blas_threads
from .._numerics.validation import check_trace, in_scale_range
from .._warnings import warn_user
from .holdout import canonical_order, holdout_pairs, r2_score
from .meg import auto_learning_rate, auto_trace, warn_unreachable
from .pair_loss import PairLoss, SubspacePairLoss
from .slow_runs import PaceEstimate, duration
from .spectral_prior import (
    ISOTROPIC_FLOOR,
    SPECTRAL_IMPUTATIONS,
    SPECTRAL_RANKS,
    SpectralPrior,
    spectral_prior,
    within_noise,
)

__all__ = ["ISOTROPIC_FLOOR", "OVERFIT_Z", "SPECTRAL_IMPUTATIONS", "SPECTRAL_RANKS",
           "SUBSPACE_FROM", "SUBSPACE_GROWTH", "SUBSPACE_MAX", "SUBSPACE_START", "BatchResult",
           "MEGBatchFit", "PairLoss", "SlowFitNote", "SpectralPrior", "SubspacePairLoss",
           "TrainingRun",
           "check_batch_units",
           "fit_batch", "minimize_pair_loss", "spectral_prior", "subspace_dimension"]

#: Largest step tried: beyond it ``eta * ||G||`` leaves double precision.
_MAX_STEP_NORM = 1e4

#: Largest step of all (the cap above is infinite for a gradient below
#: ``_MAX_STEP_NORM`` / this; ``inf * 0`` in ``eta G`` would be NaN).
_LARGEST_STEP = float(np.finfo(float).max)

#: A Barzilai-Borwein trial step stays within this factor of the last
#: accepted step (both ways).
_BB_RANGE = 10.0

#: Rejected trial steps before a call gives up (the step is then ~1e-9 of
#: the first one: numerically no descent direction is left).
_MAX_BACKTRACKS = 30


#: From this many objects the batch fit from the spectral prior learns in a
#: subspace plus its isotropic complement (:class:`SubspacePairLoss`). A
#: dense fit makes a ``d x d`` eigendecomposition (``O(d^3)``) per trial step,
#: which at that size makes the hundreds of steps of a fit take minutes; the
#: subspace's steps cost ``O(n k^2)``. Below it the dense fit is kept: its
#: kernels are the better neighbour kernels on hard sets, as the dense path
#: also makes local, pairwise changes a few global directions cannot
#: (figures: the benchmarks page).
SUBSPACE_FROM = 1500


def _power_of_two_below(x):
    """Return the largest power of two not above ``x`` (``x`` positive; ``inf`` stays)."""
    if not np.isfinite(x):
        return x
    mantissa, exponent = math.frexp(x)  # x = mantissa 2^exponent, mantissa in [0.5, 1)
    return math.ldexp(1.0, exponent - 1)


def _backtrack(step, loss, inner, residuals, trial_predictions, trial_loss, log_z_change,
               n_pairs):
    """Return the next trial step after ``step`` was rejected.

    The test accepts ``eta`` when ``D_L <= D_h / eta``, with ``D_L = L(W_+) -
    L(W) - <G, W_+ - W>`` the loss's divergence and ``D_h = -eta <G, W_+> -
    (log Z_+ - log Z)`` the von Neumann divergence ``Delta(W_+, W)`` (both
    from the rejected trial's predictions, no new matrix function). Their
    ratio ``D_h / D_L`` is the largest step at which the rejected trial
    itself would have passed; both are quadratic in the step near zero, so
    the ratio barely changes as the step shrinks and a step below it passes
    at once, where halving took up to six rejected trials (one
    eigendecomposition each) after an overlong Barzilai-Borwein step. The
    step returned is a power of two (round-off in the data stays round-off
    in the step) and at most half the rejected one (the search ends).
    """
    # <G, W_+> = (2/n) sum_t (v_t^T W v_t - z_t) v_t^T W_+ v_t, as <G, W> is ``inner``
    trial_inner = float(2.0 * residuals @ trial_predictions) / n_pairs
    loss_divergence = trial_loss - loss - trial_inner + inner
    entropy_divergence = -step * trial_inner - log_z_change
    half = 0.5 * step
    if not (loss_divergence > 0 and entropy_divergence > 0):  # round-off: no estimate
        return half
    return min(half, _power_of_two_below(entropy_divergence / loss_divergence))


def subspace_dimension(n_objects):
    """Return the starting dimension ``k`` of the batch fit's subspace."""
    return int(min(n_objects - 1, SUBSPACE_START))


#: Starting dimension of the subspace (or the prior's rank, if larger).
SUBSPACE_START = 64

#: Directions added each time the subspace grows.
SUBSPACE_GROWTH = 16

#: Largest dimension of the subspace: a step costs ``O(n k + d k^2)`` and an
#: ``eigh`` of the ``(k + 1)`` block.
SUBSPACE_MAX = 256


class BatchResult(NamedTuple):
    """What :func:`minimize_pair_loss` returns.

    Attributes
    ----------
    state : ExponentState or None
        The exponent of the kernel chosen (the last iterate, or with early
        stopping the validation pairs' best if the last one overfits);
        ``None`` for a subspace run asked for no dense state.
    loss_curve : ndarray
        Training loss (trace-one units) of the prior and of each accepted
        iterate.
    validation_curve : ndarray
        Validation loss of the same iterates (empty without validation pairs).
    step_sizes : ndarray
        The step ``eta`` of each accepted iterate.
    n_iter : int
        Accepted iterations.
    best_iter : int
        The iterate returned (0: the prior).
    converged : bool
        Whether the stopping rule (not ``max_iter``) ended the run.
    stalled : bool
        Whether the line search found no descent step (the minimum is reached
        to round-off).
    n_eigh : int
        Eigendecompositions made (one per trial step).
    growth : list of int
        Iterations after which the subspace grew (up to the iterate returned).
    subspace : SubspaceState or None
        The same kernel in its subspace form (a subspace fit), or ``None``.
    validation_predictions : ndarray or None
        The returned kernel's predictions of the validation pairs (trace-one
        units; ``None`` without validation pairs).
    """

    state: ExponentState
    loss_curve: np.ndarray
    validation_curve: np.ndarray
    step_sizes: np.ndarray
    n_iter: int
    best_iter: int
    converged: bool
    stalled: bool
    n_eigh: int
    growth: list = []
    subspace: object = None
    validation_predictions: np.ndarray | None = None



def minimize_pair_loss(state, train, *, validation=None, learning_rate="auto", max_iter=200,
                       tol=1e-4, n_iter_no_change=5, early_stopping=False, callback=None,
                       grow=0, grow_at=None, loss_scale=None, dense=True, note=None):
    """Minimise the mean square loss over density matrices by batch MEG updates.

    Parameters
    ----------
    state : ExponentState or ndarray
        The prior ``W_1`` (not changed): its state, or for a
        :class:`SubspacePairLoss` its ``(k + 1) x (k + 1)`` exponent.
    train : PairLoss or SubspacePairLoss
        The training pairs (and the kernels searched: every ``d x d``
        density matrix, or those of a subspace plus its complement).
    validation : PairLoss or SubspacePairLoss, optional
        Held-out pairs (of the same kind as ``train``): their loss is recorded
        for every iterate, and with ``early_stopping`` chooses the iterate
        returned and stops the run.
    learning_rate : float or "auto", default="auto"
        First step ``eta`` (trace-one units) of the line search. ``"auto"``:
        ``1 / ||G_1||`` (``G_1`` the gradient at the prior, its largest
        absolute row sum bounding the spectral norm), a unit change of the
        exponent. Later steps are found by the Barzilai-Borwein rule and
        backtracking either way.
    max_iter : int, default=200
        Largest number of accepted iterations.
    tol : float, default=1e-4
        The training loss improves while it falls by more than ``tol``
        times the prior's per iteration (so the rule does not depend on the
        units of the targets).
    n_iter_no_change : int, default=5
        Converged when the last ``n_iter_no_change`` iterations together
        lowered the training loss by less than ``n_iter_no_change * tol``
        times the prior's, their mean gain below ``tol`` (the subspace may
        grow first); with ``early_stopping``, also stop after this many
        consecutive iterations that overfit (below).
    early_stopping : bool, default=False
        Watch the validation loss: an iterate overfits when the held-out
        minimum so far beats it by more than ``OVERFIT_Z`` standard errors of
        the pairs' paired differences of squared error. The run returns its
        last iterate unless that one overfits; then it returns the held-out
        minimum (possibly the prior).
    callback : callable, optional
        Called as ``callback(iteration, train_loss, validation_loss, step)``
        after every accepted iteration.
    grow : int, default=0
        :class:`SubspacePairLoss` only: when the training loss stops
        improving, add up to ``grow`` directions to the subspace
        (:meth:`SubspacePairLoss.new_directions`) and go on, as long as the
        previous growth improved the validation loss (the training loss
        without ``early_stopping``): an active-set method, it ends at the
        minimum over a subspace where the full gradient asks for nothing
        more, or at ``d - 1`` dimensions.
    grow_at : collection of int, optional
        Grow after exactly these iterations instead (to repeat a run's
        growth, e.g. in a refit on more pairs).
    loss_scale : float, optional
        The loss ``tol`` is relative to (default: the start's). A run
        continued from an earlier fit's kernel gives the loss of the prior
        it started from: relative to the warm start's own, small loss the
        tolerance would ask for far more than a cold run does.
    dense : bool, default=True
        Return the kernel's dense state. ``False``: a
        :class:`SubspacePairLoss` run returns ``state=None`` and its kernel
        only in ``subspace`` (its ``dense()`` makes the state when needed),
        sparing a ``d x d`` eigendecomposition for a run that may be dropped.
    note : callable, optional
        Called as ``note(iteration, gain, goal)`` after every accepted
        iteration: the training loss's mean gain over the last
        ``n_iter_no_change`` iterations (fewer at the start or after a
        growth) and the gain below which the run converges (``tol`` times
        the scale), for an estimate of its end (:class:`SlowFitNote`).

    Returns
    -------
    BatchResult
    """
    # small eigh and products are faster on one thread (threads' start-up and
    # contention outweigh their share of so little work): the subspace's work
    # is eigh of its (k + 1) block and d x k x k products
    with blas_threads(train.size):
        return _minimize_pair_loss(state, train, validation, learning_rate, max_iter, tol,
                                   n_iter_no_change, early_stopping, callback, grow,
                                   grow_at, loss_scale, dense, note)


def _grow(train, validation, exponent, predictions, count):
    """Enlarge the subspace by up to ``count`` directions.

    The kernel is unchanged: each new direction carries the complement's
    exponent ``alpha``. The subspace stays within ``SUBSPACE_MAX`` dimensions.
    """
    count = min(count, SUBSPACE_MAX - (train.size - 1))
    directions = train.new_directions(predictions, count)
    q = directions.shape[1]
    if q == 0:
        return None
    k = train.size - 1
    grown = np.zeros((k + q + 1, k + q + 1))
    grown[:k, :k] = exponent[:k, :k]
    grown[np.arange(k, k + q + 1), np.arange(k, k + q + 1)] = exponent[k, k]
    return (train.grown(directions),
            validation.grown(directions) if validation is not None else None, grown)


#: Early stopping returns an iterate before the last (and stops the run) only
#: if its validation loss is lower by more than this many standard errors of
#: the held-out pairs' paired differences: the last iterate is the minimiser
#: the run converges to, and a held-out minimum within noise is no evidence
#: that it overfits: on sparse, noisy tables an early iterate can lead by a
#: margin within noise while its kernel is a far worse neighbour kernel than
#: the converged one (figures: the benchmarks page).
OVERFIT_Z = 2.0


def _overfits(validation, best, last):
    """Whether the validation pairs prefer the ``best`` iterate's predictions to the ``last``."""
    if best is None or last is None or best is last or len(validation) < 2:
        return False
    excess = (last - validation.z) ** 2 - (best - validation.z) ** 2
    spread = float(np.std(excess, ddof=1))
    return float(np.mean(excess)) > OVERFIT_Z * spread / np.sqrt(len(excess))


def _minimize_pair_loss(state, train, validation, learning_rate, max_iter, tol,
                        n_iter_no_change, early_stopping, callback, grow, grow_at,
                        loss_scale=None, dense=True, note=None):
    if early_stopping and (validation is None or len(validation) == 0):
        raise ValueError("early_stopping needs validation pairs.")
    if not isinstance(train, SubspacePairLoss):
        grow, grow_at = 0, None  # every direction is there already
    if isinstance(train, SubspacePairLoss):
        exponent = np.asarray(state, dtype=float).copy()  # the (k + 1) x (k + 1) layout
        lam, vecs = train.decompose(exponent)
    else:
        exponent = state.exponent.copy()
        if state.eigenvalues is not None and state.updates_since_refresh == 0:
            # the state's own decomposition of this exponent (a spectral prior's,
            # or the training run's kernel the refit continues from)
            lam, vecs = state.eigenvalues, state.eigenvectors
        else:
            lam, vecs = train.decompose(exponent)
    kernel = train.kernel(lam, vecs)
    predictions = train.predictions(lam, vecs, kernel)
    loss = train.loss(predictions)
    log_z = train.log_partition(lam)
    scored = validation is not None and len(validation) > 0

    def validation_loss(lam, vecs, kernel):
        # the held-out pairs read the kernel the training pairs' predictions made
        nonlocal val_predictions
        if not scored:
            return np.nan
        val_predictions = validation.predictions(lam, vecs, kernel)
        return validation.loss(val_predictions)

    val_predictions = None
    losses, val_losses, steps = [loss], [validation_loss(lam, vecs, kernel)], []
    best = (train, exponent, lam, vecs)  # made a state once, at the end
    best_val_predictions = val_predictions
    best_iter = 0
    growth = []  # iterations after which the subspace grew
    gained_since_growth = True
    # the run converges on the training loss (the minimiser is the fit); the
    # validation loss, when monitored, decides whether a growth of the
    # subspace paid off and, on evidence of overfitting, stops the run early
    # converged on the mean gain of the last n_iter_no_change iterations: the
    # Barzilai-Borwein steps alternate long and short, and so do their gains
    # (a long step's gain above tol every few iterations among gains below
    # it); "n iterations in a row each below tol" waited for a run of short
    # steps, which made the stopping point a matter of the path
    window_start = 0  # the window's first loss (the start, or the last growth)
    scale = abs(losses[0]) if loss_scale is None else float(loss_scale)
    paying = val_losses if early_stopping else losses
    best_paying, paying_scale = paying[0], abs(paying[0])
    overfit_run = 0  # > 0: the latest iterate overfits
    converged = stalled = False
    step = None
    previous = None  # (exponent change, gradient) of the last accepted step
    n_eigh = 0
    iteration = 0
    while iteration < max_iter:
        if grow_at is not None and iteration in grow_at and iteration not in growth:
            grown = _grow(train, validation, exponent, predictions, grow)
            if grown is not None:
                train, validation, exponent = grown
                lam, vecs = train.decompose(exponent)
                previous = None
            growth.append(iteration)
        G = train.gradient(predictions)
        norm = train.gradient_scale(G)
        if not norm > 0:  # every target met: the prior is a minimiser
            converged = True
            break
        if step is None:
            step = 1.0 / norm if learning_rate == "auto" else float(learning_rate)
        elif previous is not None:
            change, last_gradient = previous
            difference = G - last_gradient
            curvature = train.inner(change, difference)
            # (<g, g> > 0 whenever <s, g> > 0, unless it underflows: a subnormal gradient)
            squared = train.inner(difference, difference)
            if curvature > 0 and squared > 0:
                bb = _power_of_two_below(curvature / squared)
                step = min(max(bb, step / _BB_RANGE), step * _BB_RANGE)
            else:
                step *= 2.0
        # below ~5.6e-305 (a subnormal gradient) the cap, and 1 / norm, leave the
        # float range: the largest double caps the step then (eta ||G|| < 1e4 still)
        step = min(step, _MAX_STEP_NORM / norm, _LARGEST_STEP)
        # <G, W> = sum_t c_t v_t^T W v_t: G is a sum of the pairs' c_t v_t v_t^T
        inner = float(2.0 * (predictions - train.z) @ predictions) / len(train)
        for _ in range(_MAX_BACKTRACKS):
            trial = exponent - step * G
            trial = 0.5 * (trial + trial.T)
            trial_lam, trial_vecs = train.decompose(trial)
            n_eigh += 1
            trial_kernel = train.kernel(trial_lam, trial_vecs)
            trial_predictions = train.predictions(trial_lam, trial_vecs, trial_kernel)
            trial_loss = train.loss(trial_predictions)
            trial_log_z = train.log_partition(trial_lam)
            bound = loss - inner - (trial_log_z - log_z) / step
            if trial_loss <= bound + 1e-12 * abs(loss) and trial_loss <= loss:
                break
            step = _backtrack(step, loss, inner, predictions - train.z, trial_predictions,
                              trial_loss, trial_log_z - log_z, len(train))
        else:
            stalled = converged = True
            break
        previous = (trial - exponent, G)
        exponent = trial
        lam, vecs, log_z, kernel = trial_lam, trial_vecs, trial_log_z, trial_kernel
        predictions, loss = trial_predictions, trial_loss
        iteration += 1
        losses.append(loss)
        val_losses.append(validation_loss(lam, vecs, kernel))
        steps.append(step)
        if callback is not None:
            callback(iteration, loss, val_losses[-1], step)
        window = len(losses) - 1 - window_start  # iterations since the start or growth
        stopped = (window >= n_iter_no_change
                   and losses[-1 - n_iter_no_change] - loss
                   < n_iter_no_change * tol * scale)
        if note is not None and window > 0:
            span = min(window, n_iter_no_change)
            note(iteration, (losses[-1 - span] - loss) / span, tol * scale)
        if paying[-1] < best_paying - tol * paying_scale:
            gained_since_growth = True
        if early_stopping and val_losses[-1] < best_paying:  # the held-out minimum
            best = (train, exponent, lam, vecs)
            best_iter = iteration
            best_val_predictions = val_predictions
        best_paying = min(best_paying, paying[-1])
        if early_stopping:
            overfit_run = (overfit_run + 1 if _overfits(validation, best_val_predictions,
                                                        val_predictions) else 0)
            if overfit_run >= n_iter_no_change:
                converged = True
                break
        if stopped:
            # the subspace's minimum (to tol): grow it where the full gradient
            # points, as long as the last growth paid off
            grown = (_grow(train, validation, exponent, predictions, grow)
                     if grow and grow_at is None and gained_since_growth else None)
            if grown is None:
                converged = True
                break
            train, validation, exponent = grown
            lam, vecs = train.decompose(exponent)
            previous = None
            growth.append(iteration)
            window_start, gained_since_growth = len(losses) - 1, False
    if not overfit_run:  # the last iterate, unless it overfits
        best = (train, exponent, lam, vecs)
        best_iter = iteration
        best_val_predictions = val_predictions
    best_train = best[0]
    subspace = (SubspaceState(best[1], basis=best_train.basis)
                if isinstance(best_train, SubspacePairLoss) else None)
    state = best_train.state(*best[1:]) if dense or subspace is None else None
    return BatchResult(state, np.asarray(losses), np.asarray(val_losses),
                       np.asarray(steps), iteration, best_iter, converged, stalled, n_eigh,
                       [i for i in growth if i < best_iter] if early_stopping else growth,
                       subspace, best_val_predictions)


# -- the whole batch fit: split, units, prior, minimisation, refit ----------------

class TrainingRun(NamedTuple):
    """The kernel of a batch fit's run on its training pairs (before the refit).

    Attributes
    ----------
    state : ExponentState
        Its exponent (trace one).
    trace : float
        Its trace, in the targets' units.
    subspace : SubspaceState or None
        The same kernel in its subspace form (a subspace fit), else ``None``.
    """

    state: ExponentState
    trace: float
    subspace: object = None


class MEGBatchFit(NamedTuple):
    """What :func:`fit_batch` returns.

    Attributes
    ----------
    state : ExponentState
        The learned kernel's exponent (trace one).
    trace : float
        The kernel's trace, in the targets' units.
    learning_rate : float
        Lemma 3.2's on-line rate for continuing from ``state`` on these pairs.
    n_iter : int
        Iterations of the run on the training pairs plus those of the refit.
    converged : bool
        Whether the stopping rule, not ``max_iter``, ended the run.
    loss_curve : ndarray
        Root mean square training error (targets' units) of the prior and of
        each iterate of the returned kernel's run.
    validation_scores : ndarray
        Held-out ``R^2`` of the prior and of each iterate (empty without
        held-out pairs).
    validation_score, prior_score : float
        Held-out ``R^2`` of the chosen iterate and of the prior (NaN without
        held-out pairs).
    prior_rank, prior_imputations : int or None
        The spectral prior's rank and imputations (``None`` for a given prior).
    held_out : bool
        Whether pairs were held out (early stopping and the verdict).
    split_reason : str
        Why nothing was held out although asked (empty otherwise).
    subspace : SubspaceState or None
        The kernel in its subspace form (a subspace fit), else ``None``.
    held_pairs : ndarray of int or None
        Sorted indices into the given pairs of those held out (``None``
        when nothing was).
    training : TrainingRun or None
        The kernel of the run on the training pairs alone (the held-out
        pairs chose only its stopping iteration and the spectral prior's
        rank); ``None`` when nothing was held out.
    """

    state: ExponentState
    trace: float
    learning_rate: float
    n_iter: int
    converged: bool
    loss_curve: np.ndarray
    validation_scores: np.ndarray
    validation_score: float
    prior_score: float
    prior_rank: int | None
    prior_imputations: int | None
    held_out: bool
    split_reason: str
    subspace: object
    held_pairs: np.ndarray | None = None
    training: TrainingRun | None = None


class SlowFitNote:
    """Warn once when a batch fit will take long: an estimate from its first iterations.

    Made when the fit starts (the split, the units and the spectral prior
    before the first iteration count as its setup, paid once) and called by
    the run on the training pairs (``note`` of :func:`minimize_pair_loss`):
    once that run has taken :data:`~.slow_runs.SLOW_RUN_AFTER` seconds, if
    at its pace it ends after more than :data:`~.slow_runs.SLOW_RUN_SECONDS`
    (:class:`~.slow_runs.PaceEstimate`: the sooner of ``max_iter`` and the
    tolerance, progress towards it being the share of the way the
    iterations' mean gain has come from the first one down to the gain at
    which the run converges, on a log scale), it warns with the estimate and
    the ways to shorten the fit, even without ``verbose``. The refit on
    every pair that follows the run is named, not estimated.

    Parameters
    ----------
    who : str
        What the message says is fitting (the estimator, or what it fits).
    n_objects : int
        The kernel's size, for the message.
    max_iter : int
        The run's largest number of iterations.
    n_iter_no_change : int, default=5
        The stopping rule's window: its mean gain is the measure of
        progress, so no estimate is made before this many iterations.
    shorten : str, default="a larger tol or a smaller max_iter."
        What the message says shortens the fit (the parameters of the
        estimator ``who`` names that reach it).

    Notes
    -----
    A batch run's gain falls fast over its first iterations, then slower,
    so an early estimate falls short (measured in the benchmarks' scale
    page): a run of minutes says so within its first iterations, one just
    above the threshold later or not at all.
    """

    def __init__(self, who, n_objects, max_iter, n_iter_no_change=5,
                 shorten="a larger tol or a smaller max_iter."):
        self.who, self.n_objects, self.max_iter = who, int(n_objects), int(max_iter)
        self.shorten = shorten
        self.pace = PaceEstimate(max_iter, min_done=n_iter_no_change)

    def __call__(self, iteration, gain, goal):
        slow = self.pace(iteration, gain, goal)
        if slow is None:
            return
        if slow.share > 0 and slow.to_tol <= slow.to_max_iter:
            end = (f"its run on the training pairs reaches the tolerance in about "
                   f"{duration(slow.to_tol)} (the loss's gain per iteration has come "
                   f"{100 * slow.share:.2g} % of the way down to tol, log scale)")
        elif slow.share > 0:
            end = (f"its run on the training pairs stops at max_iter={self.max_iter} in "
                   f"about {duration(slow.to_max_iter)}, short of the tolerance (the "
                   f"loss's gain per iteration has come {100 * slow.share:.2g} % of the "
                   "way down to tol, log scale)")
        else:
            end = (f"the {self.max_iter} iterations of max_iter take about "
                   f"{duration(slow.to_max_iter)} if the run does not converge first")
        warn_user(
            f"{self.who}: {slow.done} iterations of the batch fit on {self.n_objects} objects "
            f"took {slow.elapsed:.1f} s ({slow.pace:.2g} s each); at this pace {end}, and a "
            f"refit on every pair follows. To shorten it: {self.shorten}", UserWarning)


def _both(note, progress):
    """One ``note(iteration, gain, goal)`` that feeds the slow-fit note and the progress."""
    def both(iteration, gain, goal):
        if note is not None:
            note(iteration, gain, goal)
        progress(iteration, gain, goal)
    return both


def check_batch_units(y, unit, what):
    """Refuse targets whose squared errors leave double precision in the fit's units.

    Parameters
    ----------
    y : ndarray
        The targets.
    unit : float
        The unit of the fit: the targets' mean, then the trace.
    what : str
        What ``unit`` is, for the message.
    """
    if not in_scale_range(unit):
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


def fit_batch(pairs, y, *, prior, spectral=False, trace="auto", learning_rate="auto",
              max_iter=1000, tol=1e-4, n_iter_no_change=5, validation_fraction=0.1,
              random_state=None, callback=None, ranks=SPECTRAL_RANKS,
              who="MEGKernelRegressor", shorten=None, progress=None):
    """Fit a kernel to squared distances of pairs by batch MEG, end to end.

    Holds out ``validation_fraction`` of the pairs (:func:`holdout_pairs`),
    works in units of the training targets' mean, starts from ``prior`` or
    from the :func:`spectral_prior` of the training distances (in a subspace
    from :data:`SUBSPACE_FROM` objects on; the prior's rank is chosen by
    the held-out loss of the kernel fitted from it among the ranks the
    prior's own held-out score cannot tell apart), minimises the total square
    loss (:func:`minimize_pair_loss`, early stopped on the held-out pairs),
    and refits on every pair (as ``LassoCV`` refits its chosen ``alpha``): to
    convergence when the held-out pairs saw no overfitting, else the number
    of iterations they chose.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Validated object indices.
    y : ndarray of shape (n,)
        Validated squared distances, in any units.
    prior : ExponentState
        ``W_1`` (not changed); with ``spectral``, the identity over the
        objects (only its size is used).
    spectral : bool, default=False
        Start from the spectral prior of the distances (``init="auto"``).
    trace : float or "auto", default="auto"
        The kernel's trace in the targets' units; ``"auto"``: the spectral
        prior's fitted trace, or :func:`auto_trace` of a given prior.
    learning_rate : float or "auto", default="auto"
        First trial step of the line search.
    max_iter : int, default=1000
        Largest number of iterations.
    tol : float, default=1e-4
        Relative decrease of the training loss that counts as improvement.
    n_iter_no_change : int, default=5
        Iterations without improvement (or overfitting) before stopping.
    validation_fraction : float or None, default=0.1
        Share of the pairs held out; ``None``: none.
    random_state : int, RandomState instance or None, default=None
        The split's randomness.
    callback : callable, optional
        ``callback(iteration, train_loss, validation_loss, step)`` after each
        iteration of the run on the training pairs.
    ranks : sequence of int, default=SPECTRAL_RANKS
        Ranks of the spectral prior scanned (increasing). With held-out
        pairs, the ranks whose prior scores within noise of the best are
        raced: each is fitted on the training pairs and the one whose fitted
        kernel predicts the held-out pairs best (beyond their noise) is kept.
    who : str or None, default="MEGKernelRegressor"
        What a fit that will take long names in its note
        (:class:`SlowFitNote`); ``None``: no note.
    shorten : str or None, default=None
        What that note says shortens the fit; ``None``: ``tol`` and
        ``max_iter`` (:class:`SlowFitNote`'s default).
    progress : callable, optional
        ``progress(iteration, gain, goal)`` after each accepted iteration of
        the run on the training pairs, then of a refit on every pair that
        runs to convergence (its iterations counted afresh): the mean gain
        per iteration of the stopping rule's window and the gain below which
        the run stops (a bar towards the tolerance, not towards
        ``max_iter``).

    Returns
    -------
    fit : MEGBatchFit
        The kernel and the fit's record.
    """
    slow = (None if who is None
            else SlowFitNote(who, prior.n_objects, max_iter, n_iter_no_change,
                             **({} if shorten is None else {"shorten": shorten})))
    note = slow if progress is None else _both(slow, progress)
    # the same pairs in any row order (or orientation) give the same fit
    order = canonical_order(pairs, y)
    pairs = np.sort(pairs, axis=1)[order]
    y = y[order]
    if validation_fraction is None:
        train, held, split_reason = np.arange(len(y)), None, ""
    else:
        train, held, split_reason = holdout_pairs(len(y), validation_fraction, random_state)
    a, b = pairs[train].T
    a_val, b_val = pairs[held].T if held is not None else (a[:0], b[:0])
    # work in units of the targets' mean (the result does not depend on them)
    moving = a != b
    with np.errstate(over="ignore"):  # a mean beyond the float range: refused below
        unit = float(np.mean(y[train][moving])) if moving.any() else 0.0
    unit = unit if unit > 0 else 1.0
    check_batch_units(y, unit, "the mean target of the training pairs of distinct objects")
    y_train = y[train] / unit
    y_val = y[held] / unit if held is not None else np.zeros(0)
    n_objects = prior.n_objects
    prior_rank = prior_imputations = None
    subspace = (subspace_dimension(n_objects)
                if spectral and n_objects >= SUBSPACE_FROM else None)
    state = prior
    if spectral:
        spectral_fit = spectral_prior(n_objects, a, b, y_train,
                                      *((a_val, b_val, y_val) if held is not None else ()),
                                      ranks=ranks, subspace=subspace)
        fitted_trace, prior_rank = spectral_fit.trace, spectral_fit.rank
        state = spectral_fit.exponent if subspace is not None else spectral_fit.state
        prior_imputations = spectral_fit.imputations
        basis = spectral_fit.basis
    else:
        fitted_trace = auto_trace(state, pairs[train], y_train)
        basis = None
    # the on-line fit's range of traces, [1e-100, 1e100], and targets in its reach
    if trace != "auto":
        fitted_trace = check_trace(trace) / unit
        warn_unreachable(pairs, y, float(trace))
        check_batch_units(y, float(trace), "the trace")
    else:
        check_trace(fitted_trace * unit)
    train_loss, validation = _losses(state, basis, a, b, y_train / fitted_trace,
                                     *((a_val, b_val, y_val / fitted_trace)
                                       if held is not None else ()))
    run = dict(learning_rate=learning_rate, max_iter=max_iter, tol=tol,
               n_iter_no_change=n_iter_no_change, grow=SUBSPACE_GROWTH)
    race = spectral and validation is not None
    result = minimize_pair_loss(
        state, train_loss, validation=validation, early_stopping=validation is not None,
        callback=callback, dense=not race, note=note, **run)
    if race:
        result, spectral_fit, fitted_trace, validation = _race_prior_ranks(
            spectral_fit, result, fitted_trace, validation, n_objects, (a, b, y_train),
            (a_val, b_val, y_val), subspace, None if trace == "auto" else fitted_trace, run,
            ranks)
        result = _with_dense_state(result)
        prior_rank, prior_imputations = spectral_fit.rank, spectral_fit.imputations
    training = None
    if held is not None:
        training = TrainingRun(result.state, fitted_trace * unit, result.subspace)
        # the held-out pairs chose the rank and the number of iterations;
        # the kernel returned learns from every pair
        a_all, b_all = pairs.T
        y_all = y / unit
        if prior_rank is None:
            state = prior.copy()
            if trace == "auto":
                fitted_trace = auto_trace(state, pairs, y_all)
            basis = None
        else:
            refit_prior = spectral_prior(n_objects, a_all, b_all, y_all, a_all, b_all, y_all,
                                         ranks=(prior_rank,), n_imputations=prior_imputations,
                                         fixed=True, subspace=subspace)
            fitted_trace = refit_prior.trace if trace == "auto" else fitted_trace
            state = refit_prior.exponent if subspace is not None else refit_prior.state
            basis = refit_prior.basis
        loss, _ = _losses(state, basis, a_all, b_all, y_all / fitted_trace)
        to_convergence = (result.best_iter == result.n_iter and result.converged
                          and result.best_iter > 0)
        if to_convergence and basis is None:
            # the held-out pairs saw no overfitting: the refit runs to convergence
            # on every pair, as the training run did on its share (a fixed count
            # of iterations would stop where the split happened to converge),
            # continuing from the training run's kernel, the minimiser on most
            # of these pairs; its tolerance is relative to the loss of the prior
            # on every pair, as a run from the prior's would be
            refit = minimize_pair_loss(
                result.state, loss, learning_rate=learning_rate, max_iter=max_iter,
                tol=tol, n_iter_no_change=n_iter_no_change,
                loss_scale=_start_loss(loss, state), note=progress)
        elif to_convergence:
            # a subspace fit: the refit prior's basis is not the training run's
            refit = minimize_pair_loss(
                state, loss, grow=SUBSPACE_GROWTH, learning_rate=learning_rate,
                max_iter=max_iter, tol=tol, n_iter_no_change=n_iter_no_change,
                note=progress)
        else:
            refit = minimize_pair_loss(
                state, loss, grow=SUBSPACE_GROWTH, grow_at=result.growth,
                learning_rate=learning_rate, max_iter=result.best_iter, tol=0.0,
                n_iter_no_change=result.best_iter + 1)
        result = result._replace(state=refit.state, loss_curve=refit.loss_curve,
                                 n_iter=result.n_iter + refit.n_iter,
                                 converged=result.converged and (refit.converged
                                                                 or not to_convergence),
                                 subspace=refit.subspace)
    kernel_trace = fitted_trace * unit
    if validation is not None:
        scores = np.array([r2_score(loss, validation.z) for loss in result.validation_curve])
    else:
        scores = np.zeros(0)
    return MEGBatchFit(
        state=result.state, trace=kernel_trace,
        learning_rate=auto_learning_rate(result.state, pairs[:, 0], pairs[:, 1]),
        n_iter=result.n_iter, converged=bool(result.converged),
        loss_curve=kernel_trace * np.sqrt(result.loss_curve), validation_scores=scores,
        validation_score=scores[result.best_iter] if len(scores) else np.nan,
        prior_score=scores[0] if len(scores) else np.nan,
        prior_rank=prior_rank, prior_imputations=prior_imputations,
        held_out=validation is not None, split_reason=split_reason,
        subspace=result.subspace,
        held_pairs=np.sort(order[held]) if held is not None else None, training=training)


def _with_dense_state(result):
    """Return a run's result with its dense state (a raced run's is made for the one kept)."""
    if result.state is not None:
        return result
    # pinned as the run's own would have been: the same state, bit for bit
    with blas_threads(result.subspace.size):
        return result._replace(state=result.subspace.dense())


def _held_out_errors(result, trace, y_val):
    """Squared errors (training-target units) of a run's kernel on the held-out pairs."""
    return (trace * result.validation_predictions - y_val) ** 2


class _RivalTrails(Exception):
    """A rival rank's run stopped early: it trails the leader at equal budget."""


def _race_prior_ranks(chosen, result, fitted_trace, validation, n_objects, train, held,
                      subspace, given_trace, run, ranks, patience=2):
    """Choose the spectral prior's rank by the held-out loss of the kernel fitted from it.

    The prior's own held-out score chose ``chosen.rank`` among ``ranks``;
    the ranks whose priors score within that score's noise
    (:func:`within_noise`) are ones the held-out pairs cannot tell apart as
    priors, yet the kernels fitted from them can differ far more (the fit
    reshapes the spectrum, and a prior whose rank matches the data's
    structure gives it the directions to grow). Such rivals are fitted on
    the training pairs as the chosen one was (``result``), walking from the
    chosen rank up the ladder and then down, each way until a rival fits
    no better than the best so far (and up also after ``patience`` ranks in
    a row outside the noise); a rival's run stops early once it trails the
    best run at an equal number of iterations, as in successive halving.
    The rank whose fitted kernel has the least held-out square loss replaces
    the chosen one only if it beats it by more than that loss's noise, so
    that noise alone does not move the choice.

    Returns
    -------
    result, prior, trace, validation
        The training run, the spectral prior, its trace (trace-one units of
        the targets) and the held-out loss of the rank chosen.
    """
    a, b, y_train = train
    a_val, b_val, y_val = held
    errors = chosen.errors
    if chosen.rank == 0 or chosen.rank not in errors:
        return result, chosen, fitted_trace, validation
    reference = errors[chosen.rank]
    best = (result, chosen, fitted_trace, validation)
    best_errors = chosen_errors = _held_out_errors(result, fitted_trace, y_val)

    def prior_at(rank):
        return spectral_prior(n_objects, a, b, y_train, a_val, b_val, y_val, ranks=(rank,),
                              subspace=subspace)

    def fitted(prior, leader):
        trace = prior.trace if given_trace is None else given_trace
        state = prior.exponent if subspace is not None else prior.state
        train_loss, rival_validation = _losses(state, prior.basis, a, b, y_train / trace,
                                               a_val, b_val, y_val / trace)
        # the leader's held-out minimum after each iteration, in the targets' units
        leading = np.minimum.accumulate(leader[0].validation_curve) * leader[2] ** 2
        rival_best = [np.inf]
        checkpoint = [max(int(run["n_iter_no_change"]), 1)]

        def prune(iteration, train_loss, validation_loss, step):
            # successive halving at equal budgets: at iterations n_iter_no_change
            # * 2^j the rival stops when its held-out minimum so far trails the
            # leader's after as many iterations (or after all of the leader's)
            rival_best[0] = min(rival_best[0], validation_loss * trace ** 2)
            if iteration == checkpoint[0]:
                checkpoint[0] *= 2
                if rival_best[0] > leading[min(iteration, len(leading) - 1)]:
                    raise _RivalTrails

        try:
            # its dense state is made only if it is kept
            rival = minimize_pair_loss(state, train_loss, validation=rival_validation,
                                       early_stopping=True, callback=prune, dense=False,
                                       **run)
        except _RivalTrails:
            return None, None
        return (rival, prior, trace, rival_validation), _held_out_errors(rival, trace, y_val)

    # a walk from the chosen rank up the ladder, then down: each way it ends
    # at the first rival that fits no better than the best so far (the fitted
    # loss taken as unimodal in the rank), and up also after ``patience``
    # ranks in a row whose priors are worse beyond noise, as the scan ends;
    # a table whose prior scores are flat over many ranks then costs a few
    # priors and runs, not one of each per rank
    outside = 0
    for rank in (r for r in ranks if chosen.rank < r < n_objects - 1):
        prior = None if rank in errors else prior_at(rank)  # the scan's score, if it has one
        if not within_noise(errors[rank] if prior is None else prior.errors[rank], reference):
            outside += 1
            if outside >= patience:
                break
            continue
        outside = 0
        candidate, candidate_errors = fitted(prior_at(rank) if prior is None else prior, best)
        if candidate is None or not np.mean(candidate_errors) < np.mean(best_errors):
            break
        best, best_errors = candidate, candidate_errors
    for rank in sorted(errors, reverse=True):
        if not 0 < rank < chosen.rank or not within_noise(errors[rank], reference):
            continue
        candidate, candidate_errors = fitted(prior_at(rank), best)
        if candidate is None or not np.mean(candidate_errors) < np.mean(best_errors):
            break
        best, best_errors = candidate, candidate_errors
    if best[1] is not chosen and within_noise(chosen_errors, best_errors):
        return result, chosen, fitted_trace, validation
    return best


def _start_loss(loss, state):
    """Return the loss (a dense :class:`PairLoss`) of a state's kernel."""
    if state.eigenvalues is None:
        state.refresh()
    return loss.loss(loss.predictions(state.eigenvalues, state.eigenvectors))


def _losses(state, basis, a, b, z, a_val=None, b_val=None, z_val=None):
    """Return the training loss and the held-out one (``None`` without held-out pairs).

    ``basis`` not ``None``: the subspace form (``state`` is then its exponent).
    """
    def loss(a, b, z):
        return SubspacePairLoss(basis, a, b, z) if basis is not None else PairLoss(state, a, b, z)
    return loss(a, b, z), (loss(a_val, b_val, z_val) if a_val is not None else None)
