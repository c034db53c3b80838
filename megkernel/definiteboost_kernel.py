"""Batch kernel learning from similar / dissimilar pairs with DefiniteBoost."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from . import _progress as progress
from ._engines import UPDATE_METHOD_CONSTRAINT
from ._kernel_learner import KernelLearnerMixin
from ._numerics.validation import check_pair_labels, refuse_bad_distances, row_name
from ._pair_estimator import (
    PairKernelEstimator,
    unchanged_on_error,
    validate_pairs,
    without_missing_distances,
)
from ._solvers.definiteboost import update_engine
from ._solvers.definiteboost_distances import (
    Y_KINDS,
    pair_sq_distances_from_y,
    resolve_y_kind,
)
from ._solvers.definiteboost_fit import fit_from_distances, fit_from_labels
from ._solvers.definiteboost_rules import (
    nothing_learned_message,
    prior_kept_message,
    prior_trace,
)
from ._warnings import (
    NoImprovementWarning,
    warn_if_not_better,
    warn_user,
)

__all__ = ["DefiniteBoostKernel"]

#: What ``y_kind="auto"`` says when it reads float targets as squared distances.
AMBIGUOUS_DISTANCES = (
    "DefiniteBoostKernel: y_kind='auto' read the float targets as squared distances, "
    "but plain distances are floats too. From megkernel 0.4 y_kind='auto' will refuse "
    "float distances: give y_kind='sq_distances' if they are squared distances (this "
    "result) or y_kind='distances' if they are plain (squared on input). In a "
    "KernelDistances, its given_squared says it for every step.")


class DefiniteBoostKernel(KernelLearnerMixin, ClassifierMixin, PairKernelEstimator):
    r"""Kernel closest to a prior under pair constraints (DefiniteBoost).

    Solves (Section 4 of Tsuda, Raetsch & Warmuth 2004, eqs. 8-14)

    .. math:: \min_W \Delta(W, W_1) \quad \text{s.t. } \mathrm{tr} W = 1,\;
              \mathrm{tr}(W C_j) \le 0

    by greedy Bregman projections onto the most violated constraint. A
    similar pair ``(a, b)`` asks ``||x_a - x_b||^2 <= gamma``
    (``C = u u^T - gamma/tau I``, ``u = e_a - e_b``); a dissimilar pair
    (label ``-1``, beyond the paper, as in ITML) asks
    ``||x_a - x_b||^2 >= gamma_dissimilar``. Squared distances are those of
    the learned kernel ``K = tau W`` (``tau = trace``). In the diagonal case
    the algorithm is AdaBoost.

    **From distances** (``y_kind``, beyond the paper). A user with observed
    squared distances of the pairs (in any units) gives them as ``y``:
    the prior is then the kernel that fits them (:class:`MEGKernelRegressor`
    at its defaults: least squares over PSD kernels from the
    classical-scaling prior, in the distances' units), and the constraints
    come from them by one rule: the closest tenth of the observed pairs of
    distinct objects are similar pairs with ``gamma`` the largest of their
    squared distances, the farthest tenth dissimilar pairs with
    ``gamma_dissimilar`` the smallest of theirs: the kernel closest to that
    fit in which every observed-close pair is at least as close as the
    closest tenth and every observed-far pair at least as far as the
    farthest tenth. When that projection ranks the held-out constraint
    pairs worse than the prior does (see ``validation_fraction``), the
    prior is returned (``converged_`` False) and a
    :class:`~megkernel.NoImprovementWarning` says so: these constraints are
    megkernel's choice, not the user's. That held-out run is scored after
    64, 128, 256, ... projections and stopped once the held-out pairs rank
    worse than under the prior at two of these checkpoints in a row: a
    projection that loses is not run to its end only to be turned away. It
    also stops once two checkpoints in a row rank them no better, beyond
    their noise (the AUC's standard error), than the last one that did: the
    held-out pairs then choose the run's length (the checkpoint that ranked
    them best, if better than the prior beyond that noise; else the prior),
    and the kernel is refitted on every pair for as many projections, as
    MEG's batch fit chooses its iterations.

    **Low-rank mode.** With ``init_factor=F`` (d x r) the prior is
    ``W_1 = F F^T / ||F||_F^2`` and the problem is solved inside its range:
    ``W = P M P^T``, ``C_j`` restricted to ``v v^T - gamma I_r`` with
    ``v = P[a] - P[b]``; eq. 13 uses the restricted eigenvalue range
    (similar ``[-gamma, ||v||^2 - gamma]``, dissimilar ``[gamma_d - ||v||^2,
    gamma_d]``, trace-one units). Cost per projection ``O(r^2)``-``O(r^3)``,
    memory ``O(d r)``. A dissimilar pair with ``||v||^2 <= gamma_d`` (plus
    the margin ``tol * gamma / 2``) can never hold (``v^T M v <= ||v||^2``):
    it is dropped with a warning, listed in ``dropped_constraints_``.

    Parameters
    ----------
    n_objects : int, default=None
        Number of objects ``d``; from ``objects``, ``init`` or ``init_factor``
        when given, otherwise, if ``None``, from the fitted pairs (the largest
        index, or the distinct ids).
    objects : array-like of shape (d,), default=None
        The objects' ids (any hashable values), in the order of the kernel's
        rows; see :class:`MEGKernelRegressor`.
    gamma : float or "auto", default="auto"
        Threshold of similar pairs on the squared distance, in the units of
        the kernel (with ``trace="auto"`` those of the prior ``init`` as
        given; of a trace-one kernel for the identity prior). A ``gamma``
        that every constraint already meets under the prior (nothing to
        learn: typically a threshold in other units) warns
        (:class:`~megkernel.NoImprovementWarning`, naming the prior's squared
        distances and the trace) and leaves ``converged_`` False.
        ``"auto"``: chosen on held-out pairs among 0.3, 0.1 and 0.03 times
        the prior's mean squared distance between distinct objects, the one
        whose kernel ranks the held-out pairs best (see ``validation_fraction``;
        the path runs from the largest ``gamma`` down, each fit continuing the
        previous one, and stops after one that does not converge). The scale is the prior's own,
        so the rule does not depend on units; the fractions span the range
        where learning moves the neighbours: at 0.3 a similar pair moves
        little, below 0.03 the similar pairs' graph diffuses over whole
        connected components. Without held-out pairs: 0.1 times the mean
        (``0.2 tau / d`` for the identity prior, the paper's choice).
    gamma_dissimilar : float or "auto", default="auto"
        Threshold of dissimilar pairs. ``"auto"``: the prior's mean squared
        distance (``2 tau / d`` for the identity prior). Must be below
        ``2 tau``, the largest squared distance a kernel of trace ``tau`` has.
    projection : {"approximate", "exact"}, default="approximate"
        Step of eq. 13 (Theorem 4.1's bound holds) or the exact projection
        of eq. 11 (the chosen constraint then holds with equality).
    corrective : bool, default=False
        ``False``: the paper's algorithm, which only increases the step
        sizes and stops at a feasible kernel that need not be the closest.
        ``True`` (beyond the paper): Hildreth-style corrections may reduce
        earlier steps, so the fit converges to the exact Bregman projection,
        the kernel closest to the prior (the final ``-log
        dual_objective_`` then equals its divergence from the prior).
    slack : float or None, default=None
        ``None``: hard constraints (the paper). A float ``c > 0`` (beyond
        the paper) allows violations at a price: each multiplier is capped,
        ``alpha_j ||v_j||^2 <= c`` (so one constraint moves the log-kernel
        along its own direction by at most ``c`` nats), the box dual of the
        always-feasible soft-margin problem ``min Delta(W, W_1) + c sum_j
        max(0, tr(W C_j)) / ||v_j||^2``. A violated constraint at its cap
        keeps its violation; the fit converges when all others hold. The
        infeasibility certificate does not apply and the last iterate is
        returned.
    max_iter : int or "auto", default="auto"
        Largest number of projections (for each ``gamma`` tried).
        ``"auto"``: 25 per training constraint, at least 2000 (the greedy
        run projects on each constraint about 10 times), and at most
        ``8e6 / d`` for ``d`` objects (4000 at 2000 objects): a budget that
        ends a run in about a minute there; a run that reaches it warns what
        it reached and returns its last iterate.
    tol : float, default=1e-2
        The fit aims at the constraints tightened by ``tol * gamma / 2``
        (squared-distance units of the kernel) and stops when those hold
        within ``tol * gamma / 2``: on convergence every constraint holds.
    init : {"auto", "identity"} or array-like of shape (d, d), default="auto"
        Prior ``W_1``: ``I / d`` or a symmetric positive definite matrix
        (scaled to trace one). ``"auto"``: ``I / d`` for labels; for
        distances (``y_kind``) the :class:`MEGKernelRegressor` fit of them.
        With distances, ``"identity"`` is ``I / d`` at the trace where its
        squared distance is the observed mean.
    init_factor : array-like of shape (d, r), default=None
        Low-rank prior ``W_1 = F F^T / ||F||_F^2``; selects low-rank mode.
        Give ``init`` or ``init_factor``, not both.
    trace : float or "auto", default="auto"
        Trace ``tau`` of the learned kernel. ``"auto"``: the trace of the
        prior as given (``init``'s trace, ``||init_factor||_F^2``), so the
        kernel, ``gamma`` and the squared distances are in the units of the
        user's own prior kernel; 1 for the identity prior, which has no
        units (as before). A float sets the scale: e.g. with the identity
        prior, ``trace=d * s / 2`` gives distinct objects the squared
        distance ``s`` under the prior, so ``gamma`` is then in units where
        the prior's squared distance is ``s``.
    validation_fraction : float or None, default=0.1
        Fraction of the pairs (of each label) held out of a first training,
        for the verdict (``prior_score_``, ``validation_score_``) and for
        choosing ``gamma="auto"``; the kernel returned is then refit on every
        pair. Scored by how well the kernel's squared distances
        rank the held-out pairs (AUC: held-out similar pairs against held-out
        dissimilar ones, or against random pairs of objects when only one
        kind is given): threshold-free, so comparable across ``gamma`` and
        with the prior, and what a nearest-neighbour rule uses (the fraction
        of held-out constraints met is not: a larger ``gamma`` meets more of
        them without learning). When the held-out pairs would be fewer than
        10, nothing is held out: a UserWarning says so and the scores are
        NaN. ``None``: train on every pair, no verdict, no warning. From
        distances with the default prior, the held-out constraint pairs are
        those among the share of every pair the prior's batch fit holds out
        (about that share of each kind), so one MEG fit gives both the
        verdict's prior (its run without them) and the prior returned.
    random_state : int, RandomState instance or None, default=None
        Seeds the held-out split (and the random pairs it ranks against).
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection; same result up to round-off.
    verbose : int, default=0
        ``1``: a progress bar on stderr counting towards the tolerance (the
        share of the way the largest violation has come down to ``tol``, on
        a log scale; rate, ETA), not towards ``max_iter``, and a one-line
        note while numba compiles the engine for the first time; ``2``: plus
        a detail line (largest violation, dual objective and bound) at every
        20th of ``max_iter``. Whatever ``verbose``, a run (or, from
        distances, the fit of its prior) that at its pace will take more
        than 30 s says so once, with its estimate, in a ``UserWarning``.
    y_kind : {"auto", "labels", "sq_distances", "distances"}, default="auto"
        What ``y`` holds. ``"labels"``: similar / dissimilar labels (see
        :meth:`fit`). ``"sq_distances"``: the pairs' observed squared
        distances (non-negative, any units), ``"distances"``: plain
        distances (squared on input); both select the fit from distances
        described above (``gamma``, ``gamma_dissimilar`` and the kernel in
        the distances' squared units). ``"auto"``: labels when ``y`` is
        ``None``, boolean, or all its values are in ``{-1, 1}`` or all in
        ``{0, 1}`` (``0`` meaning *dissimilar*), or of an integer dtype;
        squared distances when it is of a floating dtype and its finite
        values are non-negative and hold another (NaN, a missing pair, and
        an infinite value, refused naming its row, do not make it labels).
        Integer distances, or distances all 0 or 1, need
        ``y_kind="sq_distances"`` (other integers than labels are
        refused, naming it). ``y_kind_`` says what was read.

    Attributes
    ----------
    y_kind_ : {"labels", "sq_distances", "distances"}
        What ``y`` was read as (``y_kind`` resolved).
    state_ : ExponentState
        Exponent of the learned ``W`` and its eigendecomposition.
    n_objects_ : int
    objects_ : ndarray of shape (d,)
        The objects' ids, in the kernel's order (``0..d-1`` for indices).
    gamma_, gamma_dissimilar_ : float
        The thresholds used (kernel units).
    threshold_ : float
        Squared distance below which :meth:`predict` calls a pair similar:
        ``gamma_`` when fitted on similar pairs only, else the midpoint of
        ``gamma_`` and ``gamma_dissimilar_``.
    classes_ : ndarray of shape (2,)
        ``[-1, 1]``.
    rank_ : int
        Dimension ``r`` of the range of the kernel (``d`` in dense mode).
    kernel_ : ndarray of shape (d, d)
        The learned kernel ``trace * W``; in low-rank mode only for
        ``d <= 5000``.
    kernel_factor_ : ndarray of shape (d, r)
        ``F`` with ``kernel_ = F F^T``.
    n_constraints_ : int
        Constraints used (after dropping; from distances, the closest and
        farthest tenth of the pairs).
    dropped_constraints_ : ndarray of int
        Indices (into the fitted pairs) of dissimilar pairs dropped as
        never satisfiable (``||v||^2 <= gamma_dissimilar / trace``).
    n_iter_ : int
        Projections made (along the whole path of ``gamma="auto"``, and by
        the held-out fit; its only ones when the prior is returned).
    trace_ : float
        The trace used (``trace="auto"`` resolved).
    prior_score_ : float
        AUC of the held-out pairs under the prior (0.5 for the identity
        prior, which ties every pair); NaN without held-out pairs.
    validation_score_ : float
        AUC of the held-out pairs under the kernel learned without them (at
        the chosen ``gamma``; refitted on every pair for the returned kernel,
        as ``LassoCV`` refits its ``alpha``; with ``gamma="auto"`` slightly
        optimistic for that choice); not above ``prior_score_``: a
        :class:`~megkernel.NoImprovementWarning`. From distances, a projection
        scoring below the prior leaves the prior returned: this is then the
        prior's score (the projection's in ``gamma_scores_``). NaN without
        held-out pairs.
    gamma_path_ : ndarray
        The ``gamma`` values fitted (one for a given ``gamma``).
    gamma_scores_ : ndarray
        Their held-out AUCs (NaN without held-out pairs).
    n_train_pairs_ : int
        Pairs the scored kernels were trained on (the others were held out);
        the returned kernel is then refit on every pair.
    dual_objective_ : ndarray of shape (n_projections + 1,)
        ``tr exp(log W_1 - sum_s alpha_s C_s)`` from the start (``1``). With
        ``gamma="auto"``, this and the other per-projection logs below are
        those of the chosen ``gamma``'s fit (which started from the previous
        ``gamma``'s kernel).
    dual_bound_ : ndarray of shape (n_iter_ + 1,)
        Theorem 4.1's bound ``prod_s rho(r_s)`` (approximate projection).
    violations_ : ndarray of shape (n_projections,)
        Largest violation before each projection, in kernel units.
    chosen_constraints_ : ndarray of shape (n_projections,)
        Index (into the fitted pairs) of each projected constraint.
    alphas_ : ndarray of shape (n_projections,)
        Step sizes (negative for a corrective step).
    multipliers_ : ndarray of shape (n_constraints_,)
        Accumulated ``alpha_j`` of each constraint (the dual variables).
    max_violation_ : float
        Largest violation of the returned kernel, in kernel units.
    converged_ : bool
        The fit learned and every constraint holds (within ``tol``).
        ``False`` when it stopped at ``max_iter`` (a ConvergenceWarning), and
        when it made no projection at all because the prior already met
        every constraint (a :class:`~megkernel.NoImprovementWarning` naming
        the prior's squared distances: nothing was learned).

    See Also
    --------
    megkernel.definiteboost_pairs : The solver function without the estimator.
    MEGKernelRegressor : Kernel fitted to observed squared distances (the
        prior of the fit from distances).

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import DefiniteBoostKernel
    >>> pairs = np.array([[0, 1], [2, 3], [4, 5]])
    >>> model = DefiniteBoostKernel(n_objects=8, validation_fraction=None).fit(pairs)
    >>> model.predict(pairs)
    array([1, 1, 1])
    """

    _parameter_constraints: dict = {
        **PairKernelEstimator._parameter_constraints,
        "gamma": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "gamma_dissimilar": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "projection": [StrOptions({"approximate", "exact"})],
        "corrective": ["boolean"],
        "slack": [Interval(Real, 0, None, closed="neither"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither"), None],
        "method": [UPDATE_METHOD_CONSTRAINT],
        "y_kind": [StrOptions(set(Y_KINDS))],
    }

    def __init__(self, *, n_objects=None, objects=None, gamma="auto", gamma_dissimilar="auto",
                 projection="approximate", corrective=False, slack=None, max_iter="auto",
                 tol=1e-2, init="auto", init_factor=None, trace="auto",
                 validation_fraction=0.1, random_state=None, method="auto", verbose=0,
                 y_kind="auto"):
        self.n_objects = n_objects
        self.objects = objects
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.projection = projection
        self.corrective = corrective
        self.slack = slack
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.init_factor = init_factor
        self.trace = trace
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.method = method
        self.verbose = verbose
        self.y_kind = y_kind

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Find the kernel closest to the prior satisfying the pair constraints.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects of each pair: integer indices, or ids of any hashable
            kind (see ``objects``); a 2-column DataFrame works.
        y : array-like of shape (n_pairs,), default=None
            Labels: ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` /
            ``False`` dissimilar; ``None``: all similar. Or the pairs'
            observed (squared) distances: see ``y_kind``.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        with unchanged_on_error(self):
            X, y = self._without_missing(X, y)
            pairs, y, index = self._validate_pair_table(X, y)
            y_kind = resolve_y_kind(self.y_kind, y)
            if self.y_kind == "auto" and y_kind == "sq_distances":
                warn_user(AMBIGUOUS_DISTANCES, FutureWarning)
            prior = self._initial_state(pairs, index)
            options = dict(gamma=self.gamma, gamma_dissimilar=self.gamma_dissimilar,
                           max_iter=self.max_iter,
                           validation_fraction=self.validation_fraction,
                           random_state=self.random_state,
                           progress=partial(_progress, self.verbose, self.method,
                                            self.projection),
                           slack=self.slack, projection=self.projection,
                           corrective=self.corrective, tol=self.tol, method=self.method)
            if y_kind == "labels":
                signs = self._pair_signs(y, pairs)
                trace = (prior_trace(self.init, self.init_factor) if self.trace == "auto"
                         else float(self.trace))
                result = fit_from_labels(pairs, signs, prior=prior, trace=trace, **options)
            else:
                given = self.init_factor is not None or not isinstance(self.init, str)
                result = fit_from_distances(
                    pairs, pair_sq_distances_from_y(y, pairs, y_kind), prior=prior,
                    data_prior=self._uses_data_prior(),
                    init_trace=prior_trace(self.init, self.init_factor) if given else None,
                    trace=self.trace, **options)
            self._warn_split(result.split_reason, labels=y_kind == "labels",
                             n_pairs=len(pairs))
            note = ("; the prior is the fit of the distances that chose these pairs, so "
                    "a tie means the constraints added nothing to it"
                    if y_kind != "labels" and self._uses_data_prior() else "")
            self._finish(result.state, index, result.pairs, result.signs, result.log,
                         result.trace, result.n_train, result.held_out, note=note)
            self.y_kind_ = y_kind
            return self  # inside the block: an interrupt up to here restores the model

    def _without_missing(self, X, y):
        """Leave out pairs of NaN distance (missing), refuse a NaN label by its row.

        Checked before scikit-learn's validation, whose message has no row.
        """
        if y is None:
            return X, y
        values = np.asarray(y)
        if values.dtype.kind in "USO" and values.ndim == 1:
            text = next((row for row, value in enumerate(values.tolist())
                         if isinstance(value, (str, bytes))), None)
            if text is not None:
                row = row_name(y, text)
                raise ValueError(f"y holds the text {values.tolist()[text]!r} at row {row}: give "
                                 "numbers (pair labels, or distances with y_kind); parse the "
                                 "table's numbers first.")
        if values.dtype.kind not in "iuf" or values.ndim != 1 and values.shape[1:] != (1,):
            return X, y  # one value a row, or scikit-learn's refusal of y's shape
        kind = resolve_y_kind(self.y_kind, values)
        if kind != "labels":
            # before scikit-learn's validation, whose message has no row
            refuse_bad_distances(values.ravel().astype(float), y, name="y", kind=(
                "distance" if kind == "distances" else "squared distance"))
        elif np.isinf(values).any():
            t = int(np.flatnonzero(np.isinf(values.ravel()))[0])
            raise ValueError(f"y holds {values.ravel()[t]} at row {row_name(y, t)}, which is no "
                             "pair label: label every pair +1 (similar) or -1 (dissimilar); "
                             "distances need y_kind='distances' or 'sq_distances'.")
        missing = np.isnan(values.ravel()) if values.dtype.kind == "f" else np.zeros(1, bool)
        if not missing.any():
            return X, y
        if kind != "labels":
            return without_missing_distances(X, y, who="DefiniteBoostKernel")
        row = row_name(y, int(np.flatnonzero(missing)[0]))
        raise ValueError(f"y has no label at row {row} (NaN): label every pair +1 (similar) "
                         "or -1 (dissimilar), or leave the unlabelled pairs out.")

    def _reads_squared_distances(self):
        """``y_kind="sq_distances"``: the targets are squared distances."""
        return {"y_kind": "sq_distances"} if "y_kind" in self.get_params(deep=False) else {}

    def squared_distances_of(self, targets):
        """Return the squared distances these targets state, as ``y_kind`` reads them.

        Parameters
        ----------
        targets : array-like of shape (n_pairs,)
            The targets given to :meth:`learn_kernel`.

        Returns
        -------
        ndarray of shape (n_pairs,) or None
            Squared distances (plain ones squared under
            ``y_kind="distances"``), or ``None`` for labels.
        """
        try:
            values = np.array(targets, dtype=float)
        except (TypeError, ValueError):
            return None
        kind = resolve_y_kind(self.y_kind, values)
        if kind == "labels":
            return None
        return values**2 if kind == "distances" else values

    def _pair_signs(self, y, pairs):
        """Return the labels as ``+1`` / ``-1``, hinting at ``y_kind`` for distances."""
        try:
            return check_pair_labels(y, pairs, name="y")
        except ValueError as error:
            values = np.asarray(y) if y is not None else np.zeros(0)
            if self.y_kind == "auto" and values.dtype.kind in "iu" and np.all(values >= 0):
                raise ValueError(f"{error} If y holds the pairs' distances, give "
                                 "y_kind='sq_distances' (or 'distances').") from error
            if (self.y_kind == "auto" and values.dtype.kind == "f"
                    and not np.all(np.isin(values, (-1.0, 0.0, 1.0)))):
                # distances read as labels for their negative values (a "not measured" -1)
                raise ValueError(
                    f"{error} If y holds the pairs' distances, give y_kind='distances' (or "
                    f"'sq_distances'), and mark a missing distance with NaN, not a negative "
                    f"value such as {np.min(values):.6g}.") from error
            raise

    def _finish(self, state, index, pairs, signs, log, trace, n_train, held_out, *,
                note=""):
        """Store the fit and warn what must be said (``note``: for the verdict).

        One warning per problem: a fit that made no projection says so, and
        the held-out verdict (the prior against itself) is not added to it.
        """
        self._store(state, index, signs, log, trace, n_train)
        if log["n_iter_total"] == 0:
            self._nothing_learned(state, pairs, signs, trace, log)
        elif held_out is not None and "projection_score" in log:  # the prior returned
            warn_user(prior_kept_message(log, held_out.description), NoImprovementWarning)
        elif held_out is not None:
            warn_if_not_better(
                "DefiniteBoostKernel", self.validation_score_, self.prior_score_,
                what=f"AUC of the {held_out.description}{note}", best_possible=1.0)

    def _warn_split(self, reason, *, labels, n_pairs):
        """Say that nothing was held out, and what that means."""
        if not reason:
            return
        gamma = ("at 0.1 of the prior's mean squared distance" if labels
                 else "at the closest tenth's largest squared distance")
        where = "" if labels else f" (the closest and farthest tenth of {n_pairs} pairs)"
        warn_user(f"DefiniteBoostKernel: {reason}{where}; training on every "
                  "pair, with no verdict (prior_score_ and validation_score_ are NaN) "
                  f"and gamma='auto' {gamma}. Give more pairs, or "
                  "validation_fraction=None to skip the verdict.", UserWarning)

    def _nothing_learned(self, state, pairs, signs, trace, log):
        """Warn that no projection was made, and set ``converged_`` to False.

        Not an error (a fold may hold only such pairs), but never silent.
        """
        self.converged_ = False
        warn_user(nothing_learned_message(state, pairs, signs, trace, log),
                  NoImprovementWarning)

    def _store(self, state, index, signs, log, trace, n_train):
        self.state_ = state
        self.__dict__.update(self._fitted_objects(state, index))
        self.trace_ = trace
        self.n_train_pairs_ = n_train
        self.prior_score_ = log["prior_score"]
        self.validation_score_ = log["validation_score"]
        self.gamma_path_ = log["gamma_path"]
        self.gamma_scores_ = log["gamma_scores"]
        self.classes_ = np.array([-1, 1])
        self.gamma_ = log["gamma"]
        self.gamma_dissimilar_ = log["gamma_dissimilar"]
        has_dissimilar = bool(np.any(signs < 0))
        if has_dissimilar and np.any(signs > 0) and self.gamma_dissimilar_ < self.gamma_:
            warn_user(
                f"gamma_dissimilar={self.gamma_dissimilar_:.4g} is below "
                f"gamma={self.gamma_:.4g}: a squared distance between the two meets "
                "both kinds of constraint, so predict (threshold_ at their midpoint) "
                "can call a pair that meets its constraint the other kind. Give "
                "gamma_dissimilar >= gamma.", UserWarning)
        self.threshold_ = (0.5 * (self.gamma_ + self.gamma_dissimilar_) if has_dissimilar
                           else self.gamma_)
        self.n_constraints_ = len(log["kept"])
        self.dropped_constraints_ = log["dropped"]
        self.n_iter_ = log["n_iter_total"]
        self.dual_objective_ = log["dual_objective"]
        self.dual_bound_ = log["dual_bound"]
        self.violations_ = log["violation"]
        self.chosen_constraints_ = log["constraint"]
        self.alphas_ = log["alpha"]
        self.multipliers_ = log["multipliers"]
        self.max_violation_ = max(log["max_violation"], 0.0)
        self.converged_ = log["converged"]

    def targets_are_distances(self, targets):
        """Whether ``targets`` are observed distances (``y_kind``) rather than labels.

        Parameters
        ----------
        targets : array-like of shape (n_pairs,)
            The targets given to :meth:`learn_kernel`.

        Returns
        -------
        bool
            True when ``y_kind`` reads them as (squared) distances.
        """
        try:
            values = np.array(targets, dtype=float)
        except (TypeError, ValueError):
            return False
        return resolve_y_kind(self.y_kind, values) != "labels"

    # -- fitted views ----------------------------------------------------------
    def pair_sq_distances(self, X):
        """Compute the squared distances ``K_aa + K_bb - 2 K_ab`` of pairs under ``kernel_``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects of each pair: integer indices, or ids as given to
            :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_pairs,)
            Squared distance of each pair under the learned kernel.
        """
        check_is_fitted(self, "state_")
        pairs, _, _ = validate_pairs(self, X, reset=False, n_objects=self.n_objects_,
                                     index=self._object_index)
        return self.trace_ * self.state_.pair_sq_distances(pairs[:, 0], pairs[:, 1])

    def pair_distances(self, X):
        """Compute squared distances: deprecated alias of :meth:`pair_sq_distances`.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects of each pair: integer indices, or ids as given to
            :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_pairs,)
            Squared (not plain) distance of each pair under the learned kernel.
        """
        warn_user("pair_distances is deprecated since megkernel 0.2 (it returns "
                  "squared distances) and will be removed in 0.3; use "
                  "pair_sq_distances.", FutureWarning)
        return self.pair_sq_distances(X)

    def decision_function(self, X):
        """Compute ``threshold_ - squared distance``: positive for similar pairs.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects of each pair: integer indices, or ids as given to
            :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_pairs,)
            ``threshold_`` minus each pair's squared distance under the
            learned kernel.
        """
        return -self.pair_sq_distances(X) + self.threshold_  # NotFittedError first

    def predict(self, X):
        """Predict ``+1`` (similar) where the squared distance is ``<= threshold_``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Objects of each pair: integer indices, or ids as given to
            :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_pairs,)
            ``+1`` for pairs predicted similar, ``-1`` for the others.
        """
        return np.where(self.decision_function(X) >= 0, 1, -1)

    def __sklearn_tags__(self):
        """Tag ``y`` optional (``None``: all pairs similar) and two-class only."""
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.classifier_tags.multi_class = False
        tags.classifier_tags.poor_score = True
        return tags


@contextmanager
def _progress(verbose, method, projection, state, max_iter, n_constraints=None):
    """Yield the projections' progress callback (``None`` unless ``verbose``).

    ``verbose=2``: also a line per twentieth of ``max_iter``.
    """
    if not verbose:
        yield None
        return
    progress.note_compiling([update_engine(method, state, n_constraints, projection)])
    every = max(1, max_iter // 20)
    # convergence (every constraint within tol), not max_iter, ends an ordinary
    # fit: the bar counts towards the tolerance (a bar towards max_iter would
    # show a false ETA)
    with progress.ToleranceBar("DefiniteBoostKernel") as towards_tol:
        def callback(t, record):
            margin = record.get("margin", 0.0)
            towards_tol.update(t, record["violation"] + margin, margin)
            if verbose >= 2 and (t % every == 0 or t == 1):
                progress.detail(f"[DefiniteBoostKernel] iter {t}: largest violation "
                                f"{record['violation']:.4g}, dual objective "
                                f"{record['dual_objective']:.6g} (bound "
                                f"{record['dual_bound']:.6g})")

        yield callback
