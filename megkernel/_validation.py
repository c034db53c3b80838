"""Input validation shared by the pair estimators."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sklearn.utils.validation import validate_data

__all__ = [
    "validate_pairs",
    "check_pair_indices",
    "check_squared_distances",
    "unchanged_on_error",
]


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


def check_pair_indices(pairs, n_objects=None, *, name="X"):
    """Return ``pairs`` as an int array of shape (n, 2) of valid object indices.

    Raises
    ------
    ValueError
        Wrong shape, non-integer or negative indices, or an index
        ``>= n_objects``.
    """
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(
            f"{name} must be an array of object pairs of shape (n_pairs, 2), "
            f"got shape {pairs.shape}."
        )
    if pairs.dtype == bool or not (
        np.issubdtype(pairs.dtype, np.integer) or np.issubdtype(pairs.dtype, np.floating)
    ):
        raise ValueError(f"{name} must hold integer object indices, got dtype {pairs.dtype}.")
    if np.issubdtype(pairs.dtype, np.floating):
        if not np.all(np.isfinite(pairs)):
            raise ValueError(f"{name} contains NaN or infinite object indices.")
        if np.any(pairs != np.round(pairs)):
            raise ValueError(f"{name} must hold integer object indices; found non-integer values.")
    pairs = pairs.astype(np.intp)
    if pairs.size and pairs.min() < 0:
        raise ValueError(f"{name} contains a negative object index ({pairs.min()}).")
    if n_objects is not None and pairs.size and pairs.max() >= n_objects:
        raise ValueError(
            f"{name} refers to object {pairs.max()}, out of range for a model of "
            f"{n_objects} objects (indices 0..{n_objects - 1})."
        )
    return pairs


def check_squared_distances(y, n_pairs, *, name="y"):
    """Return ``y`` as finite, non-negative floats of shape (n_pairs,)."""
    y = np.asarray(y, dtype=float)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n_pairs:
        raise ValueError(f"{name} must have shape ({n_pairs},), got {y.shape}.")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinite squared distances.")
    if np.any(y < 0):
        raise ValueError(
            f"{name} contains negative squared distances (min {y.min():.3g})."
        )
    return y


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
