"""DefiniteBoost (Section 4): the solver's public entry points.

Finds ``W* = argmin Delta(W, W_1)`` subject to ``tr W = 1`` and
``tr(W C_j) <= 0`` by greedy Bregman projections. Three modules:

* :mod:`.definiteboost_projections`, the algorithm (constraints, the greedy
  run, the dual objective and Theorem 4.1's bound);
* :mod:`.definiteboost_rules`, the rules of labeled pairs (thresholds in
  the kernel's units, the estimator's defaults, the labels' check) and
  :func:`definiteboost_pairs`;
* this one: :func:`definiteboost` for general constraint matrices, and the
  names above importable from one place.
"""

from __future__ import annotations

import numpy as np

from .._engines import select
from .._numerics.state import ExponentState
from .definiteboost_lazy import lazy_state
from .definiteboost_projections import (
    MatrixConstraints,
    PairConstraints,
    _scan_interval,
    _Settings,
    _warn_outcome,
    run_definiteboost,
)
from .definiteboost_rules import (
    definiteboost_pairs,
    fit_pair_constraints,
    pair_thresholds,
    prior_mean_sq_distance,
    satisfiable_pairs,
)

__all__ = [
    "update_engine",
    "definiteboost",
    "definiteboost_pairs",
    "fit_pair_constraints",
    "run_definiteboost",
    "PairConstraints",
    "MatrixConstraints",
    "pair_thresholds",
    "prior_mean_sq_distance",
    "satisfiable_pairs",
]


def update_engine(method, state, n_constraints=None, projection="approximate"):
    """Name of the engine ``method`` makes DefiniteBoost's updates on ``state`` with.

    Parameters
    ----------
    method : str
        An update ``method`` option of the engine registry (``"auto"``
        included).
    state : ExponentState
        The state the fit starts from.
    n_constraints : int, optional
        Pair constraints of the fit: with ``"auto"``, many of them on a dense
        state make the lazy run (:mod:`.definiteboost_lazy`), whose steps are
        the Lanczos engine's.
    projection : {"approximate", "exact"}, default="approximate"

    Returns
    -------
    name : str
        The engine's registry name (for the progress bar's compile note).
    """
    if (method == "auto" and n_constraints is not None and projection == "approximate"
            and lazy_state(state, _scan_interval(n_constraints, state.size))):
        return "lanczos"
    return select(method, state, need="update").name


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
        Maximum number of projections.
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
