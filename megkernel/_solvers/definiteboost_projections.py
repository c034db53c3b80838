"""DefiniteBoost's algorithm: Bregman projections onto inequality constraints (Section 4).

Finds ``W* = argmin Delta(W, W_1)`` subject to ``tr W = 1`` and
``tr(W C_j) <= 0`` by greedy approximate (eq. 13) or exact (eq. 11)
projections onto the most violated constraint, keeping
``W_t = exp(log W_1 - sum_s alpha_s C_{j_s}) / Z`` in the stable exponent form
(eq. 12). The dual objective ``tr exp(log W_1 - sum alpha C)`` (eq. 9, with
``tr W_1 = 1``) is recorded with Theorem 4.1's bound ``prod rho(r_t)``.

Pure solver functions: arrays in, arrays and a log out. The rules of pair
labels (thresholds, the estimator's defaults, the public
:func:`~megkernel.definiteboost_pairs`) live in :mod:`.definiteboost_rules`,
the public entry points in :mod:`.definiteboost`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning

from .._engines import factor_rows_sq_distances, pair_sq_distances, select
from .._numerics.limits import MAX_SCALE, MIN_SCALE
from .._numerics.spectral import (
    check_symmetric,
    normalized_exp_weights,
)
from .._numerics.state import ExponentState
from .._numerics.threads import blas_threads
from .._numerics.validation import in_scale_range
from .._warnings import warn_user
from .bounds import _log_rho
from .definiteboost_choice import (
    choose,
    kept_best,
    run_bounds,
    run_log,
    step,
)
from .definiteboost_fused import fused_applies, run_fused
from .definiteboost_lazy import lazy_applies, run_lazy
from .slow_runs import PaceEstimate, duration

__all__ = [
    "run_definiteboost",
    "PairConstraints",
    "MatrixConstraints",
]

#: Range of a constraint matrix's largest entry (constraints are scale-free).
_MIN_CONSTRAINT_SCALE, _MAX_CONSTRAINT_SCALE = MIN_SCALE, MAX_SCALE
#: Eigenvalues within this fraction of the largest are round-off (no sign).
_SIGN_RTOL = 1e-12


class MatrixConstraints:
    """General constraints ``tr(W C_j) <= 0`` for symmetric ``C_j`` (d x d)."""

    def __init__(self, constraints):
        self.matrices = np.stack([check_symmetric(C, name=f"constraints[{j}]")
                                  for j, C in enumerate(constraints)])
        scale = np.abs(self.matrices).max(axis=(1, 2))
        out = ~in_scale_range(scale)
        if np.any(out):
            bad = np.flatnonzero(out)[0]
            raise ValueError(
                f"constraints[{bad}] has largest entry {scale[bad]:.3g}, outside "
                f"[{_MIN_CONSTRAINT_SCALE:g}, {_MAX_CONSTRAINT_SCALE:g}]: a constraint "
                "tr(W C) <= 0 does not change with the scale of C, so rescale it.")
        eigenvalues = np.linalg.eigvalsh(self.matrices)
        self.lam_min = eigenvalues[:, 0]
        self.lam_max = eigenvalues[:, -1]
        spread = np.abs(eigenvalues).max(axis=1)
        one_signed = ((self.lam_min >= -_SIGN_RTOL * spread)
                      | (self.lam_max <= _SIGN_RTOL * spread))
        if np.any(one_signed):
            bad = np.flatnonzero(one_signed)[0]
            raise ValueError(
                f"constraints[{bad}] must have eigenvalues of both signs, beyond "
                f"round-off (got range [{self.lam_min[bad]:.3g}, {self.lam_max[bad]:.3g}])."
            )

    def __len__(self):
        return len(self.matrices)

    def values(self, state, subset=None):
        """``tr(W C_j)`` for every constraint (or those of ``subset``)."""
        matrices = self.matrices if subset is None else self.matrices[subset]
        return np.tensordot(matrices, state.matrix(), axes=([1, 2], [0, 1]))

    def eigen_range(self, j):
        return self.lam_max[j], self.lam_min[j]

    def project(self, state, j, alpha, engine):
        """Update ``A <- A - alpha C_j``; return the change of the log-dual offset.

        A general ``C_j`` is no rank-one change: every engine re-decomposes.
        """
        state.add_symmetric(self.matrices[j], -alpha)
        return 0.0

    def value_after(self, state, j, alpha, engine=None):
        """``tr(W(alpha) C_j)`` with ``W(alpha) ~ exp(A - alpha C_j)``.

        A general ``C_j`` costs one ``eigh`` whatever the engine.
        """
        lam, vecs = linalg.eigh(state.exponent - alpha * self.matrices[j],
                                check_finite=False)
        W = (vecs * normalized_exp_weights(lam)) @ vecs.T
        return float(np.sum(W * self.matrices[j]))


class PairConstraints:
    r"""Distance constraints on pairs, ``C_j = s_j (v_j v_j^T - \gamma_j I)``.

    ``s_j = +1``: similar, ``||x_a - x_b||^2 <= gamma_j``;
    ``s_j = -1``: dissimilar, ``||x_a - x_b||^2 >= gamma_j``
    (thresholds in trace-one units). ``v_j = e_a - e_b`` or ``P[a] - P[b]``.
    The ``gamma I`` part only rescales ``exp(A)``: it is kept as a scalar
    offset of the log-dual, and ``A`` changes by a rank-one matrix.
    """

    def __init__(self, a, b, signs, thresholds, state):
        self.a = np.asarray(a, dtype=np.intp)
        self.b = np.asarray(b, dtype=np.intp)
        self.signs = np.asarray(signs, dtype=float)
        self.thresholds = np.broadcast_to(np.asarray(thresholds, dtype=float),
                                          self.a.shape).copy()
        if state.basis is None:  # v = e_a - e_b
            self.vectors = None
        else:  # kept: gathering P[a] - P[b] again each iteration costs more than the product
            self.vectors = state.pair_vectors(self.a, self.b)
        self.sq_norms = state.pair_sq_norms(self.a, self.b)
        similar = self.signs > 0
        self.lam_max = np.where(similar, self.sq_norms - self.thresholds, self.thresholds)
        self.lam_min = np.where(similar, -self.thresholds, self.thresholds - self.sq_norms)

    def __len__(self):
        return len(self.a)

    def values(self, state, subset=None):
        """``tr(W C_j) = s_j (v_j^T W v_j - gamma_j)`` for every constraint.

        Only those of ``subset``, an index array, when it is given.
        """
        a, b, signs, thresholds = self.a, self.b, self.signs, self.thresholds
        if subset is not None:
            a, b, signs, thresholds = a[subset], b[subset], signs[subset], thresholds[subset]
        if self.vectors is None:
            sq_distances = pair_sq_distances(state, a, b)
        elif type(state) is ExponentState and len(a) > state.n_objects:
            # more pairs than points: the points' factor P V sqrt(w) once (n r^2),
            # then a gather per pair (r), not every pair's r x r product (n_pairs r^2)
            sq_distances = factor_rows_sq_distances(state.factor(), a, b)
        else:
            vectors = self.vectors if subset is None else self.vectors[subset]
            weights = state.density_eigenvalues()
            sq_distances = np.empty(len(vectors))
            rows = max(1, _VALUES_BLOCK_ENTRIES // max(vectors.shape[1], 1))
            for start in range(0, len(vectors), rows):  # small temporaries: see the constant
                coords = vectors[start:start + rows] @ state.eigenvectors
                sq_distances[start:start + rows] = (coords * coords) @ weights
        return signs * (sq_distances - thresholds)

    def eigen_range(self, j):
        return self.lam_max[j], self.lam_min[j]

    def project(self, state, j, alpha, engine):
        """Update ``A <- A - alpha s_j v v^T`` by ``engine``; return ``alpha s_j gamma_j``."""
        engine.pair_update(state, self.a[j], self.b[j], -alpha * self.signs[j])
        return alpha * self.signs[j] * self.thresholds[j]

    def value_after(self, state, j, alpha, engine):
        """``tr(W(alpha) C_j)`` after ``A <- A - alpha s_j v v^T``.

        The engine's ``pair_sq_distance_after`` (rank-one: one rank-one
        eigenproblem in the current eigenbasis, ``O(r^2)``).
        """
        z = state.pair_coordinates(self.a[j], self.b[j])[0]
        sq_distance = engine.pair_sq_distance_after(state, z, -alpha * self.signs[j])
        return float(self.signs[j] * (sq_distance - self.thresholds[j]))


#: Entries per block of the pairs' coordinates in :meth:`PairConstraints.values`
#: (512 KB): larger temporaries are mapped and faulted in again at every
#: iteration (see ``megkernel._numerics.spectral._FACTOR_BLOCK_ENTRIES``).
_VALUES_BLOCK_ENTRIES = 1 << 16

class _Settings(NamedTuple):
    """How :func:`run_definiteboost` runs (the algorithm's options)."""

    projection: str = "approximate"
    max_iter: int = 1000
    tol: float = 1e-8
    keep: str = "best"
    corrective: bool = False
    max_multiplier: object = None
    min_prior_eigenvalue: object = None
    scan_every: object = None


#: Candidates kept between two scans of every constraint, per scan interval
#: (see :func:`_scan_interval`), and at least this many.
_CANDIDATES_PER_INTERVAL, _MIN_CANDIDATES = 8, 64

#: Scans of at most this many pair-eigenvector terms (``m r``, about 1 ms)
#: run at every iteration: the paper's greedy choice exactly, wherever a scan
#: costs little (e.g. the Section 5 experiment, d = 52).
_SCAN_ALWAYS_UP_TO = 1 << 20


def _scan_interval(n_constraints, size):
    """Projections between two evaluations of every constraint.

    Evaluating all ``m`` pair constraints costs ``O(m r)``; one projection
    (a rank-one eigen-update) at least ``O(r^2)``. Re-scanning every
    ``ceil(m / r)`` projections keeps the scans' cost at most that of the
    projections; in between, the most violated of a working set (the
    :data:`_CANDIDATES_PER_INTERVAL` x interval most violated constraints
    of the last scan, at least :data:`_MIN_CANDIDATES`), re-evaluated
    exactly, is projected. With ``m <= r``, or a scan of at most
    :data:`_SCAN_ALWAYS_UP_TO` terms, every iteration scans (the paper's
    greedy choice exactly). Without the working set, on a large state with
    many constraints the scan is most of an iteration's cost.
    """
    if n_constraints * size <= _SCAN_ALWAYS_UP_TO:
        return 1
    return max(1, -(-n_constraints // max(size, 1)))


def _factor_scan_interval(n_constraints, n_objects, rank):
    """Projections between two scans when a scan goes through the points' factor.

    In low-rank mode with more pairs than points (the metric learners) a
    scan forms the factor ``P V sqrt(w)`` (``n r^2``) and gathers two of its
    rows per pair (``m r``), while a working-set iteration evaluates its
    ``c = max(64, 8 s)`` candidates as ``c`` products of an ``r``-vector
    with the ``r x r`` eigenvectors (``c r^2``). Scanning every ``s``
    iterations then costs, per iteration and in units of ``r^2``, ``c + (n +
    m / r) / s`` (``n + m / r`` for ``s = 1``, where no working set is
    kept); the ``s`` of least cost is taken. A scan of at most
    :data:`_SCAN_ALWAYS_UP_TO` multiply-adds runs at every iteration (the
    paper's greedy choice). The working set changes which constraint is
    projected only between scans, so the learned metric's held-out quality
    is kept while a fit makes fewer scans (see the benchmarks page).
    """
    rank = max(int(rank), 1)
    if n_objects * rank * rank + n_constraints * rank <= _SCAN_ALWAYS_UP_TO:
        return 1
    scan = n_objects + n_constraints / rank

    def cost(s):
        if s == 1:
            return scan
        return max(_MIN_CANDIDATES, _CANDIDATES_PER_INTERVAL * s) + scan / s

    return min(range(1, int(np.sqrt(scan)) + 2), key=cost)


def _scans_factor(constraints, state):
    """Whether a full scan of ``constraints`` goes through the points' factor.

    This is the branch :meth:`PairConstraints.values` takes.
    """
    return (getattr(constraints, "vectors", None) is not None
            and type(state) is ExponentState and len(constraints) > state.n_objects)


def _check_settings(settings, n_constraints):
    """Refuse options the greedy run cannot honour (before any state changes)."""
    if settings.projection not in ("approximate", "exact"):
        raise ValueError(f"projection must be 'approximate' or 'exact', got "
                         f"{settings.projection!r}.")
    if settings.keep not in ("best", "last"):
        raise ValueError(f"keep must be 'best' or 'last', got {settings.keep!r}.")
    if isinstance(settings.max_iter, bool) or not (
            isinstance(settings.max_iter, (int, np.integer)) and settings.max_iter >= 0):
        raise ValueError(f"max_iter must be an integer >= 0, got {settings.max_iter!r}.")
    if np.isnan(settings.tol):
        raise ValueError("tol must be a number, got nan.")
    if n_constraints == 0:
        raise ValueError("No constraints: give at least one.")


def _working_set(scores, n_candidates):
    """Return the indices of the largest scores, ascending (ties go to the first)."""
    if n_candidates >= scores.size:
        return None
    top = np.argpartition(-scores, n_candidates - 1)[:n_candidates]
    return np.sort(top)


class ChosenCount(int):
    """``max_iter`` that megkernel chose for ``max_iter="auto"`` (an int).

    The warnings about a run that reached it say so: the user did not set
    the number. ``reason`` (optional) says how it was chosen, for those
    warnings (e.g. the budget of a run over many objects). ``budgeted``:
    whether the count cuts the run short of its end (its ties then go in a
    scrambled order, see ``fit_pair_constraints``); by default whether there
    is a ``reason``.
    """

    def __new__(cls, value, reason="", budgeted=None):
        count = super().__new__(cls, value)
        count.reason = reason
        count.budgeted = bool(reason) if budgeted is None else bool(budgeted)
        return count


class SlowRunNote:
    """Warn once when a run of projections will take long (:mod:`.slow_runs`).

    Called with the number of projections done and, from the solvers, the
    violation of the constraint projected; after
    :data:`~.slow_runs.SLOW_RUN_AFTER` seconds, if the run at its pace so far
    ends after more than :data:`~.slow_runs.SLOW_RUN_SECONDS` (the sooner of
    ``max_iter`` and ``tol``, progress towards ``tol`` being the share of
    the way the smallest violation so far has come from the first one down
    to ``tol`` on a log scale), it warns with the estimate and the ways to
    shorten the run (``max_iter``, ``slack``, ``tol``). The pace is that of
    the projections since the first one: the setup before it (a first
    ``eigh``, seconds at thousands of objects) is paid once, not per
    projection.

    Parameters
    ----------
    max_iter : int
        The run's ``max_iter`` (a :class:`ChosenCount` is named as such).
    n_constraints : int
        Constraints, for the message.
    tol : float, optional
        The run stops when the largest violation is at most ``tol``;
        without it (or without violations) the estimate is to ``max_iter``.
    """

    def __init__(self, max_iter, n_constraints, tol=None):
        self.max_iter = max_iter  # a ChosenCount kept as such, for the message
        self.n_constraints = int(n_constraints)
        self.pace = PaceEstimate(max_iter, tol)  # on slow_runs' clock

    def __call__(self, done, violation=None):
        slow = self.pace(done, violation)
        if slow is None:
            return
        chosen = (f"max_iter='auto' chose for {self.n_constraints} constraints"
                  if isinstance(self.max_iter, ChosenCount)
                  else f"of max_iter={self.max_iter} ({self.n_constraints} constraints)")
        if slow.share > 0:
            end = (f"; the largest violation has come {100 * slow.share:.0f} % of the way to "
                   f"tol (log scale), and at this pace reaches it in about "
                   f"{duration(slow.to_tol)}")
        else:
            end = " if the run does not converge first"
        warn_user(
            f"DefiniteBoost: {slow.done} projections took {slow.elapsed:.1f} s; at this pace "
            f"the {self.max_iter} projections {chosen} take about "
            f"{duration(slow.to_max_iter)}{end}. To shorten it: a smaller max_iter, "
            "slack=... (soft constraints, which labels that cannot all hold do not drag "
            "on), or a larger tol.", UserWarning)


def run_definiteboost(constraints, state, settings=None, *, method="eigh", callback=None,
                      callback_at=None, checkpoints=None, on_checkpoint=None):
    """Greedy Bregman projections on ``state`` (in place); returns the log.

    Parameters
    ----------
    constraints : PairConstraints or MatrixConstraints
    state : ExponentState
        Starts at ``log W_1`` with ``tr W_1 = 1``; holds the result.
    settings : _Settings, optional
        ``projection`` ("approximate": eq. 13; "exact": eq. 11);
        ``max_iter``; ``tol`` (stop when ``max_j tr(W C_j) <= tol``);
        ``keep`` ("best": leave the iterate with the smallest largest
        violation, the answer when the run stops early; "last": the last
        one, of smallest dual objective); ``corrective`` (see below);
        ``max_multiplier`` (see below); ``min_prior_eigenvalue`` (smallest
        eigenvalue of ``W_1``: a dual objective below it certifies that the
        constraints are infeasible by weak duality, which stops the run).

        ``corrective``: the paper's algorithm only ever increases the
        multipliers ``alpha_j``; it stops at a feasible kernel that need not
        be the closest one. With corrections (Hildreth-style, beyond the
        paper) a constraint with ``alpha_j > 0`` that has become slack may
        also be chosen and its multiplier reduced (never below 0), so the
        run converges to the exact Bregman projection: it stops when
        feasibility and complementary slackness both hold within ``tol``.
        The dual objective still never increases; Theorem 4.1's factor is
        applied for every step not clipped at ``alpha_j = 0``.

        ``max_multiplier`` (float or array, beyond the paper): an upper
        bound ``C_j`` on each multiplier; the box ``0 <= alpha_j <= C_j`` is
        the dual of the soft-margin problem ``min Delta(W, W_1) + sum_j C_j
        max(0, tr(W C_j))``, which is always feasible. A violated
        constraint whose multiplier reached its bound is then optimal and
        no longer chosen; steps are clipped at the bound.

        ``scan_every`` (int or None): projections between two evaluations
        of every constraint; in between, the most violated constraint of a
        working set (the most violated ones of the last scan, re-evaluated
        exactly at each step) is projected, and a run only stops after a
        scan. ``None``: ``ceil(m / r)`` (see :func:`_scan_interval`), which
        is 1, the paper's greedy choice at every step, for ``m <= r``; where
        a scan forms the points' factor (low-rank mode, more pairs than
        points), the interval of least cost (:func:`_factor_scan_interval`).
    method : {"auto", "eigh", "rank-one"}, default="eigh"
        Engine of each pair projection (see :func:`megkernel._engines.select`).
    callback : callable, optional
        Called as ``callback(t, record)`` after each iteration.
    callback_at : iterable of int, optional
        Only after these iterations (e.g. a validation's checkpoints): a run
        of small rank then goes through the compiled loop of
        :mod:`.definiteboost_fused`, which hands the state back only there.
    checkpoints : iterable of int, optional
        Iterations after which ``on_checkpoint(t)`` is called with ``state``
        current (its eigendecomposition refreshed where a run keeps it
        stale), whatever the engine and whether or not there is a
        ``callback``; ``on_checkpoint`` may raise to end the run there (a
        validation pruning it), leaving ``state`` at that iterate. The lazy
        loop's refresh restarts its Lanczos steps there: a run with
        checkpoints differs from one without by rounding (the same
        constraints; step sizes within about 1e-15).
    on_checkpoint : callable, optional
        Called as ``on_checkpoint(t)``.

    Returns
    -------
    log : dict of arrays
        ``constraint`` (chosen ``j_t``), ``violation`` (``r_t``), ``alpha``
        (negative for a corrective step), ``multipliers`` (``alpha_j``),
        ``dual_objective`` and ``dual_bound`` (index 0 is the start),
        ``max_violation`` of the kept iterate, ``converged``,
        ``infeasible``, ``n_iter``.
    """
    settings = _Settings() if settings is None else settings
    _check_settings(settings, len(constraints))
    engine = select(method, state, need=("exact-update" if settings.projection == "exact"
                                         else "update"))
    if settings.scan_every is not None:
        scan_every = int(settings.scan_every)
    elif _scans_factor(constraints, state):
        scan_every = _factor_scan_interval(len(constraints), state.n_objects, state.size)
    else:
        scan_every = _scan_interval(len(constraints), state.size)
    checkpoints = (frozenset(int(t) for t in checkpoints)
                   if on_checkpoint is not None and checkpoints is not None else frozenset())
    watch = dict(checkpoints=checkpoints, on_checkpoint=on_checkpoint) if checkpoints else {}
    if fused_applies(constraints, state, settings, scan_every, callback, engine, callback_at):
        return run_fused(constraints, state, settings, callback, callback_at or (), **watch)
    if callback is not None and callback_at is not None:
        wanted, every = set(callback_at), callback

        def callback(t, record):
            if t in wanted:
                every(t, record)
    slow = SlowRunNote(settings.max_iter, len(constraints), settings.tol)
    if method == "auto" and lazy_applies(constraints, state, settings, scan_every):
        user_callback = callback

        def watched(t, record):  # the lazy run's iterations are timed through it
            slow(t, record["violation"])
            if user_callback is not None:
                user_callback(t, record)

        return run_lazy(constraints, state, settings, watched, **watch)
    n_candidates = max(_MIN_CANDIDATES, _CANDIDATES_PER_INTERVAL * scan_every)
    candidates, last_scan = None, 0
    multipliers = np.zeros(len(constraints))
    cap, log_floor = run_bounds(settings, len(constraints))
    offset = log_bound = 0.0
    record = {"constraint": [], "violation": [], "alpha": [],
              "dual_objective": [state.log_partition()], "dual_bound": [0.0]}
    best = None
    converged = infeasible = False
    with blas_threads(state.size):
        for t in range(settings.max_iter + 1):
            scan = candidates is None or t - last_scan >= scan_every
            if not scan:  # the most violated of the working set
                values = constraints.values(state, candidates)
                k, violation, direction, _ = choose(
                    values, multipliers[candidates], cap[candidates], settings)
                j = int(candidates[k])
                scan = violation <= settings.tol or violation <= 0  # confirm by a scan
            if scan:
                values = constraints.values(state)
                largest = float(values.max())
                j, violation, direction, scores = choose(values, multipliers, cap,
                                                          settings)
                if scan_every > 1:
                    candidates, last_scan = _working_set(scores, n_candidates), t
                best = kept_best(best, settings, violation, largest, state)
                if violation <= settings.tol or violation <= 0:  # nothing left to project
                    converged = True
                    break
            if t == settings.max_iter or infeasible:
                if not scan and settings.keep == "best":  # the last iterate counts too
                    values = constraints.values(state)
                    best = kept_best(best, settings,
                                     choose(values, multipliers, cap, settings)[1],
                                     float(values.max()), state)
                break
            limit = multipliers[j] if direction < 0 else cap[j] - multipliers[j]
            alpha, lam_max, lam_min = step(constraints, state, j, violation, direction,
                                            limit, settings.projection, engine)
            offset += constraints.project(state, j, direction * alpha, engine)
            multipliers[j] += direction * alpha
            log_dual = state.log_partition() + offset
            if alpha < limit:  # a clipped step has no Theorem 4.1 factor
                log_bound += float(_log_rho(violation, lam_max, lam_min))
            for key, value in zip(record, (j, violation, direction * alpha, log_dual,
                                           log_bound)):
                record[key].append(value)
            infeasible = log_dual < log_floor
            slow(t + 1, violation)
            if callback is not None:
                callback(t + 1, {"constraint": j, "violation": violation,
                                 "alpha": direction * alpha,
                                 "dual_objective": np.exp(log_dual),
                                 "dual_bound": np.exp(log_bound)})
            if t + 1 in checkpoints:
                on_checkpoint(t + 1)
    if settings.keep == "best":
        _, max_violation, best_state = best
        state.assign(best_state)
    else:
        max_violation = float(constraints.values(state).max())
    n_violated = (0 if converged else
                  int(np.count_nonzero(constraints.values(state) > settings.tol)))
    return run_log(record, multipliers, max_violation, converged, infeasible, n_violated)


def _warn_outcome(log, max_iter, units="", hint=""):
    """Warn when the run stopped infeasible or unconverged.

    The log's ``max_violation`` is in the caller's units, which ``units``
    names; ``hint`` ends the message.
    """
    if log["infeasible"]:
        warn_user(
            "The constraints are infeasible: the dual objective fell below the "
            "prior's smallest eigenvalue (a certificate by weak duality). "
            f"Returning the iterate with the smallest largest violation "
            f"({log['max_violation']:.3g})." + hint,
            ConvergenceWarning,
        )
    elif not log["converged"]:
        n_constraints = len(log["multipliers"])
        met = n_constraints - log["n_violated"]
        share = f" ({100.0 * met / n_constraints:.1f} %)" if n_constraints else ""
        reached = (f"the {max_iter} iterations max_iter='auto' chose"
                   + (f" ({max_iter.reason})" if max_iter.reason else "")
                   if isinstance(max_iter, ChosenCount) else f"{max_iter} iterations")
        warn_user(
            f"DefiniteBoost did not converge in {reached}: {met} of {n_constraints} "
            f"constraints met{share}; {log['n_violated']} constraints still violated "
            f"(largest violation {log['max_violation']:.3g}{units}); returning "
            + ("the last iterate (the lowest dual objective)" if log.get("keep") == "last"
               else "the iterate with the smallest largest violation")
            + ". Increase max_iter or tol." + hint,
            ConvergenceWarning,
        )
