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

import warnings

import numpy as np
from scipy import linalg, optimize
from sklearn.exceptions import ConvergenceWarning

from .._engines import select
from .._engines.rank_one import pair_sq_distance_after
from .._numerics.spectral import check_symmetric, normalized_exp_weights
from .._numerics.state import ExponentState, prior_state
from .._numerics.threads import blas_threads
from .._numerics.validation import check_pair_indices
from .bounds import _log_rho, definiteboost_step

__all__ = ["definiteboost", "definiteboost_pairs", "PairConstraints", "MatrixConstraints"]


class MatrixConstraints:
    """General constraints ``tr(W C_j) <= 0`` for symmetric ``C_j`` (d x d)."""

    def __init__(self, constraints):
        self.matrices = np.stack([check_symmetric(C, name=f"constraints[{j}]")
                                  for j, C in enumerate(constraints)])
        eigenvalues = np.linalg.eigvalsh(self.matrices)
        self.lam_min = eigenvalues[:, 0]
        self.lam_max = eigenvalues[:, -1]
        if np.any(self.lam_min >= 0) or np.any(self.lam_max <= 0):
            bad = np.flatnonzero((self.lam_min >= 0) | (self.lam_max <= 0))[0]
            raise ValueError(
                f"constraints[{bad}] must have eigenvalues of both signs "
                f"(got range [{self.lam_min[bad]:.3g}, {self.lam_max[bad]:.3g}])."
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
            sq_distances = state.pair_sq_distances(self.a, self.b)
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


def run_definiteboost(constraints, state, *, projection="approximate",
                      max_iter=1000, tol=1e-8, min_prior_eigenvalue=None,
                      method="eigh", callback=None, keep="best", corrective=False,
                      max_multiplier=None):
    """Greedy Bregman projections on ``state`` (in place); returns the log.

    Parameters
    ----------
    constraints : PairConstraints or MatrixConstraints
    state : ExponentState
        Starts at ``log W_1`` with ``tr W_1 = 1``; holds the result.
    projection : {"approximate", "exact"}
        Step size of eq. 13 or the exact projection of eq. 11.
    max_iter : int
        Largest number of projections.
    tol : float
        Stop when the largest violation ``max_j tr(W C_j) <= tol``.
    min_prior_eigenvalue : float, optional
        Smallest eigenvalue of ``W_1``: a dual objective below it certifies
        that the constraints are infeasible (weak duality), which stops the
        run with a warning.
    method : {"auto", "eigh", "rank-one"}, default="eigh"
        Engine of each pair projection (see :func:`megkernel._engines.select`).
    callback : callable, optional
        Called as ``callback(t, record)`` after each iteration.
    keep : {"best", "last"}, default="best"
        Leave in ``state`` the iterate with the smallest largest violation
        (the answer when the run stops early) or the last one (the smallest
        dual objective).
    corrective : bool, default=False
        The paper's algorithm only ever increases the multipliers
        ``alpha_j``; it stops at a feasible kernel that need not be the
        closest one. With ``corrective=True`` (Hildreth-style corrections,
        beyond the paper) a constraint with ``alpha_j > 0`` that has become
        slack may also be chosen and its multiplier reduced (never below
        0), so the run converges to the exact Bregman projection: it stops
        when feasibility and complementary slackness both hold within
        ``tol``. The dual objective still never increases; Theorem 4.1's
        factor is applied for every step not clipped at ``alpha_j = 0``.
    max_multiplier : float or ndarray of shape (n_constraints,), optional
        Upper bound ``C_j`` on each multiplier (beyond the paper): the box
        ``0 <= alpha_j <= C_j`` is the dual of the soft-margin problem
        ``min Delta(W, W_1) + sum_j C_j max(0, tr(W C_j))``, which is always
        feasible. A violated constraint whose multiplier reached its bound
        is then optimal (it keeps its slack) and is no longer chosen; steps
        are clipped at the bound. Pass ``min_prior_eigenvalue=None`` and
        ``keep="last"`` with it (the certificate and "best" refer to the
        hard constraints).

    Returns
    -------
    log : dict of arrays
        ``constraint`` (chosen ``j_t``), ``violation`` (``r_t``), ``alpha``
        (negative for a corrective step), ``multipliers`` (``alpha_j``),
        ``dual_objective`` and ``dual_bound`` (index 0 is the start),
        ``max_violation`` of the kept iterate, ``converged``,
        ``infeasible``, ``n_iter``.
    """
    engine = select(method, state, need="update")
    log_dual = state.log_partition()
    log_bound = 0.0
    offset = 0.0
    multipliers = np.zeros(len(constraints))
    cap = np.broadcast_to(np.inf if max_multiplier is None else max_multiplier,
                          multipliers.shape)
    chosen, violations, alphas = [], [], []
    log_duals, log_bounds = [log_dual], [log_bound]
    best = None
    converged = infeasible = False
    for t in range(max_iter + 1):
        values = constraints.values(state)
        largest = float(values.max())
        if keep == "best" and (best is None or largest < best[0]):
            best = (largest, state.copy())
        scores = values
        if corrective:
            scores = np.where((values < 0) & (multipliers > 0), -values, values)
        if max_multiplier is not None:
            scores = np.where((values > 0) & (multipliers >= cap), 0.0, scores)
        j = _most_violated(scores)
        r = float(scores[j])
        if r <= tol:
            converged = True
            break
        if t == max_iter or infeasible:
            break
        direction = -1.0 if values[j] < 0 else 1.0
        lam_max, lam_min = constraints.eigen_range(j)
        if direction < 0:
            lam_max, lam_min = -lam_min, -lam_max
        alpha = float(definiteboost_step(r, lam_max, lam_min))
        limit = multipliers[j] if direction < 0 else cap[j] - multipliers[j]
        if projection == "exact":
            alpha = _exact_step(constraints, state, j, alpha, direction, limit)
        clipped = alpha >= limit
        alpha = min(alpha, limit)
        offset += constraints.project(state, j, direction * alpha, engine)
        multipliers[j] += direction * alpha
        log_dual = state.log_partition() + offset
        if not clipped:
            log_bound += float(_log_rho(r, lam_max, lam_min))
        chosen.append(j)
        violations.append(r)
        alphas.append(direction * alpha)
        log_duals.append(log_dual)
        log_bounds.append(log_bound)
        if min_prior_eigenvalue is not None and log_dual < np.log(min_prior_eigenvalue) - 1e-9:
            infeasible = True
        if callback is not None:
            callback(t + 1, {"constraint": j, "violation": r, "alpha": direction * alpha,
                             "dual_objective": np.exp(log_dual),
                             "dual_bound": np.exp(log_bound)})
    best_violation, best_state = best if best is not None else (largest, None)
    if keep == "best":
        state.assign(best_state)
    else:
        best_violation = float(constraints.values(state).max())
    return {
        "constraint": np.asarray(chosen, dtype=np.intp),
        "violation": np.asarray(violations),
        "alpha": np.asarray(alphas),
        "multipliers": multipliers,
        "dual_objective": np.exp(log_duals),
        "dual_bound": np.exp(log_bounds),
        "max_violation": best_violation,
        "converged": converged,
        "infeasible": infeasible,
        "n_iter": len(chosen),
    }


def _warn_outcome(log, max_iter, max_violation=None):
    """Warn when the run stopped infeasible or unconverged; ``max_violation``
    overrides the log's (trace-one) figure, e.g. in the caller's units."""
    if max_violation is None:
        max_violation = log["max_violation"]
    if log["infeasible"]:
        warnings.warn(
            "The constraints are infeasible: the dual objective fell below the "
            "prior's smallest eigenvalue (a certificate by weak duality). "
            f"Returning the iterate with the smallest largest violation "
            f"({max_violation:.3g}).",
            ConvergenceWarning, stacklevel=3,
        )
    elif not log["converged"]:
        warnings.warn(
            f"DefiniteBoost did not converge in {max_iter} iterations "
            f"(largest violation {max_violation:.3g}); returning the "
            "iterate with the smallest largest violation. Increase max_iter "
            "or tol.",
            ConvergenceWarning, stacklevel=3,
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
    constraints = MatrixConstraints(constraints)
    if constraints.matrices.shape[1:] != state.exponent.shape:
        raise ValueError(
            f"constraints have shape {constraints.matrices.shape[1:]}, the prior "
            f"{state.exponent.shape}."
        )
    log = run_definiteboost(constraints, state, projection=projection,
                            max_iter=max_iter, tol=tol, keep=keep,
                            corrective=corrective, min_prior_eigenvalue=np.exp(state.eigenvalues[0]))
    _warn_outcome(log, max_iter)
    log["state"] = state
    return state.matrix(), log


def definiteboost_pairs(pairs, signs, thresholds, *, n_objects=None, prior=None,
                        projection="approximate", max_iter=1000, tol=1e-8,
                        method="eigh", keep="best", corrective=False):
    """DefiniteBoost for similar / dissimilar pair constraints.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
    signs : ndarray of shape (n,)
        ``+1`` similar (``||x_a - x_b||^2 <= threshold``), ``-1`` dissimilar
        (``>= threshold``).
    thresholds : float or ndarray of shape (n,)
        In the units of a trace-one kernel.
    n_objects : int, optional
        ``d`` for the prior ``I / d`` when ``prior`` is not given.
    prior : ndarray of shape (d, d), optional
    projection, max_iter, tol, method, keep, corrective
        See :func:`run_definiteboost`.

    Returns
    -------
    W : ndarray of shape (d, d)
    log : dict
    """
    state = prior_state(n_objects, prior)
    pairs = check_pair_indices(pairs, state.n_objects, name="pairs")
    constraints = PairConstraints(pairs[:, 0], pairs[:, 1], signs, thresholds, state)
    log = run_definiteboost(constraints, state, projection=projection,
                            max_iter=max_iter, tol=tol,
                            min_prior_eigenvalue=np.exp(state.eigenvalues[0]
                                                        - state.log_partition()),
                            method=method, keep=keep, corrective=corrective)
    _warn_outcome(log, max_iter)
    log["state"] = state
    return state.matrix(), log
