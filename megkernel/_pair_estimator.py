"""What the pair estimators share: input validation, the prior from their
parameters, transactional calls, and the views of the learned kernel.

In low-rank mode (a prior given as a factor ``F``, d x r, ``W_1 = F F^T /
||F||_F^2``) every iterate stays in its range, ``W = P M P^T`` with ``P``
(d x r) orthonormal and ``M`` (r x r) evolved instead of ``W`` (derivation:
``LOWRANK.md`` of the project's paper notes); nothing of size d x d is
formed unless asked for explicitly.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from ._numerics.state import ExponentState
from ._numerics.validation import check_pair_indices

__all__ = [
    "KernelViewsMixin",
    "declared_n_objects",
    "initial_state",
    "unchanged_on_error",
    "validate_pairs",
]

#: Largest ``d`` for which ``kernel_`` forms the d x d kernel in low-rank mode.
MAX_DENSE_OBJECTS = 5000


@contextmanager
def unchanged_on_error(estimator):
    """Restore the estimator's attributes if the block raises.

    Fitting validates everything before it changes the model; this keeps
    that promise also for attributes scikit-learn's ``validate_data`` sets.
    """
    saved = dict(estimator.__dict__)
    try:
        yield
    except BaseException:
        estimator.__dict__.clear()
        estimator.__dict__.update(saved)
        raise


def validate_pairs(estimator, X, y=None, *, reset, n_objects=None):
    """scikit-learn's ``validate_data`` plus the pair checks.

    Accepts a 2-column pandas DataFrame (its column names are remembered as
    ``feature_names_in_``).
    """
    kwargs = dict(reset=reset, dtype=None, ensure_min_samples=1)
    with unchanged_on_error(estimator):
        if y is None:
            X = validate_data(estimator, X, **kwargs)
        else:
            X, y = validate_data(estimator, X, y, y_numeric=False, **kwargs)
        X = check_pair_indices(X, n_objects)
    return X, y


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


class KernelViewsMixin:
    """The learned kernel ``K = trace * W`` of a fitted pair estimator.

    Needs ``state_``, ``trace_`` (the trace the model was fitted with) and
    ``n_objects_``.
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
            return self.trace_ * state.matrix()
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
        return np.sqrt(self.trace_) * self.state_.factor()

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
        return self.trace_ * self.state_.entries(rows, cols)

    def _object_indices(self, indices, name):
        indices = np.asarray(indices)
        if indices.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of object indices, "
                             f"got shape {indices.shape}.")
        pairs = check_pair_indices(np.column_stack([indices, indices]),
                                   self.n_objects_, name=name)
        return pairs[:, 0]
