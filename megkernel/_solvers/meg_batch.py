r"""Batch MEG: the kernel of least total square loss, by MEG updates on the whole loss.

The on-line algorithm (eq. 4) updates the exponent by the gradient of one
trial's loss. Applied to the *total* loss of all the pairs,

.. math:: L(W) = \frac{1}{n} \sum_t (v_t^T W v_t - z_t)^2, \qquad
          z_t = y_t / \tau,

the same update ``log W <- log W - eta grad L(W)`` followed by the
normalisation ``W = exp(A) / tr exp(A)`` (eq. 7) is mirror descent on the
density matrices (trace one, positive definite) with the von Neumann entropy
as mirror map. Its step needs no tuning: each trial step is accepted only if
it meets the relative-smoothness condition

.. math:: L(W_+) \le L(W) + \langle \nabla L(W), W_+ - W \rangle
          + \frac{1}{\eta} \Delta(W_+, W),

which guarantees a decrease of ``L`` at every accepted step (``Delta`` is the
von Neumann divergence of eq. 3; Bauschke, Bolte & Teboulle 2017, Lu, Freund
& Nesterov 2018). With ``A_+ = A - eta G`` the right-hand side is
``L(W) - <G, W> - (log Z_+ - log Z) / eta``: no extra matrix function is
needed. The first trial step of an iteration is the Barzilai-Borwein step of
the exponent (``<s, s> / <s, g>``, ``s`` the last change of ``A``, ``g`` that
of the gradient), kept within a factor ``_BB_RANGE`` of the last accepted
step; a rejected trial halves it. ``L`` is convex in ``W`` and the feasible
set convex and compact, so the iterates converge to the minimum loss.

:func:`spectral_prior` gives the fit a data-driven start (``init="auto"``):
classical scaling of the observed distances, the missing ones filled by their
mean, with its rank chosen on held-out pairs.

Everything in :func:`minimize_pair_loss` is in trace-one units
(``z = y / tau``); the caller converts.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.optimize import nnls
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from .._numerics.spectral import eigh_symmetric, log_trace_exp, normalized_exp_weights
from .._numerics.state import ExponentState
from .._numerics.threads import blas_threads

__all__ = ["SUBSPACE_FROM", "SUBSPACE_GROWTH", "BatchResult", "PairLoss", "SpectralPrior",
           "SubspacePairLoss", "minimize_pair_loss", "spectral_prior", "subspace_dimension"]

#: Pairs gathered at a time (bounds the ``(n, r)`` arrays of low-rank mode).
_CHUNK = 50_000

#: Largest step tried: beyond it ``eta * ||G||`` leaves double precision.
_MAX_STEP_NORM = 1e4

#: A Barzilai-Borwein trial step stays within this factor of the last
#: accepted step (both ways).
_BB_RANGE = 10.0

#: Rejected trial steps before a call gives up (the step is then ~1e-9 of
#: the first one: numerically no descent direction is left).
_MAX_BACKTRACKS = 30

#: Ranks of the classical-scaling prior tried by :func:`spectral_prior`
#: (0: the isotropic prior ``I / d``).
SPECTRAL_RANKS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

#: Largest number of imputations of the missing distances per rank.
SPECTRAL_IMPUTATIONS = 10

#: Below this many objects classical scaling takes the full ``eigh``; from it
#: on, ARPACK's top eigenpairs.
_DENSE_EIGH_BELOW = 400

#: Smallest isotropic eigenvalue of the spectral prior, as a fraction of the
#: mean eigenvalue ``trace / d``: the prior is positive definite and a
#: direction it lacks starts within a factor ``e^2.3`` of the mean, so the
#: multiplicative (exponentiated) update can still grow it in a few steps
#: (at 1e-3 such a direction needs three times the change of the exponent).
ISOTROPIC_FLOOR = 0.1


#: From this many objects the batch fit from the spectral prior learns in a
#: subspace plus its isotropic complement (:class:`SubspacePairLoss`). A
#: ``d x d`` eigendecomposition per trial step costs about 0.5 s there (one
#: core), so the ~100-200 steps of a dense fit would take minutes; the
#: subspace's steps cost ``O(n k^2)``. Below it the dense fit is kept: on
#: hard family sets of 500-1000 objects (measured, issue 19) the subspace's
#: kernels were worse than the dense fit's (1-NN 0.43 vs 0.48, 0.56 vs 0.63),
#: as the dense path also makes local, pairwise changes a few global
#: directions cannot.
SUBSPACE_FROM = 1500


def subspace_dimension(n_objects):
    """Return the starting dimension ``k`` of the batch fit's subspace."""
    return int(min(n_objects - 1, SUBSPACE_START))


#: Starting dimension of the subspace (or the prior's rank, if larger).
SUBSPACE_START = 64

#: Directions added each time the subspace grows.
SUBSPACE_GROWTH = 16

#: Largest dimension of the subspace: its pairs' coordinates take
#: ``8 n k`` bytes (200 MB for 10^5 pairs).
SUBSPACE_MAX = 256


class PairLoss:
    """Predictions, loss and gradient of the mean square loss over pairs.

    Parameters
    ----------
    state : ExponentState
        Gives the mode (dense, or low-rank with ``state.basis``).
    a, b : ndarray of int
        The pairs' objects.
    z : ndarray of float
        Targets in trace-one units.
    """

    def __init__(self, state, a, b, z):
        self.a = np.asarray(a, dtype=np.intp)
        self.b = np.asarray(b, dtype=np.intp)
        self.z = np.asarray(z, dtype=float)
        self.basis = state.basis
        self.size = state.size

    def __len__(self):
        return len(self.z)

    def predictions(self, eigenvalues, eigenvectors):
        """``v_t^T W v_t`` for every pair, ``W`` from the exponent's eigenpairs."""
        weights = normalized_exp_weights(eigenvalues)
        if len(self.z) == 0:
            return np.zeros(0)
        out = np.empty(len(self.z))
        if self.basis is None:
            W = (eigenvectors * weights) @ eigenvectors.T
            diagonal = np.diag(W)
            for start in range(0, len(self.z), _CHUNK):
                a, b = self.a[start:start + _CHUNK], self.b[start:start + _CHUNK]
                out[start:start + _CHUNK] = diagonal[a] + diagonal[b] - 2.0 * W[a, b]
            return out
        for start in range(0, len(self.z), _CHUNK):
            stop = start + _CHUNK
            coords = (self.basis[self.a[start:stop]] - self.basis[self.b[start:stop]]) \
                @ eigenvectors
            out[start:stop] = (coords * coords) @ weights
        return out

    def decompose(self, exponent):
        """Eigenpairs ``(lam, vecs)`` of an exponent (ascending ``lam``)."""
        return eigh_symmetric(exponent, name="the exponent log W", check=False)

    def log_partition(self, eigenvalues):
        """``log tr exp(A)`` from the exponent's eigenvalues."""
        return log_trace_exp(eigenvalues)

    def inner(self, X, Y):
        """Frobenius inner product ``<X, Y>`` of two exponents (or changes of one)."""
        return float(np.sum(X * Y))

    def gradient_scale(self, G):
        """Bound the spectral norm of ``G`` (by its largest absolute row sum)."""
        return float(np.abs(G).sum(axis=1).max())

    def state(self, exponent, eigenvalues, eigenvectors):
        """Return the :class:`ExponentState` of an iterate."""
        return _state_from(exponent, eigenvalues, eigenvectors, self.basis)

    def loss(self, predictions):
        """Mean square loss (trace-one units)."""
        if len(self.z) == 0:
            return 0.0
        residuals = predictions - self.z
        return float(residuals @ residuals) / len(self.z)

    def gradient(self, predictions):
        """``G = (2/n) sum_t (v_t^T W v_t - z_t) v_t v_t^T`` (``size x size``)."""
        coefficients = 2.0 * (predictions - self.z) / len(self.z)
        if self.basis is None:
            d = self.size
            # a weighted graph Laplacian: duplicates add up in the sparse sum
            off = sparse.coo_matrix((-coefficients, (self.a, self.b)), shape=(d, d))
            G = (off + off.T).toarray()
            G[np.diag_indices(d)] += (np.bincount(self.a, coefficients, d)
                                      + np.bincount(self.b, coefficients, d))
            return G
        G = np.zeros((self.size, self.size))
        for start in range(0, len(self.z), _CHUNK):
            stop = start + _CHUNK
            v = self.basis[self.a[start:stop]] - self.basis[self.b[start:stop]]
            G += v.T @ (coefficients[start:stop, None] * v)
        return 0.5 * (G + G.T)


class SubspacePairLoss(PairLoss):
    r"""The pair loss over kernels of a subspace plus an isotropic complement.

    The kernels are ``W = P M P^T + mu (I - P P^T)`` (``P`` a ``d x k``
    orthonormal basis, ``M`` positive definite, ``mu > 0``, trace one): the
    density matrices of the matrix algebra of block-diagonal matrices in the
    basis ``[P, P_perp]`` with a scalar second block. The von Neumann
    divergence's Bregman projection onto that algebra keeps its projection
    of the exponent (its exponents ``A = P B P^T + alpha (I - P P^T)`` form a
    linear space closed under ``exp`` and ``log``), so MEG's update restricted
    to it, ``B <- B - eta P^T G P``, ``alpha <- alpha - eta tr((I - P P^T)
    G) / (d - k)``, is the same mirror descent on a convex subset: every
    accepted step still lowers the loss, and the iterates converge to the
    subset's minimum. An iteration costs ``O(n k^2 + k^3)`` for ``n`` pairs
    instead of a ``d x d`` eigendecomposition.

    An exponent is held as a ``(k + 1) x (k + 1)`` array: ``B`` in its top
    left block, ``alpha`` in its last diagonal entry (the rest zero); its
    eigenvalues are ``B``'s followed by ``alpha``, whose multiplicity is
    ``d - k``.

    Parameters
    ----------
    basis : ndarray of shape (d, k)
        Orthonormal basis ``P``, ``k < d``.
    a, b : ndarray of int
        The pairs' objects.
    z : ndarray of float
        Targets in trace-one units.
    """

    def __init__(self, basis, a, b, z):
        self.a = np.asarray(a, dtype=np.intp)
        self.b = np.asarray(b, dtype=np.intp)
        self.z = np.asarray(z, dtype=float)
        self.basis = basis
        d, k = basis.shape
        if not 0 <= k < d:
            raise ValueError(f"the subspace's dimension ({k}) must be below d ({d}).")
        self.size = k + 1
        self.multiplicity = np.ones(k + 1)
        self.multiplicity[k] = d - k
        #: ``P^T v_t`` for every pair (``n x k``), gathered once.
        self.coords = np.empty((len(self.z), k))
        for start in range(0, len(self.z), _CHUNK):
            stop = start + _CHUNK
            self.coords[start:stop] = basis[self.a[start:stop]] - basis[self.b[start:stop]]
        #: ``||(I - P P^T) v_t||^2 = ||v_t||^2 - ||P^T v_t||^2`` (0 for a self-pair).
        self.outside = np.where(self.a != self.b, 2.0, 0.0) - np.einsum(
            "ij,ij->i", self.coords, self.coords)
        np.maximum(self.outside, 0.0, out=self.outside)

    def grown(self, directions):
        """Return the same loss in the basis ``[P, directions]`` (orthonormal columns)."""
        return SubspacePairLoss(np.hstack([self.basis, directions]), self.a, self.b, self.z)

    def new_directions(self, predictions, exponent, count):
        """Return up to ``count`` directions outside the subspace where the loss changes most.

        They are the leading eigenvectors of the part of the full
        gradient ``G`` the restriction to the algebra discards,
        ``G - P P^T G P P^T - g_alpha (I - P P^T)`` (its block between ``P`` and
        the complement, and the complement's departure from a multiple of the
        identity), projected onto the complement and orthonormalised.

        At the subspace's minimum that part is what first-order optimality
        over every density matrix still asks for; ``G`` is the pairs' sparse
        weighted Laplacian, so each product costs ``O(n + d k)``.
        """
        d, k = self.basis.shape
        count = min(count, d - 1 - k, SUBSPACE_MAX - k)
        if count <= 0 or len(self.z) == 0:
            return np.zeros((d, 0))
        coefficients = 2.0 * (predictions - self.z) / len(self.z)
        off = sparse.coo_matrix((-coefficients, (self.a, self.b)), shape=(d, d)).tocsr()
        G = off + off.T + sparse.diags(np.bincount(self.a, coefficients, d)
                                       + np.bincount(self.b, coefficients, d))
        P = self.basis
        inside = self.gradient(predictions)
        g_inside, g_alpha = inside[:k, :k], inside[k, k]

        def discarded(x):
            x = x.reshape(d, -1)
            px = P.T @ x
            return (G @ x - P @ (g_inside @ px) - g_alpha * (x - P @ px)).ravel()

        operator = LinearOperator((d, d), matvec=discarded, dtype=float)
        rng = np.random.default_rng(k)  # a fixed start: the same directions every run
        try:
            _, vectors = eigsh(operator, k=min(count, d - 2), which="LM",
                               v0=rng.normal(size=d), tol=1e-6, maxiter=50 * d)
        except ArpackNoConvergence as error:
            vectors = error.eigenvectors
        if vectors is None or vectors.shape[1] == 0:
            return np.zeros((d, 0))
        vectors = vectors - P @ (P.T @ vectors)
        q, r = np.linalg.qr(vectors)
        keep = np.abs(np.diag(r)) > 1e-8 * max(np.abs(np.diag(r)).max(initial=0.0), 1e-300)
        q = q[:, keep]
        q -= P @ (P.T @ q)  # re-orthogonalise against P
        q, _ = np.linalg.qr(q)
        return q

    def decompose(self, exponent):
        """Eigenpairs of the exponent (``B``'s, then ``alpha``'s, unit vector last)."""
        k = self.size - 1
        lam_b, vecs_b = eigh_symmetric(exponent[:k, :k], name="the exponent log W",
                                       check=False)
        vecs = np.zeros((k + 1, k + 1))
        vecs[:k, :k] = vecs_b
        vecs[k, k] = 1.0
        return np.append(lam_b, exponent[k, k]), vecs

    def _weights(self, eigenvalues):
        """Eigenvalues of ``W`` (``alpha``'s per dimension of the complement)."""
        shifted = eigenvalues - eigenvalues.max()
        weights = np.exp(shifted)
        return weights / float(weights @ self.multiplicity)

    def log_partition(self, eigenvalues):
        """``log tr exp(A)``, ``alpha`` counted ``d - k`` times."""
        top = eigenvalues.max()
        return top + np.log(np.exp(eigenvalues - top) @ self.multiplicity)

    def inner(self, X, Y):
        """``<X, Y>`` of the ``d x d`` matrices the two exponents stand for."""
        k = self.size - 1
        return float(np.sum(X[:k, :k] * Y[:k, :k]) + self.multiplicity[k] * X[k, k] * Y[k, k])

    def gradient_scale(self, G):
        """Bound the spectral norm of ``G``'s block-diagonal part."""
        k = self.size - 1
        return float(max(np.abs(G[:k, :k]).sum(axis=1).max(initial=0.0), abs(G[k, k])))

    def predictions(self, eigenvalues, eigenvectors):
        """``v_t^T W v_t`` for every pair."""
        k = self.size - 1
        weights = self._weights(eigenvalues)
        if len(self.z) == 0:
            return np.zeros(0)
        M = (eigenvectors[:k, :k] * weights[:k]) @ eigenvectors[:k, :k].T
        out = np.empty(len(self.z))
        for start in range(0, len(self.z), _CHUNK):
            stop = start + _CHUNK
            c = self.coords[start:stop]
            out[start:stop] = np.einsum("ij,ij->i", c @ M, c)
        out += weights[k] * self.outside
        return out

    def gradient(self, predictions):
        """``P^T G P`` and ``tr((I - P P^T) G) / (d - k)`` in the exponent's layout."""
        k = self.size - 1
        coefficients = 2.0 * (predictions - self.z) / len(self.z)
        G = np.zeros((k + 1, k + 1))
        for start in range(0, len(self.z), _CHUNK):
            stop = start + _CHUNK
            c = self.coords[start:stop]
            G[:k, :k] += c.T @ (coefficients[start:stop, None] * c)
        G[:k, :k] = 0.5 * (G[:k, :k] + G[:k, :k].T)
        G[k, k] = float(coefficients @ self.outside) / self.multiplicity[k]
        return G

    def state(self, exponent, eigenvalues, eigenvectors):
        """Return the dense state of ``P (B - alpha I) P^T + alpha I`` (one eigh)."""
        k = self.size - 1
        alpha = exponent[k, k]
        inside = exponent[:k, :k] - alpha * np.eye(k)
        full = self.basis @ inside @ self.basis.T
        full[np.diag_indices_from(full)] += alpha
        return ExponentState(0.5 * (full + full.T))


class BatchResult(NamedTuple):
    """What :func:`minimize_pair_loss` returns.

    Attributes
    ----------
    state : ExponentState
        The exponent of the kernel chosen (the last iterate, or the best on
        the validation pairs when early stopping).
    loss_curve : ndarray
        Training loss (trace-one units) of the prior and of each accepted
        iterate.
    validation_curve : ndarray
        Validation loss of the same iterates (empty without validation pairs).
    step_sizes : ndarray
        The step ``eta`` of each accepted iterate.
    n_iter : int
        Accepted iterations.
    best_iter : int
        The iterate returned (0: the prior).
    converged : bool
        Whether the stopping rule (not ``max_iter``) ended the run.
    stalled : bool
        Whether the line search found no descent step (the minimum is reached
        to round-off).
    n_eigh : int
        Eigendecompositions made (one per trial step).
    growth : list of int
        Iterations after which the subspace grew (up to the iterate returned).
    """

    state: ExponentState
    loss_curve: np.ndarray
    validation_curve: np.ndarray
    step_sizes: np.ndarray
    n_iter: int
    best_iter: int
    converged: bool
    stalled: bool
    n_eigh: int
    growth: list = []


def _state_from(exponent, eigenvalues, eigenvectors, basis):
    state = ExponentState.__new__(ExponentState)
    state.exponent = exponent
    state.basis = basis
    state.eigenvalues, state.eigenvectors = eigenvalues, eigenvectors
    state.updates_since_refresh = 0
    state.partition_anchor = None
    return state


def minimize_pair_loss(state, train, *, validation=None, learning_rate="auto", max_iter=200,
                       tol=1e-4, n_iter_no_change=5, early_stopping=False, callback=None,
                       grow=0, grow_at=None):
    """Minimise the mean square loss over density matrices by batch MEG updates.

    Parameters
    ----------
    state : ExponentState or ndarray
        The prior ``W_1`` (not changed): its state, or for a
        :class:`SubspacePairLoss` its ``(k + 1) x (k + 1)`` exponent.
    train : PairLoss or SubspacePairLoss
        The training pairs (and the kernels searched: every ``d x d``
        density matrix, or those of a subspace plus its complement).
    validation : PairLoss or SubspacePairLoss, optional
        Held-out pairs (of the same kind as ``train``): their loss is recorded
        for every iterate, and with ``early_stopping`` chooses the iterate
        returned and stops the run.
    learning_rate : float or "auto", default="auto"
        First step ``eta`` (trace-one units) of the line search. ``"auto"``:
        ``1 / ||G_1||`` (``G_1`` the gradient at the prior, its largest
        absolute row sum bounding the spectral norm), a unit change of the
        exponent. Later steps are found by the Barzilai-Borwein rule and
        backtracking either way.
    max_iter : int, default=200
        Largest number of accepted iterations.
    tol : float, default=1e-4
        An iteration improves when the monitored loss falls by more than
        ``tol`` times the prior's monitored loss (so the rule does not
        depend on the units of the targets).
    n_iter_no_change : int, default=5
        Stop after this many iterations without improvement.
    early_stopping : bool, default=False
        Monitor the validation loss (returning its best iterate, possibly
        the prior) instead of the training loss.
    callback : callable, optional
        Called as ``callback(iteration, train_loss, validation_loss, step)``
        after every accepted iteration.
    grow : int, default=0
        :class:`SubspacePairLoss` only: when the monitored loss stops
        improving, add up to ``grow`` directions to the subspace
        (:meth:`SubspacePairLoss.new_directions`) and go on, as long as the
        previous growth improved it (an active-set method: it ends at the
        minimum over a subspace where the full gradient asks for nothing
        more, or at ``d - 1`` dimensions).
    grow_at : collection of int, optional
        Grow after exactly these iterations instead (to repeat a run's
        growth, e.g. in a refit on more pairs).

    Returns
    -------
    BatchResult
    """
    # small eigh and products are faster on one thread; the subspace's work
    # is products of (n_pairs x k) arrays
    size = len(train) if isinstance(train, SubspacePairLoss) else train.size
    with blas_threads(size):
        return _minimize_pair_loss(state, train, validation, learning_rate, max_iter, tol,
                                   n_iter_no_change, early_stopping, callback, grow,
                                   grow_at)


def _grow(train, validation, exponent, predictions, count):
    """Enlarge the subspace by up to ``count`` directions.

    The kernel is unchanged: each new direction carries the complement's
    exponent ``alpha``.
    """
    directions = train.new_directions(predictions, exponent, count)
    q = directions.shape[1]
    if q == 0:
        return None
    k = train.size - 1
    grown = np.zeros((k + q + 1, k + q + 1))
    grown[:k, :k] = exponent[:k, :k]
    grown[np.arange(k, k + q + 1), np.arange(k, k + q + 1)] = exponent[k, k]
    return (train.grown(directions),
            validation.grown(directions) if validation is not None else None, grown)


def _minimize_pair_loss(state, train, validation, learning_rate, max_iter, tol,
                        n_iter_no_change, early_stopping, callback, grow, grow_at):
    if early_stopping and (validation is None or len(validation) == 0):
        raise ValueError("early_stopping needs validation pairs.")
    if not isinstance(train, SubspacePairLoss):
        grow, grow_at = 0, None  # every direction is there already
    if isinstance(train, SubspacePairLoss):
        exponent = np.asarray(state, dtype=float).copy()  # the (k + 1) x (k + 1) layout
    else:
        exponent = state.exponent.copy()
    lam, vecs = train.decompose(exponent)
    log_z = train.log_partition(lam)
    predictions = train.predictions(lam, vecs)
    loss = train.loss(predictions)
    scored = validation is not None and len(validation) > 0

    def validation_loss(lam, vecs):
        return validation.loss(validation.predictions(lam, vecs)) if scored else np.nan

    losses, val_losses, steps = [loss], [validation_loss(lam, vecs)], []
    best = (train, exponent, lam, vecs)  # made a state once, at the end
    best_iter = 0
    growth = []  # iterations after which the subspace grew
    gained_since_growth = True
    monitored = val_losses if early_stopping else losses
    best_monitored = monitored[0]
    scale = abs(monitored[0])
    no_change = 0
    converged = stalled = False
    step = None
    previous = None  # (exponent change, gradient) of the last accepted step
    n_eigh = 0
    iteration = 0
    while iteration < max_iter:
        if grow_at is not None and iteration in grow_at and iteration not in growth:
            grown = _grow(train, validation, exponent, predictions, grow)
            if grown is not None:
                train, validation, exponent = grown
                lam, vecs = train.decompose(exponent)
                previous = None
            growth.append(iteration)
        G = train.gradient(predictions)
        norm = train.gradient_scale(G)
        if not norm > 0:  # every target met: the prior is a minimiser
            converged = True
            break
        if step is None:
            step = 1.0 / norm if learning_rate == "auto" else float(learning_rate)
        elif previous is not None:
            change, last_gradient = previous
            curvature = train.inner(change, G - last_gradient)
            if curvature > 0:
                bb = train.inner(change, change) / curvature
                step = min(max(bb, step / _BB_RANGE), step * _BB_RANGE)
            else:
                step *= 2.0
        step = min(step, _MAX_STEP_NORM / norm)
        # <G, W> = sum_t c_t v_t^T W v_t: G is a sum of the pairs' c_t v_t v_t^T
        inner = float(2.0 * (predictions - train.z) @ predictions) / len(train)
        for _ in range(_MAX_BACKTRACKS):
            trial = exponent - step * G
            trial = 0.5 * (trial + trial.T)
            trial_lam, trial_vecs = train.decompose(trial)
            n_eigh += 1
            trial_predictions = train.predictions(trial_lam, trial_vecs)
            trial_loss = train.loss(trial_predictions)
            trial_log_z = train.log_partition(trial_lam)
            bound = loss - inner - (trial_log_z - log_z) / step
            if trial_loss <= bound + 1e-12 * abs(loss) and trial_loss <= loss:
                break
            step *= 0.5
        else:
            stalled = converged = True
            break
        previous = (trial - exponent, G)
        exponent = trial
        lam, vecs, log_z = trial_lam, trial_vecs, trial_log_z
        predictions, loss = trial_predictions, trial_loss
        iteration += 1
        losses.append(loss)
        val_losses.append(validation_loss(lam, vecs))
        steps.append(step)
        if callback is not None:
            callback(iteration, loss, val_losses[-1], step)
        current = monitored[-1]
        if current < best_monitored - tol * scale:
            no_change = 0
            gained_since_growth = True
        else:
            no_change += 1
        if current < best_monitored:
            best_monitored = current
            if early_stopping:
                best = (train, exponent, lam, vecs)
                best_iter = iteration
        if no_change >= n_iter_no_change:
            # the subspace's minimum (to tol): grow it where the full gradient
            # points, as long as the last growth paid off
            grown = (_grow(train, validation, exponent, predictions, grow)
                     if grow and grow_at is None and gained_since_growth else None)
            if grown is None:
                converged = True
                break
            train, validation, exponent = grown
            lam, vecs = train.decompose(exponent)
            previous = None
            growth.append(iteration)
            no_change, gained_since_growth = 0, False
    if not early_stopping:
        best = (train, exponent, lam, vecs)
        best_iter = iteration
    best_train = best[0]
    return BatchResult(best_train.state(*best[1:]), np.asarray(losses), np.asarray(val_losses),
                       np.asarray(steps), iteration, best_iter, converged, stalled, n_eigh,
                       [i for i in growth if i < best_iter] if early_stopping else growth)


class SpectralPrior(NamedTuple):
    """What :func:`spectral_prior` returns.

    Attributes
    ----------
    state : ExponentState
        The prior ``W_1`` (trace one).
    trace : float
        Its trace in the targets' units (the fitted scale).
    rank : int
        Rank of the classical-scaling part (0: isotropic, ``I / d``).
    imputations : int
        Imputations of the missing distances made (0: the mean fill).
    scores : dict
        Held-out mean square error (targets' units) of every ``(rank,
        imputations)`` tried.
    basis : ndarray of shape (d, k) or None
        With ``subspace=k``: the top ``k`` eigenvectors of the chosen Gram
        matrix (the prior's structured part is in their span; ``state`` is
        then ``None``).
    exponent : ndarray of shape (k + 1, k + 1) or None
        With ``subspace``: the prior's exponent in the layout of
        :class:`SubspacePairLoss`.
    """

    state: ExponentState | None
    trace: float
    rank: int
    imputations: int
    scores: dict
    basis: np.ndarray | None = None
    exponent: np.ndarray | None = None


def _observed_matrix(n_objects, a, b, y):
    """Fill a matrix with the observed squared distances, each missing one their mean."""
    distinct = a != b
    a, b, y = a[distinct], b[distinct], y[distinct]
    fill = float(y.mean()) if len(y) else 0.0
    first, second = np.minimum(a, b), np.maximum(a, b)
    key = first * n_objects + second
    sums = np.bincount(key, y, n_objects * n_objects)
    counts = np.bincount(key, minlength=n_objects * n_objects)
    observed = counts > 0
    D = np.full(n_objects * n_objects, fill)
    D[observed] = sums[observed] / counts[observed]
    D = D.reshape(n_objects, n_objects)
    D = np.triu(D, 1)
    return D + D.T


def _scaling_fit(p, y):
    """Least squares ``y ~ s p + c`` with ``s, c >= 0`` (NNLS on two columns)."""
    (s, c), _ = nnls(np.column_stack([p, np.ones_like(p)]), y)
    return s, c


def _top_eigenpairs(matrix, rank):
    """Return the ``rank`` largest eigenpairs of a symmetric matrix, largest first."""
    d = len(matrix)
    if rank == 0:
        return np.zeros(0), np.zeros((d, 0))
    if d <= _DENSE_EIGH_BELOW or rank > d // 4:
        lam, vecs = eigh_symmetric(matrix, name="the classical-scaling matrix")
        return lam[::-1][:rank], vecs[:, ::-1][:, :rank]
    lam, vecs = eigsh(matrix, k=rank, which="LA")
    order = np.argsort(lam)[::-1]
    return lam[order], vecs[:, order]


def _gram(D):
    """``-J D J / 2``: the Gram matrix of classical scaling (``J`` centres)."""
    return -0.5 * (D - D.mean(axis=0) - D.mean(axis=1)[:, None] + D.mean())


def _pair_sq(coords, a, b):
    out = np.empty(len(a))
    for start in range(0, len(a), _CHUNK):
        diff = coords[a[start:start + _CHUNK]] - coords[b[start:start + _CHUNK]]
        out[start:start + _CHUNK] = np.einsum("ij,ij->i", diff, diff)
    return out


def spectral_prior(n_objects, a, b, y, a_val=None, b_val=None, y_val=None, *,
                   ranks=SPECTRAL_RANKS, n_imputations=SPECTRAL_IMPUTATIONS,
                   floor=None, patience=2, fixed=False, subspace=None):
    """Fit a prior kernel to the observed squared distances by classical scaling.

    The squared distances given (``y`` for pairs ``(a, b)``) fill a
    symmetric matrix ``D``, each missing entry first the mean of the given
    ones; ``B = -J D J / 2`` (``J`` the centring matrix) is the Gram matrix
    of classical (Torgerson) scaling. At rank ``r`` the kernel is
    ``K_r = s B_r + (c / 2) I`` (``B_r`` the top ``r`` eigenpairs of ``B``,
    negative ones dropped), ``s, c >= 0`` fitted to the training pairs by
    least squares: ``c`` is the offset the fill adds to every squared
    distance, carried by the identity (which adds ``c`` to each). Then the
    missing entries are imputed from ``K_r``'s squared distances and the
    scaling repeated (alternating projections onto rank-``r`` Gram matrices
    and onto the observed entries, the EM algorithm of low-rank matrix
    completion), up to ``n_imputations`` times. Every iterate of every rank
    is scored by its mean square error on the held-out pairs; the best is
    kept (the mean fill, iterate 0, included), and the scan over ``ranks``
    stops after ``patience`` ranks without a better score. Without held-out
    pairs a tenth of the training pairs is set aside for the choice (rank
    and iterate), which is then repeated on all of them. Rank 0 is
    ``I / d`` at the trace that meets the targets on average, as
    ``trace="auto"`` does. The isotropic eigenvalue is at least ``floor``
    times the mean eigenvalue, so the prior is positive definite and every
    direction stays learnable.

    Parameters
    ----------
    n_objects : int
    a, b : ndarray of int
        Training pairs.
    y : ndarray of float
        Their squared distances, in the targets' units.
    a_val, b_val, y_val : ndarray, optional
        Held-out pairs choosing the rank and the number of imputations.
    ranks : sequence of int, default=SPECTRAL_RANKS
        Increasing.
    n_imputations : int, default=SPECTRAL_IMPUTATIONS
    floor : float, default=None
        ``None``: :data:`ISOTROPIC_FLOOR`.
    patience : int, default=2
    fixed : bool, default=False
        Take the last iterate of the last rank instead of the best (to
        repeat a choice made on held-out pairs, on all of them).
    subspace : int, optional
        Return the prior in the layout of :class:`SubspacePairLoss`, in the
        span of the chosen Gram matrix's top ``max(subspace, rank)``
        eigenvectors (``< d``), without forming the ``d x d`` state.

    Returns
    -------
    SpectralPrior
    """
    a, b, y = (np.asarray(a, dtype=np.intp), np.asarray(b, dtype=np.intp),
               np.asarray(y, dtype=float))
    d = int(n_objects)
    floor = ISOTROPIC_FLOOR if floor is None else floor
    if a_val is None or len(y_val) == 0:
        order = np.random.default_rng(0).permutation(len(y))
        n_out = len(y) // 10 if len(y) >= 20 else 0
        if not n_out:
            return spectral_prior(d, a, b, y, a, b, y, ranks=(0,), floor=floor, fixed=True,
                                  subspace=subspace)
        held, kept = order[:n_out], order[n_out:]
        chosen = spectral_prior(d, a[kept], b[kept], y[kept], a[held], b[held], y[held],
                                ranks=ranks, n_imputations=n_imputations, floor=floor,
                                patience=patience)
        return spectral_prior(d, a, b, y, a, b, y, ranks=(chosen.rank,),
                              n_imputations=chosen.imputations, floor=floor, fixed=True,
                              subspace=subspace)
    a_val, b_val, y_val = (np.asarray(a_val, dtype=np.intp),
                           np.asarray(b_val, dtype=np.intp), np.asarray(y_val, dtype=float))
    moving = a != b
    a_m, b_m, y_m = a[moving], b[moving], y[moving]
    moving_val = a_val != b_val
    observed_D = _observed_matrix(d, a, b, y)
    observed = np.zeros((d, d), dtype=bool)
    observed[a_m, b_m] = observed[b_m, a_m] = True
    np.fill_diagonal(observed, True)
    best, scores, worse = None, {}, 0
    with blas_threads(d):
        for rank in ranks:
            if rank > d - 1:
                break
            D = observed_D
            improved = False
            for imputation in range(n_imputations + 1 if rank else 1):
                lam, vecs = _top_eigenpairs(_gram(D), rank)
                lam = np.maximum(lam, 0.0)
                coords = vecs * np.sqrt(lam)
                if rank:
                    s, c = _scaling_fit(_pair_sq(coords, a_m, b_m), y_m)
                else:
                    s, c = 0.0, float(y_m.mean()) if len(y_m) else 0.0
                isotropic = c / 2.0
                structured = s * lam.sum()
                # the isotropic eigenvalue: at least ``floor`` times the mean one
                if not isotropic * (1.0 - floor) >= floor * structured / d:  # also 0 / 0
                    isotropic = floor * structured / (d * (1.0 - floor)) if structured > 0 \
                        else 1.0
                predicted = np.where(moving_val,
                                     s * _pair_sq(coords, a_val, b_val) + 2.0 * isotropic, 0.0)
                score = float(np.mean((predicted - y_val) ** 2))
                scores[(rank, imputation)] = score
                if best is None or score < best[0] or fixed:
                    best = (score, rank, imputation, s, isotropic, lam, vecs, D)
                    improved = True
                if imputation < n_imputations and rank:
                    sq = np.einsum("ij,ij->i", coords, coords)
                    completed = s * (sq[:, None] + sq[None, :] - 2.0 * coords @ coords.T) + c
                    D = np.where(observed, observed_D, completed)
                    np.fill_diagonal(D, 0.0)
            worse = 0 if improved else worse + 1
            if worse >= patience:
                break
    _, rank, imputation, s, isotropic, lam, vecs, D = best
    trace = s * lam.sum() + isotropic * d
    if subspace is not None:
        return _subspace_prior(D, rank, imputation, s, isotropic, trace, scores,
                               min(max(int(subspace), rank), d - 1))
    if not (np.isfinite(trace) and trace > 0):
        return SpectralPrior(ExponentState.identity(d), 1.0, 0, 0, scores)
    log_iso = np.log(isotropic / trace)
    top = np.log((s * lam + isotropic) / trace) - log_iso
    exponent = (vecs * top) @ vecs.T
    exponent[np.diag_indices(d)] += log_iso
    state = ExponentState(0.5 * (exponent + exponent.T))
    return SpectralPrior(state, float(trace), int(rank), int(imputation), scores)


def _subspace_prior(D, rank, imputation, s, isotropic, trace, scores, size):
    """Return the chosen prior in the layout of :class:`SubspacePairLoss`."""
    d = len(D)
    if not (np.isfinite(trace) and trace > 0):  # no usable scale: the isotropic prior
        rank, s, isotropic, trace = 0, 0.0, 1.0 / d, 1.0
    with blas_threads(d):
        top_lam, basis = _top_eigenpairs(_gram(D), size)
    structured = np.zeros(size)
    structured[:rank] = s * np.maximum(top_lam[:rank], 0.0)  # the prior's own eigenvalues
    exponent = np.zeros((size + 1, size + 1))
    exponent[np.diag_indices(size)] = np.log((structured + isotropic) / trace)
    exponent[size, size] = np.log(isotropic / trace)
    return SpectralPrior(None, float(trace), int(rank), int(imputation), scores,
                         basis=basis, exponent=exponent)
