"""The spectral prior: classical scaling of the observed distances, rank chosen on held-out pairs.

:func:`spectral_prior` gives the batch fit its data-driven start
(``init="auto"``): the Gram matrix of the observed squared distances (the
missing ones filled by their mean, then imputed from the low-rank fit), at
the rank and number of imputations that predict held-out pairs best, plus
an isotropic part that keeps every direction learnable.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.optimize import nnls
from scipy.sparse.linalg import LinearOperator, eigsh

from .._numerics.spectral import eigh_symmetric, factor_pair_sq_distances
from .._numerics.state import ExponentState
from .._numerics.threads import blas_threads

__all__ = ["ISOTROPIC_FLOOR", "SPECTRAL_IMPUTATIONS", "SPECTRAL_RANKS", "SpectralPrior",
           "spectral_prior", "within_noise"]

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
        :class:`~megkernel._solvers.pair_loss.SubspacePairLoss`.
    errors : dict
        Held-out squared errors (targets' units, one per held-out pair) of
        each rank's best iterate, by rank (empty when the choice was made on
        an internal split or repeated with ``fixed``).
    """

    state: ExponentState | None
    trace: float
    rank: int
    imputations: int
    scores: dict
    basis: np.ndarray | None = None
    exponent: np.ndarray | None = None
    errors: dict = {}


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
    """Return the ``rank`` largest eigenpairs of a symmetric matrix, largest first.

    ``matrix``: an array, or a :class:`_FilledDistances` for its Gram matrix.
    """
    d = matrix.d if isinstance(matrix, _FilledDistances) else len(matrix)
    if rank == 0:
        return np.zeros(0), np.zeros((d, 0))
    if d <= _DENSE_EIGH_BELOW or rank > d // 4:
        if isinstance(matrix, _FilledDistances):
            matrix = matrix.dense_gram()
        lam, vecs = eigh_symmetric(matrix, name="the classical-scaling matrix")
        return lam[::-1][:rank], vecs[:, ::-1][:, :rank]
    if isinstance(matrix, _FilledDistances):
        matrix = matrix.gram()
    # a fixed start vector: ARPACK's own is random, and same-seed fits would differ
    start = np.random.default_rng(d).uniform(-1.0, 1.0, size=d)
    lam, vecs = eigsh(matrix, k=rank, which="LA", v0=start)
    order = np.argsort(lam)[::-1]
    return lam[order], vecs[:, order]


def _gram(D):
    """``-J D J / 2``: the Gram matrix of classical scaling (``J`` centres)."""
    return -0.5 * (D - D.mean(axis=0) - D.mean(axis=1)[:, None] + D.mean())


class _FilledDistances:
    """The filled matrix ``D`` of :func:`spectral_prior` without forming it.

    ``D = base + R``: ``base`` the mean fill ``f (1 1^T - I)`` or the last
    completion ``s (q 1^T + 1 q^T - 2 C C^T) + c 1 1^T`` (``q_i = ||C_i||^2``),
    and ``R`` sparse: the observed entries' departure from it (and ``-c`` on
    the diagonal, where ``D`` is 0). A product with the Gram matrix
    ``-J D J / 2`` then costs ``O(n + d r)`` for ``n`` observed pairs
    instead of ``O(d^2)`` (with few pairs observed the dense products would
    dominate the prior's cost), and no ``d x d`` matrix is stored. Used
    from :data:`_DENSE_EIGH_BELOW` objects on; below, the dense matrices of
    the same formulas.
    """

    def __init__(self, d, rows, cols, values, fill, coords=None, s=0.0, c=0.0):
        self.d, self.rows, self.cols, self.values = d, rows, cols, values
        self.fill, self.coords, self.s, self.c = fill, coords, s, c
        if coords is None:
            off = values - fill
            diagonal = np.zeros(d)
        else:
            off = values - self._base_entries(rows, cols)
            diagonal = np.full(d, -c)
        self.residual = sparse.coo_matrix(
            (np.concatenate([off, off, diagonal]),
             (np.concatenate([rows, cols, np.arange(d)]),
              np.concatenate([cols, rows, np.arange(d)]))), shape=(d, d)).tocsr()

    @classmethod
    def observed(cls, d, a, b, y):
        """Return the mean fill of the observed pairs (``a != b``), duplicates averaged."""
        distinct = a != b
        a, b, y = a[distinct], b[distinct], y[distinct]
        fill = float(y.mean()) if len(y) else 0.0
        keys, inverse = np.unique(np.minimum(a, b) * d + np.maximum(a, b),
                                  return_inverse=True)
        values = np.bincount(inverse, y) / np.bincount(inverse)
        return cls(d, keys // d, keys % d, values, fill)

    def completed(self, coords, s, c):
        """Return the next imputation: missing entries from the scaled kernel's distances."""
        return _FilledDistances(self.d, self.rows, self.cols, self.values, self.fill,
                                coords, s, c)

    def _base_entries(self, rows, cols):
        sq = np.einsum("ij,ij->i", self.coords, self.coords)
        cross = np.einsum("ij,ij->i", self.coords[rows], self.coords[cols])
        return self.s * (sq[rows] + sq[cols] - 2.0 * cross) + self.c

    def _product(self, x):
        u = x - x.mean()
        total = u.sum()
        if self.coords is None:
            du = self.fill * (total - u)
        else:
            sq = np.einsum("ij,ij->i", self.coords, self.coords)
            du = (self.s * (sq * total + sq @ u - 2.0 * (self.coords @ (self.coords.T @ u)))
                  + self.c * total)
        du = du + self.residual @ u
        return -0.5 * (du - du.mean())

    def gram(self):
        """``-J D J / 2`` as a ``LinearOperator``."""
        return LinearOperator((self.d, self.d), matvec=self._product, dtype=float)

    def dense_gram(self):
        """``-J D J / 2`` as an array (a top-eigenpair count beyond ``d / 4``)."""
        return np.column_stack([self._product(e) for e in np.eye(self.d)])


def within_noise(errors, reference):
    """Whether squared errors are no worse than ``reference``'s beyond their noise.

    The noise is one standard error of the mean paired difference (the same
    held-out pairs scored twice): ``mean(errors - reference) <= std / sqrt(n)``.
    """
    difference = np.asarray(errors) - np.asarray(reference)
    if len(difference) == 0:  # no evidence either way
        return False
    noise = float(np.std(difference)) / np.sqrt(len(difference))
    return float(np.mean(difference)) <= noise


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
        Return the prior in the layout of
        :class:`~megkernel._solvers.pair_loss.SubspacePairLoss`, in the span
        of the chosen Gram matrix's top ``max(subspace, rank)`` eigenvectors
        (``< d``), without forming the ``d x d`` state.

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
    implicit = d > _DENSE_EIGH_BELOW  # ARPACK's products, D never formed
    if implicit:
        observed_D = _FilledDistances.observed(d, a, b, y)
    else:
        observed_D = _observed_matrix(d, a, b, y)
        observed = np.zeros((d, d), dtype=bool)
        observed[a_m, b_m] = observed[b_m, a_m] = True
        np.fill_diagonal(observed, True)
    best, scores, worse = None, {}, 0
    rank_errors = {}  # each rank's best iterate's held-out squared errors
    best_structured = None  # the best of rank >= 1, with its squared errors
    with blas_threads(d):
        for rank in ranks:
            if rank > d - 1:
                break
            D = observed_D
            improved = False
            for imputation in range(n_imputations + 1 if rank else 1):
                lam, vecs = _top_eigenpairs(D if implicit else _gram(D), rank)
                lam = np.maximum(lam, 0.0)
                coords = vecs * np.sqrt(lam)
                if rank:
                    s, c = _scaling_fit(factor_pair_sq_distances(coords, a_m, b_m), y_m)
                else:
                    s, c = 0.0, float(y_m.mean()) if len(y_m) else 0.0
                isotropic = c / 2.0
                structured = s * lam.sum()
                # the isotropic eigenvalue: at least ``floor`` times the mean one
                if not isotropic * (1.0 - floor) >= floor * structured / d:  # also 0 / 0
                    isotropic = floor * structured / (d * (1.0 - floor)) if structured > 0 \
                        else 1.0
                fitted = s * factor_pair_sq_distances(coords, a_val, b_val)
                predicted = np.where(moving_val, fitted + 2.0 * isotropic, 0.0)
                errors = (predicted - y_val) ** 2
                score = float(np.mean(errors))
                scores[(rank, imputation)] = score
                if not fixed and (rank not in rank_errors or score < rank_errors[rank][0]):
                    rank_errors[rank] = (score, errors)
                candidate = (score, rank, imputation, s, isotropic, lam, vecs, D)
                if best is None or score < best[0] or fixed:
                    best = candidate
                    improved = True
                if rank and (best_structured is None or score < best_structured[0][0]):
                    best_structured = (candidate, errors)
                    improved = True  # the scan goes on while structure improves
                elif not rank:
                    isotropic_errors = errors
                if imputation < n_imputations and rank and implicit:
                    D = observed_D.completed(coords, s, c)
                elif imputation < n_imputations and rank:
                    sq = np.einsum("ij,ij->i", coords, coords)
                    completed = s * (sq[:, None] + sq[None, :] - 2.0 * coords @ coords.T) + c
                    D = np.where(observed, observed_D, completed)
                    np.fill_diagonal(D, 0.0)
            worse = 0 if improved else worse + 1
            if worse >= patience:
                break
    if not fixed and best[1] == 0 and best_structured is not None:
        # From I/d the fit's first-order changes touch only the observed
        # pairs: nothing it learns reaches the others. So the isotropic prior
        # must beat the best structured one by more than the noise of the
        # held-out pairs (one standard error of the paired difference of
        # squared errors) to be chosen.
        if within_noise(best_structured[1], isotropic_errors):
            best = best_structured[0]
    _, rank, imputation, s, isotropic, lam, vecs, D = best
    trace = s * lam.sum() + isotropic * d
    errors = {r: e for r, (_, e) in rank_errors.items()}
    if subspace is not None:
        return _subspace_prior(D, rank, imputation, s, isotropic, trace, scores,
                               min(max(int(subspace), rank), d - 1))._replace(errors=errors)
    if not (np.isfinite(trace) and trace > 0):
        return SpectralPrior(ExponentState.identity(d), 1.0, 0, 0, scores, errors=errors)
    log_iso = np.log(isotropic / trace)
    top = np.log((s * lam + isotropic) / trace) - log_iso
    exponent = (vecs * top) @ vecs.T
    exponent[np.diag_indices(d)] += log_iso
    state = ExponentState(0.5 * (exponent + exponent.T))
    return SpectralPrior(state, float(trace), int(rank), int(imputation), scores,
                         errors=errors)


def _subspace_prior(D, rank, imputation, s, isotropic, trace, scores, size):
    """Return the chosen prior in the layout of ``SubspacePairLoss``."""
    d = D.d if isinstance(D, _FilledDistances) else len(D)
    if not (np.isfinite(trace) and trace > 0):  # no usable scale: the isotropic prior
        rank, s, isotropic, trace = 0, 0.0, 1.0 / d, 1.0
    with blas_threads(d):
        top_lam, basis = _top_eigenpairs(
            D if isinstance(D, _FilledDistances) else _gram(D), size)
    structured = np.zeros(size)
    structured[:rank] = s * np.maximum(top_lam[:rank], 0.0)  # the prior's own eigenvalues
    exponent = np.zeros((size + 1, size + 1))
    exponent[np.diag_indices(size)] = np.log((structured + isotropic) / trace)
    exponent[size, size] = np.log(isotropic / trace)
    return SpectralPrior(None, float(trace), int(rank), int(imputation), scores,
                         basis=basis, exponent=exponent)
