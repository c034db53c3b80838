"""Kernel learning from distances with MEG updates: batch fit, on-line partial_fit.

The estimator validates its input, makes one solver call and commits the
result: :func:`~megkernel._solvers.meg_batch.fit_batch` (the batch fit) or
:func:`~megkernel._solvers.meg.fit_online` (the paper's on-line trials).
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._engines import METHOD_CONSTRAINT
from ._kernel_learner import MEGKernelLearnerMixin, new_ids_and_kernel
from ._numerics.state import ExponentState
from ._numerics.validation import (
    MAX_STEP,
    check_pair_indices,
    check_squared_distances,
    check_target_range,
    refuse_bad_distances,
    squares_of_distances,
)
from ._pair_estimator import (
    ObjectIndex,
    PairKernelEstimator,
    check_id_kinds,
    check_kind_of_known,
    square_hint,
    unchanged_on_error,
    validate_pairs,
    without_missing_distances,
)
from ._progress import ToleranceBar, note_compiling
from ._progress import bar as progress_bar
from ._progress import detail as progress_detail
from ._solvers.meg import fit_online, run_meg_trials, trial_engine
from ._solvers.meg_batch import fit_batch
from ._warnings import NoImprovementWarning, warn_if_not_better, warn_user

#: A held-out R^2 below this, learned and prior alike, means the kernel
#: explains little of the held-out distances: the verdict's warning then says
#: so and points at the observed distances. R^2 alone cannot tell a kernel
#: whose neighbours are worse than the given distances' from one whose are
#: better (the benchmarks page's sparse tables): a tenth does not fire where
#: learning helped there; ``KernelDistances(keep_given="auto")`` decides with
#: the labels.
WEAK_R2 = 0.1

#: Pairs of distinct objects from which a first ``partial_fit`` call's
#: ``trace="auto"`` (a mean of squared distances) is taken without a
#: warning: with a coefficient of variation near 1, the mean of ``k`` is
#: within ``1 / sqrt(k)`` (18 % at 30), and later chunks never change it.
MIN_TRACE_PAIRS = 30

#: Trials between two updates of the progress bar when ``verbose``.
_PROGRESS_EVERY = 10_000

#: ``verbose=1`` draws a bar for calls of at least this many trials (shorter
#: ones end before a bar says anything; one pair per ``partial_fit`` would
#: print a bar per call); ``verbose=2`` draws one for every call.
_BAR_FROM = 1000

__all__ = ["MEGKernelRegressor"]


class MEGKernelRegressor(MEGKernelLearnerMixin, RegressorMixin, PairKernelEstimator):
    r"""Learn a kernel from (squared) distances of pairs with MEG updates.

    Each sample is a pair of objects ``(a, b)`` with target the squared
    feature-space distance ``y = ||x_a - x_b||^2 = K_aa + K_bb - 2 K_ab``
    (or the distance itself with ``squared=False``).

    **fit (batch, the default).** :meth:`fit` returns the kernel of least
    total square loss over the positive definite kernels of its trace: the
    MEG update applied to the gradient of the whole loss (mirror descent
    with the von Neumann entropy; a Barzilai-Borwein step checked by the
    relative-smoothness condition, so no learning rate needs tuning and
    every accepted step lowers the training loss). It starts from a prior
    fitted to the data (``init="auto"``: classical scaling of the observed
    distances) and runs to convergence unless held-out pairs show it
    overfitting; they also give the verdict ``validation_score_`` against
    ``prior_score_``. See
    :func:`megkernel._solvers.meg_batch.fit_batch`.

    **partial_fit (on-line, the paper's algorithm)** and ``fit`` with
    ``solver="online"``: trial ``t`` predicts :math:`\hat y_t = \tau\,\mathrm{tr}(W_t X_t)` and
    updates (eq. 4 of Tsuda, Raetsch & Warmuth 2004, in the stable form of
    eq. 7)

    .. math:: W_{t+1} = \exp(\log W_t - 2\eta(\hat y_t - y_t)/\tau\, X_t) / Z_t

    with :math:`X_t = u u^T`, :math:`u = e_a - e_b`, :math:`\mathrm{tr} W = 1`
    and the learned kernel :math:`K = \tau W` (``tau = trace``). With this
    instance matrix ``tr(W X_t)`` is the squared distance itself, the
    eigenvalue range is ``r = 2`` and the realizable bound-optimal rate of
    Lemma 3.2 is ``eta = 2 / r^2 = 1/2`` (the paper's ``eta = 2`` with
    half of this ``X_t``: the same kernels).

    **Low-rank mode.** With ``init_factor=F`` (d x r) the prior is
    ``W_1 = F F^T / ||F||_F^2`` and every iterate stays in its range,
    ``W = P M P^T`` (``P``: orthonormal basis of ``range(F)``): a trial
    costs ``O(r^2)``-``O(r^3)`` whatever ``d``, memory is ``O(d r)``, and
    no ``d x d`` array is formed. The instance range shrinks from ``2`` to
    ``||P[a] - P[b]||^2`` (about ``2 r / d``), which ``learning_rate="auto"``
    accounts for. Read the kernel through :attr:`kernel_factor_`,
    :meth:`kernel_entries` and :meth:`predict`.

    Parameters
    ----------
    n_objects : int, default=None
        Number of objects ``d``. Taken from ``objects``, ``init`` or
        ``init_factor`` when given; otherwise, if ``None``, from the pairs of
        the first fit (the largest index, or the distinct ids).
    objects : array-like of shape (d,), default=None
        The objects' ids (any hashable values: strings, numbers, the index
        of a DataFrame of objects), in the order of the kernel's rows; the
        pairs then name objects by id. ``None``: the pairs hold integer
        indices ``0..d-1``, or, if they hold other ids (strings, pandas
        categoricals), the objects are the distinct ids of the first fit
        (sorted; a categorical's categories). Later calls refuse an id not
        among them, naming it.
    learning_rate : float or "auto", default="auto"
        On-line (``partial_fit``, ``solver="online"``): ``eta`` in trace-one
        units. Batch: the first trial step of the line search (later steps
        are found by the line search, so it hardly matters).
        On-line: ``"auto"``: chosen from the first ``fit`` /
        ``partial_fit`` call's pairs, ``max(2 / rho^2, 1 / (2 rho m))``
        (:func:`megkernel._solvers.meg.data_learning_rate`): Lemma 3.2's
        realizable rate ``2 / rho^2``, ``rho`` a bound on the instance
        range ``||v||^2`` (``2`` in dense mode, the largest
        ``||P[a] - P[b]||^2`` over the pairs in low-rank mode), or the same
        argument with the variance the instances have under a kernel that
        meets the targets, ``m`` their mean over the trace (trace-one
        units). On a user's table at ``trace="auto"`` from the identity
        prior ``m = 2 / d`` and the rate is ``d / 8``: at ``0.5`` a trial
        moves the kernel by about ``2 / d`` and a few dozen trials per
        object leave it at its prior (1-NN at chance on the benchmarks
        page's user-like tables). Lemma 3.2's bound on
        ``cumulative_loss_`` holds at ``learning_rate=0.5``
        (``meg_learning_rate(2)``), the rate the paper's experiments pass.
        Updates run in trace-one units, so it does not depend on the units
        of ``y``.
    init : {"auto", "identity"} or array-like of shape (d, d), default="auto"
        Prior ``W_1``: ``I / d``, a symmetric positive definite matrix
        (scaled to trace one), or ``"auto"``: for the batch ``fit``, the
        classical scaling of the training distances (each missing pair the
        mean of the given ones) at the rank, among 0 (``I / d``), 1, 2, 3,
        4, 6, 8, ... 128, that predicts the held-out pairs best (among the
        ranks whose priors predict them as well within noise, the one whose
        fitted kernel predicts them best beyond noise), plus the
        isotropic part that carries the fill's offset (at least a tenth of the
        mean eigenvalue), with ``trace="auto"`` its fitted trace
        (:func:`megkernel._solvers.spectral_prior.spectral_prior`); for the
        on-line algorithm, ``I / d`` as in the paper. From 1500 objects on
        (``SUBSPACE_FROM``) the batch fit from this prior learns the kernels
        ``P M P^T + mu (I - P P^T)``: ``P`` the top 64 eigenvectors of the
        prior's Gram matrix (or its rank, if larger), grown by 16 directions
        of the discarded gradient whenever the held-out loss stops falling
        and the last growth paid off, up to 256; the same mirror descent on
        a convex subset, ``O(n_pairs k^2)`` per step instead of a ``d x d``
        eigendecomposition, and one at the end
        (:class:`megkernel._solvers.pair_loss.SubspacePairLoss`).
    init_factor : array-like of shape (d, r), default=None
        Low-rank prior ``W_1 = F F^T / ||F||_F^2`` (e.g. ``F`` = centred
        features, a Nystroem or kernel-PCA map); selects low-rank mode.
        Directions of numerically zero singular value are dropped. Give
        ``init`` or ``init_factor``, not both.
    trace : float or "auto", default="auto"
        Trace ``tau`` of the learned kernel; squared distances are in its
        units (at most ``2 tau``). ``"auto"``: with the batch ``fit`` and
        ``init="auto"``, the spectral prior's fitted trace; otherwise, from
        the first call's pairs,
        the trace at which the prior has the targets' mean squared distance
        (``tau = mean(y) / mean(v^T W_1 v)``, ``d mean(y) / 2`` for the
        identity prior), so targets in any units just work: scaling ``y`` by
        ``c`` scales the learned kernel by ``c``. A float fixes it (fitting
        ``tau * y`` with ``trace=tau`` learns ``tau`` times the trace-one
        kernel learned from ``y``).
    solver : {"batch", "online"}, default="batch"
        What :meth:`fit` runs: the batch minimisation of the total loss, or
        ``n_epochs`` passes of the paper's on-line trials. The on-line
        trials are for pairs that arrive one by one (:meth:`partial_fit`, a
        stream), for many trials per object, and for Lemma 3.2's bound; on a
        table of observed distances, a few dozen pairs per object, the batch
        fit learns more and needs no learning rate. A fit whose trials,
        each predicting its pair before its update, predict no better than
        the prior warns (:class:`~megkernel.NoImprovementWarning`, once per
        fit), and one whose final training loss is above its prior's warns
        too (``ConvergenceWarning``, naming the learning rate).
    squared : bool, default=True
        Whether ``y`` holds squared distances (the paper's targets) or
        plain distances (``squared=False``: ``y`` is squared on input and
        :meth:`predict` returns distances; the kernel is the same).
    max_iter : int, default=1000
        Batch: largest number of iterations (each one or a few
        eigendecompositions), a safety net set well above what ordinary fits
        need, so that the stopping rule (``tol``, ``n_iter_no_change``) ends
        them first (figures: the benchmarks page); reaching it warns
        (``ConvergenceWarning``).
    tol : float, default=1e-4
        Batch: the fit improves while the training loss falls by more than
        ``tol`` times the prior's per iteration.
    n_iter_no_change : int, default=5
        Batch: converged when the last this many iterations together
        lowered the training loss by less than ``n_iter_no_change * tol``
        times the prior's; with ``early_stopping``, also stop after this
        many iterations in a row that overfit.
    early_stopping : bool, default=True
        Batch: hold out ``validation_fraction`` of the pairs and watch their
        loss: an iterate overfits when the held-out minimum so far beats it
        by more than two standard errors of the pairs' paired differences.
        The fit returns its converged iterate unless that one overfits (then
        the held-out minimum, possibly the prior); a converged iterate no
        better than the prior on the held-out pairs warns
        (``NoImprovementWarning``), as does a held-out ``R^2`` below 0.1
        (``WEAK_R2``). The held-out pairs also choose the spectral prior's
        rank and give ``validation_score_``.
        With fewer than 10 held-out pairs nothing is held out (a
        ``UserWarning`` says so) and the converged iterate is returned.
    validation_fraction : float, default=0.1
        Batch: share of the pairs held out when ``early_stopping``.
    n_epochs : int, default=1
        On-line: passes over the training pairs in :meth:`fit`.
    shuffle : bool, default=False
        On-line: shuffle the pairs before each epoch of :meth:`fit`.
    random_state : int, RandomState instance or None, default=None
        Seed for the held-out split (batch) and ``shuffle`` (on-line).
    method : {"auto", "eigh", "rank-one", "lanczos"}, default="auto"
        Engine of the trials. ``"eigh"`` re-decomposes the exponent each
        trial (``O(d^3)``); ``"rank-one"`` updates its eigendecomposition
        (secular equation plus one matrix product); ``"lanczos"`` needs no
        eigendecomposition per trial (Gauss quadrature on a short Lanczos
        run from ``e_a - e_b``; ``O(nnz)`` per step while the exponent is
        sparse, as from ``init="identity"``) and one ``eigh`` per call to
        :meth:`fit` / :meth:`partial_fit` (low-rank mode runs rank-one).
        Same result up to round-off; ``"auto"`` picks the fastest
        available (Lanczos in dense mode from ``d = 200`` on, for calls of
        at least 8 trials).
    verbose : int, default=0
        ``1``: a progress bar on stderr (trials, rate, ETA) for each call of
        :meth:`fit` (each epoch) or :meth:`partial_fit` with at least 1,000
        trials, and a one-line note while numba compiles the engine for the
        first time; ``2``: a bar for every call, plus a detail line (loss,
        time) every 10,000 trials. The batch solver's bar counts towards
        the tolerance (its stopping rule, not ``max_iter``, ends it): the
        share of the way the mean gain per iteration has come down to the
        gain at which it stops, on a log scale, with the ETA at that pace
        (short early on: the gain falls fast at first); at ``2``, a line per
        iteration. ``0``: nothing. Whatever ``verbose``, a batch fit that at its pace will
        take more than 30 s says so once, with its estimate, in a
        ``UserWarning``.
    grow_objects : bool, default=False
        :meth:`partial_fit` after the first call: pairs naming ids that are
        not among ``objects_`` add them (ids, dense mode) instead of being
        refused. Each new object gets the row and column of the out-of-sample
        extension from its distances to known objects in the same call (the
        kernel over the known objects unchanged, positive definite: each new
        object keeps at least the kernel's smallest eigenvalue as a part of
        its own; ``W`` of trace one, ``trace_`` grown by the new diagonal
        entries so the units stay), then the call's trials run over the
        larger set. See :func:`megkernel._kernel_learner.new_ids_and_kernel`.

    Attributes
    ----------
    state_ : ExponentState
        The exponent ``log W`` (``log M`` in low-rank mode, with the basis
        ``state_.basis``) and its eigendecomposition (the model state).
    n_objects_ : int
        Number of objects ``d``.
    objects_ : ndarray of shape (d,)
        The objects' ids, in the kernel's order (``0..d-1`` for indices).
    trace_ : float
        The trace of the learned kernel (``trace``, or the one ``"auto"``
        found).
    rank_ : int
        Dimension ``r`` of the range of the kernel (``d`` in dense mode).
    learning_rate_ : float
        The learning rate used.
    kernel_ : ndarray of shape (d, d)
        The learned kernel ``trace_ * W``; in low-rank mode only for
        ``d <= 5000`` (otherwise a ``ValueError`` points to the views below).
    kernel_factor_ : ndarray of shape (d, r)
        ``F`` with ``kernel_ = F F^T``.
    n_iter_ : int
        Batch: iterations made, those of the run on the training pairs plus
        those of the refit on every pair (to convergence when the held-out
        pairs saw no overfitting, else as many as early stopping chose).
        On-line ``fit``: ``n_epochs``.
    converged_ : bool
        Batch: whether the stopping rule, not ``max_iter``, ended the fit.
    loss_curve_ : ndarray
        Batch: root mean square training error of the squared distances
        (in the units of ``y``) of the prior and of each iterate of the returned
        kernel's run (the refit on every pair, when held-out pairs were
        monitored). On-line ``fit``: the prior's and the final kernel's.
    validation_scores_ : ndarray
        Batch: ``R^2`` of the held-out squared distances for the prior and
        each iterate (empty without held-out pairs).
    validation_score_ : float
        ``R^2`` of the held-out squared distances under the iterate early
        stopping chose (trained without them; the returned kernel is that
        many iterations refit on every pair, as ``LassoCV`` refits its
        chosen ``alpha``); NaN without held-out pairs.
    prior_score_ : float
        The same for the prior ``init`` (at its trace). A fit that ends no
        better warns (:class:`~megkernel.NoImprovementWarning`).
    prior_rank_ : int or None
        Rank of the spectral prior (``init="auto"``, batch); ``None``
        otherwise.
    prior_imputations_ : int or None
        Imputations of the missing distances the spectral prior made (0:
        the mean fill); ``None`` as ``prior_rank_``.
    n_updates_ : int
        Number of on-line trials so far (0 after a batch ``fit``).
    losses_ : ndarray of shape (n_updates_,)
        On-line losses ``(yhat_t - y_t)^2``, each taken before its update
        (empty after a batch ``fit``).
    cumulative_loss_ : float
        ``L_MEG(S)``, the sum of ``losses_``.
    trials_from_prior_ : bool
        Whether the on-line trials of ``losses_`` started from the prior
        ``init`` (``partial_fit`` from the start, or ``solver="online"``), so
        that Lemma 3.2 bounds ``cumulative_loss_``; False when they continue
        a batch fit's kernel.
    n_features_in_ : int
        Always 2 (the two objects of a pair).

    See Also
    --------
    megkernel.meg : The on-line solver function without the estimator.
    megkernel.meg_loss_bound : Lemma 3.2's bound on ``cumulative_loss_``.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import MEGKernelRegressor
    >>> rng = np.random.default_rng(0)
    >>> features = rng.normal(size=(20, 3))
    >>> K = features @ features.T
    >>> K /= np.trace(K)
    >>> pairs = rng.integers(0, 20, size=(2000, 2))
    >>> a, b = pairs.T
    >>> sq_dist = K[a, a] + K[b, b] - 2 * K[a, b]
    >>> model = MEGKernelRegressor(n_objects=20).fit(pairs, sq_dist)
    >>> model.kernel_.shape
    (20, 20)
    """

    _parameter_constraints: dict = {
        **PairKernelEstimator._parameter_constraints,
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "solver": [StrOptions({"batch", "online"})],
        "squared": ["boolean"],
        "grow_objects": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "method": [METHOD_CONSTRAINT],
    }

    #: Parameters the first ``partial_fit`` fixes.
    _FIXED_PARAMS = ("trace", "n_objects", "objects", "init", "init_factor")

    def __init__(self, *, n_objects=None, objects=None, learning_rate="auto",
                 init="auto", init_factor=None, trace="auto", solver="batch", squared=True,
                 max_iter=1000, tol=1e-4, n_iter_no_change=5, early_stopping=True,
                 validation_fraction=0.1, n_epochs=1, shuffle=False,
                 random_state=None, method="auto", verbose=0, grow_objects=False):
        self.n_objects = n_objects
        self.objects = objects
        self.learning_rate = learning_rate
        self.init = init
        self.init_factor = init_factor
        self.trace = trace
        self.solver = solver
        self.squared = squared
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_epochs = n_epochs
        self.shuffle = shuffle
        self.random_state = random_state
        self.method = method
        self.verbose = verbose
        self.grow_objects = grow_objects

    # -- fitting -----------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the kernel of the pairs ``(X, y)``, starting from the prior.

        ``solver="batch"``: the kernel of least total square loss (early
        stopped on held-out pairs); ``solver="online"``: ``n_epochs`` passes
        of the on-line trials in order.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects ``(a, b)`` of each pair: integer indices, or ids of any
            hashable kind (see ``objects``); a 2-column DataFrame works.
        y : array-like of shape (n_pairs,)
            Squared distances ``||x_a - x_b||^2`` (distances with
            ``squared=False``), in any units. NaN marks a missing pair: it is
            left out, with a ``UserWarning`` counting such rows. Required
            (``None`` is refused, saying what was passed).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        with unchanged_on_error(self):
            X, y = self._without_missing(X, y)
            pairs, y, index = self._validate_first_call(X, y)
            prior = self._initial_state(pairs, index)
            if self.solver == "batch":
                with self._batch_progress() as (callback, towards_tol):
                    result = fit_batch(
                        pairs, y, prior=prior, spectral=self._uses_data_prior(),
                        trace=self.trace, learning_rate=self.learning_rate,
                        max_iter=self.max_iter, tol=self.tol,
                        n_iter_no_change=self.n_iter_no_change,
                        validation_fraction=(self.validation_fraction
                                             if self.early_stopping else None),
                        random_state=self.random_state, callback=callback,
                        progress=towards_tol)
                fitted = self._batch_attributes(result, index)
            else:
                with self._trials_progress(prior, len(y), done=0) as (chunk, callback):
                    result = fit_online(
                        pairs, y, prior=prior, trace=self.trace,
                        learning_rate=self.learning_rate, n_epochs=self.n_epochs,
                        shuffle=self.shuffle, random_state=self.random_state,
                        method=self.method, chunk=chunk, callback=callback, summary=True)
                fitted = self._online_attributes(result, index)
            fitted["_validated_params"] = self._param_values()
            self.__dict__.update(fitted)  # one step: an interrupt cannot split it
            self._report(result)
            return self  # inside the block: an interrupt up to here restores the model

    def _batch_attributes(self, result, index):
        """Return the fitted attributes of a batch fit (not yet stored)."""
        if result.split_reason:
            warn_user(
                f"MEGKernelRegressor: {result.split_reason}; training on every pair "
                "without early stopping and with no verdict (validation_score_ and "
                "prior_score_ are NaN). Give more pairs, or early_stopping=False to "
                "silence this.", UserWarning)
        return {**self._started(result.state, result.trace, result.learning_rate, index),
                "n_updates_": 0, "_loss_buffer": np.zeros(0), "trials_from_prior_": False,
                "n_iter_": result.n_iter, "converged_": result.converged,
                "loss_curve_": result.loss_curve,
                "validation_scores_": result.validation_scores,
                "validation_score_": result.validation_score,
                "prior_score_": result.prior_score, "prior_rank_": result.prior_rank,
                "prior_imputations_": result.prior_imputations}

    def _online_attributes(self, result, index):
        """Return the fitted attributes of ``solver="online"``'s fit (not yet stored)."""
        return {**self._started(result.state, result.trace, result.learning_rate, index),
                "n_updates_": len(result.losses), "_loss_buffer": result.losses,
                "trials_from_prior_": True, "n_iter_": self.n_epochs, "converged_": True,
                "loss_curve_": result.trace * np.sqrt([result.prior_loss, result.final_loss]),
                "validation_scores_": np.zeros(0), "validation_score_": np.nan,
                "prior_score_": np.nan, "prior_rank_": None, "prior_imputations_": None}

    def _started(self, state, trace, learning_rate, index):
        """Return the attributes every first call sets: state, units, objects, fixed params."""
        return {"state_": state, "trace_": trace, "learning_rate_": learning_rate,
                **self._fitted_objects(state, index),
                "_fixed_params": {name: getattr(self, name) for name in self._FIXED_PARAMS}}

    def _report(self, result):
        """Warn about a finished ``fit`` (after the model is stored)."""
        name = type(self).__name__
        if self.solver == "online":
            if result.final_loss > result.prior_loss and result.final_loss > 0:
                warn_user(
                    f"{name}: the on-line fit diverged: the training R^2 fell from "
                    f"{result.prior_r2:.4g} under the prior to {result.final_r2:.4g} at "
                    f"learning_rate={self.learning_rate!r} ({result.learning_rate:.4g} in "
                    "trace-one units); lower the learning rate, or use solver='batch', "
                    "which needs none.", ConvergenceWarning)
                return
            # predict-then-update: each trial's loss is that of a kernel that has
            # not seen its pair, an honest held-out figure the prior's loss on the
            # same pairs must be beaten by
            progressive = float(np.mean(result.losses)) / result.trace ** 2
            if not (len(result.losses) and result.prior_loss > 0):
                return
            gain = 1.0 - progressive / result.prior_loss  # an R^2 against the prior
            if gain < WEAK_R2:
                how = ("no better than the prior" if gain <= 0 else
                       f"little better than the prior (R^2 {gain:.3g} against it, below "
                       f"{WEAK_R2})")
                warn_user(
                    f"{name}: the on-line trials predicted {how}: their mean loss before "
                    f"each update is {progressive:.4g} against {result.prior_loss:.4g} for "
                    f"the prior on the same pairs (trace-one units), at learning_rate="
                    f"{self.learning_rate!r} ({result.learning_rate:.4g}). The on-line "
                    "algorithm needs many trials per object, in no particular order (a "
                    "table sorted by its objects: shuffle=True); for a table of observed "
                    "distances use solver='batch' (the default).", NoImprovementWarning)
            return
        if not self.converged_:
            warn_user(
                f"{name}: the batch fit stopped at max_iter={self.max_iter} iterations "
                "before its loss settled; raise max_iter.", ConvergenceWarning)
        if result.held_out:
            weak = self._kernel_is_weak()
            advice = (f"the kernel explains little of the held-out distances (R^2 below "
                      f"{WEAK_R2}): too few or too noisy pairs to learn from, and its "
                      "neighbours may rank worse than the given distances'. In a Pipeline, "
                      "KernelDistances(keep_given='auto') keeps the given distances where "
                      "they rank neighbours better (with labels to judge by; without "
                      "labels, for a kernel this weak, it ranks the given distances "
                      "first); compare with the observed distances alone (learner=None) "
                      "in the same grid.")
            better = warn_if_not_better(name, self.validation_score_, self.prior_score_,
                                        what="R^2 of the held-out squared distances",
                                        hint=advice if weak else None)
            if better and weak:
                warn_user(f"{name}: the learned kernel beats its prior on held-out pairs "
                          f"(R^2 {self.validation_score_:.4g} against "
                          f"{self.prior_score_:.4g}), but {advice}", NoImprovementWarning)

    def _kernel_is_weak(self):
        """Whether the batch fit's kernel, and its prior, explain little of the held-out pairs.

        Both held-out R^2 below ``WEAK_R2``: the fit's ``NoImprovementWarning``
        then says so, and ``KernelDistances(keep_given="auto")`` without
        labels keeps the given distances first. ``False`` without held-out
        pairs (on-line fits, too few pairs).
        """
        scores = (getattr(self, "validation_score_", np.nan), getattr(self, "prior_score_", np.nan))
        return bool(np.nanmax(scores) < WEAK_R2) if not np.isnan(scores).all() else False

    def partial_fit(self, X, y=None):
        """Continue the on-line sequence with the trials of ``(X, y)``.

        The first call starts from the prior; each call is one pass in the
        given order. Every call is a transaction: if it fails (bad input,
        an interrupt mid-way) the model is exactly as before. A numeric
        ``learning_rate`` set between calls takes effect at the next call;
        ``trace``, ``n_objects``, ``objects``, ``init`` and ``init_factor``
        are fixed by the first call (changing them raises: call :meth:`fit`
        to start again), and so are the objects: an id the first call did
        not know (nor ``objects``) is refused, named.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects ``(a, b)``, as for :meth:`fit`.
        y : array-like of shape (n_pairs,)
            Squared distances (distances with ``squared=False``); NaN marks
            a missing pair, left out with a ``UserWarning``.

        Returns
        -------
        self : object
            The estimator, its on-line sequence continued.
        """
        if self._fast_call(X, y):
            return self._partial_fit_fast(X, y)
        return self._partial_fit(X, y)

    @_fit_context(prefer_skip_nested_validation=True)
    def _partial_fit(self, X, y):
        first = not hasattr(self, "state_")
        with unchanged_on_error(self):
            X, y = self._without_missing(X, y)
            if first:
                pairs, y, index = self._validate_first_call(X, y)
                state, trace, learning_rate = self._initial_state(pairs, index), \
                    self.trace, self.learning_rate
            else:
                self._check_fixed_params()
                if self.grow_objects:
                    self._grow_objects(X, y)  # inside the block: undone on an error
                pairs, y = self._validate_more_pairs(X, y)
                y = self._squared_targets(y, len(pairs))
                self._warn_self_pairs(pairs, y, self._object_index)
                index, state, trace = self._object_index, self.state_, self.trace_
                learning_rate = self._current_learning_rate()
            with self._trials_progress(state, len(y), done=0 if first else self.n_updates_
                                       ) as (chunk, callback):
                result = fit_online(pairs, y, prior=state, trace=trace,
                                    learning_rate=learning_rate, method=self.method,
                                    chunk=chunk, callback=callback)
            if first:
                self._warn_short_first_chunk(pairs, result.trace)
            self._commit(result.state, result.losses,
                         started={**self._started(result.state, result.trace,
                                                  result.learning_rate, index),
                                  "trials_from_prior_": True} if first else None,
                         learning_rate=result.learning_rate)
            return self  # inside the block: an interrupt up to here restores the model

    def _grow_objects(self, X, y):
        """Add the ids of the pairs ``X`` that are not objects yet (``grow_objects``)."""
        index = self._object_index
        if index is None or self.state_.basis is not None:
            raise ValueError("grow_objects=True adds objects named by id to a dense model: "
                             "name the objects by id (objects=[...] or ids in the pairs), "
                             "with no init_factor (a batch fit from 1500 objects on learns "
                             "a subspace model, which cannot grow either).")
        X = check_id_kinds(X)  # the ids' rule on X, before the objects grow by its ids
        check_kind_of_known(X.to_numpy(dtype=object) if isinstance(X, pd.DataFrame) else X,
                            index.objects, name="X", known="the model's objects")
        self._require_targets(y, X)
        sq_targets = self._squared_targets(y, len(X))
        check_target_range(sq_targets)  # as the trials would, before the kernel grows
        smallest = float(self.state_.density_eigenvalues().min())
        grown = new_ids_and_kernel(index, self.kernel_, X, sq_targets,
                                   own=self.trace_ * smallest)
        if grown is None:
            return
        new_ids, kernel = grown
        trace = float(np.trace(kernel))
        try:
            state = ExponentState.from_prior(kernel / trace, name="the grown kernel")
        except ValueError as error:  # its eigenvalues are beyond a dense eigh's resolution
            shown = ", ".join(repr(key) for key in new_ids[:3].tolist())
            raise ValueError(
                f"grow_objects cannot add the new object {shown}"
                f"{' and others' if len(new_ids) > 3 else ''}: with it the kernel's "
                f"eigenvalues span more than double precision resolves (the model's "
                f"kernel has eigenvalues down to {smallest:.3g} of its trace "
                f"{self.trace_:.4g}; the call's squared distances reach "
                f"{float(np.max(sq_targets)):.3g}, placing the new objects at squared "
                f"norms up to {float(np.max(kernel.diagonal()[len(index.objects):])):.3g})."
                " Give their distances in the fit's units, or fit again with the new "
                "objects among the pairs (objects=[...]).") from error
        objects = np.concatenate([np.asarray(index.objects, dtype=object), new_ids])
        self.__dict__.update(state_=state, trace_=trace,
                             **self._fitted_objects(state, ObjectIndex(objects)))

    def _current_learning_rate(self):
        """Return a later call's learning rate: ``learning_rate_`` unless set since."""
        return (self.learning_rate_ if self.learning_rate == "auto"
                else float(self.learning_rate))

    def _warn_short_first_chunk(self, pairs, trace):
        """Warn when ``partial_fit``'s first chunk sets ``trace="auto"`` from few pairs."""
        n_moving = int(np.count_nonzero(pairs[:, 0] != pairs[:, 1]))
        if self.trace == "auto" and n_moving < MIN_TRACE_PAIRS:
            rate = (", as is learning_rate='auto'," if self.learning_rate == "auto"
                    else "")
            warn_user(
                f"trace='auto' is set by the first partial_fit call from {n_moving} pairs "
                f"of distinct objects (fewer than {MIN_TRACE_PAIRS}){rate} and later calls "
                f"keep it (trace_={trace:.4g}). Give the trace, a larger first chunk, or "
                "stream through KernelDistances (a first pass over the whole stream sets "
                "it).", UserWarning)

    # -- the on-line fast path: one example per call, as river's learn_one ------
    def _param_values(self):
        return tuple(self.__dict__[name] for name in _PARAM_NAMES)

    def _fast_call(self, X, y):
        """Whether a ``partial_fit`` call may skip scikit-learn's validation.

        A later call on plain integer index arrays, with every parameter the
        very object validated by the previous call (``set_params`` makes new
        ones), no feature names and no ids to map: the checks that matter
        (shape, indices, targets, step bound) still run, before any change.
        """
        params = self.__dict__.get("_validated_params")
        return (params is not None and type(X) is np.ndarray and type(y) is np.ndarray
                and X.ndim == 2 and X.shape[1] == 2 and len(X) > 0
                and X.dtype.kind in "iu" and y.ndim == 1 and y.dtype.kind == "f"
                and not self.verbose and self.squared  # plain distances: squared on the way
                and self.__dict__.get("_object_index") is None
                and "feature_names_in_" not in self.__dict__
                and all(now is then for now, then in zip(self._param_values(), params)))

    def _partial_fit_fast(self, X, y):
        """Run one pass over plain, clean examples.

        Anything unusual (a bad index or target, a self-pair, a target out
        of reach, a step near overflow) goes to the validated path, which
        raises or warns exactly as always.
        """
        learning_rate = self._current_learning_rate()
        trace = self.trace_
        if len(y) != len(X) or X.min() < 0 or X.max() >= self.n_objects_:
            return self._partial_fit(X, y)
        y = y.astype(float, copy=False)  # float32 targets: no float32 arithmetic below
        low, high = float(y.min()), float(y.max())  # NaN fails every comparison below
        if not (low >= 0 and high <= 2.0 * trace
                and 8.0 * learning_rate * (1.0 + high / trace) <= MAX_STEP
                and not (X[:, 0] == X[:, 1]).any()):
            return self._partial_fit(X, y)
        pairs = X.astype(np.intp, copy=False)
        with unchanged_on_error(self):
            state = self.state_.copy()
            predictions = run_meg_trials(state, pairs, y, learning_rate=learning_rate,
                                         trace=trace, method=self.method)
            self._commit(state, (predictions - y) ** 2, learning_rate=learning_rate)
            return self  # inside the block: an interrupt up to here restores the model

    def _check_fixed_params(self):
        for name, value in self._fixed_params.items():
            now = getattr(self, name)
            same = now is value or (
                np.shape(now) == np.shape(value) and np.array_equal(now, value)
                if not isinstance(now, str) and not isinstance(value, str)
                else now == value)
            if not same:
                raise ValueError(
                    f"{name} changed since the model was fitted; partial_fit "
                    f"continues the same model (call fit to start again with "
                    f"{name}={now!r}).")

    def _validate_first_call(self, X, y):
        """Validate a first call: return ``(pairs, squared targets, index)``."""
        self._require_targets(y, X)
        pairs, y, index = self._validate_pair_table(X, y)
        y = self._squared_targets(y, len(pairs))
        moving = pairs[:, 0] != pairs[:, 1]
        if self.trace == "auto" and moving.any() and not np.any(y[moving] > 0):
            raise ValueError(
                "Every target of a pair of distinct objects is 0: trace='auto' has "
                "no scale to learn from. Check the units of y (squares that "
                "underflowed?), or give the trace.")
        self._warn_self_pairs(pairs, y, index)  # once the table is taken
        return pairs, y, index

    def _validate_more_pairs(self, X, y=None):
        self._require_targets(y, X)
        return super()._validate_more_pairs(X, y)

    def _warn_self_pairs(self, pairs, sq_targets, index):
        """Warn of pairs of an object with itself at a positive distance, naming the first.

        The value as the user gave it (a plain distance under
        ``squared=False``), the object by its id.
        """
        loops = np.flatnonzero((pairs[:, 0] == pairs[:, 1]) & (sq_targets > 0))
        if not loops.size:
            return
        y = sq_targets if self.squared else np.sqrt(sq_targets)
        t = int(loops[0])
        who = pairs[t, 0] if index is None else index.objects[pairs[t, 0]]
        who = who.item() if isinstance(who, np.generic) else who
        warn_user(
            f"{loops.size} of {len(y)} pairs join an object with itself but have a "
            f"positive {self._target_kind()[:-1]} (the first: {who!r} at {y[t]:.4g}; up "
            f"to {np.max(y[loops]):.4g}): an object is at distance 0 from itself, which "
            "no kernel can change. Set them to 0, or leave those pairs out.", UserWarning)

    def _without_missing(self, X, y):
        """Leave out the pairs whose distance is NaN (missing), counted in a warning.

        An infinite or negative target is refused first, by its row as given
        (after the NaN rows are left out, a list's positions would shift).
        """
        values = y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y)
        if values.dtype.kind in "iuf" and (values.ndim == 1 or values.shape[1:] == (1,)):
            refuse_bad_distances(values.ravel().astype(float), y, name=(
                "y" if self.squared else "y (distances, squared=False)"),
                kind=self._target_kind()[:-1])
        return without_missing_distances(X, y, who=type(self).__name__,
                                         kind=self._target_kind())

    def _target_kind(self):
        """Return what the targets are in the user's convention, as messages name them."""
        return "squared distances" if self.squared else "distances"

    def _require_targets(self, y, X=None):
        """Refuse a missing ``y``, saying what ``X`` was.

        (An infinite or negative target is refused by :meth:`_without_missing`,
        which every call runs first, by its row as given.)
        """
        kind = self._target_kind()
        if y is None:
            shape = np.shape(X) if isinstance(X, (np.ndarray, pd.DataFrame)) else None
            passed = ""
            if shape is not None and len(shape) == 2 and shape[1] != 2:
                passed = (f"; X has shape {shape}, not the (n_pairs, 2) of a pair table"
                          f"{square_hint(shape)}")
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                f"is None (give the {kind} of the pairs of X, one per row){passed}.")

    def _squared_targets(self, y, n_pairs):
        """Return the targets as squared distances (``squared=False`` squares them)."""
        if self.squared:
            return check_squared_distances(y, n_pairs)
        y = check_squared_distances(y, n_pairs, name="y (distances, squared=False)",
                                    kind="distances")
        return squares_of_distances(y, "y (distances, squared=False)")

    def _commit(self, state, losses, *, learning_rate, started=None):
        """Store the result of an on-line call in one step.

        Nothing before it changed the model. Called last inside the caller's
        ``unchanged_on_error`` block, so an interrupt at the caller's
        ``return`` still restores it. ``started``: the attributes of a first
        call.
        """
        done = 0 if started is not None else self.n_updates_
        buffer = np.zeros(0) if started is not None else self._loss_buffer
        needed = done + len(losses)
        if needed > len(buffer):
            grown = np.zeros(max(needed, 2 * len(buffer)))
            grown[:done] = buffer[:done]
            buffer = grown
        buffer[done:needed] = losses  # beyond n_updates_: invisible until committed
        update = {**(started or {}), "state_": state, "learning_rate_": learning_rate,
                  "n_updates_": needed, "_loss_buffer": buffer,
                  "_validated_params": self._param_values()}
        self.__dict__.update(update)  # one step: an interrupt cannot split it

    # -- progress ------------------------------------------------------------
    def _batch_progress(self):
        """Return the batch iterations' progress (a context manager yielding the callback)."""
        return _BatchProgress(self.verbose, self.max_iter)

    def _trials_progress(self, state, n_trials, *, done):
        """Return the on-line trials' progress (a context manager yielding chunk, callback)."""
        show = bool(self.verbose) and (self.verbose >= 2 or n_trials >= _BAR_FROM)
        if show:
            note_compiling([trial_engine(self.method, state, n_trials)])
        return _TrialsProgress(show, self.verbose, n_trials, done,
                               self.n_epochs if self.solver == "online" else 1)

    def __getstate__(self):
        """Pickle the model, the loss buffer cut to the losses so far."""
        # the loss buffer's spare room is not part of the model (an interrupted
        # call may have written there): pickle only the losses so far
        state = dict(super().__getstate__())
        if "_loss_buffer" in state:
            state["_loss_buffer"] = state["_loss_buffer"][: state["n_updates_"]].copy()
        return state

    # -- fitted views --------------------------------------------------------
    @property
    def losses_(self):
        """On-line losses ``(yhat_t - y_t)^2``, each taken before its update."""
        check_is_fitted(self, "state_")
        return self._loss_buffer[: self.n_updates_]

    @property
    def cumulative_loss_(self):
        """``L_MEG(S)``: the sum of the on-line losses so far."""
        return float(self.losses_.sum())

    def score(self, X, y, sample_weight=None):
        """Return ``R^2`` of the predicted squared distances (distances with ``squared=False``).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects ``(a, b)``, as for :meth:`fit`.
        y : array-like of shape (n_pairs,)
            Their squared distances (distances with ``squared=False``); text
            is refused, naming its row.
        sample_weight : array-like of shape (n_pairs,), default=None
            Weights of the pairs.

        Returns
        -------
        score : float
            ``R^2`` of :meth:`predict` against ``y``.
        """
        values = y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y)
        if values.dtype.kind in "USO" and values.ndim == 1:
            check_squared_distances(values, len(values), kind=self._target_kind())
        return super().score(X, y, sample_weight=sample_weight)

    def predict(self, X):
        """Predict the squared distances ``K_aa + K_bb - 2 K_ab`` of pairs.

        Their square roots, the distances, with ``squared=False``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects ``(a, b)``, as for :meth:`fit`.

        Returns
        -------
        y : ndarray of shape (n_pairs,)
            Squared distances (distances with ``squared=False``).
        """
        check_is_fitted(self, "state_")
        if (type(X) is np.ndarray and X.ndim == 2 and X.shape[1] == 2
                and X.dtype.kind in "iu" and self._object_index is None
                and "feature_names_in_" not in self.__dict__):
            pairs = check_pair_indices(X, self.n_objects_)  # plain indices: fast
        else:
            pairs, _, _ = validate_pairs(self, X, reset=False, n_objects=self.n_objects_,
                                         index=self._object_index)
        sq = self.trace_ * self.state_.pair_sq_distances(pairs[:, 0], pairs[:, 1])
        return sq if self.squared else np.sqrt(np.maximum(sq, 0.0))

    def __sklearn_tags__(self):
        """Tags: targets are non-negative; the R^2 of random pairs may be poor."""
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.regressor_tags.poor_score = True
        return tags


#: The parameter names, once (``_get_param_names`` inspects the signature).
_PARAM_NAMES = tuple(MEGKernelRegressor._get_param_names())


class _BatchProgress:
    """The batch fit's progress (a context manager yielding its two callbacks).

    ``(callback, towards_tol)`` for :func:`fit_batch`, ``(None, None)``
    unless ``verbose``: a bar towards the tolerance (the stopping rule, not
    ``max_iter``, ends an ordinary fit: a bar towards ``max_iter`` would
    show a false ETA), the share of the way the mean gain per iteration has
    come down to the gain at which the run stops, on a log scale; at
    ``verbose=2`` a line per iteration.
    """

    def __init__(self, verbose, max_iter):
        self.verbose, self.max_iter = verbose, max_iter

    def __enter__(self):
        if not self.verbose:
            self._bar = None
            return None, None
        self._bar = ToleranceBar("MEGKernelRegressor (batch)", measure="mean gain above tol")
        bar = self._bar.__enter__()
        verbose = self.verbose

        def callback(iteration, train_loss, validation_loss, step):
            if verbose >= 2:
                progress_detail(
                    f"[MEGKernelRegressor] iteration {iteration}: training loss "
                    f"{train_loss:.6g}, held-out loss {validation_loss:.6g}, "
                    f"step {step:.3g} (trace-one units)")

        return callback, bar.update

    def __exit__(self, *exc):
        return False if self._bar is None else self._bar.__exit__(*exc)


class _TrialsProgress:
    """The on-line trials' progress: one bar per epoch, a detail line at ``verbose=2``.

    A context manager yielding ``(chunk, callback)`` for
    :func:`~megkernel._solvers.meg.fit_online` (``(None, None)`` when silent).
    """

    def __init__(self, show, verbose, n_trials, done, n_epochs):
        self.show, self.verbose, self.n, self.done = show, verbose, n_trials, done
        self.n_epochs = n_epochs
        self._bar, self._epoch = None, None

    def __enter__(self):
        if not self.show:
            return None, None
        self._clock = time.perf_counter()
        return _PROGRESS_EVERY, self._callback

    def _open(self, epoch):
        self._close()
        where = (f" epoch {epoch + 1}/{self.n_epochs}" if self.n_epochs > 1 else "")
        self._where = where
        self._context = progress_bar(total=self.n, desc=f"MEGKernelRegressor{where}",
                                     unit="trial", enabled=True)
        self._bar, self._epoch = self._context.__enter__(), epoch

    def _close(self, *exc):
        if self._bar is not None:
            self._context.__exit__(*(exc or (None, None, None)))
            self._bar = None

    def _callback(self, epoch, stop, losses):
        if epoch != self._epoch:
            self._open(epoch)
        self._bar.update(len(losses))
        if self.verbose >= 2:
            progress_detail(
                f"[MEGKernelRegressor]{self._where} trial "
                f"{self.done + epoch * self.n + stop}: loss of the last {len(losses)} "
                f"trials {losses.sum():.6g}, {time.perf_counter() - self._clock:.1f} s")

    def __exit__(self, *exc):
        self._close(*exc)
        return False
