"""DefiniteBoost: Bregman projection onto inequality constraints (Section 4).

Finds ``W* = argmin Delta(W, W_1)`` subject to ``tr W = 1`` and
``tr(W C_j) <= 0`` by greedy approximate (eq. 13) or exact (eq. 11)
projections onto the most violated constraint, keeping
``W_t = exp(log W_1 - sum_s alpha_s C_{j_s}) / Z`` in the stable exponent form
(eq. 12). The dual objective ``tr exp(log W_1 - sum alpha C)`` (eq. 9, with
``tr W_1 = 1``) is recorded with Theorem 4.1's bound ``prod rho(r_t)``.

Pure solver functions: arrays in, arrays and a log out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg, optimize
from sklearn.exceptions import ConvergenceWarning

from .._engines import select
from .._engines._distances import pair_sq_distances
from .._engines.rank_one import pair_sq_distance_after
from .._numerics.spectral import check_symmetric, normalized_exp_weights
from .._numerics.state import ExponentState, prior_state
from .._numerics.threads import blas_threads
from .._numerics.validation import check_pair_indices, check_positive, check_trace
from .._warnings import warn_user
from .bounds import _log_rho, definiteboost_step

#: Largest ``d`` for which a low-rank result is returned as a d x d kernel.
MAX_DENSE_OBJECTS = 5000

__all__ = [
    "definiteboost",
    "definiteboost_pairs",
    "fit_pair_constraints",
    "run_definiteboost",
    "PairConstraints",
    "MatrixConstraints",
]


#: Range of a constraint matrix's largest entry (constraints are scale-free).
_MIN_CONSTRAINT_SCALE, _MAX_CONSTRAINT_SCALE = 1e-100, 1e100
#: Eigenvalues within this fraction of the largest are round-off (no sign).
_SIGN_RTOL = 1e-12


class MatrixConstraints:
    """General constraints ``tr(W C_j) <= 0`` for symmetric ``C_j`` (d x d)."""

    def __init__(self, constraints):
        self.matrices = np.stack([check_symmetric(C, name=f"constraints[{j}]")
                                  for j, C in enumerate(constraints)])
        scale = np.abs(self.matrices).max(axis=(1, 2))
        out = (scale < _MIN_CONSTRAINT_SCALE) | (scale > _MAX_CONSTRAINT_SCALE)
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

    def values(self, state):
        """``tr(W C_j)`` for every constraint."""
        return np.tensordot(self.matrices, state.matrix(), axes=([1, 2], [0, 1]))

    def eigen_range(self, j):
        return self.lam_max[j], self.lam_min[j]

    def project(self, state, j, alpha, engine):
        """``A <- A - alpha C_j``; returns the change of the log-dual offset.

        A general ``C_j`` is no rank-one change: every engine re-decomposes.
        """
        state.add_symmetric(self.matrices[j], -alpha)
        return 0.0

    def value_after(self, state, j, alpha):
        """``tr(W(alpha) C_j)`` with ``W(alpha) ~ exp(A - alpha C_j)``."""
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
        else:  # kept: gathering P[a] - P[b] again each iteration costs 3x the product
            self.vectors = state.pair_vectors(self.a, self.b)
        self.sq_norms = state.pair_sq_norms(self.a, self.b)
        similar = self.signs > 0
        self.lam_max = np.where(similar, self.sq_norms - self.thresholds, self.thresholds)
        self.lam_min = np.where(similar, -self.thresholds, self.thresholds - self.sq_norms)

    def __len__(self):
        return len(self.a)

    def values(self, state):
        """``tr(W C_j) = s_j (v_j^T W v_j - gamma_j)`` for every constraint."""
        if self.vectors is None:
            sq_distances = pair_sq_distances(state, self.a, self.b)
        else:
            coords = self.vectors @ state.eigenvectors
            sq_distances = (coords * coords) @ state.density_eigenvalues()
        return self.signs * (sq_distances - self.thresholds)

    def eigen_range(self, j):
        return self.lam_max[j], self.lam_min[j]

    def project(self, state, j, alpha, engine):
        """``A <- A - alpha s_j v v^T`` by ``engine``; returns ``alpha s_j gamma_j``."""
        engine.pair_update(state, self.a[j], self.b[j], -alpha * self.signs[j])
        return alpha * self.signs[j] * self.thresholds[j]

    def value_after(self, state, j, alpha):
        """``tr(W(alpha) C_j)`` after ``A <- A - alpha s_j v v^T``.

        One rank-one eigenproblem in the current eigenbasis (``O(r^2)``).
        """
        z = state.pair_coordinates(self.a[j], self.b[j])[0]
        sq_distance = pair_sq_distance_after(state, z, -alpha * self.signs[j])
        return float(self.signs[j] * (sq_distance - self.thresholds[j]))


def _exact_step(constraints, state, j, alpha_guess, direction=1.0, limit=np.inf):
    """Eq. 11: the step where constraint ``j`` holds with equality.

    Moves ``A <- A - direction * alpha * C_j`` with ``0 <= alpha <= limit``
    (``direction = -1`` undoes part of an earlier step, see ``corrective``).
    """
    def residual(alpha):
        return direction * constraints.value_after(state, j, direction * alpha)

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


#: Scores within this relative distance of the largest count as tied.
_TIE_RTOL = 1e-9


def _most_violated(scores):
    """Index of the largest score; ties (up to round-off) go to the first.

    Under the identity prior every similar pair is violated by the same
    amount; breaking such ties by index rather than by round-off keeps the
    greedy path the same for every engine.
    """
    top = scores.max()
    return int(np.argmax(scores >= top - _TIE_RTOL * abs(top)))


class _Settings(NamedTuple):
    """How :func:`run_definiteboost` runs (the algorithm's options)."""

    projection: str = "approximate"
    max_iter: int = 1000
    tol: float = 1e-8
    keep: str = "best"
    corrective: bool = False
    max_multiplier: object = None
    min_prior_eigenvalue: object = None


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


def _choose(values, multipliers, cap, settings):
    """The constraint to project on: ``(j, violation, direction)``.

    ``violation`` (the paper's ``r_t``) is ``values[j]`` (for a corrective
    step how far the constraint is inside its threshold) and ``direction =
    -1`` for a corrective step.
    """
    scores = values
    if settings.corrective:
        scores = np.where((values < 0) & (multipliers > 0), -values, values)
    if settings.max_multiplier is not None:
        scores = np.where((values > 0) & (multipliers >= cap), 0.0, scores)
    j = _most_violated(scores)
    return j, float(scores[j]), (-1.0 if values[j] < 0 else 1.0)


def _step(constraints, state, j, violation, direction, limit, projection):
    """Step size ``alpha`` along ``direction * C_j``, at most ``limit``, and the
    eigenvalue range of ``direction * C_j``."""
    lam_max, lam_min = constraints.eigen_range(j)
    if direction < 0:
        lam_max, lam_min = -lam_min, -lam_max
    alpha = float(definiteboost_step(violation, lam_max, lam_min))
    if projection == "exact":
        alpha = _exact_step(constraints, state, j, alpha, direction, limit)
    return min(alpha, limit), lam_max, lam_min


def run_definiteboost(constraints, state, settings=None, *, method="eigh", callback=None):
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
    method : {"auto", "eigh", "rank-one"}, default="eigh"
        Engine of each pair projection (see :func:`megkernel._engines.select`).
    callback : callable, optional
        Called as ``callback(t, record)`` after each iteration.

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
    engine = select(method, state, need="update")
    multipliers = np.zeros(len(constraints))
    cap = np.broadcast_to(np.inf if settings.max_multiplier is None
                          else settings.max_multiplier, multipliers.shape)
    log_floor = (-np.inf if settings.min_prior_eigenvalue is None
                 else np.log(settings.min_prior_eigenvalue) - 1e-9)
    offset = log_bound = 0.0
    record = {"constraint": [], "violation": [], "alpha": [],
              "dual_objective": [state.log_partition()], "dual_bound": [0.0]}
    best = None
    converged = infeasible = False
    with blas_threads(state.size):
        for t in range(settings.max_iter + 1):
            values = constraints.values(state)
            largest = float(values.max())
            j, violation, direction = _choose(values, multipliers, cap, settings)
            # "best": the iterate nearest the answer; with corrections the
            # projection's (KKT) score, else the largest violation
            quality = violation if settings.corrective else largest
            if settings.keep == "best" and (best is None or quality < best[0]):
                best = (quality, largest, state.copy())
            if violation <= settings.tol or violation <= 0:  # nothing left to project
                converged = True
                break
            if t == settings.max_iter or infeasible:
                break
            limit = multipliers[j] if direction < 0 else cap[j] - multipliers[j]
            alpha, lam_max, lam_min = _step(constraints, state, j, violation, direction,
                                            limit, settings.projection)
            offset += constraints.project(state, j, direction * alpha, engine)
            multipliers[j] += direction * alpha
            log_dual = state.log_partition() + offset
            if alpha < limit:  # a clipped step has no Theorem 4.1 factor
                log_bound += float(_log_rho(violation, lam_max, lam_min))
            for key, value in zip(record, (j, violation, direction * alpha, log_dual,
                                           log_bound)):
                record[key].append(value)
            infeasible = log_dual < log_floor
            if callback is not None:
                callback(t + 1, {"constraint": j, "violation": violation,
                                 "alpha": direction * alpha,
                                 "dual_objective": np.exp(log_dual),
                                 "dual_bound": np.exp(log_bound)})
    if settings.keep == "best":
        _, max_violation, best_state = best
        state.assign(best_state)
    else:
        max_violation = float(constraints.values(state).max())
    return {
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


def _warn_outcome(log, max_iter):
    """Warn when the run stopped infeasible or unconverged (the log's
    ``max_violation`` in the caller's units)."""
    if log["infeasible"]:
        warn_user(
            "The constraints are infeasible: the dual objective fell below the "
            "prior's smallest eigenvalue (a certificate by weak duality). "
            f"Returning the iterate with the smallest largest violation "
            f"({log['max_violation']:.3g}).",
            ConvergenceWarning,
        )
    elif not log["converged"]:
        warn_user(
            f"DefiniteBoost did not converge in {max_iter} iterations "
            f"(largest violation {log['max_violation']:.3g}); returning the "
            "iterate with the smallest largest violation. Increase max_iter "
            "or tol.",
            ConvergenceWarning,
        )


def definiteboost(constraints, prior, *, projection="approximate", max_iter=1000,
                  tol=1e-8, keep="best", corrective=False):
    """DefiniteBoost for general symmetric constraint matrices (eqs. 8-14).

    Parameters
    ----------
    constraints : array-like of shape (n, d, d)
        Symmetric ``C_j``, each with eigenvalues of both signs.
    prior : array-like of shape (d, d)
        Symmetric positive definite ``W_1`` (scaled to trace one).
    projection : {"approximate", "exact"}, default="approximate"
        Step of eq. 13 (Theorem 4.1's bound holds) or the exact projection
        of eq. 11.
    max_iter : int, default=1000
    tol : float, default=1e-8
        Stop when ``max_j tr(W C_j) <= tol``.
    keep : {"best", "last"}, default="best"
        Which iterate to return when the run stops before convergence.
    corrective : bool, default=False
        Allow reducing earlier multipliers: converge to the exact
        projection (see :func:`run_definiteboost`).

    Returns
    -------
    W : ndarray of shape (d, d)
        The trace-one result.
    log : dict
        See :func:`run_definiteboost`; also ``state``.
    """
    state = ExponentState.from_prior(prior, name="prior")
    if len(constraints) == 0:
        raise ValueError("No constraints: give at least one.")
    constraints = MatrixConstraints(constraints)
    if constraints.matrices.shape[1:] != state.exponent.shape:
        raise ValueError(
            f"constraints have shape {constraints.matrices.shape[1:]}, the prior "
            f"{state.exponent.shape}."
        )
    settings = _Settings(projection=projection, max_iter=max_iter, tol=tol, keep=keep,
                         corrective=corrective,
                         min_prior_eigenvalue=np.exp(state.eigenvalues[0]))
    log = run_definiteboost(constraints, state, settings)
    _warn_outcome(log, max_iter)
    log["state"] = state
    return state.matrix(), log


# -- pair constraints: the rules of the estimator, in one place -------------------
def prior_mean_sq_distance(state):
    """Mean squared distance between distinct objects under trace-one ``W``:
    ``2 (d - 1^T W 1) / (d (d - 1))`` (``2 / d`` for ``I / d``)."""
    d = state.n_objects
    column_sums = state.factor().sum(axis=0)  # 1^T W 1 = |B^T 1|^2, tr W = 1
    return 2.0 * (d - column_sums @ column_sums) / (d * (d - 1))


def pair_thresholds(state, signs, *, gamma="auto", gamma_dissimilar="auto",
                    thresholds=None, trace=1.0):
    """Resolve the thresholds of pair constraints (kernel units).

    Returns ``(thresholds, gamma, gamma_dissimilar)``: one threshold per
    pair, and the similar / dissimilar thresholds. ``"auto"``: a tenth of
    the prior's mean squared distance between distinct objects for similar
    pairs (``0.2 tau / d`` for the identity prior, the paper's choice), the
    mean itself for dissimilar ones. Explicit per-pair ``thresholds``
    override both; ``gamma`` is then the smallest threshold of a similar
    pair (of any pair when none is similar).
    """
    trace = check_trace(trace)
    if state.n_objects < 2:
        raise ValueError("DefiniteBoost needs at least 2 objects (pairs of distinct "
                         f"objects), got a prior over {state.n_objects}.")
    mean_sq_distance = trace * prior_mean_sq_distance(state)
    if thresholds is not None:
        thresholds = np.broadcast_to(np.asarray(thresholds, dtype=float),
                                     signs.shape).copy()
        similar = thresholds[signs > 0]
        gamma = float((similar if similar.size else thresholds).min())
        dissimilar = thresholds[signs < 0]
        gamma_dissimilar = float(dissimilar.max()) if dissimilar.size else mean_sq_distance
        _check_thresholds(thresholds, signs, trace)
        return thresholds, gamma, gamma_dissimilar
    gamma = 0.1 * mean_sq_distance if gamma == "auto" else check_positive(gamma, "gamma")
    gamma_dissimilar = (mean_sq_distance if gamma_dissimilar == "auto"
                        else check_positive(gamma_dissimilar, "gamma_dissimilar"))
    if gamma_dissimilar >= 2.0 * trace:
        raise ValueError(
            f"gamma_dissimilar={gamma_dissimilar:.4g} can never hold: squared "
            f"distances under a kernel of trace {trace:g} are below {2.0 * trace:g}."
        )
    thresholds = np.where(signs > 0, gamma, gamma_dissimilar)
    _check_thresholds(thresholds, signs, trace)
    return thresholds, gamma, gamma_dissimilar


#: Similar thresholds below this fraction of the trace are round-off level.
_MIN_RELATIVE_THRESHOLD = 1e-12


def _check_thresholds(thresholds, signs, trace):
    """Finite thresholds a kernel of trace ``trace`` can meet, or a ValueError."""
    if not np.all(np.isfinite(thresholds)):
        raise ValueError("The thresholds contain NaN or infinite values.")
    similar, dissimilar = thresholds[signs > 0], thresholds[signs < 0]
    if similar.size and similar.min() < _MIN_RELATIVE_THRESHOLD * trace:
        raise ValueError(
            f"A similar-pair threshold of {similar.min():.3g} is below "
            f"{_MIN_RELATIVE_THRESHOLD:g} * trace ({_MIN_RELATIVE_THRESHOLD * trace:.3g}): "
            "squared distances that small are round-off for a kernel of that trace "
            "(and 0 or less can never hold between distinct objects).")
    if dissimilar.size and dissimilar.max() >= 2.0 * trace:
        raise ValueError(
            f"A dissimilar-pair threshold of {dissimilar.max():.4g} can never hold: "
            f"squared distances under a kernel of trace {trace:g} are below "
            f"{2.0 * trace:g}.")


def _satisfiable(state, pairs, signs, thresholds, trace):
    """Mask of the constraints that some kernel in the prior's range can meet:
    a dissimilar pair needs ``trace * ||v||^2 > threshold``."""
    never = (signs < 0) & (trace * state.pair_sq_norms(pairs[:, 0], pairs[:, 1])
                           <= thresholds)
    if np.all(never):
        raise ValueError(
            f"All {len(pairs)} constraints are dissimilar pairs that can never "
            f"hold: their squared distance is at most trace * ||P[a] - P[b]||^2 "
            f"<= gamma_dissimilar={thresholds.min():.4g} under every kernel in "
            "the prior's range. Lower gamma_dissimilar."
        )
    if np.any(never):
        warn_user(
            f"Dropped {np.count_nonzero(never)} of {len(pairs)} constraints: dissimilar "
            f"pairs that can never reach gamma_dissimilar={thresholds[never].min():.4g} "
            "in the prior's range (trace * ||P[a] - P[b]||^2 <= gamma_dissimilar); "
            "see dropped_constraints_.",
            UserWarning,
        )
    return ~never


def satisfiable_pairs(state, pairs, signs, thresholds, trace):
    """Mask of the pairs some kernel in the prior's range can satisfy; warns
    (or raises, if none) about the others, as :func:`fit_pair_constraints`."""
    return _satisfiable(state, pairs, signs, thresholds, trace)


def fit_pair_constraints(state, pairs, signs, *, gamma="auto", gamma_dissimilar="auto",
                         thresholds=None, trace=1.0, slack=None,
                         projection="approximate", corrective=False, max_iter=2000,
                         tol=1e-2, keep=None, method="auto", callback=None):
    """DefiniteBoost on validated pairs from ``state`` (in place).

    The rules of :func:`definiteboost_pairs` (and of
    :class:`megkernel.DefiniteBoostKernel`), on a prior already made a
    state. Returns the log (see :func:`definiteboost_pairs`).
    """
    trace = check_trace(trace)
    tol = float(tol)  # a float32 tol would overflow in tol * gamma
    thresholds, gamma, gamma_dissimilar = pair_thresholds(
        state, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
        thresholds=thresholds, trace=trace)
    if not tol < 2.0:
        raise ValueError(
            f"tol={tol!r} would tighten the similar threshold gamma by tol * gamma / 2 "
            "to zero or below, which no kernel meets; use tol < 2 (default 0.01).")
    # aim at constraints tightened by half the tolerance, stop within the other
    # half: on convergence every constraint holds
    margin = 0.5 * max(tol, 0.0) * gamma
    with np.errstate(over="ignore"):  # overflow is caught just below
        target = (thresholds - signs * margin) / trace
    if not np.all(np.abs(target) < 1e300):  # with room for the violations' arithmetic
        raise ValueError(
            f"The thresholds (up to {np.abs(thresholds).max():.3g}) divided by "
            f"trace={trace:.3g} leave double precision: give the thresholds in the "
            "kernel's units (at most 2 * trace for a pair's squared distance).")
    kept = np.flatnonzero(_satisfiable(state, pairs, signs, thresholds, trace))
    constraints = PairConstraints(pairs[kept, 0], pairs[kept, 1], signs[kept],
                                  target[kept], state)
    hard = slack is None
    if keep is None:
        keep = "best" if hard else "last"
    if not hard:
        slack = check_positive(slack, "slack")
        with np.errstate(divide="ignore", over="ignore"):  # ||v|| = 0: never binding
            cap = np.where(constraints.sq_norms > 0,
                           slack / np.where(constraints.sq_norms > 0, constraints.sq_norms, 1),
                           np.inf)
    settings = _Settings(
        projection=projection, max_iter=max_iter, tol=0.5 * tol * gamma / trace,
        keep=keep, corrective=corrective,
        max_multiplier=None if hard else cap,
        min_prior_eigenvalue=(np.exp(state.eigenvalues[0] - state.log_partition())
                              if hard else None),
    )
    if callback is not None:
        user_callback = callback

        def callback(t, record):
            user_callback(t, {**record, "violation": record["violation"] * trace - margin})

    log = run_definiteboost(constraints, state, settings, method=method,
                            callback=callback)
    # violations of the user's constraints, in kernel units
    log["violation"] = log["violation"] * trace - margin
    log["max_violation"] = log["max_violation"] * trace - margin
    log["constraint"] = kept[log["constraint"]]
    log.update(kept=kept, dropped=np.setdiff1d(np.arange(len(pairs)), kept),
               gamma=gamma, gamma_dissimilar=gamma_dissimilar, margin=margin,
               thresholds=thresholds)
    _warn_outcome(log, max_iter)
    return log


def definiteboost_pairs(pairs, signs=None, thresholds=None, *, gamma="auto",
                        gamma_dissimilar="auto", n_objects=None, prior=None,
                        prior_factor=None, trace=1.0, slack=None,
                        projection="approximate", corrective=False, max_iter=2000,
                        tol=1e-2, keep=None, method="auto", callback=None):
    """DefiniteBoost for similar / dissimilar pair constraints.

    The solver behind :class:`megkernel.DefiniteBoostKernel`: called with the
    estimator's parameters it returns the estimator's kernel.

    Parameters
    ----------
    pairs : array-like of int, shape (n, 2)
    signs : array-like of shape (n,), default=None
        ``+1`` similar (``||x_a - x_b||^2 <= threshold``), ``-1`` dissimilar
        (``>= threshold``); ``None``: all similar.
    thresholds : float or array-like of shape (n,), default=None
        Explicit thresholds (kernel units), instead of ``gamma`` and
        ``gamma_dissimilar``.
    gamma, gamma_dissimilar : float or "auto", default="auto"
        Thresholds of similar and dissimilar pairs (kernel units). ``"auto"``:
        a tenth of the prior's mean squared distance between distinct
        objects (``0.2 tau / d`` for ``I / d``, the paper's choice) and the
        mean itself.
    n_objects : int, optional
        ``d`` for the prior ``I / d`` when neither ``prior`` nor
        ``prior_factor`` is given.
    prior : array-like of shape (d, d), optional
        Symmetric positive definite ``W_1`` (scaled to trace one).
    prior_factor : array-like of shape (d, r), optional
        Low-rank prior ``W_1 = F F^T / ||F||_F^2``: every iterate stays in
        its range. Dissimilar pairs no kernel of that range can separate
        (``trace ||P[a] - P[b]||^2 <= threshold``) are dropped with a warning.
    trace : float, default=1.0
        Trace ``tau`` of the learned kernel.
    slack : float, optional
        ``None``: hard constraints (the paper). ``c > 0`` (beyond the paper):
        each multiplier is capped, ``alpha_j ||v_j||^2 <= c``, the box dual
        of the always-feasible soft-margin problem.
    projection : {"approximate", "exact"}, default="approximate"
        Step of eq. 13 (Theorem 4.1's bound holds) or the exact projection
        of eq. 11.
    corrective : bool, default=False
        Hildreth-style corrections (beyond the paper): converge to the exact
        Bregman projection (see :func:`run_definiteboost`).
    max_iter : int, default=2000
        Largest number of projections.
    tol : float, default=1e-2
        In units of ``gamma``: the run aims at the constraints tightened by
        ``tol * gamma / 2`` and stops when those hold within ``tol * gamma /
        2``, so on convergence every constraint holds. ``tol <= 0`` aims at
        the constraints themselves (``-inf``: run ``max_iter`` iterations).
    keep : {"best", "last"}, default=None
        Iterate returned when the run stops early; ``None``: "best" for hard
        constraints, "last" with ``slack``.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection; same result up to round-off.
    callback : callable, optional
        ``callback(t, record)`` after each iteration (violation in kernel units).

    Returns
    -------
    K : ndarray of shape (d, d) or None
        The learned kernel ``trace * W`` (``None`` for a low-rank prior over
        more than 5000 objects: use ``log["kernel_factor"]``).
    log : dict
        ``constraint`` (index into ``pairs`` of each projected pair),
        ``violation`` (largest violation before each projection, kernel
        units), ``alpha``, ``multipliers`` (of the kept constraints),
        ``dual_objective`` and ``dual_bound`` (Theorem 4.1), ``max_violation``
        (of the returned kernel), ``converged``, ``infeasible``, ``n_iter``,
        ``kept`` / ``dropped`` (indices into ``pairs``), ``gamma``,
        ``gamma_dissimilar``, ``margin``, ``thresholds``, ``state`` and
        ``kernel_factor`` (``F``, d x r, with ``K = F F^T``).
    """
    state = prior_state(n_objects, prior, prior_factor)
    pairs = check_pair_indices(pairs, state.n_objects, name="pairs")
    signs = check_pair_signs(signs, pairs)
    log = fit_pair_constraints(
        state, pairs, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
        thresholds=thresholds, trace=trace, slack=slack, projection=projection,
        corrective=corrective, max_iter=max_iter, tol=tol, keep=keep, method=method,
        callback=callback)
    log["state"] = state
    log["kernel_factor"] = np.sqrt(trace) * state.factor()
    if state.basis is None:
        return trace * state.matrix(), log
    if state.n_objects > MAX_DENSE_OBJECTS:
        return None, log
    return log["kernel_factor"] @ log["kernel_factor"].T, log


def check_pair_signs(signs, pairs, *, name="signs"):
    """``signs`` as floats ``+1`` / ``-1``, one per pair (``None``: all +1).

    Accepts ``+1`` / ``-1``, ``1`` / ``0`` and ``True`` / ``False`` (similar /
    dissimilar).

    Raises
    ------
    ValueError
        Wrong shape, a label other than +1 / -1, or a dissimilar pair of an
        object with itself.
    """
    if signs is None:
        return np.ones(len(pairs))
    signs = np.asarray(signs)
    if signs.ndim == 2 and signs.shape[1] == 1:
        signs = signs[:, 0]
    if signs.shape != (len(pairs),):
        raise ValueError(f"{name} must have shape ({len(pairs)},), got {signs.shape}.")
    try:
        labels = set(np.unique(signs).tolist())
    except TypeError:
        labels = {"<mixed types>"}
    if labels <= {True, False} and signs.dtype == bool or labels <= {0, 1} and 0 in labels:
        signs = np.where(signs.astype(bool), 1.0, -1.0)  # bool or 0/1: 0 = dissimilar
    elif labels <= {1, -1}:
        signs = signs.astype(float)
    else:
        shown = sorted(map(str, labels))
        raise ValueError(f"{name} must hold +1 (similar) or -1 (dissimilar) pair labels "
                         f"(or 1 / 0, True / False), got {', '.join(shown[:5])}"
                         f"{', ...' if len(shown) > 5 else ''}.")
    loops = (pairs[:, 0] == pairs[:, 1]) & (signs < 0)
    if np.any(loops):
        raise ValueError(
            f"Pair ({pairs[loops][0, 0]}, {pairs[loops][0, 1]}) of an object "
            "with itself cannot be dissimilar."
        )
    return signs
