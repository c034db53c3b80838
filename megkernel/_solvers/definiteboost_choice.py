"""DefiniteBoost's choice of constraint and step (shared by both runs).

The greedy choice (:func:`choose`: the most violated constraint, ties to
the first), its scores (:func:`scores`, with corrections and multiplier
caps) and the step along the chosen constraint (:func:`_step`: eq. 13's
approximate projection or eq. 11's exact one), used by
:func:`~.definiteboost_projections.run_definiteboost` and
:func:`~.definiteboost_lazy.run_lazy`.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from .bounds import definiteboost_step

__all__ = ["TIE_RTOL", "choose", "exact_step", "kept_best", "most_violated", "run_bounds",
           "run_log", "scores", "step", "tolerance_share"]


#: Scores within this relative distance of the largest count as tied.
TIE_RTOL = 1e-9


def tolerance_share(first, current, goal):
    """Share of the way from ``first`` down to ``goal`` on a log scale, in ``[0, 1]``.

    For a quantity that falls geometrically towards its tolerance (the
    largest violation of a run of projections): ``log(first / current) /
    log(first / goal)``; 1 at or below ``goal``, 0 above ``first``.
    """
    if current <= goal:
        return 1.0
    if not (goal > 0 and np.isfinite(first) and first > goal):  # no scale to go by
        return 0.0
    return float(min(max(np.log(first / current) / np.log(first / goal), 0.0), 1.0))


def most_violated(found):
    """Index of the largest score; ties (up to round-off) go to the first.

    Under the identity prior every similar pair is violated by the same
    amount; breaking such ties by index rather than by round-off keeps the
    greedy path the same for every engine.
    """
    top = found.max()
    return int(np.argmax(found >= top - TIE_RTOL * abs(top)))


def exact_step(constraints, state, j, alpha_guess, engine, direction=1.0,
               limit=np.inf):
    """Eq. 11: the step where constraint ``j`` holds with equality.

    Moves ``A <- A - direction * alpha * C_j`` with ``0 <= alpha <= limit``
    (``direction = -1`` undoes part of an earlier step, see ``corrective``).
    """
    def residual(alpha):
        return direction * constraints.value_after(state, j, direction * alpha, engine)

    high = min(max(alpha_guess, 1e-12), limit)
    for _ in range(200):
        if residual(high) <= 0:
            break
        if high >= limit:
            return limit
        high = min(2.0 * high, limit)
    else:
        return high
    return optimize.brentq(residual, 0.0, high, xtol=1e-300,
                           rtol=4 * np.finfo(float).eps, maxiter=500)


def scores(values, multipliers, cap, settings):
    """How much projecting on each constraint is called for (``> 0``: it is)."""
    found = values
    if settings.corrective:
        found = np.where((values < 0) & (multipliers > 0), -values, values)
    if settings.max_multiplier is not None:
        found = np.where((values > 0) & (multipliers >= cap), 0.0, found)
    return found


def choose(values, multipliers, cap, settings):
    """Choose the constraint to project on: ``(j, violation, direction, scores)``.

    ``violation`` (the paper's ``r_t``) is ``values[j]`` (for a corrective
    step how far the constraint is inside its threshold) and ``direction =
    -1`` for a corrective step.
    """
    found = scores(values, multipliers, cap, settings)
    j = most_violated(found)
    return j, float(found[j]), (-1.0 if values[j] < 0 else 1.0), found


def step(constraints, state, j, violation, direction, limit, projection, engine):
    """Return the step size along ``direction * C_j`` and that matrix's eigenvalue range.

    The step ``alpha`` is at most ``limit``.
    """
    lam_max, lam_min = constraints.eigen_range(j)
    if direction < 0:
        lam_max, lam_min = -lam_min, -lam_max
    alpha = float(definiteboost_step(violation, lam_max, lam_min))
    if projection == "exact":
        alpha = exact_step(constraints, state, j, alpha, engine, direction, limit)
    return min(alpha, limit), lam_max, lam_min


def run_bounds(settings, n_constraints):
    """Return a run's multiplier caps and the floor of its log-dual objective.

    The floor: the log of the prior's smallest eigenvalue (a dual objective
    below it certifies infeasibility by weak duality); ``-inf`` without one
    (a zero, underflowed eigenvalue gives no certificate either).
    """
    cap = np.broadcast_to(np.inf if settings.max_multiplier is None
                          else settings.max_multiplier, (n_constraints,))
    log_floor = -np.inf
    if settings.min_prior_eigenvalue is not None and settings.min_prior_eigenvalue > 0:
        log_floor = np.log(settings.min_prior_eigenvalue) - 1e-9
    return cap, log_floor


def run_log(record, multipliers, max_violation, converged, infeasible, n_violated):
    """Build the log a run returns from its records.

    See :func:`~.definiteboost_projections.run_definiteboost` for its keys.
    """
    return {
        "n_violated": n_violated,
        "constraint": np.asarray(record["constraint"], dtype=np.intp),
        "violation": np.asarray(record["violation"], dtype=float),
        "alpha": np.asarray(record["alpha"], dtype=float),
        "multipliers": multipliers,
        "dual_objective": np.exp(record["dual_objective"]),
        "dual_bound": np.exp(record["dual_bound"]),
        "max_violation": max_violation,
        "converged": converged,
        "infeasible": infeasible,
        "n_iter": len(record["constraint"]),
    }


def kept_best(best, settings, violation, largest, state):
    """Track the iterate nearest the answer so far, for ``keep="best"``.

    Returns ``(quality, largest violation, state copy)`` of that iterate;
    the quality is the projection's KKT score ``violation`` with
    corrections, else the largest violation.
    """
    quality = violation if settings.corrective else largest
    if settings.keep == "best" and (best is None or quality < best[0]):
        return quality, largest, state.copy()
    return best
