"""DefiniteBoost on many objects: a lazy greedy choice and matrix-free steps.

:func:`run_definiteboost` projects on the most violated constraint of a
working set whose values it re-evaluates at every iteration, each update a
rank-one eigen-update: ``O(d k^2)`` for the ``k`` eigenpairs that do not
deflate. From the identity prior almost all deflate at first; once the pairs
touch every object none do, and with thousands of objects the iterations
slow down by an order of magnitude or more (the benchmarks page has the
rates).

Here, for pair constraints ``v = e_a - e_b`` on a dense state, every value
``v^T W v`` and every step is a Lanczos quadrature on the exponent itself
(the Lanczos engine's ``pair_steps``, :class:`megkernel._engines.lanczos.PairSteps`,
reached through its record in :data:`megkernel._engines.ENGINES`; with the
identity prior the exponent stays sparse, a signed graph Laplacian of the
pairs projected on), so an iteration costs about the same at the first step
and the ten-thousandth.
The choice is the lazy form of the greedy one (as in lazy greedy
maximisation): the constraint with the largest score of the last full scan
is evaluated exactly; if it is still the largest, it is projected on, else
its score is updated and the next is looked at (at most :data:`MAX_LOOKS`
per iteration once a violated one was seen; then the most violated of those).
A full scan of every constraint (on one ``eigh`` of the state, which also
re-anchors ``log Z``) runs every :data:`SCAN_FRACTION` ``m`` iterations and
whenever no stale score is above ``tol``; the run only stops after a scan.
Each step's violation ``r_t`` is exact, so the dual objective's decrease and
Theorem 4.1's bound hold as for the greedy choice.
"""

from __future__ import annotations

import math

import numpy as np

from .._engines import ENGINES
from .._numerics.state import ExponentState
from .._numerics.threads import blas_threads
from .bounds import _log_rho
from .definiteboost_choice import (
    choose,
    kept_best,
    most_violated,
    run_bounds,
    run_log,
    scores,
    step,
)

__all__ = ["lazy_applies", "lazy_state", "run_lazy", "LAZY_FROM", "MAX_LOOKS", "SCAN_FRACTION"]

#: Exact evaluations per iteration of the lazy choice, at most.
MAX_LOOKS = 8
#: Iterations between two full scans, as a fraction of the constraints.
SCAN_FRACTION = 0.5
#: Objects from which ``"auto"`` runs the lazy run: about where it overtakes
#: the eigen-updates to convergence. Below, eigen-updates stay cheap
#: (``O(d^3)`` at most) and the working set's frequent scans keep the greedy
#: choice closer, in fewer iterations (the measurements are in the user
#: guide's "scale" page and on the benchmarks page).
LAZY_FROM = 400
#: Quadratures the Lanczos engine may decline before the run goes on with
#: rank-one eigen-updates (each decline costs an ``eigh``).
MAX_DECLINED = 4


def lazy_applies(constraints, state, settings, scan_interval):
    """Tell whether ``method="auto"`` runs DefiniteBoost by :func:`run_lazy`.

    For approximate projections on pair constraints ``e_a - e_b``
    (:func:`lazy_state`), with the default scans.
    """
    return (getattr(constraints, "vectors", True) is None
            and settings.projection == "approximate" and settings.scan_every is None
            and lazy_state(state, scan_interval))


def lazy_state(state, scan_interval):
    """Tell whether the lazy run suits ``state``.

    It does on a dense state of at least :data:`LAZY_FROM` objects on which
    the Lanczos quadrature can run (the spread of its eigenvalues: the
    engine's ``runs_on``), when the greedy choice is already not made at
    every iteration (``scan_interval > 1``: many constraints).
    """
    return (type(state) is ExponentState and state.basis is None
            and state.size >= LAZY_FROM and scan_interval > 1
            and ENGINES["lanczos"].runs_on(state))


class _EigenSteps:
    """The same interface as ``PairSteps``, by rank-one eigen-updates (fallback)."""

    def __init__(self, state):
        self.state = state
        self.anchors = 0

    def values(self, a, b):
        return self.state.pair_sq_distances(a, b)

    def update(self, a, b, scale, value):
        ENGINES["rank-one"].pair_update(self.state, a, b, scale)
        return scale

    def log_partition(self):
        return self.state.log_partition()

    def finish(self):
        pass


class _Oracle:
    """Values and steps by Lanczos, by eigen-updates after repeated declines.

    ``engine``: the Lanczos engine's record, whose ``pair_steps`` make the
    steps and raise its ``declined``. ``fresh``: whether the state's
    eigendecomposition is current (it is when the run starts, after a scan,
    and always once eigen-updates run).
    """

    def __init__(self, state):
        self.state = state
        self.engine = ENGINES["lanczos"]
        self.steps = self.engine.pair_steps(state)
        self.declined = 0
        self.fresh = True

    def _declined(self):
        """After a decline (the state was refreshed) or an eigen-update."""
        self.declined += 1
        self.fresh = True
        self.steps = (_EigenSteps(self.state) if self.declined >= MAX_DECLINED
                      else self.engine.pair_steps(self.state))

    def values(self, a, b):
        try:
            return self.steps.values(a, b)
        except self.engine.declined:
            out = self.state.pair_sq_distances(a, b)  # refreshed by the decline
            self._declined()
            return out

    def update(self, a, b, scale, value):
        try:
            taken = self.steps.update(a, b, scale, value)
        except self.engine.declined:
            ENGINES["rank-one"].pair_update(self.state, a, b, scale)
            self._declined()
            return scale
        self.fresh = isinstance(self.steps, _EigenSteps)
        return taken

    def log_partition(self):
        return self.steps.log_partition()

    def scan(self, constraints):
        """Every constraint's value, exactly, on a current ``eigh`` of the state.

        An ``eigh`` and the compiled walk over the eigenvectors cost no more
        than ``m`` quadratures (the benchmarks page compares them), and
        re-anchor ``log Z`` exactly.
        """
        self.current()
        return constraints.values(self.state)

    def current(self):
        """Make the state's eigendecomposition current (and the steps' on it)."""
        if not self.fresh:
            self.state.refresh()
            self.fresh = True
            if isinstance(self.steps, self.engine.pair_steps):
                self.state.partition_anchor = None  # log Z from the new eigh
                self.steps = self.engine.pair_steps(self.state)

    def finish(self):
        """Leave the state's eigendecomposition current."""
        if not self.fresh:
            self.steps.finish()
            self.fresh = True


def _lazy_choice(oracle, constraints, stale, multipliers, cap, settings):
    """Return the constraint to project on by the lazy greedy rule.

    Looks at the largest stale score until the one looked at stays the
    largest, or :data:`MAX_LOOKS` looks found a violated constraint (then
    the most violated of those); while none looked at is violated it goes
    on until no stale score is (the caller then scans: near convergence a
    few stale scores above ``tol`` would otherwise cost a full scan each).
    Returns ``(j, violation, direction, sq_distance)`` (see
    :func:`~.definiteboost_choice.choose`); updates ``stale`` with the
    exact scores looked at.
    """
    found = None
    threshold = max(settings.tol, 0.0)
    for looks in range(1, stale.size + 1):
        j = most_violated(stale)
        sq = float(oracle.values(constraints.a[j:j + 1], constraints.b[j:j + 1])[0])
        value = constraints.signs[j] * (sq - constraints.thresholds[j])
        stale[j] = scores(np.array([value]), multipliers[j:j + 1], cap[j:j + 1],
                          settings)[0]
        if found is None or stale[j] > found[1]:
            found = (j, float(stale[j]), -1.0 if value < 0 else 1.0, sq)
        if most_violated(stale) == j:
            break
        if found[1] > threshold:
            if looks >= MAX_LOOKS:
                break
        elif stale.max() <= threshold:
            break
    return found


def run_lazy(constraints, state, settings, callback=None, *, checkpoints=frozenset(),
             on_checkpoint=None):
    """Greedy Bregman projections with the lazy choice and Lanczos steps.

    Same parameters (``settings.scan_every`` aside) and log as
    :func:`~.definiteboost_projections.run_definiteboost`, which calls it
    (see :func:`lazy_applies`); at a checkpoint the state's
    eigendecomposition is made current first (between scans it is stale).
    """
    m = len(constraints)
    scan_every = max(1, math.ceil(SCAN_FRACTION * m))
    multipliers = np.zeros(m)
    cap, log_floor = run_bounds(settings, m)
    offset = log_bound = 0.0
    best = stale = None
    last_scan = 0
    converged = infeasible = False
    with blas_threads(state.size):
        oracle = _Oracle(state)
        record = {"constraint": [], "violation": [], "alpha": [],
                  "dual_objective": [oracle.log_partition()], "dual_bound": [0.0]}
        for t in range(settings.max_iter + 1):
            scan = stale is None or t - last_scan >= scan_every
            if not scan:
                j, violation, direction, sq = _lazy_choice(
                    oracle, constraints, stale, multipliers, cap, settings)
                scan = violation <= settings.tol or violation <= 0
            if scan:
                values = oracle.scan(constraints)
                largest = float(values.max())
                j, violation, direction, stale = choose(values, multipliers, cap,
                                                        settings)
                stale = np.array(stale, dtype=float)
                sq = float(constraints.signs[j] * values[j] + constraints.thresholds[j])
                last_scan = t
                best = kept_best(best, settings, violation, largest, state)
                if violation <= settings.tol or violation <= 0:
                    converged = True
                    break
            if t == settings.max_iter or infeasible:
                if not scan and settings.keep == "best":
                    # the last iterate against the best of the scans: without this
                    # look a run stopped between two scans returns the prior
                    values = oracle.scan(constraints)
                    best = kept_best(best, settings,
                                     choose(values, multipliers, cap, settings)[1],
                                     float(values.max()), state)
                break
            limit = multipliers[j] if direction < 0 else cap[j] - multipliers[j]
            alpha, lam_max, lam_min = step(constraints, state, j, violation, direction,
                                            limit, "approximate", None)
            sign = constraints.signs[j]
            taken = oracle.update(constraints.a[j], constraints.b[j],
                                  -direction * alpha * sign, sq)
            signed = -taken * sign  # the step taken, to round-off direction * alpha
            offset += signed * sign * constraints.thresholds[j]
            if alpha < limit:  # a clipped step has no Theorem 4.1 factor
                multipliers[j] = min(max(multipliers[j] + signed, 0.0), cap[j])
                log_bound += float(_log_rho(violation, lam_max, lam_min))
            else:  # clipped at its bound: exactly there (a few ulps short would
                # leave the constraint chosen again for steps that round to 0)
                multipliers[j] = 0.0 if direction < 0 else cap[j]
            log_dual = oracle.log_partition() + offset
            for key, value in zip(record, (j, violation, signed, log_dual, log_bound)):
                record[key].append(value)
            infeasible = log_dual < log_floor
            if callback is not None:
                callback(t + 1, {"constraint": j, "violation": violation, "alpha": signed,
                                 "dual_objective": np.exp(log_dual),
                                 "dual_bound": np.exp(log_bound)})
            if t + 1 in checkpoints:
                oracle.current()
                on_checkpoint(t + 1)
        if settings.keep == "best":  # a copy made at a scan: its eigh is current
            _, max_violation, best_state = best
            state.assign(best_state)
            state.partition_anchor = None
        else:
            oracle.finish()
            max_violation = float(constraints.values(state).max())
        n_violated = (0 if converged else
                      int(np.count_nonzero(constraints.values(state) > settings.tol)))
    return run_log(record, multipliers, max_violation, converged, infeasible, n_violated)
