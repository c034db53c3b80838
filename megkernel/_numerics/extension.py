r"""Out-of-sample extension of a kernel: place a new object from its distances.

A kernel ``K`` over ``n`` known objects is, after centring at their mean
(``K_c = J K J``, which changes no distance), the Gram matrix of points
``z_i`` in its eigenbasis: ``K_c = V diag(lam) V^T``, ``z_i = lam^{1/2} V_i``.
A new object ``x`` is a point ``y`` in the span of the top ``r`` eigenvectors
plus a part of its own, orthogonal to every known object (as each known
object has one: the eigen-directions left out). Its squared distance to a
known object ``j`` is then

.. math:: \delta_j^2 = t + e_j - 2 z_j^\top y, \qquad t = \|x\|^2,\ e_j = (K_c)_{jj},

linear in the unknowns ``(y, t)``. Given ``delta_j`` for a subset ``S`` of the
known objects (``m`` of them, never all are needed), with ``y = lam^{1/2} u``
and ``t`` eliminated by centring the equations over ``S`` (``C_S``):

.. math:: \min_u \|C_S (B_S u - b_S)\|^2 + \alpha \|u\|^2, \qquad
          B_S = 2 V_S \mathrm{diag}(\lambda), \ b_j = e_j - \delta_j^2,

the MAP estimate under the prior that new objects are spread like the known
ones (``y ~ N(0, diag(lam) / n)``) and equation noise of variance
``alpha / n``. Then ``t = mean_S(B_S u - b_S)``, raised to ``||y||^2`` when
below (the extended kernel stays positive semidefinite: the Schur complement
of the new diagonal entry is ``t - ||y||^2``), and the new object's squared
distance to any known ``i`` is ``t + e_i - B_i u``.

**Error.** Given an in-sample object's exact distances to all known objects,
the estimate is ``u_k = 4 lam_k^2 / (4 lam_k^2 + alpha) V_ik`` and
``t = e_i``: exact up to the ridge's shrinkage ``alpha / (4 lam_k^2 +
alpha)`` on each direction and the part of the object outside the top ``r``
directions (its own part; its distance to itself comes out as twice that
part's energy, not 0). With fewer or noisy distances the directions the
given objects do not separate fall back to the prior mean (the known
objects' centre).

**Conditioning.** ``||C_S B_S|| <= 2 lam_1`` (``V`` has orthonormal columns,
``C_S`` is a projection), so the matrix of the regularised normal equations
has eigenvalues in ``[alpha, alpha + 4 lam_1^2]`` and condition number at most
``1 + 4 lam_1^2 / alpha``, whatever the given objects.

**Cost.** The eigendecomposition is done once (:func:`extension_basis`);
placing one object costs ``O(m r min(m, r) + min(m, r)^3)`` (the primal
``r x r`` or the dual ``m x m`` normal equations, whichever is smaller) and
its distances to ``n`` objects ``O(n r)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .spectral import eigh_symmetric, power_of_four_scale

__all__ = ["ExtensionBasis", "Placement", "extension_basis", "place_objects",
           "placed_sq_distances", "DEFAULT_MAX_RANK", "DEFAULT_NOISE"]

#: Eigen-directions a new object is placed in, at most (the rest is each
#: object's own part): enough for the structure a learned kernel carries and
#: cheap enough (a 64 x 64 solve) to place an object in well under 1 ms.
DEFAULT_MAX_RANK = 64

#: Standard deviation of the noise on a given squared distance, relative to the
#: known objects' mean squared distance (it sets the ridge ``alpha``). With it
#: the condition number of every placement is below ``1 + 100 n`` (the top
#: eigenvalue of the centred kernel is at most ``n / 2`` mean squared distances).
DEFAULT_NOISE = 0.1


@dataclass(frozen=True)
class ExtensionBasis:
    """What placing new objects needs, computed once from the kernel.

    Attributes
    ----------
    weights : ndarray of shape (n, r)
        ``B = 2 V diag(lam)``: row ``j`` maps ``u`` to ``2 z_j . y``.
    sq_norms : ndarray of shape (n,)
        ``e_j``, the centred kernel's diagonal (the whole of it, not only its
        top ``r`` directions).
    eigenvalues : ndarray of shape (r,)
        ``lam``, descending, positive.
    ridge : float
        ``alpha``.
    scale : float
        The power of four the kernel was divided by (all arrays are in its
        units; distances are multiplied back by it).
    mean_sq_distance : float
        The known objects' mean squared distance (in the user's units,
        times ``scale``: ``2 tr K_c / (n - 1)``).
    """

    weights: np.ndarray
    sq_norms: np.ndarray
    eigenvalues: np.ndarray
    ridge: float
    scale: float
    mean_sq_distance: float

    @property
    def gram_diagonal(self):
        """``B^T B = 4 diag(lam^2)`` (the eigenvectors are orthonormal)."""
        return 4.0 * self.eigenvalues**2

    @property
    def rank(self):
        """The number of eigen-directions new objects are placed in."""
        return len(self.eigenvalues)

    @property
    def condition_bound(self):
        """Upper bound on the condition number of every placement's normal equations."""
        top = self.eigenvalues[0] if self.rank else 0.0
        return 1.0 + 4.0 * top**2 / self.ridge


@dataclass(frozen=True)
class Placement:
    """New objects placed in an :class:`ExtensionBasis`.

    Attributes
    ----------
    coefficients : ndarray of shape (k, r)
        ``u`` of each new object (``y = lam^{1/2} u``).
    sq_norms : ndarray of shape (k,)
        ``t`` of each (at least ``||y||^2``), in the basis' units.
    residuals : ndarray of shape (k,)
        Root mean square misfit of each object's given squared distances,
        relative to the known objects' mean squared distance.
    """

    coefficients: np.ndarray
    sq_norms: np.ndarray
    residuals: np.ndarray


def extension_basis(kernel, *, max_rank=DEFAULT_MAX_RANK, noise=DEFAULT_NOISE, sq_noise=None):
    """Eigenbasis of the centred kernel, for placing new objects.

    Parameters
    ----------
    kernel : ndarray of shape (n, n)
        Symmetric positive semidefinite kernel over the known objects, at
        any scale (computed on it divided by a power of four).
    max_rank : int, default=DEFAULT_MAX_RANK
        Largest number of eigen-directions kept (those above ``1e-10`` times
        the largest eigenvalue, at most this many).
    noise : float, default=DEFAULT_NOISE
        Noise of a given squared distance relative to the mean squared
        distance: ``alpha = n (noise * mean_sq_distance)^2``.
    sq_noise : float, default=None
        A noise in the kernel's units (the root mean square misfit of the
        kernel to the distances it was learned from) that raises ``noise``
        when larger. It never lowers it: a kernel's misfit to the pairs it
        was fitted to understates a new object's (on held-out family
        sequences, 1-NN accuracy fell from 0.92 to 0.67 with the misfit
        alone as the noise; 0.05, 0.1, 0.15, 0.3 gave 0.88, 0.92, 0.91,
        0.86, and 0.1 was best on graph hop counts too:
        ``benchmarks/bench_new_objects.py``).

    Returns
    -------
    ExtensionBasis
    """
    kernel = np.asarray(kernel, dtype=float)
    n = len(kernel)
    scale = power_of_four_scale(np.abs(kernel).max(initial=0.0))
    unit = kernel / scale
    centred = unit - unit.mean(axis=0)[None, :]
    centred -= centred.mean(axis=1)[:, None]
    centred = 0.5 * (centred + centred.T)
    sq_norms = np.maximum(np.diag(centred).copy(), 0.0)
    mean_sq = 2.0 * sq_norms.sum() / max(n - 1, 1)
    if n > 4 * max_rank:
        top = min(max_rank, n - 1)
        lam, vecs = linalg.eigh(centred, subset_by_index=(n - top, n - 1),
                                check_finite=False, driver="evr")
    else:
        lam, vecs = eigh_symmetric(centred, check=False)
    order = np.argsort(lam)[::-1]
    lam, vecs = lam[order], vecs[:, order]
    keep = lam > 1e-10 * max(lam[0] if lam.size else 0.0, np.finfo(float).tiny)
    keep[max_rank:] = False
    lam, vecs = lam[keep], vecs[:, keep]
    if sq_noise is not None and mean_sq > 0:
        noise = max(sq_noise / scale / mean_sq, noise)
    ridge = n * (noise * mean_sq) ** 2 if mean_sq > 0 else 1.0
    return ExtensionBasis(weights=np.ascontiguousarray(2.0 * vecs * lam), sq_norms=sq_norms,
                          eigenvalues=lam, ridge=float(ridge), scale=scale,
                          mean_sq_distance=float(mean_sq * scale))


def _place_one(basis, rows, sq):
    """``(u, t, residual)`` of one new object (``sq`` in the basis' units)."""
    B = basis.weights[rows]
    b = basis.sq_norms[rows] - sq
    m, r = B.shape
    if r == 0:
        u = np.zeros(0)
    elif m < r:  # dual: u = Bc^T (Bc Bc^T + alpha I)^{-1} bc
        Bc = B - B.mean(axis=0)
        gram = Bc @ Bc.T
        gram.flat[::m + 1] += basis.ridge
        u = Bc.T @ linalg.solve(gram, b - b.mean(), assume_a="pos", check_finite=False)
    else:  # primal: Bc^T Bc = B^T B - m mu mu^T, B^T B from the complement when cheaper
        total = B.sum(axis=0)
        if 2 * m > len(basis.sq_norms):
            rest = np.ones(len(basis.sq_norms), dtype=bool)
            rest[rows] = False
            others = basis.weights[rest]
            gram = np.diag(basis.gram_diagonal) - others.T @ others
        else:
            gram = B.T @ B
        gram -= np.outer(total, total / m)
        gram.flat[::r + 1] += basis.ridge
        u = linalg.solve(gram, B.T @ b - total * b.mean(), assume_a="pos",
                         check_finite=False)
    fitted = B @ u
    t = float(np.mean(fitted - b))
    t = max(t, float(np.dot(u * basis.eigenvalues, u)))  # ||y||^2 = u^T diag(lam) u
    misfit = t - fitted + b  # the model's squared distances minus the given ones
    peak = float(np.abs(misfit).max())  # scaled: the squares of large misfits overflow
    rms = peak * float(np.sqrt(np.mean((misfit / peak) ** 2))) if peak > 0 else 0.0
    return u, t, rms


def place_objects(basis, rows, sq_distances):
    """Place new objects from their squared distances to some known objects.

    Parameters
    ----------
    basis : ExtensionBasis
    rows : list of ndarray of int
        For each new object, the known objects it has distances to (at
        least one).
    sq_distances : list of ndarray of float
        Their squared distances, in the kernel's units (not divided by
        ``basis.scale``).

    Returns
    -------
    Placement
    """
    k, r = len(rows), basis.rank
    coefficients, sq_norms, residuals = np.zeros((k, r)), np.zeros(k), np.zeros(k)
    relative = basis.mean_sq_distance / basis.scale or 1.0
    for i, (at, sq) in enumerate(zip(rows, sq_distances)):
        u, t, misfit = _place_one(basis, np.asarray(at, dtype=np.intp),
                                  np.asarray(sq, dtype=float) / basis.scale)
        coefficients[i], sq_norms[i], residuals[i] = u, t, misfit / relative
    return Placement(coefficients, sq_norms, residuals)


def placed_sq_distances(basis, placement, cols):
    """Squared distances of placed objects to known objects ``cols`` (kernel units).

    Parameters
    ----------
    basis : ExtensionBasis
    placement : Placement
    cols : ndarray of int
        Known objects.

    Returns
    -------
    ndarray of shape (k, len(cols))
        ``t + e_i - B_i u``, clipped at 0; each object's row does not depend
        on the others placed with it.
    """
    cols = np.asarray(cols, dtype=np.intp)
    weights = basis.weights[cols]
    sq = np.empty((len(placement.sq_norms), len(cols)))
    for i, u in enumerate(placement.coefficients):  # one object at a time: the same
        sq[i] = weights @ u  # bits whatever else is placed in the call
    sq = placement.sq_norms[:, None] + basis.sq_norms[cols][None, :] - sq
    return np.maximum(sq, 0.0) * basis.scale


def grown_kernel(kernel, rows, sq_distances, *, own=0.0, max_rank=DEFAULT_MAX_RANK,
                 noise=DEFAULT_NOISE):
    r"""Return the kernel over the known objects and new ones placed from their distances.

    The known block is ``kernel`` itself; each new object is the point
    ``p_x = mu + y + o_x`` (``mu`` the known objects' mean, ``y`` its
    placement in the centred eigenbasis, ``o_x`` its own part, orthogonal
    to everything else, of squared norm ``max(t - ||y||^2, own)``), so the
    result is the Gram matrix of actual vectors: positive semidefinite, and
    definite when ``kernel`` is and ``own > 0``. With ``r_i`` the row means
    of ``kernel``, ``s`` their mean and ``g = V^T (r - s 1)``:

    .. math:: K_{xi} = z_i^\top y + u^\top g + r_i, \qquad
              K_{xx'} = y^\top y' + u^\top g + u'^\top g + s + [x = x'] |o_x|^2.

    Parameters
    ----------
    kernel : ndarray of shape (n, n)
        Symmetric positive semidefinite kernel over the known objects.
    rows : list of ndarray of int
        For each new object, the known objects it has distances to.
    sq_distances : list of ndarray of float
        Their squared distances, in the kernel's units.
    own : float, default=0.0
        Least squared norm of each new object's own part (kernel units).
    max_rank, noise : see :func:`extension_basis`.

    Returns
    -------
    ndarray of shape (n + k, n + k)
        The known objects first, then the new ones in the order given.
    """
    kernel = np.asarray(kernel, dtype=float)
    basis = extension_basis(kernel, max_rank=max_rank, noise=noise)
    placement = place_objects(basis, rows, sq_distances)
    scale = basis.scale
    unit = kernel / scale
    means = unit.mean(axis=1)
    grand = float(means.mean())
    vectors = basis.weights / (2.0 * basis.eigenvalues) if basis.rank else basis.weights
    g = vectors.T @ (means - grand)
    u = placement.coefficients
    y_sq = np.einsum("ij,ij->i", u * basis.eigenvalues, u)
    own_sq = np.maximum(placement.sq_norms - y_sq, own / scale)
    shift = u @ g
    n, k = len(kernel), len(u)
    out = np.empty((n + k, n + k))
    out[:n, :n] = unit
    cross = 0.5 * u @ basis.weights.T + shift[:, None] + means[None, :]
    out[n:, :n] = cross
    out[:n, n:] = cross.T
    out[n:, n:] = (u * basis.eigenvalues) @ u.T + shift[:, None] + shift[None, :] + grand
    out[n:, n:] += np.diag(own_sq)
    return out * scale
