"""Batch kernel learning from similar / dissimilar pairs with DefiniteBoost."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._definiteboost import PairConstraints, _warn_outcome, run_definiteboost
from ._exponent import ExponentState
from ._validation import unchanged_on_error, validate_pairs

__all__ = ["DefiniteBoostKernel"]


def _pair_updater(method, size):
    """Engine for one rank-one projection: ``(state, a, b, scale)``."""
    if method == "eigh":
        return None
    try:
        from ._rank_one import rank_one_update_state
    except ImportError:
        if method == "rank-one":
            raise ValueError("method='rank-one' is not available.") from None
        return None
    return rank_one_update_state if size > 2 else None


class DefiniteBoostKernel(ClassifierMixin, BaseEstimator):
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

    Parameters
    ----------
    n_objects : int, default=None
        Number of objects ``d``; from ``init`` when that is a matrix,
        otherwise, if ``None``, from the largest index in the fitted pairs.
    gamma : float or "auto", default="auto"
        Threshold of similar pairs on the squared distance, in the units of
        the kernel. ``"auto"``: a tenth of the prior's mean squared distance
        between distinct objects (``0.2 tau / d`` for the identity prior,
        the paper's choice).
    gamma_dissimilar : float or "auto", default="auto"
        Threshold of dissimilar pairs. ``"auto"``: the prior's mean squared
        distance (``2 tau / d`` for the identity prior). Must be below
        ``2 tau``, the largest squared distance a kernel of trace ``tau`` has.
    projection : {"approximate", "exact"}, default="approximate"
        Step of eq. 13 (Theorem 4.1's bound holds) or the exact projection
        of eq. 11 (the chosen constraint then holds with equality).
    max_iter : int, default=2000
        Largest number of projections.
    tol : float, default=1e-2
        Stop when every constraint holds within ``tol * gamma`` (squared
        distance units of the kernel).
    init : {"identity"} or array-like of shape (d, d), default="identity"
        Prior ``W_1``: ``I / d`` or a symmetric positive definite matrix
        (scaled to trace one).
    trace : float, default=1.0
        Trace ``tau`` of the learned kernel.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection; same result up to round-off.
    verbose : int, default=0
        Print progress when positive.

    Attributes
    ----------
    state_ : ExponentState
        Exponent of the learned ``W`` and its eigendecomposition.
    n_objects_ : int
    gamma_, gamma_dissimilar_ : float
        The thresholds used (kernel units).
    threshold_ : float
        Squared distance below which :meth:`predict` calls a pair similar:
        ``gamma_`` when fitted on similar pairs only, else the midpoint of
        ``gamma_`` and ``gamma_dissimilar_``.
    classes_ : ndarray of shape (2,)
        ``[-1, 1]``.
    n_constraints_ : int
    n_iter_ : int
        Projections made.
    dual_objective_ : ndarray of shape (n_iter_ + 1,)
        ``tr exp(log W_1 - sum_s alpha_s C_s)`` from the start (``1``).
    dual_bound_ : ndarray of shape (n_iter_ + 1,)
        Theorem 4.1's bound ``prod_s rho(r_s)`` (approximate projection).
    violations_ : ndarray of shape (n_iter_,)
        Largest violation before each projection, in kernel units.
    chosen_constraints_ : ndarray of shape (n_iter_,)
        Index (into the fitted pairs) of each projected constraint.
    alphas_ : ndarray of shape (n_iter_,)
        Step sizes.
    max_violation_ : float
        Largest violation of the returned kernel, in kernel units.
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import DefiniteBoostKernel
    >>> pairs = np.array([[0, 1], [2, 3], [4, 5]])
    >>> model = DefiniteBoostKernel(n_objects=8).fit(pairs)
    >>> model.predict(pairs)
    array([1, 1, 1])
    """

    _parameter_constraints: dict = {
        "n_objects": [Interval(Integral, 2, None, closed="left"), None],
        "gamma": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "gamma_dissimilar": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "projection": [StrOptions({"approximate", "exact"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "init": [StrOptions({"identity"}), "array-like"],
        "trace": [Interval(Real, 0, None, closed="neither")],
        "method": [StrOptions({"auto", "eigh", "rank-one"})],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_objects=None, gamma="auto", gamma_dissimilar="auto",
                 projection="approximate", max_iter=2000, tol=1e-2, init="identity",
                 trace=1.0, method="auto", verbose=0):
        self.n_objects = n_objects
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.projection = projection
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.trace = trace
        self.method = method
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Find the kernel closest to the prior satisfying the pair constraints.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Object indices (integer array or 2-column DataFrame).
        y : array-like of shape (n_pairs,), default=None
            ``+1`` similar, ``-1`` dissimilar; ``None``: all similar.

        Returns
        -------
        self : object
        """
        with unchanged_on_error(self):
            pairs, signs = self._validate_constraints(X, y)
            state = self._initial_state(pairs)
            gamma, gamma_dissimilar = self._thresholds(state)
        thresholds = np.where(signs > 0, gamma, gamma_dissimilar) / self.trace
        constraints = PairConstraints(pairs[:, 0], pairs[:, 1], signs, thresholds, state)
        log = run_definiteboost(
            constraints, state, projection=self.projection, max_iter=self.max_iter,
            tol=self.tol * gamma / self.trace,
            min_prior_eigenvalue=np.exp(state.eigenvalues[0] - state.log_partition()),
            update=_pair_updater(self.method, state.size),
            callback=self._progress if self.verbose else None,
        )
        _warn_outcome(log, self.max_iter)
        self._store(state, pairs, signs, gamma, gamma_dissimilar, log)
        return self

    def _validate_constraints(self, X, y):
        n_objects = self._declared_n_objects()
        pairs, y = validate_pairs(self, X, y, reset=True, n_objects=n_objects)
        if y is None:
            signs = np.ones(len(pairs))
        else:
            signs = np.asarray(y)
            labels = set(np.unique(signs).tolist())
            if not labels <= {1, -1}:
                raise ValueError(
                    f"y must hold +1 (similar) or -1 (dissimilar) pair labels, "
                    f"got {sorted(labels)}."
                )
            signs = signs.astype(float)
        loops = (pairs[:, 0] == pairs[:, 1]) & (signs < 0)
        if np.any(loops):
            raise ValueError(
                f"Pair ({pairs[loops][0, 0]}, {pairs[loops][0, 1]}) of an object "
                "with itself cannot be dissimilar."
            )
        return pairs, signs

    def _declared_n_objects(self):
        if isinstance(self.init, str):
            return self.n_objects
        n_init = np.shape(self.init)[0]
        if self.n_objects is not None and self.n_objects != n_init:
            raise ValueError(
                f"n_objects={self.n_objects} does not match init of shape "
                f"{np.shape(self.init)}."
            )
        return n_init

    def _initial_state(self, pairs):
        if isinstance(self.init, str):
            n_objects = self.n_objects or max(int(pairs.max()) + 1, 2)
            return ExponentState.identity(n_objects)
        return ExponentState.from_prior(self.init, name="init")

    def _thresholds(self, state):
        """``(gamma, gamma_dissimilar)`` in kernel units."""
        W = state.matrix()
        d = W.shape[0]
        mean_sq_distance = 2.0 * (d * np.trace(W) - W.sum()) / (d * (d - 1))
        mean_sq_distance *= self.trace
        gamma = 0.1 * mean_sq_distance if self.gamma == "auto" else float(self.gamma)
        gamma_dissimilar = (mean_sq_distance if self.gamma_dissimilar == "auto"
                            else float(self.gamma_dissimilar))
        if gamma_dissimilar >= 2.0 * self.trace:
            raise ValueError(
                f"gamma_dissimilar={gamma_dissimilar:.4g} can never hold: squared "
                f"distances under a kernel of trace {self.trace:g} are below "
                f"{2.0 * self.trace:g}."
            )
        return gamma, gamma_dissimilar

    def _store(self, state, pairs, signs, gamma, gamma_dissimilar, log):
        self.state_ = state
        self.n_objects_ = state.n_objects
        self.classes_ = np.array([-1, 1])
        self.gamma_ = gamma
        self.gamma_dissimilar_ = gamma_dissimilar
        has_dissimilar = bool(np.any(signs < 0))
        self.threshold_ = 0.5 * (gamma + gamma_dissimilar) if has_dissimilar else gamma
        self.n_constraints_ = len(pairs)
        self.n_iter_ = log["n_iter"]
        self.dual_objective_ = log["dual_objective"]
        self.dual_bound_ = log["dual_bound"]
        self.violations_ = log["violation"] * self.trace
        self.chosen_constraints_ = log["constraint"]
        self.alphas_ = log["alpha"]
        self.max_violation_ = max(log["max_violation"], 0.0) * self.trace
        self.converged_ = log["converged"]

    def _progress(self, t, record):
        every = max(1, self.max_iter // 20)
        if t % every == 0 or t == 1:
            print(f"[DefiniteBoostKernel] iter {t}: largest violation "
                  f"{record['violation'] * self.trace:.4g}, dual objective "
                  f"{record['dual_objective']:.6g} (bound {record['dual_bound']:.6g})")

    # -- fitted views ----------------------------------------------------------
    @property
    def kernel_(self):
        """The learned kernel ``trace * W`` (symmetric PSD, d x d)."""
        check_is_fitted(self, "state_")
        return self.trace * self.state_.matrix()

    def pair_distances(self, X):
        """Squared distances ``K_aa + K_bb - 2 K_ab`` of pairs under ``kernel_``."""
        check_is_fitted(self, "state_")
        pairs, _ = validate_pairs(self, X, reset=False, n_objects=self.n_objects_)
        return self.trace * self.state_.pair_sq_distances(pairs[:, 0], pairs[:, 1])

    def decision_function(self, X):
        """``threshold_ - squared distance``: positive for similar pairs."""
        return self.threshold_ - self.pair_distances(X)

    def predict(self, X):
        """``+1`` (similar) where the squared distance is ``<= threshold_``, else ``-1``."""
        return np.where(self.decision_function(X) >= 0, 1, -1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.classifier_tags.multi_class = False
        tags.classifier_tags.poor_score = True
        return tags
