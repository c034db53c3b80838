"""New objects for :class:`~megkernel.KernelDistances`: ids the fit never saw.

The user gives ``new_pairs`` and ``new_distances``: a pair table whose rows
pair a new id with a known one (an id of ``objects_``) and give their
distance. This module validates that table against the known objects,
converts the distances to squared distances in the kernel's units, and checks
those units against the fit's. The placement itself is
:mod:`megkernel._numerics.extension`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._numerics.limits import MAX_SCALE
from ._numerics.spectral import kernel_pair_sq_distances
from ._numerics.validation import in_scale_range, refuse_bad_distances, row_name
from ._objects_given import _as_float, _shown
from ._pair_estimator import check_id_kinds, check_kind_of_known
from ._warnings import warn_user

#: Squared distances more than this factor (10 in distance) away from the
#: fit's typical squared distance draw a warning ...
UNIT_WARN = 1e2

#: ... and more than this factor (100 in distance) are refused: the new
#: distances are in other units than the fit's (or squared where plain ones
#: are expected, or the reverse).
UNIT_REFUSE = 1e4

#: Known pairs sampled for the fit's typical (median) squared distance.
_REFERENCE_PAIRS = 4096


class NewObjects:
    """The validated table of new objects' distances to known ones.

    Attributes
    ----------
    rows : dict
        New id -> ndarray of the known objects' rows it has distances to.
    sq_distances : dict
        New id -> ndarray of those squared distances (the user's units).
    named : set
        Every new id the table names (also those without a usable distance).
    median_sq : float
        The median of all the table's usable squared distances (new to known
        objects): what the units are judged and matched by, so that an
        object's row does not depend on the other ids of a call.
    """

    def __init__(self, rows, sq_distances, named, median_sq):
        self.rows = rows
        self.sq_distances = sq_distances
        self.named = named
        self.median_sq = median_sq


def new_object_table(new_pairs, new_distances, index, *, read):
    """Validate ``new_pairs`` / ``new_distances`` against the known ``index``.

    ``read`` turns the validated distances into squared distances (as the
    fit read its own). Rows pairing a new id with a known one are kept; rows of two known ids
    or of two new ids are left out (a placement uses distances to known
    objects only). A NaN distance is missing, as everywhere in
    ``KernelDistances``.
    """
    if new_distances is None:
        raise ValueError("new_pairs needs new_distances: the distance of each pair.")
    if isinstance(new_pairs, pd.DataFrame) and new_pairs.shape[1] != 2:
        raise ValueError(f"new_pairs must be a table of object pairs of shape "
                         f"(n_pairs, 2), got shape {new_pairs.shape}.")
    # a missing id named; a list of tuple ids comes back as an (n, 2) object array
    new_pairs = check_id_kinds(new_pairs, name="new_pairs")
    if isinstance(new_pairs, pd.DataFrame):
        values = new_pairs.to_numpy(dtype=object)
    else:
        values = np.array(new_pairs, dtype=object)
    if values.ndim != 2 or values.shape[1] != 2 or len(values) == 0:
        raise ValueError(f"new_pairs must be a table of object pairs of shape (n_pairs, 2), "
                         f"got shape {values.shape}.")
    y = _as_float(new_distances, "new_distances")
    if y.shape != (len(values),):
        raise ValueError(f"new_distances must have shape ({len(values)},) like new_pairs, "
                         f"got {y.shape}.")
    table = new_distances if isinstance(new_distances, pd.Series) else new_pairs
    refuse_bad_distances(y, table, name="new_distances", pair=lambda t: (
        f"{_shown(values[t, 0])!r}, {_shown(values[t, 1])!r}"))
    check_kind_of_known(values, index.objects, name="new_pairs", known="the fit's objects")
    at = _rows_or_missing(index, values.ravel()).reshape(values.shape)
    known = at >= 0
    mixed = known[:, 0] != known[:, 1]
    named = set(pd.unique(values[~known]).tolist())
    keep = np.flatnonzero(mixed & ~np.isnan(y))
    with np.errstate(over="ignore"):
        sq = np.asarray(read(y), dtype=float)
    huge = ~np.isnan(sq) & ~(sq <= MAX_SCALE)  # squares that overflow, or beyond the range
    if huge.any():
        t = int(np.argmax(huge))
        raise ValueError(f"new_distances holds {y[t]:.6g} at row {row_name(table, t)} (the "
                         f"pair {_shown(values[t, 0])!r}, {_shown(values[t, 1])!r}), beyond "
                         f"the range the library computes with (squared distances up to "
                         f"{MAX_SCALE:.0e}): give the distances in smaller units.")
    first_new = ~known[keep, 0]
    new_ids = np.where(first_new, values[keep, 0], values[keep, 1])
    old_rows = np.where(first_new, at[keep, 1], at[keep, 0])
    codes, uniques = pd.factorize(pd.Series(new_ids, dtype=object), sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    grouped_rows, grouped_sq = {}, {}
    sq_kept = sq[keep]
    for g, key in enumerate(uniques.tolist()):
        chosen = order[bounds[g]:bounds[g + 1]]
        rows, values = old_rows[chosen].astype(np.intp), sq_kept[chosen]
        canonical = np.lexsort((values, rows))  # the table's row order changes nothing
        grouped_rows[key], grouped_sq[key] = rows[canonical], values[canonical]
    median_sq = float(np.median(sq_kept)) if sq_kept.size else np.nan
    return NewObjects(grouped_rows, grouped_sq, named, median_sq)


def _rows_or_missing(index, ids):
    """Rows of ``ids`` among the known objects, -1 for an id that is not one."""
    try:
        return pd.Index(_vector(index.objects)).get_indexer(pd.Index(_vector(ids)))
    except TypeError:  # unhashable ids: none of them is known
        return np.array([index.row_or_missing(key) for key in ids], dtype=np.intp)


def _vector(values):
    """``values`` as a 1-D object array (tuple ids kept whole)."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    try:
        out[:] = values
    except ValueError:  # tuples of equal length: numpy would read them as rows
        for i, value in enumerate(values):
            out[i] = value
    return out


def _known(lookup, key):
    try:
        return key in lookup
    except TypeError:  # unhashable: no id of the model
        return False


def rows_of_new(table, ids):
    """Check that every id of ``ids`` has a distance to a known object."""
    for key in ids:
        if key in table.rows:
            continue
        if key in table.named:
            raise ValueError(
                f"The new object {_shown(key)!r} has no distance to any known object in "
                "new_pairs / new_distances (its rows pair it with other new objects, or "
                "hold NaN): it cannot be placed. Give its distance to at least one of the "
                "fit's objects (objects_).")


def reference_sq_distance(kernel, scale):
    """Median squared distance over a seeded sample of the kernel's pairs (its units)."""
    n = len(kernel)
    rng = np.random.default_rng(0)
    a = rng.integers(0, n, _REFERENCE_PAIRS)
    b = (a + 1 + rng.integers(0, n - 1, _REFERENCE_PAIRS)) % n  # never a == b
    sq = kernel_pair_sq_distances(np.asarray(kernel) / scale, a, b)
    return float(np.median(np.maximum(sq, 0.0)) * scale)


def unit_factor(kernel_sq, observed_sq):
    """Squared-distance units of the kernel per unit of the observed ones (a median ratio).

    ``None`` when no pair has both positive.
    """
    kernel_sq, observed_sq = np.asarray(kernel_sq, float), np.asarray(observed_sq, float)
    usable = (kernel_sq > 0) & (observed_sq > 0) & np.isfinite(observed_sq)
    if not usable.any():
        return None
    return float(np.exp(np.median(np.log(kernel_sq[usable]) - np.log(observed_sq[usable]))))


def matched_unit(median_sq, reference):
    """Squared kernel units per squared unit of the new distances, their medians matched.

    For a kernel without units (a learner of pair labels, a stream): the
    table's median squared distance ``median_sq`` is taken for the kernel's
    typical one, ``reference``. A ``ValueError`` where that cannot be done.
    """
    with np.errstate(divide="ignore", over="ignore"):
        unit = reference / median_sq if median_sq > 0 else np.inf
    if not in_scale_range(unit):
        raise ValueError(
            f"The median of new_distances is {np.sqrt(median_sq):.3g} (squared "
            f"{median_sq:.3g}): the kernel's learner gave it no units (pair labels, or "
            "a stream), so the new distances' median is taken for the kernel's typical "
            f"distance ({np.sqrt(reference):.3g} in its units), and this median cannot be "
            "matched to it (half the distances or more are 0, or too small to square in "
            "double precision). Give the new distances in larger units, or learn the "
            "kernel from distances (MEGKernelRegressor), which fixes their units.")
    return float(unit)


def check_units(given, reference, *, fitted_units):
    """Warn about, or refuse, new distances grossly off the fit's typical distance.

    ``given``: the median of the table's new squared distances, converted;
    ``reference``: the fit's median squared distance.
    """
    if not (given > 0 and reference > 0):
        return
    ratio = given / reference
    if 1.0 / UNIT_WARN <= ratio <= UNIT_WARN:
        return
    factor = np.sqrt(ratio)
    message = (f"The new objects' distances are {factor:.3g} times the fit's typical "
               f"distance (medians, {fitted_units}): ")
    if not 1.0 / UNIT_REFUSE <= ratio <= UNIT_REFUSE:
        raise ValueError(message + "they are in other units than the fit's (or squared "
                         "where plain distances are expected, or the reverse; see "
                         "given_squared). Give them in the fit's units.")
    warn_user(message + "check that they are in the fit's units, plain or squared as the "
              "fit's own distances were given; they are placed as given.", UserWarning)
