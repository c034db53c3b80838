"""The mean square loss over pairs that the batch fit minimises, and its subspace form.

:class:`PairLoss` gives the predictions ``v_t^T W v_t``, the loss and its
gradient over every ``d x d`` density matrix (or, in low-rank mode, over
those of a fixed basis); :class:`SubspacePairLoss` restricts them to the
kernels ``P M P^T + mu (I - P P^T)`` of a subspace plus its isotropic
complement, at ``O(n k^2)`` per step. Both work in trace-one units
(``z = y / tau``); :func:`~megkernel._solvers.meg_batch.minimize_pair_loss`
runs the mirror descent on either.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from .._numerics.spectral import (
    eigh_symmetric,
    factor_pair_sq_distances,
    kernel_pair_sq_distances,
    log_trace_exp,
    normalized_exp_weights,
)
from .._numerics.state import ExponentState, SubspaceState

__all__ = ["PairLoss", "SubspacePairLoss"]


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

    def _laplacian(self, coefficients):
        """``sum_t c_t v_t v_t^T`` (``v_t = e_a - e_b``), sparse ``d x d`` (``O(n)``).

        The pairs' weighted graph Laplacian: duplicate pairs add up. A
        self-pair (``v_t = 0``) adds nothing and is left out: its four
        entries ``c, c, -c, -c`` at one place cancel only when summed
        alone, and among other pairs' entries there round-off left a
        gradient of its coefficient's size where the true one is zero (a
        subnormal one, whose ``1 / ||G||`` step overflowed).
        """
        d = self.size if self.basis is None else self.basis.shape[0]
        moving = self.a != self.b
        a, b, coefficients = self.a[moving], self.b[moving], coefficients[moving]
        values = np.concatenate([coefficients, coefficients, -coefficients, -coefficients])
        rows = np.concatenate([a, b, a, b])
        cols = np.concatenate([a, b, b, a])
        return sparse.csr_matrix((values, (rows, cols)), shape=(d, d))

    def kernel(self, eigenvalues, eigenvectors):
        """Return an iterate's kernel in the form :meth:`predictions` reads.

        Dense: ``W = F F^T`` with ``F = V diag(sqrt(w))`` (a symmetric
        product: half a general product's work, and exactly symmetric);
        low-rank: the factor ``P F``. Losses of the same kind and basis
        (training and held-out pairs) can share it.
        """
        factor = eigenvectors * np.sqrt(normalized_exp_weights(eigenvalues))
        if self.basis is None:
            return factor @ factor.T
        # ||F^T v||^2 with F = P V diag(sqrt(w)): O(d r^2 + n r), not O(n r^2)
        return self.basis @ factor

    def _dense_laplacian(self, coefficients):
        """Return the Laplacian of :meth:`_laplacian` as a dense array, by one ``bincount``.

        Its entries summed at their flat positions (made once per loss):
        at d = 944 and 7e4 pairs 1 ms, where a sparse matrix made dense
        took 17 ms (sorting its entries), a tenth of an iteration's
        eigendecomposition. Self-pairs are left out as there.
        """
        d = self.size
        if getattr(self, "_flat", None) is None:
            moving = self.a != self.b
            a, b = self.a[moving], self.b[moving]
            self._moving = moving
            self._flat = np.concatenate([a * d + a, b * d + b, a * d + b, b * d + a])
        c = coefficients[self._moving]
        weights = np.concatenate([c, c, -c, -c])
        return np.bincount(self._flat, weights=weights, minlength=d * d).reshape(d, d)

    def predictions(self, eigenvalues, eigenvectors, kernel=None):
        """``v_t^T W v_t`` for every pair, ``W`` from the exponent's eigenpairs.

        ``kernel``: the same iterate's :meth:`kernel`, if already made.
        """
        if len(self.z) == 0:
            return np.zeros(0)
        if kernel is None:
            kernel = self.kernel(eigenvalues, eigenvectors)
        if self.basis is None:
            return kernel_pair_sq_distances(kernel, self.a, self.b)
        return factor_pair_sq_distances(kernel, self.a, self.b)

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
            return self._dense_laplacian(coefficients)
        G = self.basis.T @ (self._laplacian(coefficients) @ self.basis)  # O(n r + d r^2)
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
        #: ``||(I - P P^T) v_t||^2 = ||v_t||^2 - ||P^T v_t||^2`` (0 for a self-pair);
        #: ``P^T v_t`` itself is never kept (``n x k``: 200 MB at 10^5 pairs, k = 256)
        inside = factor_pair_sq_distances(basis, self.a, self.b)
        self.outside = np.where(self.a != self.b, 2.0, 0.0) - inside
        np.maximum(self.outside, 0.0, out=self.outside)

    def grown(self, directions):
        """Return the same loss in the basis ``[P, directions]`` (orthonormal columns)."""
        return SubspacePairLoss(np.hstack([self.basis, directions]), self.a, self.b, self.z)

    def new_directions(self, predictions, count):
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
        count = min(count, d - 1 - k)
        if count <= 0 or len(self.z) == 0:
            return np.zeros((d, 0))
        G = self._laplacian(2.0 * (predictions - self.z) / len(self.z))
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

    def kernel(self, eigenvalues, eigenvectors):
        """Return ``(F, w_alpha)``: ``F = P V_B diag(sqrt(w))`` and the complement's weight."""
        k = self.size - 1
        weights = self._weights(eigenvalues)
        # v^T P M P^T v = ||F^T v||^2: O(d k^2 + n k), not O(n k^2) through P^T v
        return self.basis @ (eigenvectors[:k, :k] * np.sqrt(weights[:k])), weights[k]

    def predictions(self, eigenvalues, eigenvectors, kernel=None):
        """``v_t^T W v_t`` for every pair (``kernel``: the iterate's :meth:`kernel`)."""
        if len(self.z) == 0:
            return np.zeros(0)
        factor, complement = self.kernel(eigenvalues, eigenvectors) if kernel is None else kernel
        return factor_pair_sq_distances(factor, self.a, self.b) + complement * self.outside

    def gradient(self, predictions):
        """``P^T G P`` and ``tr((I - P P^T) G) / (d - k)`` in the exponent's layout."""
        k = self.size - 1
        coefficients = 2.0 * (predictions - self.z) / len(self.z)
        G = np.zeros((k + 1, k + 1))
        # P^T (sum_t c_t v_t v_t^T) P through the sparse Laplacian: O(n k + d k^2)
        inside = self.basis.T @ (self._laplacian(coefficients) @ self.basis)
        G[:k, :k] = 0.5 * (inside + inside.T)
        G[k, k] = float(coefficients @ self.outside) / self.multiplicity[k]
        return G

    def state(self, exponent, eigenvalues, eigenvectors):
        """Return the dense state of ``P (B - alpha I) P^T + alpha I`` (one eigh)."""
        return SubspaceState(exponent, basis=self.basis).dense()


def _state_from(exponent, eigenvalues, eigenvectors, basis):
    state = ExponentState.__new__(ExponentState)
    state.exponent = exponent
    state.basis = basis
    state.eigenvalues, state.eigenvectors = eigenvalues, eigenvectors
    state.updates_since_refresh = 0
    state.partition_anchor = None
    return state
