"""The paper's guarantees as functions, and the step size of eq. 13.

Lemma 3.2 (MEG) and Theorem 4.1 (DefiniteBoost).

All MEG quantities are in trace-one units (``tr W = 1``): for a kernel of
trace ``tau`` multiply losses and bounds by ``tau**2``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "meg_learning_rate",
    "meg_loss_bound",
    "meg_optimal_c",
    "meg_regret_bound",
    "definiteboost_step",
    "definiteboost_rho",
]


def _positive(value, name):
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}.")


def meg_learning_rate(r, c=math.inf):
    r"""Learning rate of Lemma 3.2: :math:`\eta = 2c / (r^2 (2 + c))`.

    Parameters
    ----------
    r : float
        Bound on the eigenvalue range ``lambda_max(X_t) - lambda_min(X_t)``
        of every instance (``2`` for distance pairs ``X_t = u u^T``).
    c : float, default=inf
        Trade-off constant; ``inf`` is the realizable case, ``eta = 2/r^2``.

    Returns
    -------
    float
        The learning rate ``eta``.
    """
    _positive(r, "r")
    if c <= 0:
        raise ValueError(f"c must be positive, got {c!r}.")
    if math.isinf(c):
        return 2.0 / r**2
    return 2.0 * c / (r**2 * (2.0 + c))


def meg_loss_bound(r, divergence, comparator_loss=0.0, c=math.inf):
    r"""Lemma 3.2: :math:`L_{MEG} \le (1 + c/2) L_U + (1/2 + 1/c) r^2 \Delta(U, W_1)`.

    Parameters
    ----------
    r : float
        Eigenvalue-range bound of the instances.
    divergence : float
        ``Delta(U, W_1)`` for the comparator ``U`` (trace one).
    comparator_loss : float, default=0
        ``L_U(S)``, the comparator's total loss.
    c : float, default=inf
        Trade-off constant used for the learning rate; ``inf`` requires
        ``comparator_loss == 0`` and gives ``r^2 Delta / 2``.

    Returns
    -------
    float
        The bound on MEG's total loss (trace-one units); ``inf`` when
        ``c`` is infinite and ``comparator_loss`` is positive.
    """
    _positive(r, "r")
    if divergence < 0 or comparator_loss < 0:
        raise ValueError("divergence and comparator_loss must be >= 0.")
    if math.isinf(c):
        if comparator_loss > 0:
            return math.inf
        return 0.5 * r**2 * divergence
    return (1.0 + c / 2.0) * comparator_loss + (0.5 + 1.0 / c) * r**2 * divergence


def meg_optimal_c(r, max_comparator_loss, max_divergence):
    r"""Return the best ``c`` given :math:`L_U \le \ell_{max}`, :math:`\Delta \le d_{max}`.

    :math:`c = r \sqrt{2 d_{max} / \ell_{max}}` (``inf`` when ``l_max = 0``).

    Parameters
    ----------
    r : float
        Eigenvalue-range bound of the instances.
    max_comparator_loss : float
        ``l_max``, a bound on the comparator's total loss ``L_U``.
    max_divergence : float
        ``d_max``, a bound on ``Delta(U, W_1)``.

    Returns
    -------
    float
        The trade-off constant ``c`` that minimises Lemma 3.2's bound.
    """
    _positive(r, "r")
    if max_comparator_loss < 0 or max_divergence < 0:
        raise ValueError("max_comparator_loss and max_divergence must be >= 0.")
    if max_comparator_loss == 0:
        return math.inf
    return r * math.sqrt(2.0 * max_divergence / max_comparator_loss)


def meg_regret_bound(r, max_comparator_loss, max_divergence, divergence=None):
    r"""Bound the regret at the optimal ``c``.

    :math:`L_{MEG} - L_U \le r \sqrt{2 \ell_{max} d_{max}} + r^2 \Delta / 2`.

    Parameters
    ----------
    r : float
        Eigenvalue-range bound of the instances.
    max_comparator_loss : float
        ``l_max``, a bound on the comparator's total loss ``L_U``.
    max_divergence : float
        ``d_max``, a bound on ``Delta(U, W_1)``.
    divergence : float, default=None
        ``Delta(U, W_1)`` of the comparator; None uses ``max_divergence``.

    Returns
    -------
    float
        The bound on ``L_MEG - L_U`` (trace-one units).
    """
    _positive(r, "r")
    if divergence is None:
        divergence = max_divergence
    return (r * math.sqrt(2.0 * max_comparator_loss * max_divergence)
            + 0.5 * r**2 * divergence)


def definiteboost_step(r, lam_max, lam_min):
    r"""Approximate projection step, eq. 13.

    :math:`\alpha = \frac{1}{\lambda_{max} - \lambda_{min}}
    \log \frac{1 - r/\lambda_{min}}{1 - r/\lambda_{max}}`, for a violation
    ``0 <= r < lam_max`` of a constraint with eigenvalues in
    ``[lam_min, lam_max]``, ``lam_min < 0 < lam_max``. Vectorized.

    Parameters
    ----------
    r : float or array-like
        The violation ``r_t`` of the constraint, ``0 <= r < lam_max``.
    lam_max : float or array-like
        Largest eigenvalue of the constraint matrix (positive).
    lam_min : float or array-like
        Smallest eigenvalue of the constraint matrix (negative).

    Returns
    -------
    float or ndarray
        The step size ``alpha``, of the inputs' broadcast shape.
    """
    r = np.asarray(r, dtype=float)
    r = np.minimum(r, lam_max * (1.0 - 1e-15))
    return (np.log1p(-r / lam_min) - np.log1p(-r / lam_max)) / (lam_max - lam_min)


def definiteboost_rho(r, lam_max, lam_min):
    r"""Theorem 4.1's per-step factor ``rho(r) <= 1``.

    :math:`\rho = (1 - r/\lambda_{max})^{\lambda_{max}/(\lambda_{max}-\lambda_{min})}
    (1 - r/\lambda_{min})^{-\lambda_{min}/(\lambda_{max}-\lambda_{min})}`.
    Vectorized.

    Parameters
    ----------
    r : float or array-like
        The violation ``r_t`` of the constraint, ``0 <= r < lam_max``.
    lam_max : float or array-like
        Largest eigenvalue of the constraint matrix (positive).
    lam_min : float or array-like
        Smallest eigenvalue of the constraint matrix (negative).

    Returns
    -------
    float or ndarray
        The factor ``rho`` by which an approximate projection at least
        lowers the dual objective, of the inputs' broadcast shape.
    """
    return np.exp(_log_rho(r, lam_max, lam_min))


def _log_rho(r, lam_max, lam_min):
    r = np.asarray(r, dtype=float)
    r = np.minimum(r, lam_max * (1.0 - 1e-15))
    span = lam_max - lam_min
    return (lam_max / span) * np.log1p(-r / lam_max) - (lam_min / span) * np.log1p(-r / lam_min)
