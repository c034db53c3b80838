"""Low-rank mode shared by the pair estimators.

A prior given as a factor ``F`` (d x r), ``W_1 = F F^T / ||F||_F^2``, keeps
every iterate in its range: ``W = P M P^T`` with ``P`` (d x r) orthonormal
and ``M`` (r x r) evolved instead of ``W`` (``shared/paper/LOWRANK.md``).
Nothing of size ``d x d`` is formed unless asked for explicitly.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._bounds import meg_learning_rate
from ._exponent import ExponentState
from ._validation import check_pair_indices

__all__ = ["KernelViewsMixin", "declared_n_objects", "initial_state", "auto_learning_rate"]

#: Largest ``d`` for which ``kernel_`` forms the d x d kernel in low-rank mode.
MAX_DENSE_OBJECTS = 5000

_CHUNK = 100_000


def declared_n_objects(estimator):
    """``d`` from ``init`` / ``init_factor`` / ``n_objects`` (None if unknown)."""
    init, factor, n_objects = estimator.init, estimator.init_factor, estimator.n_objects
    if factor is not None and not isinstance(init, str):
        raise ValueError(
            "Give the prior either as init (a d x d matrix) or as init_factor "
            "(a d x r factor), not both."
        )
    if factor is None and isinstance(init, str):
        return n_objects
    name, shape = ("init", np.shape(init)) if factor is None else ("init_factor", np.shape(factor))
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {shape}.")
    if n_objects is not None and n_objects != shape[0]:
        raise ValueError(f"n_objects={n_objects} does not match {name} of shape {shape}.")
    return shape[0]


def initial_state(estimator, pairs):
    """The prior's :class:`ExponentState` (low-rank when ``init_factor`` is set)."""
    if estimator.init_factor is not None:
        return ExponentState.from_factor(estimator.init_factor, name="init_factor")
    if isinstance(estimator.init, str):
        n_objects = estimator.n_objects or max(int(pairs.max()) + 1, 2)
        return ExponentState.identity(n_objects)
    return ExponentState.from_prior(estimator.init, name="init")


def pair_sq_norms(basis, a, b):
    """``||P[a] - P[b]||^2`` for each pair, in chunks (``O(chunk r)`` memory)."""
    out = np.empty(len(a))
    for start in range(0, len(a), _CHUNK):
        stop = start + _CHUNK
        v = basis[a[start:stop]] - basis[b[start:stop]]
        out[start:stop] = np.einsum("ij,ij->i", v, v)
    return out


def auto_learning_rate(state, a, b):
    """Lemma 3.2's realizable rate ``2 / rho^2`` for the restricted range.

    ``rho`` bounds the eigenvalue range ``||v||^2`` of the instances: ``2``
    in dense mode (every pair ``a != b``), the largest ``||P[a] - P[b]||^2``
    over the given pairs in low-rank mode (about ``2 r / d``, so the rate is
    about ``(d / r)^2`` times the dense one). When no given pair moves the
    model, the all-pairs bound ``min(2, 4 max_a ||P[a]||^2)`` is used.
    """
    if state.basis is None:
        return meg_learning_rate(2.0)
    rho = pair_sq_norms(state.basis, a, b).max(initial=0.0)
    if rho <= 0:
        rho = min(2.0, 4.0 * np.einsum("ij,ij->i", state.basis, state.basis).max())
    return meg_learning_rate(rho)


class KernelViewsMixin:
    """The learned kernel ``K = trace * W`` of a fitted pair estimator.

    Needs ``state_``, ``trace`` and ``n_objects_``.
    """

    @property
    def rank_(self):
        """Dimension ``r`` of the range of the kernel (``d`` in dense mode)."""
        check_is_fitted(self, "state_")
        return self.state_.size

    @property
    def kernel_(self):
        """The learned kernel ``trace * W`` (symmetric PSD, d x d).

        In low-rank mode it is formed only for ``d <= 5000``; use
        :attr:`kernel_factor_` or :meth:`kernel_entries` beyond.
        """
        check_is_fitted(self, "state_")
        state = self.state_
        if state.basis is None:
            return self.trace * state.matrix()
        d = state.n_objects
        if d > MAX_DENSE_OBJECTS:
            raise ValueError(
                f"kernel_ would form a {d} x {d} matrix ({8 * d * d / 2**30:.1f} GiB) "
                f"from a rank-{state.size} model. Use kernel_factor_ (K = F F^T), "
                "kernel_entries(rows, cols) for blocks, or "
                "kernel_entries(np.arange(n_objects_)) to form it on purpose."
            )
        return self.kernel_entries(np.arange(d))

    @property
    def kernel_factor_(self):
        """``F`` of shape (d, r) with ``kernel_ = F F^T`` (``O(d r)`` memory)."""
        check_is_fitted(self, "state_")
        return np.sqrt(self.trace) * self.state_.factor()

    def kernel_entries(self, rows, cols=None):
        """The block ``K[rows][:, cols]`` of the learned kernel.

        Parameters
        ----------
        rows : array-like of int, shape (n_rows,)
            Object indices.
        cols : array-like of int, shape (n_cols,), default=None
            Object indices; ``None`` means ``rows``.

        Returns
        -------
        block : ndarray of shape (n_rows, n_cols)
            Computed from the factor in ``O((n_rows + n_cols) r^2 +
            n_rows n_cols r)`` time, without forming ``K``.
        """
        check_is_fitted(self, "state_")
        rows = self._object_indices(rows, "rows")
        cols = rows if cols is None else self._object_indices(cols, "cols")
        return self.trace * self.state_.entries(rows, cols)

    def _object_indices(self, indices, name):
        indices = np.asarray(indices)
        if indices.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of object indices, "
                             f"got shape {indices.shape}.")
        pairs = check_pair_indices(np.column_stack([indices, indices]),
                                   self.n_objects_, name=name)
        return pairs[:, 0]
