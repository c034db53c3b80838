"""MEG for metric learning on features, in the whitened coordinates of the training points.

The loss is the one-sided square loss.

Pure solver functions: arrays in, arrays out. :class:`megkernel.MEGMetric`
wraps them; how long it trains is chosen by
:mod:`megkernel._solvers.holdout`. The derivation of the one-sided loss bound is in
the user guide, ``docs/user_guide/metrics.rst``, "The one-sided loss and its bound".

Coordinates
-----------
The centered training features ``X = U S V^T`` (rank ``r``) give whitened
coordinates ``z(x) = S^-1 V^T (x - mean)``; the rows of ``U`` are those of the
training points. A metric is ``d^2(x, x') = tau (z - z')^T M (z - z')`` with
``M`` an ``r x r`` density matrix and ``tau = ||X||_F^2``. The prior
``M_1 = S^2 / tau`` is the Euclidean metric. A pair of points is the instance
``u u^T`` with ``u = z - z'``; its prediction is ``u^T M u`` and its
eigenvalue range is ``||u||^2`` (trace-one units: targets are divided by
``tau``).

Loss
----
``sides`` says which errors count: ``+1`` only ``yhat > y`` (a similar pair
farther than its target), ``-1`` only ``yhat < y`` (a dissimilar pair nearer
than its target), ``0`` both (the square loss). A trial whose error does not
count makes no update; otherwise it is the square-loss MEG update with the
same target, so Lemma 3.1's relative loss bound holds for the one-sided
losses of algorithm and comparator alike.
"""

from __future__ import annotations

import numpy as np

from .._numerics.spectral import log_trace_exp, normalized_exp_weights

__all__ = [
    "MetricExponent",
    "divergence_to",
    "embedding",
    "mean_range_learning_rate",
    "normalised_loss",
    "one_sided_residuals",
    "online_bound",
    "online_trials",
    "pair_diffs",
    "metric_components",
    "resolve_learning_rate",
    "run_batches",
    "targets_and_sides",
    "whiten",
]


def whiten(centred, *, rtol=1e-10):
    """Whitened coordinates of centered training points.

    Returns
    -------
    coordinates : ndarray of shape (n_samples, rank)
        ``U``: rows are the training points' ``z``.
    scales : ndarray of shape (rank,)
        Singular values ``S``.
    directions : ndarray of shape (rank, n_features)
        ``V^T``.
    trace : float
        ``tau = ||X||_F^2 = sum(S^2)``.
    """
    U, s, Vt = np.linalg.svd(centred, full_matrices=False)
    keep = s > s[0] * rtol
    s = s[keep]
    return U[:, keep], s, Vt[keep], float(np.sum(s * s))


class MetricExponent:
    """The exponent ``A = log M`` of an ``r x r`` density matrix, with its eigendecomposition.

    Eq. 7's stable form: ``M = V diag(exp lam) V^T / Z``.
    """

    FIELDS = ("exponent", "eigvals", "eigvecs")

    def __init__(self, exponent, eigvals, eigvecs):
        self.exponent, self.eigvals, self.eigvecs = exponent, eigvals, eigvecs

    @classmethod
    def from_prior(cls, prior_eigvals):
        """Start from ``A = diag(log prior)``, the diagonal prior ``S^2 / tau``."""
        log_prior = np.log(np.asarray(prior_eigvals, dtype=float))
        return cls(np.diag(log_prior), log_prior.copy(), np.eye(len(log_prior)))

    def copy(self):
        return MetricExponent(*(getattr(self, name).copy() for name in self.FIELDS))

    @property
    def weights(self):
        """Eigenvalues of ``M`` (sum one), in the order of ``eigvecs``."""
        return normalized_exp_weights(self.eigvals)

    def density(self):
        """``M`` itself."""
        return (self.eigvecs * self.weights) @ self.eigvecs.T

    def log_density(self):
        """``log M = A - log tr exp(A) I``, exact however small ``M``'s eigenvalues."""
        return (self.eigvecs * (self.eigvals - log_trace_exp(self.eigvals))) @ self.eigvecs.T

    def divergence_from(self, start_log):
        """Von Neumann divergence ``Delta(M, M_start)`` (eq. 1) from ``log M_start``."""
        log_own = self.log_density()
        return float(max(np.sum(self.density() * (log_own - start_log)), 0.0))

    def predict(self, diffs):
        """``u^T M u`` for each row ``u`` of ``diffs``.

        Each row is computed by the same vector-matrix product and the same
        row sum whatever the other rows: a pair's prediction (and so whether
        it meets its target) does not depend on the batch it is in. (One
        matrix product over all rows would let BLAS pick a different kernel,
        with a different rounding, for one row than for many.)
        """
        projected = np.matmul(diffs[:, None, :], self.eigvecs)[:, 0, :]
        return np.sum(projected * projected * self.weights, axis=1)

    def add(self, diffs, coefficients):
        """Update ``A <- A - sum_t c_t u_t u_t^T``, then re-diagonalize."""
        self.assign(self.exponent - (diffs.T * coefficients) @ diffs)

    def assign(self, exponent):
        """Set ``A`` (symmetrized), then diagonalize it; non-finite refused first."""
        exponent = 0.5 * (exponent + exponent.T)
        magnitude = np.abs(exponent).max()
        if not np.isfinite(magnitude):  # LAPACK never sees a non-finite matrix
            raise ValueError("The metric's exponent overflowed: the learning rate or "
                             "the targets are too large for double precision.")
        if magnitude == 0:  # A = 0: M = I / rank
            eigvals, eigvecs = np.zeros(len(exponent)), np.eye(len(exponent))
        else:
            # numpy's eigh (LAPACK syevd) on the scaled matrix: for the small
            # rank x rank exponents here, far less call overhead than scipy's
            eigvals, eigvecs = np.linalg.eigh(exponent / magnitude)
            eigvals = eigvals * magnitude
        self.exponent, self.eigvals, self.eigvecs = exponent, eigvals, eigvecs


def one_sided_residuals(predictions, targets, sides):
    """``yhat - y`` where the error counts for its side, else 0.

    A residual within the round-off of its operands (``8 eps (|yhat| + |y|)``)
    is 0: the prediction meets its target to the precision it is computed
    in, so it is neither a loss nor an update (an update of that size is
    noise, and the bound's divergence term cannot resolve it).
    """
    predictions = np.asarray(predictions, dtype=float)
    residuals = predictions - targets
    round_off = 8.0 * np.finfo(float).eps * (np.abs(predictions) + np.abs(targets))
    return np.where((sides * residuals >= 0) & (np.abs(residuals) > round_off), residuals, 0.0)


def run_batches(exponent, diffs, targets, sides, *, learning_rate, n_seen, n_more,
                batch_size, rng, order=None):
    """Mini-batch MEG over the pairs in epochs of random order, in place.

    Each batch predicts with the current ``M``, then makes the MEG update on
    the batch's summed loss, ``A <- A - 2 eta sum_t (yhat_t - y_t) u_t u_t^T``
    (one eigendecomposition per batch; ``batch_size=1`` is on-line MEG).
    Trials ``n_seen .. n_seen + n_more - 1`` of the endless sequence of
    epochs are run; ``order`` carries the current epoch's permutation
    between calls (drawn from ``rng`` at each epoch's start).

    Parameters
    ----------
    exponent : MetricExponent
    diffs : ndarray of shape (n_pairs, rank)
    targets, sides : ndarray of shape (n_pairs,)
        Targets in trace-one units; sides as :func:`one_sided_residuals`.
    learning_rate : float
    n_seen, n_more : int
    batch_size : int
    rng : numpy.random.Generator or None
        Draws each epoch's order; ``None``: the pairs' own order.
    order : ndarray or None

    Returns
    -------
    loss : float
        Summed loss of the predictions made before each update.
    order : ndarray
        The current epoch's permutation.
    """
    n_pairs = len(diffs)
    total, position, stop = 0.0, n_seen, n_seen + n_more
    while position < stop:
        within = position % n_pairs
        if within == 0 or order is None:
            order = np.arange(n_pairs) if rng is None else rng.permutation(n_pairs)
        end = min(within + batch_size, n_pairs, within + stop - position)
        batch = order[within:end]
        residuals = one_sided_residuals(exponent.predict(diffs[batch]), targets[batch],
                                        sides[batch])
        if residuals.any():
            total += float(residuals @ residuals)
            exponent.add(diffs[batch], 2.0 * learning_rate * residuals)
        position += len(batch)
    return total, order


def online_trials(exponent, diffs, targets, sides, ranges):
    """On-line MEG, one pair per update, at the bound's rate ``1 / rho_t^2``.

    ``ranges[t]`` is ``rho_t``, the largest instance range seen up to trial
    ``t`` (non-decreasing). With ``eta_t = 1 / rho_t^2`` (Lemma 3.1 with
    ``c = 2``) the one-sided losses obey :func:`online_bound`.

    Returns
    -------
    losses : ndarray of shape (n_pairs,)
        One-sided loss of each trial's prediction (before its update).
    """
    losses = np.empty(len(diffs))
    for t in range(len(diffs)):
        u = diffs[t:t + 1]
        residual = one_sided_residuals(exponent.predict(u), targets[t:t + 1],
                                       sides[t:t + 1])
        losses[t] = residual[0] ** 2
        if residual[0] != 0 and ranges[t] > 0:  # range 0: u = 0, nothing to learn
            exponent.add(u, 2.0 * (residual / ranges[t]) / ranges[t])
    return losses


def online_bound(comparator_losses, ranges, divergence):
    """Right-hand side of the normalized relative loss bound (c = 2).

    ``sum_t loss_t / rho_t^2 <= 2 sum_t loss_U,t / rho_t^2 + Delta(U, M_1)``
    for any comparator density ``U``, where ``loss_U,t`` is ``U``'s one-sided
    loss on trial ``t`` (see ``docs/user_guide/metrics.rst``, "The one-sided loss and its bound").
    """
    return 2.0 * normalised_loss(comparator_losses, ranges) + float(divergence)


def divergence_to(comparator, start_log):
    """Return the von Neumann divergence ``Delta(U, M_start)`` of a trace-one ``U`` (eq. 1).

    Computed from ``log M_start`` (``0 log 0 = 0``).
    """
    mu = np.linalg.eigvalsh(comparator)
    mu = mu[mu > 0]
    return float(max(np.sum(mu * np.log(mu)) - np.sum(comparator * start_log), 0.0))


def normalised_loss(losses, ranges):
    """Left-hand side of :func:`online_bound`: ``sum_t loss_t / rho_t^2``.

    Trials before any pair of distinct points (``rho_t = 0``) are left out on
    both sides: there every metric predicts 0, so ``loss_t = loss_U,t``.
    """
    ranges = np.asarray(ranges, dtype=float)
    moving = ranges > 0
    return float(np.sum((np.sqrt(losses[moving]) / ranges[moving]) ** 2))


def mean_range_learning_rate(diffs):
    """Lemma 3.2's rate ``2 / rho^2`` at the mean instance range ``rho``.

    ``rho = mean ||u||^2`` over the pairs: the typical trial's range (the
    largest, the worst case of the bound, is set by a few outlying pairs and
    would slow every other trial by ``(max / mean)^2``).
    """
    ranges = np.einsum("ij,ij->i", diffs, diffs)
    rho = ranges.mean()
    if not rho > 0:
        raise ValueError("Every pair joins two points with the same features: "
                         "no pair can move the metric.")
    return 2.0 / rho**2


def embedding(coordinates, exponent):
    """Return the rows ``z^T M^{1/2}`` (up to a rotation).

    Their Euclidean distances are the metric's, in trace-one units.
    """
    return coordinates @ (exponent.eigvecs * np.sqrt(exponent.weights))


def resolve_learning_rate(diffs, learning_rate):
    """Return MEGMetric's learning rate: :func:`mean_range_learning_rate` for ``"auto"``."""
    return (mean_range_learning_rate(diffs) if learning_rate == "auto"
            else float(learning_rate))


def pair_diffs(coordinates, pairs):
    """Return the instances ``u = z_a - z_b`` of the pairs (rows of ``coordinates``)."""
    return coordinates[pairs[:, 0]] - coordinates[pairs[:, 1]]


def targets_and_sides(signs, gamma, gamma_dissimilar, trace, loss):
    """Targets (trace-one units) and counted sides of pairs, by their signs.

    ``loss="one-sided"``: a similar pair's error counts above its target, a
    dissimilar pair's below; ``"square"``: both (side 0).
    """
    targets = np.where(signs > 0, gamma, gamma_dissimilar) / trace
    sides = (np.where(signs > 0, 1.0, -1.0) if loss == "one-sided"
             else np.zeros(len(signs)))
    return targets, sides


def metric_components(exponent, scales, directions, trace):
    """Return the linear map of the metric: ``transform(x) = (x - mean) @ components.T``.

    ``sqrt(tau) M^{1/2} S^-1 V^T`` (up to a rotation), so that Euclidean
    distances of the embedding are ``tau (z - z')^T M (z - z')``.
    """
    root = exponent.eigvecs * np.sqrt(exponent.weights * trace)
    return root.T @ (directions / scales[:, None])
