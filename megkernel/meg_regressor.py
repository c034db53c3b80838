"""Kernel learning from distances with MEG updates: batch fit, on-line partial_fit."""

from __future__ import annotations

import time
from contextlib import contextmanager
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._engines import METHOD_CONSTRAINT, run_pair_trials, select
from ._numerics.limits import MAX_SCALE, MIN_SCALE
from ._numerics.validation import (
    MAX_STEP,
    check_meg_step,
    check_n_trials,
    check_pair_indices,
    check_squared_distances,
    check_trace,
)
from ._pair_estimator import (
    KernelViewsMixin,
    declared_n_objects,
    initial_state,
    object_ids,
    unchanged_on_error,
    validate_pairs,
)
from ._progress import bar as progress_bar
from ._progress import detail as progress_detail
from ._progress import note_compiling
from ._solvers.meg import auto_learning_rate
from ._solvers.meg_batch import (
    SUBSPACE_FROM,
    SUBSPACE_GROWTH,
    PairLoss,
    SubspacePairLoss,
    minimize_pair_loss,
    spectral_prior,
    subspace_dimension,
)
from ._warnings import warn_if_not_better, warn_user

__all__ = ["MEGKernelRegressor"]

#: Fewest held-out pairs for early stopping and the verdict; with fewer,
#: ``fit`` trains on every pair and says so.
MIN_VALIDATION_PAIRS = 10

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


def auto_trace(state, pairs, y):
    """``trace="auto"``: the trace at which the prior meets the targets on average.

    ``tau = mean(y) / mean(v^T W_1 v)`` over the pairs of distinct objects:
    the prior ``tau W_1`` then has the targets' mean squared distance (for
    ``W_1 = I / d``, ``tau = d mean(y) / 2``). Scaling ``y`` by ``c`` scales
    ``tau`` by ``c``, so the learned kernel scales by ``c`` too: the units of
    the targets do not matter. ``1.0`` when no pair separates two objects or
    every target is 0.
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


class MEGKernelRegressor(KernelViewsMixin, RegressorMixin, BaseEstimator):
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
    distances) and stops early on held-out pairs, which also give the
    verdict ``validation_score_`` against ``prior_score_``. See
    :func:`megkernel._solvers.meg_batch.minimize_pair_loss`.

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
        On-line: ``"auto"``: Lemma 3.2's realizable rate
        ``2 / rho^2`` with ``rho`` a bound on the instance range
        ``||v||^2``: ``rho = 2`` in dense mode (so ``eta = 0.5``), the
        largest ``||P[a] - P[b]||^2`` over the pairs of the first
        ``fit`` / ``partial_fit`` call in low-rank mode. Updates run in
        trace-one units, so it does not depend on the units of ``y``.
    init : {"auto", "identity"} or array-like of shape (d, d), default="auto"
        Prior ``W_1``: ``I / d``, a symmetric positive definite matrix
        (scaled to trace one), or ``"auto"``: for the batch ``fit``, the
        classical scaling of the training distances (each missing pair the
        mean of the given ones) at the rank, among 0 (``I / d``), 1, 2, 3,
        4, 6, 8, ... 128, that predicts the held-out pairs best, plus the
        isotropic part that carries the fill's offset (at least a tenth of the
        mean eigenvalue), with ``trace="auto"`` its fitted trace
        (:func:`megkernel._solvers.meg_batch.spectral_prior`); for the
        on-line algorithm, ``I / d`` as in the paper. From 1500 objects on
        (``SUBSPACE_FROM``) the batch fit from this prior learns the kernels
        ``P M P^T + mu (I - P P^T)``: ``P`` the top 64 eigenvectors of the
        prior's Gram matrix (or its rank, if larger), grown by 16 directions
        of the discarded gradient whenever the held-out loss stops falling
        and the last growth paid off, up to 256; the same mirror descent on
        a convex subset, ``O(n_pairs k^2)`` per step instead of a ``d x d``
        eigendecomposition, and one at the end
        (:class:`megkernel._solvers.meg_batch.SubspacePairLoss`).
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
        ``n_epochs`` passes of the paper's on-line trials (then a fit whose
        final training loss is above its prior's warns, naming the
        learning rate).
    squared : bool, default=True
        Whether ``y`` holds squared distances (the paper's targets) or
        plain distances (``squared=False``: ``y`` is squared on input and
        :meth:`predict` returns distances; the kernel is the same).
    max_iter : int, default=200
        Batch: largest number of iterations (each one or a few
        eigendecompositions); reaching it warns (``ConvergenceWarning``).
    tol : float, default=1e-4
        Batch: an iteration improves when the monitored loss (held-out with
        ``early_stopping``, else training) falls by more than ``tol`` times
        the prior's.
    n_iter_no_change : int, default=5
        Batch: stop after this many iterations without improvement.
    early_stopping : bool, default=True
        Batch: hold out ``validation_fraction`` of the pairs, monitor their
        loss and return the best iterate. The held-out pairs also choose the
        spectral prior's rank and give ``validation_score_``. With fewer
        than 10 held-out pairs nothing is held out (a ``UserWarning`` says
        so) and the training loss is monitored.
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
        time) every 10,000 trials. ``0``: nothing.

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
        those of the refit on every pair (which repeats as many as early
        stopping chose). On-line ``fit``: ``n_epochs``.
    converged_ : bool
        Batch: whether the stopping rule, not ``max_iter``, ended the fit.
    loss_curve_ : ndarray
        Batch: root mean square training error of the squared distances
        (in the units of ``y``) of the prior and of each iterate of the returned
        kernel's run (the refit on every pair, when early stopping chose an
        iterate). On-line ``fit``: the prior's and the final kernel's.
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
        "n_objects": [Interval(Integral, 2, None, closed="left"), None],
        "objects": ["array-like", None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "init": [StrOptions({"auto", "identity"}), "array-like"],
        "init_factor": ["array-like", None],
        "trace": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "solver": [StrOptions({"batch", "online"})],
        "squared": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "method": [METHOD_CONSTRAINT],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_objects=None, objects=None, learning_rate="auto",
                 init="auto", init_factor=None, trace="auto", solver="batch", squared=True,
                 max_iter=200, tol=1e-4, n_iter_no_change=5, early_stopping=True,
                 validation_fraction=0.1, n_epochs=1, shuffle=False,
                 random_state=None, method="auto", verbose=0):
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

    # -- fitting -----------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
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
            ``squared=False``), in any units.

        Returns
        -------
        self : object
        """
        with unchanged_on_error(self):
            if self.solver == "batch":
                fitted = self._fit_batch(X, y)
            else:
                fitted = self._fit_online(X, y)
            fitted["_validated_params"] = self._param_values()
            self.__dict__.update(fitted)  # one step: an interrupt cannot split it
            self._report()
            return self  # inside the block: an interrupt up to here restores the model

    def _fit_online(self, X, y):
        start = self._start(X, y)
        # losses_ keeps each trial's loss; each epoch's order is drawn when it starts
        check_n_trials(self.n_epochs, len(start.y), bytes_per_trial=8,
                       record="its on-line loss in losses_")
        rng = check_random_state(self.random_state)
        orders = (rng.permutation(len(start.y)) if self.shuffle
                  else np.arange(len(start.y)) for _ in range(self.n_epochs))
        prior = start.state.copy()
        losses = [self._run(start.state, start.pairs[order], start.y[order],
                            start.learning_rate, start.trace, epoch=epoch,
                            done=epoch * len(start.y))
                  for epoch, order in enumerate(orders)]
        fitted = self._fitted(start, np.concatenate(losses))
        a, b = start.pairs.T
        z = start.y / start.trace  # trace-one units: no overflow in any units of y
        prior_loss = np.mean((prior.pair_sq_distances(a, b) - z) ** 2)
        final_loss = np.mean((start.state.pair_sq_distances(a, b) - z) ** 2)
        fitted.update(
            n_iter_=self.n_epochs, converged_=True, prior_rank_=None,
            prior_imputations_=None,
            loss_curve_=start.trace * np.sqrt([prior_loss, final_loss]),
            validation_scores_=np.zeros(0), validation_score_=np.nan,
            prior_score_=np.nan,
            _verdict=None,
            _diverged=(final_loss > prior_loss and final_loss > 0, _r2(prior_loss, z),
                       _r2(final_loss, z), start.learning_rate))
        return fitted

    def _split(self, n_pairs):
        """Training and held-out pair indices (held-out ``None``: no split)."""
        everything = np.arange(n_pairs)
        if not self.early_stopping:
            return everything, None
        n_held = int(round(self.validation_fraction * n_pairs))
        if n_held < MIN_VALIDATION_PAIRS or n_pairs - n_held < MIN_VALIDATION_PAIRS:
            warn_user(
                f"MEGKernelRegressor: {n_pairs} pairs are too few to hold out "
                f"{MIN_VALIDATION_PAIRS} at validation_fraction={self.validation_fraction} "
                f"(it takes about {int(np.ceil(MIN_VALIDATION_PAIRS / self.validation_fraction))}"
                "); training on every pair without early stopping and with no verdict "
                "(validation_score_ and prior_score_ are NaN). Give more pairs, or "
                "early_stopping=False to silence this.", UserWarning)
            return everything, None
        order = check_random_state(self.random_state).permutation(n_pairs)
        return np.sort(order[n_held:]), np.sort(order[:n_held])

    def _fit_batch(self, X, y):
        pairs, y, index = self._validate_trials(X, y, reset=True)
        state = initial_state(self, pairs, index)
        _warn_unreachable(pairs, y, 1.0, beyond_trace=False)
        train, held = self._split(len(y))
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
        subspace = self._subspace(state.n_objects)
        if self._spectral_init():
            prior = spectral_prior(state.n_objects, a, b, y_train,
                                   *((a_val, b_val, y_val) if held is not None else ()),
                                   subspace=subspace)
            trace, prior_rank = prior.trace, prior.rank
            state = prior.exponent if subspace is not None else prior.state
            prior_imputations = prior.imputations
        else:
            trace = auto_trace(state, pairs[train], y_train)
        # the on-line fit's range of traces, [1e-100, 1e100], and targets in its reach
        if self.trace != "auto":
            trace = check_trace(self.trace) / unit
            _warn_unreachable(pairs, y, float(self.trace))
            _check_batch_units(y, float(self.trace), "the trace")
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
        learning_rate = ("auto" if self.learning_rate == "auto"
                         else float(self.learning_rate))
        with self._batch_progress() as callback:
            result = minimize_pair_loss(
                state, train_loss, validation=validation, learning_rate=learning_rate,
                max_iter=self.max_iter, tol=self.tol,
                n_iter_no_change=self.n_iter_no_change,
                early_stopping=validation is not None, callback=callback,
                grow=SUBSPACE_GROWTH)
        if held is not None and result.best_iter > 0:
            # the held-out pairs chose the rank and the number of iterations;
            # the kernel returned learns from every pair (as LassoCV refits)
            state, trace, loss = self._refit_prior(pairs, y / unit, index, prior_rank,
                                                   prior_imputations, trace,
                                                   result.state.n_objects, subspace)
            refit = minimize_pair_loss(
                state, loss,
                grow=SUBSPACE_GROWTH, grow_at=result.growth,
                learning_rate=learning_rate, max_iter=result.best_iter, tol=0.0,
                n_iter_no_change=result.best_iter + 1)
            result = result._replace(state=refit.state, loss_curve=refit.loss_curve,
                                     n_iter=result.n_iter + refit.n_iter)
        trace_ = trace * unit
        start = _Start(pairs, y, index, result.state, trace_,
                       auto_learning_rate(result.state, pairs[:, 0], pairs[:, 1]))
        fitted = self._fitted(start, np.zeros(0))
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
            _verdict=validation is not None, _diverged=None)
        return fitted

    def _refit_prior(self, pairs, y, index, prior_rank, prior_imputations, trace,
                     n_objects, subspace):
        """Return the prior, trace and loss of the refit on every pair.

        ``y`` is in the fit's unit.
        """
        a, b = pairs.T
        if prior_rank is None:
            state = initial_state(self, pairs, index)
            if self.trace == "auto":
                trace = auto_trace(state, pairs, y)
            return state, trace, PairLoss(state, a, b, y / trace)
        prior = spectral_prior(n_objects, a, b, y, a, b, y, ranks=(prior_rank,),
                               n_imputations=prior_imputations, fixed=True,
                               subspace=subspace)
        trace = prior.trace if self.trace == "auto" else trace
        if subspace is not None:
            return prior.exponent, trace, SubspacePairLoss(prior.basis, a, b, y / trace)
        return prior.state, trace, PairLoss(prior.state, a, b, y / trace)

    def _spectral_init(self):
        """Whether the prior is the spectral one (``init="auto"``)."""
        return (isinstance(self.init, str) and self.init == "auto"
                and self.init_factor is None)

    def _subspace(self, n_objects):
        """Dimension of the subspace the batch fit learns in (``None``: every direction)."""
        if not self._spectral_init() or n_objects < SUBSPACE_FROM:
            return None
        return subspace_dimension(n_objects)

    @contextmanager
    def _batch_progress(self):
        """Yield the batch iterations' ``callback``: a progress bar when ``verbose``."""
        show = bool(self.verbose)
        with progress_bar(total=self.max_iter, desc="MEGKernelRegressor (batch)",
                          unit="iter", enabled=show) as bar:
            def callback(iteration, train_loss, validation_loss, step):
                bar.update(1)
                if self.verbose >= 2:
                    progress_detail(
                        f"[MEGKernelRegressor] iteration {iteration}: training loss "
                        f"{train_loss:.6g}, held-out loss {validation_loss:.6g}, "
                        f"step {step:.3g} (trace-one units)")
            yield callback if show else None

    def _report(self):
        """Warn about a finished ``fit`` (after the model is stored)."""
        name = type(self).__name__
        if self.solver == "online":
            diverged, before, after, rate = self._diverged
            if diverged:
                warn_user(
                    f"{name}: the on-line fit diverged: the training R^2 fell from "
                    f"{before:.4g} under the prior to {after:.4g} at learning_rate="
                    f"{self.learning_rate!r} ({rate:.4g} in trace-one units); lower the "
                    "learning rate, or use solver='batch', which needs none.",
                    ConvergenceWarning)
            return
        if not self.converged_:
            warn_user(
                f"{name}: the batch fit stopped at max_iter={self.max_iter} iterations "
                "before its loss settled; raise max_iter.", ConvergenceWarning)
        if self._verdict:
            warn_if_not_better(name, self.validation_score_, self.prior_score_,
                               what="R^2 of the held-out squared distances")

    def partial_fit(self, X, y):
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
            Squared distances.

        Returns
        -------
        self : object
        """
        if self._fast_call(X, y):
            return self._partial_fit_fast(X, y)
        return self._partial_fit(X, y)

    @_fit_context(prefer_skip_nested_validation=True)
    def _partial_fit(self, X, y):
        first = not hasattr(self, "state_")
        with unchanged_on_error(self):
            if first:
                start = self._start(X, y)
            else:
                self._check_fixed_params()
                pairs, y = self._validate_trials(X, y, reset=False)
                learning_rate = (self.learning_rate_ if self.learning_rate == "auto"
                                 else float(self.learning_rate))
                start = _Start(pairs, y, self._object_index, self.state_.copy(),
                               self.trace_, learning_rate)
                self._check_targets(start)
            losses = self._run(start.state, start.pairs, start.y, start.learning_rate,
                               start.trace, epoch=None,
                               done=0 if first else self.n_updates_)
            self._commit(start, losses, first=first)
            return self  # inside the block: an interrupt up to here restores the model

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
                and not self.verbose
                and self.__dict__.get("_object_index") is None
                and "feature_names_in_" not in self.__dict__
                and all(now is then for now, then in zip(self._param_values(), params)))

    def _partial_fit_fast(self, X, y):
        """Run one pass over plain, clean examples.

        Anything unusual (a bad index or target, a self-pair, a target out
        of reach, a step near overflow) goes to the validated path, which
        raises or warns exactly as always.
        """
        learning_rate = (self.learning_rate_ if self.learning_rate == "auto"
                         else float(self.learning_rate))
        trace = self.trace_
        if len(y) != len(X) or X.min() < 0 or X.max() >= self.n_objects_:
            return self._partial_fit(X, y)
        low, high = y.min(), y.max()  # NaN fails every comparison below
        if not (low >= 0 and high <= 2.0 * trace
                and 8.0 * learning_rate * (1.0 + high / trace) <= MAX_STEP
                and not (X[:, 0] == X[:, 1]).any()):
            return self._partial_fit(X, y)
        pairs = X.astype(np.intp, copy=False)
        with unchanged_on_error(self):
            start = _Start(pairs, y, None, self.state_.copy(), trace, learning_rate)
            losses = self._run(start.state, pairs, y, learning_rate, trace,
                               epoch=None, done=self.n_updates_)
            self._commit(start, losses, first=False)
            return self  # inside the block: an interrupt up to here restores the model

    #: Parameters the first ``partial_fit`` fixes.
    _FIXED_PARAMS = ("trace", "n_objects", "objects", "init", "init_factor")

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

    def _start(self, X, y):
        """Validate a first call and make its prior, trace and learning rate."""
        pairs, y, index = self._validate_trials(X, y, reset=True)
        state = initial_state(self, pairs, index)
        trace = (auto_trace(state, pairs, y) if self.trace == "auto"
                 else float(self.trace))
        start = _Start(pairs, y, index, state, trace, self._learning_rate(state, pairs))
        self._check_targets(start)
        return start

    def _check_targets(self, start):
        _warn_unreachable(start.pairs, start.y, start.trace)
        check_meg_step(start.learning_rate, start.trace, start.y)

    def _validate_trials(self, X, y, *, reset):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None (give the squared distances of the pairs)."
            )
        if reset:
            pairs, y, index = validate_pairs(
                self, X, y, reset=True, n_objects=declared_n_objects(self),
                objects=self.objects)
            return pairs, self._squared_targets(y, len(pairs)), index
        pairs, y, _ = validate_pairs(self, X, y, reset=False, n_objects=self.n_objects_,
                                     index=self._object_index)
        return pairs, self._squared_targets(y, len(pairs))

    def _squared_targets(self, y, n_pairs):
        """Return the targets as squared distances (``squared=False`` squares them)."""
        if self.squared:
            return check_squared_distances(y, n_pairs)
        y = check_squared_distances(y, n_pairs, name="y (distances, squared=False)")
        with np.errstate(over="ignore"):
            squared = y * y
        if not np.all(np.isfinite(squared)):
            raise ValueError(
                f"y holds distances (squared=False) up to {y.max():.4g}, whose squares "
                "exceed double precision: give them in smaller units.")
        return squared

    def _learning_rate(self, state, pairs):
        if self.learning_rate == "auto":
            return auto_learning_rate(state, pairs[:, 0], pairs[:, 1])
        return float(self.learning_rate)

    def _run(self, state, pairs, y, learning_rate, trace, *, epoch, done):
        """Run the trials on ``state`` (a copy the call owns); return the losses.

        ``verbose=1``: a progress bar (stderr) for calls of at least
        ``_BAR_FROM`` trials; ``verbose=2``: a bar for every call, and a
        detail line every ``_PROGRESS_EVERY`` trials.
        """
        n = len(y)
        losses = np.empty(n)
        show = bool(self.verbose) and (self.verbose >= 2 or n >= _BAR_FROM)
        chunk = _PROGRESS_EVERY if show else max(n, 1)
        if show:
            note_compiling([select(self.method, state, n).name])
        where = (f" epoch {epoch + 1}/{self.n_epochs}"
                 if epoch is not None and self.n_epochs > 1 else "")
        clock = time.perf_counter()
        with progress_bar(total=n, desc=f"MEGKernelRegressor{where}", unit="trial",
                          enabled=show) as trials:
            for start in range(0, n, chunk):
                stop = min(start + chunk, n)
                predictions = run_pair_trials(
                    state, pairs[start:stop, 0], pairs[start:stop, 1], y[start:stop],
                    learning_rate=learning_rate, trace=trace, method=self.method,
                )
                losses[start:stop] = (predictions - y[start:stop]) ** 2
                trials.update(stop - start)
                if show and self.verbose >= 2:
                    progress_detail(
                        f"[MEGKernelRegressor]{where} trial {done + stop}: loss of the "
                        f"last {stop - start} trials {losses[start:stop].sum():.6g}, "
                        f"{time.perf_counter() - clock:.1f} s")
        return losses

    def _fitted(self, start, losses):
        """Return the attributes of a model fitted from scratch (not yet stored)."""
        return {"state_": start.state, "learning_rate_": start.learning_rate,
                "n_updates_": len(losses), "_loss_buffer": np.array(losses, dtype=float),
                "n_objects_": start.state.n_objects, "trace_": start.trace,
                "objects_": object_ids(start.state, start.index),
                "_object_index": start.index,
                "_fixed_params": {name: getattr(self, name)
                                  for name in self._FIXED_PARAMS}}

    def _commit(self, start, losses, *, first):
        """Store the result of a call in one step: nothing before it changed the model.

        Called last inside the caller's ``unchanged_on_error`` block, so an
        interrupt at the caller's ``return`` still restores it.
        """
        done = 0 if first else self.n_updates_
        buffer = np.zeros(0) if first else self._loss_buffer
        needed = done + len(losses)
        if needed > len(buffer):
            grown = np.zeros(max(needed, 2 * len(buffer)))
            grown[:done] = buffer[:done]
            buffer = grown
        buffer[done:needed] = losses  # beyond n_updates_: invisible until committed
        update = {"state_": start.state, "learning_rate_": start.learning_rate,
                  "n_updates_": needed, "_loss_buffer": buffer,
                  "_validated_params": self._param_values()}
        if first:
            update.update(n_objects_=start.state.n_objects, trace_=start.trace,
                          objects_=object_ids(start.state, start.index),
                          _object_index=start.index,
                          _fixed_params={name: getattr(self, name)
                                         for name in self._FIXED_PARAMS})
        self.__dict__.update(update)  # one step: an interrupt cannot split it

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

    def predict(self, X):
        """Predicted squared distances ``K_aa + K_bb - 2 K_ab`` of pairs.

        Their square roots, the distances, with ``squared=False``.
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
