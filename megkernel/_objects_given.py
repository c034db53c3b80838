"""What the user gives :class:`~megkernel.KernelDistances`: ids, distances, a kernel.

Object ids from ``X``; the user's own distances, a matrix or a pair table,
validated into a matrix with NaN where a distance is missing (returned as
:data:`MISSING_DISTANCE`); and the power-of-four scale at which a fixed
kernel's distances are computed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix, triu

from ._numerics.limits import MAX_DENSE_OBJECTS
from ._numerics.spectral import induced_sq_distances, power_of_four_scale, warn_if_not_psd
from ._numerics.validation import (
    check_pair_indices,
    refuse_bad_distances,
    row_label,
    row_name,
)
from ._pair_estimator import (
    MAX_INFERRED_OBJECTS,
    ObjectIndex,
    _as_index_array,
    _categories,
    _id_vector,
    check_id_kinds,
)
from ._solvers.holdout import canonical_order
from ._warnings import limit_error, warn_user

_UNKNOWN_HINT = ("The kernel covers objects_ only: give the learner objects=[...] "
                 "listing every object, or a kernel over all of them.")
_UNKNOWN_HINT_GIVEN = ("The distances cover objects_ only: give objects=[...] listing "
                       "every object (pairs nobody measured stay missing).")

#: What :meth:`KernelDistances.transform` returns for a pair whose distance is
#: missing. Finite (scikit-learn's ``metric="precomputed"`` refuses ``inf``),
#: beyond any distance a user gives (larger ones are refused), and small
#: enough that sums of many of them, and its reciprocal (the weight of
#: ``weights="distance"``), stay normal doubles.
MISSING_DISTANCE = 1e300


def _shown(value):
    """Return an id as users wrote it (``0``, not ``np.int64(0)``) for messages."""
    return value.item() if isinstance(value, np.generic) else value


def _as_float(values, name):
    """Return ``values`` as floats, or a ValueError naming the first value that is not a number.

    Text is refused even where it reads as a number (``"1.5"``): a table of
    strings is a parsing problem upstream (a header row, a decimal comma, a
    ``"n/a"``), which a silent conversion would hide.
    """
    if isinstance(values, (pd.DataFrame, pd.Series)):
        kinds = {dtype.kind for dtype in (values.dtypes if isinstance(values, pd.DataFrame)
                                          else [values.dtype])
                 if isinstance(dtype, np.dtype)}
        numeric = kinds <= set("iuf") and len(kinds) > 0
        raw = None if numeric else values.to_numpy(dtype=object)
    else:
        array = values if isinstance(values, np.ndarray) else None
        numeric = array is not None and array.dtype.kind in "iuf"
        raw = None if numeric else np.asarray(values, dtype=object)
    if raw is not None and raw.ndim in (1, 2):
        for position, value in enumerate(raw.ravel().tolist()):
            if isinstance(value, (str, bytes)) or not _is_number(value):
                where = np.unravel_index(position, raw.shape)
                if isinstance(values, (pd.DataFrame, pd.Series)):  # the user's labels
                    place = f"row {row_label(values.index, where[0])!r}" + (
                        f", column {values.columns[where[1]]!r}" if raw.ndim == 2 else "")
                else:
                    place = f"row {where[0]}" + (f", column {where[1]}" if raw.ndim == 2
                                                 else "")
                what = (f"the text {_shown(value)!r}: parse the table's numbers first "
                        "(text is refused even where it reads as a number)"
                        if isinstance(value, (str, bytes)) else f"{_shown(value)!r}")
                raise ValueError(f"{name} must hold numbers (NaN for a missing distance); "
                                 f"{place} holds {what}.")
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers (NaN for a missing distance).") from None


def _is_number(value):
    """Whether ``value`` is a real number (NaN and None count: a missing distance)."""
    if value is None or value is pd.NA:
        return True
    if isinstance(value, (bool, np.bool_)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, complex)


#: A self-distance this small against the largest distance is round-off, taken
#: as 0: a distance computed as the square root of a difference (``sqrt(2 - 2
#: cos)``, ``sqrt(|x|^2 + |y|^2 - 2 x.y)``) leaves about sqrt(machine epsilon),
#: 1.5e-8, of its scale on the diagonal, and ``1 - cos`` a few -1e-16.
SELF_DISTANCE_ROUNDING = 1e-7


def round_off_self_distances(values, scale):
    """Which self-distances ``values`` are round-off (within :data:`SELF_DISTANCE_ROUNDING`).

    ``scale``: the largest distance between two distinct objects; NaN is
    missing and an exact 0 no round-off.
    """
    return ~np.isnan(values) & (values != 0) & (
        np.abs(np.nan_to_num(values)) <= SELF_DISTANCE_ROUNDING * scale)


def _checked_distances(matrix, observed, objects, name, what):
    """Refuse negative or infinite distances and non-zero self-distances.

    Self-distances within :data:`SELF_DISTANCE_ROUNDING` of the largest
    distance are round-off (the caller sets the diagonal to 0).
    """
    if np.isinf(matrix).any():
        raise ValueError(f"{name} holds infinite {what}; mark a missing distance "
                         "with NaN.")
    diagonal = np.diag(matrix)
    off = observed.copy()
    np.fill_diagonal(off, False)
    scale = np.abs(matrix[off]).max(initial=0.0)
    rounding = round_off_self_distances(diagonal, scale)
    negative = observed & (np.nan_to_num(matrix, nan=0.0) < 0)
    negative[np.diag_indices_from(negative)] &= ~rounding
    if negative.any():
        i, j = np.argwhere(negative)[0]
        raise ValueError(f"{name} holds a negative {what[:-1]} ({matrix[i, j]:.6g}, "
                         f"between {_shown(objects[i])!r} and {_shown(objects[j])!r}).")
    self_distance = ~np.isnan(diagonal) & (diagonal != 0) & ~rounding
    if self_distance.any():
        i = int(np.argmax(self_distance))
        raise ValueError(f"{name} gives {_shown(objects[i])!r} a distance {diagonal[i]:.6g} to "
                         f"itself against {scale:.6g} at most between two objects; an "
                         "object's distance to itself is 0.")


def _given_matrix(distances, objects):
    """Validate the user's distance matrix.

    Return the matrix, with NaN where missing and a zero diagonal, and its
    objects.
    """
    if isinstance(distances, pd.DataFrame):
        rows, columns = distances.index, distances.columns
        if objects is not None and not np.array_equal(
                _id_vector(objects), rows.to_numpy(dtype=object)):
            raise ValueError("distances is a DataFrame: its index names the objects; "
                             "leave objects=None (or give the same ids in that order).")
        ObjectIndex(rows.to_numpy(), name="distances.index")
        ObjectIndex(columns.to_numpy(), name="distances.columns")
        if len(rows) != len(columns) or not rows.isin(columns).all():
            unmatched = next(iter(set(rows.tolist()) ^ set(columns.tolist())), None)
            raise ValueError(
                "distances must have the same ids as its index and its columns; "
                f"{unmatched!r} is in one and not the other.")
        objects = rows.to_numpy()
        distances = distances.loc[:, rows]
    matrix = _as_float(distances, "distances")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"distances must be a square matrix (objects x objects), got "
                         f"shape {matrix.shape}; give a table of pairs as pairs=(its two "
                         "id columns) and targets=(its distances).")
    objects = (np.arange(len(matrix)) if objects is None
               else np.asarray(objects) if isinstance(objects, np.ndarray)
               else _id_vector(objects))  # ids kept as given, tuples whole
    if objects.shape != (len(matrix),):
        raise ValueError(f"objects has {len(objects)} ids for distances between "
                         f"{len(matrix)} objects.")
    ObjectIndex(objects)  # distinct, at least 2
    observed = ~np.isnan(matrix)
    _checked_distances(matrix, observed, objects, "distances", "distances")
    both = observed & observed.T
    scale = np.abs(matrix[observed]).max(initial=0.0)
    asymmetric = both & (np.abs(matrix - matrix.T) > 1e-10 * scale)
    if asymmetric.any():
        i, j = np.argwhere(asymmetric)[0]
        raise ValueError(
            f"distances is not symmetric: distances[{_shown(objects[i])!r}, "
            f"{_shown(objects[j])!r}] = {matrix[i, j]:.6g} but distances"
            f"[{_shown(objects[j])!r}, {_shown(objects[i])!r}] = "
            f"{matrix[j, i]:.6g} (give one of the two, NaN for the other, or their mean).")
    matrix = np.where(both, 0.5 * (matrix + matrix.T), np.where(observed, matrix, matrix.T))
    np.fill_diagonal(matrix, 0.0)
    return matrix, objects


def _pair_values(pairs, name="pairs"):
    values = np.asarray(pairs)
    if values.ndim != 2 or values.shape[1] != 2 or len(values) == 0:
        raise ValueError(f"{name} must be a table of object pairs of shape (n_pairs, 2), "
                         f"got shape {values.shape}.")
    return values


def _pair_index(pairs, values, objects):
    """Return the rows of the pairs and the objects, by the learners' rules.

    The objects are the declared ids, the integer indices ``0..max``, or the
    distinct ids (sorted).
    """
    if objects is not None:
        index = ObjectIndex(objects)
        return index.rows(values, name="pairs", hint=_UNKNOWN_HINT_GIVEN), index.objects
    numbers = _as_index_array(values)
    if numbers is None:
        try:
            index = ObjectIndex.from_pairs(values, _categories(pairs))
        except ValueError:
            check_id_kinds(pairs, name="pairs")  # a missing id: named by its row and column
            raise
        return index.rows(values, name="pairs"), index.objects
    rows = check_pair_indices(numbers, name="pairs")
    n_objects = max(int(rows.max()) + 1, 2)
    if n_objects > MAX_INFERRED_OBJECTS:
        raise ValueError(f"The pairs name object index {n_objects - 1}: give objects=[...] "
                         "to mean a matrix over that many objects.")
    return rows, np.arange(n_objects)


def refuse_self_distances(values, targets, y, loops, *, kind="distance"):
    """Refuse a pair of an object with itself at a distance beyond round-off.

    ``values``: the pairs' ids, ``targets`` as the user gave them (their
    rows named by their labels), ``y`` their values as floats (NaN:
    missing), ``loops`` which rows pair an object with itself. The scale of
    round-off is the largest distance between two objects
    (:func:`round_off_self_distances`).
    """
    known = ~np.isnan(y)
    loops = loops & known
    scale = np.abs(y[known & ~loops]).max(initial=0.0)
    loop = loops & (y != 0) & ~round_off_self_distances(y, scale)
    if loop.any():
        t = int(np.argmax(loop))
        row = row_name(targets, t)
        raise ValueError(f"targets gives {_shown(values[t, 0])!r} a {kind} {y[t]:.6g} to "
                         f"itself at row {row}, against {scale:.6g} at most between two "
                         "objects; an object's distance to itself is 0.")


def _table_matrix(pairs, targets, objects, kind="distance"):
    """Turn the user's pair table of distances into a matrix.

    NaN where missing; repeated pairs, in either order, are averaged.
    ``kind``: what the targets are in the user's convention, as messages
    name them (``"squared distance"`` under ``given_squared=True``).
    """
    values = _pair_values(pairs)
    if targets is None:
        raise ValueError("Observed distances without a learner need targets: the "
                         "distance of each pair.")
    y = _as_float(targets, "targets")
    if y.shape != (len(values),):
        raise ValueError(f"targets must have shape ({len(values)},) like pairs, got "
                         f"{y.shape}.")
    rows, objects = _pair_index(pairs, values, objects)

    def pair(t):  # as the user wrote its ids
        return f"{_shown(values[t, 0])!r}, {_shown(values[t, 1])!r}"

    # an infinite value first: the scale of round-off below is over finite ones
    refuse_bad_distances(y, targets, name="targets", kind=kind, pair=pair,
                         skip=~np.isinf(y))
    known = ~np.isnan(y)
    if not known.all():  # the one rule of a NaN distance: a missing pair, counted
        first = row_name(targets, int(np.flatnonzero(~known)[0]))
        warn_user(f"KernelDistances: {int((~known).sum())} of {len(y)} pairs have no "
                  f"distance (NaN, the first at row {first}): left out as missing pairs.",
                  UserWarning)
    loops = known & (rows[:, 0] == rows[:, 1])
    scale = np.abs(y[known & ~loops]).max(initial=0.0)
    refuse_bad_distances(y, targets, name="targets", kind=kind, pair=pair,
                         skip=loops & round_off_self_distances(y, scale))
    refuse_self_distances(values, targets, y, loops, kind=kind)
    d = len(objects)
    if d > MAX_DENSE_OBJECTS:  # before the d x d matrix
        raise limit_error(
            f"The pair table names {d} objects: its distance matrix would take "
            f"{d} x {d} doubles ({8 * float(d) ** 2 / 2**30:.3g} GiB); KernelDistances "
            f"holds the user's distances for at most {MAX_DENSE_OBJECTS} objects "
            "(MAX_DENSE_OBJECTS).", limit="MAX_DENSE_OBJECTS")
    a, b, y = rows[known, 0], rows[known, 1], y[known]
    flat = np.concatenate([a * d + b, b * d + a])
    sums = np.bincount(flat, np.concatenate([y, y]), minlength=d * d)
    counts = np.bincount(flat, minlength=d * d)
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = (sums / counts).reshape(d, d)
    np.fill_diagonal(matrix, 0.0)
    return matrix, objects


def _converted(block, given_squared, squared):
    """Distances in the units asked for, missing ones as MISSING_DISTANCE."""
    missing = np.isnan(block)
    if given_squared and not squared:
        np.sqrt(block, out=block)
    elif squared and not given_squared:
        np.square(block, out=block)
    block[missing] = MISSING_DISTANCE
    return block


class GivenSquaredDistances:
    """The squared distances given for pairs, kept beside the kernel learned from them.

    In the learned kernel's units (the learner's reading of its targets:
    :meth:`~megkernel.KernelLearnerMixin.squared_distances_of`); a pair given
    more than once keeps the mean of its values, a pair of one object none.
    Stored sparse (one entry per given pair and orientation), so a block of
    any rows and columns is read without an ``n x n`` matrix.

    Parameters
    ----------
    n_objects : int
    a, b : ndarray of int
        Object indices of the given pairs.
    sq : ndarray of float
        Their squared distances, in the kernel's units.

    Attributes
    ----------
    a, b, sq : ndarray
        The given pairs of distinct objects and their squared distances
        (repeats kept), in an order independent of the table's rows.
    n_objects : int
        The number of objects.
    n_pairs : int
        Their number.
    largest : float
        The largest given squared distance.
    """

    def __init__(self, n_objects, a, b, sq):
        a, b, sq = np.asarray(a, np.intp), np.asarray(b, np.intp), np.asarray(sq, float)
        keep = (a != b) & np.isfinite(sq)
        a, b, sq = a[keep], b[keep], sq[keep]
        # repeats summed in one order whatever the table's row order (bit for bit)
        order = canonical_order(np.column_stack([a, b]), sq)
        a, b, sq = a[order], b[order], sq[order]
        self.a, self.b, self.sq = a, b, sq  # the given pairs, in one order
        rows, cols = np.concatenate([a, b]), np.concatenate([b, a])
        shape = (int(n_objects), int(n_objects))
        self._sums = coo_matrix((np.concatenate([sq, sq]), (rows, cols)), shape).tocsr()
        self._counts = coo_matrix((np.ones(rows.size), (rows, cols)), shape).tocsr()
        self.n_objects = int(n_objects)
        self.n_pairs = int(keep.sum())
        self.largest = float(sq.max(initial=0.0))

    def unique_pairs(self):
        """Return ``a, b, sq``: each given pair once (``a < b``), a repeated one's mean."""
        upper = triu(self._sums, 1).tocsr()
        counts = triu(self._counts, 1).tocsr()
        upper.sort_indices()
        counts.sort_indices()
        a = np.repeat(np.arange(upper.shape[0]), np.diff(upper.indptr))
        return a, upper.indices.astype(np.intp), upper.data / counts.data

    def block(self, rows, cols):
        """Return the given squared distances between ``rows`` and ``cols`` (NaN: none)."""
        sums = self._sums[rows][:, cols].toarray()
        counts = self._counts[rows][:, cols].toarray()
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / counts, np.nan)


def _user_kernel_scale(kernel, *, squared, check_psd):
    """Return the power of four the distances of ``kernel`` are computed at.

    :mod:`megkernel.neighbors`' rule for kernels from the user: distances
    computed on the kernel divided by a power of four near its largest entry
    (exact), so that any finite kernel gives finite distances, and a kernel
    that cannot be positive semidefinite named in a ``UserWarning``
    (``check_psd``: the fixed kernel; learned ones are PSD by construction).
    Squared distances beyond the float range are refused (``squared``).
    """
    scale = power_of_four_scale(np.abs(kernel).max(initial=0.0))
    if not (check_psd or squared):
        return scale
    unit = kernel / scale
    sq_distances = induced_sq_distances(unit)
    if check_psd:
        warn_if_not_psd(unit, np.diag(unit), sq_distances, name="The kernel")
    largest = float(sq_distances.max(initial=0.0))
    if squared and scale > 1.0 and largest > np.finfo(float).max / scale:
        raise ValueError(
            f"The kernel's largest squared distance, {largest:.6g} x {scale:.6g}, exceeds "
            "the float range; use squared=False (the distances are finite) or scale the "
            "kernel down.")
    return scale


def _ids(X):
    """Read the object ids of ``X``: 1-D, a single column, or a Series / DataFrame.

    A list of tuples is a list of tuple ids (numpy would split them into
    columns: the same ids in an object array work).
    """
    if isinstance(X, (list, tuple)) and X and all(type(i) is tuple for i in X):
        values = np.empty(len(X), dtype=object)
        values[:] = list(X)
        return values
    values = np.array(X, dtype=object)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError("X must hold one object id per row (a 1-D array or a single "
                         f"column), got shape {values.shape}.")
    if len(values) == 0:
        raise ValueError("X holds no object ids.")
    return values

