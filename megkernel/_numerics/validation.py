"""Array validation of pairs and squared distances (no scikit-learn here)."""

from __future__ import annotations

import math

import numpy as np

from .._warnings import limit_error
from .limits import (
    MAX_DENSE_OBJECTS,
    MAX_SCALE,
    MAX_STEP,
    MAX_TRACE,
    MAX_TRIAL_BYTES,
    MAX_TRIALS,
    MIN_SCALE,
    MIN_TRACE,
)

__all__ = [
    "in_scale_range",
    "check_real",
    "check_pair_indices",
    "check_squared_distances",
    "check_meg_step",
    "check_target_range",
    "check_positive",
    "check_trace",
    "check_n_objects",
    "check_n_trials",
    "check_pair_labels",
]


def check_real(values, *, name, kind="array"):
    """Return ``values`` as a float array; refuse complex values by ``name``.

    Kernels, priors and factors here are real: a complex Hermitian matrix
    is not a real symmetric one, and a cast to float would drop its
    imaginary part with only numpy's ComplexWarning. Complex values whose
    imaginary parts are all zero are their real parts (nothing is lost).
    Values that are not numbers: a ValueError saying ``name`` must be a
    numeric ``kind``.
    """
    labels = None
    if hasattr(values, "index") and hasattr(values, "to_numpy"):  # a pandas object
        labels = (values.index, getattr(values, "columns", None))
    try:
        values = np.asarray(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a numeric {kind} ({error}).") from None
    if values.dtype == object:
        _refuse_text(values, name, kind, labels)
    if np.iscomplexobj(values):
        if np.any(values.imag != 0):
            raise ValueError(
                f"{name} is complex (dtype {values.dtype}) with nonzero imaginary parts: "
                f"it must be a real {kind} (a complex Hermitian matrix is not a real "
                "symmetric one, and its imaginary part would be dropped). Give a real "
                f"{name}, e.g. its real part if that is what you mean.")
        values = values.real
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a numeric {kind} ({error}).") from None


class SelfDistanceError(ValueError):
    """A learner refuses a pair of an object with itself at a positive distance.

    Typed so that :class:`~megkernel.KernelDistances` explains this refusal,
    and no other, in the terms of its own table.
    """


def row_label(index, position):
    """Return the label of row ``position`` of a pandas ``index`` as the user wrote it.

    ``5``, not numpy's ``np.int64(5)``: a filtered table's integer labels
    are numpy scalars.
    """
    label = index[position]
    return label.item() if isinstance(label, np.generic) else label


def row_name(container, position):
    """Return how a message names row ``position`` of the user's ``container``.

    A pandas Series' or DataFrame's label as written (``'r5'``, ``5``), else
    the position (lists, tuples and arrays).
    """
    if hasattr(container, "iloc"):  # pandas, without importing it here
        return repr(row_label(container.index, position))
    return str(int(position))


def refuse_bad_distances(values, container, *, name, kind="distance", pair=None, skip=None):
    """Refuse an infinite or negative distance, naming its row: one wording everywhere.

    ``values``: the distances as floats (NaN, a missing pair, passes);
    ``container``: what the user gave, whose rows name the place
    (:func:`row_name`); ``name``: the argument; ``kind``: ``"distance"`` or
    ``"squared distance"``, the user's convention; ``pair(t)``: the text of
    row ``t``'s pair, if known; ``skip``: rows not to check (e.g. round-off
    self-distances).
    """
    bad = np.isinf(values) | (np.nan_to_num(values) < 0)
    if skip is not None:
        bad &= ~skip
    if not bad.any():
        return
    t = int(np.argmax(bad))
    what = "an infinite" if np.isinf(values[t]) else "a negative"
    of = "" if pair is None else f", for the pair {pair(t)}"
    raise ValueError(f"{name} holds {what} {kind} ({values[t]:.6g}{of}) at row "
                     f"{row_name(container, t)}; {kind}s are finite and non-negative (NaN: "
                     "a missing pair).")


def _refuse_text(values, name, kind, labels=None):
    """Refuse the first entry of an object array that is no number, naming its place."""
    for position, value in enumerate(values.ravel().tolist()):
        try:
            float(value)
        except (TypeError, ValueError):
            if isinstance(value, (complex, np.complexfloating)):
                continue  # refused below, as complex
            where = np.unravel_index(position, values.shape) if values.ndim else ()
            if labels is not None and len(where) >= 1:
                index, columns = labels
                place = f"row {row_label(index, where[0])!r}" + (
                    f", column {columns[where[1]]!r}" if columns is not None and len(where) > 1
                    else "")
            else:
                place = ", ".join(f"{axis} {at}" for axis, at in zip(("row", "column"), where))
            shown = value if not isinstance(value, (str, bytes)) or len(value) <= 40 else (
                value[:37] + "...")
            raise ValueError(f"{name} must be a numeric {kind}: {place or 'its value'} holds "
                             f"{shown!r}.") from None


def check_pair_indices(pairs, n_objects=None, *, name="X", min_pairs=0):
    """Return ``pairs`` as an int array of shape (n, 2) of valid object indices.

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2)
    n_objects : int, optional
        Indices must be below it.
    name : str, default="X"
        The argument's name, for the messages.
    min_pairs : int, default=0
        Fewest pairs accepted (``1`` for a fit: a learner needs pairs to
        learn from); an empty input (``[]`` too) is then refused as such.

    Raises
    ------
    ValueError
        Wrong shape, non-integer or negative indices, an index
        ``>= n_objects``, or fewer than ``min_pairs`` pairs.
    """
    pairs = np.asarray(pairs)
    if min_pairs > 0 and pairs.size == 0 and (
            pairs.ndim == 1 or (pairs.ndim == 2 and pairs.shape[1] in (0, 2))):
        raise ValueError(f"{name} holds no pairs (shape {pairs.shape}); at least "
                         f"{min_pairs} pair{'s' if min_pairs > 1 else ''} of objects "
                         f"{'are' if min_pairs > 1 else 'is'} needed.")
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
    if pairs.size and (pairs.max() >= 2.0**63 if np.issubdtype(pairs.dtype, np.floating)
                       else pairs.max() > np.iinfo(np.intp).max):
        raise ValueError(f"{name} contains an object index ({pairs.max():.6g}) beyond any "
                         "model's range.")
    if len(pairs) < min_pairs:
        raise ValueError(f"{name} holds {len(pairs)} pairs; at least {min_pairs} are needed.")
    if pairs.size and pairs.min() < 0:  # before the cast: -1e19 has no intp
        raise ValueError(f"{name} contains a negative object index ({pairs.min():.6g}).")
    pairs = pairs.astype(np.intp)
    if pairs.size and pairs.min() < 0:
        raise ValueError(f"{name} contains a negative object index ({pairs.min()}).")
    if n_objects is not None and pairs.size and pairs.max() >= n_objects:
        raise ValueError(
            f"{name} refers to object {pairs.max()}, out of range for a model of "
            f"{n_objects} objects (indices 0..{n_objects - 1})."
        )
    return pairs


def check_squared_distances(y, n_pairs, *, name="y", kind="squared distances"):
    """Return ``y`` as finite, non-negative floats of shape (n_pairs,).

    A refusal names the first offending row: text (even ``"1.5"``: a table
    parsed wrongly upstream), NaN or infinity, a negative value. ``kind``:
    what the values are in the user's convention (``"distances"`` for plain
    ones), as the messages name them.
    """
    raw = np.asarray(y)
    if raw.dtype.kind in "USO":
        for row, value in enumerate(raw.ravel().tolist()):
            if isinstance(value, (str, bytes)):
                raise ValueError(
                    f"{name} holds the text {value!r} at row {row}: give numbers (parse "
                    "the table's numbers first; text is refused even where it reads as "
                    "a number).")
    try:
        y = np.asarray(y, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers ({kind}).") from None
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n_pairs:
        raise ValueError(f"{name} must have shape ({n_pairs},), got {y.shape}.")
    if not np.all(np.isfinite(y)):
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"{name} contains NaN or infinite {kind} (row {row}: "
                         f"{y[row]}).")
    if np.any(y < 0):
        row = int(np.argmin(y))
        raise ValueError(f"{name} contains negative {kind} (min {y.min():.3g}, row {row}).")
    return y


def squares_of_distances(distances, name):
    """Return the squares of non-negative distances.

    A ``ValueError`` naming ``name`` where they overflow, or where even the
    largest underflows (the scale is lost; a tiny distance among larger ones
    squares to 0 harmlessly).
    """
    with np.errstate(over="ignore", under="ignore"):
        squared = distances * distances
    largest = float(np.max(distances, initial=0.0))
    if not np.all(np.isfinite(squared)):
        raise ValueError(f"{name} reaches {largest:.4g}, whose square exceeds double "
                         "precision: give the distances in smaller units.")
    if largest > 0 and not np.max(squared, initial=0.0) >= np.finfo(float).tiny:
        raise ValueError(f"{name} reaches only {largest:.4g}, whose square underflows "
                         "double precision: give the distances in larger units.")
    return squared


def check_positive(value, name):
    """``value`` as a positive, finite float, or a ValueError naming it."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}.") from None
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}.")
    return value


def in_scale_range(values):
    """Tell which values are scales the library computes with: in ``[MIN_SCALE, MAX_SCALE]``.

    The one range check of traces, units and constraint scales: squared
    distances, their squared errors and thresholds of such a scale stay in
    double precision. Each caller words its own refusal in the user's terms.

    Parameters
    ----------
    values : float or array-like of float
        Positive scales (a trace, a unit, a constraint's largest entry).

    Returns
    -------
    bool or ndarray of bool
        True where the value is finite and within the range.
    """
    values = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        inside = np.isfinite(values) & (values >= MIN_SCALE) & (values <= MAX_SCALE)
    return bool(inside) if inside.ndim == 0 else inside


def check_trace(trace, *, name="trace"):
    """``trace`` as a float in ``[MIN_TRACE, MAX_TRACE]``, or a ValueError."""
    try:
        trace = float(trace)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {trace!r}.") from None
    if not in_scale_range(trace):
        raise ValueError(
            f"{name}={trace:.3g} is outside [{MIN_TRACE:g}, {MAX_TRACE:g}], where squared "
            "distances, their squared errors and thresholds stay in double precision; "
            "rescale the distances.")
    return trace


def check_n_objects(n_objects, *, name="n_objects"):
    """``n_objects`` as an int >= 2, or a ValueError."""
    if isinstance(n_objects, bool) or not isinstance(n_objects, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= 2, got {n_objects!r}.")
    if n_objects < 2:
        raise ValueError(f"{name} must be at least 2 (a kernel's distances need two "
                         f"objects), got {n_objects}.")
    if n_objects > MAX_DENSE_OBJECTS:  # before any d x d allocation
        raise limit_error(
            f"{name}={n_objects} asks for a dense model of {n_objects} x {n_objects} "
            f"matrices ({8 * float(n_objects) ** 2 / 2**30:.3g} GiB each); dense mode "
            f"holds at most {MAX_DENSE_OBJECTS} objects (MAX_DENSE_OBJECTS). For more, "
            "give a low-rank prior (init_factor; prior_factor for the functions).",
            limit="MAX_DENSE_OBJECTS")
    return int(n_objects)


def check_n_trials(n_epochs, n_pairs, *, name="n_epochs", bytes_per_trial=0,
                   record="its on-line loss"):
    """Refuse ``n_epochs`` passes over ``n_pairs`` pairs beyond what one call may run.

    Checked before the first trial (the rule of resource parameters: checked
    against the work and memory they imply, with the numbers).

    Parameters
    ----------
    n_epochs : int or float
        Passes over the pairs.
    n_pairs : int
        Pairs per pass.
    name : str, default="n_epochs"
        The parameter's name, for the messages.
    bytes_per_trial : int, default=0
        Memory the call keeps per trial (8 for an on-line loss in
        ``losses_``, 8 more for each epoch's order); checked against
        :data:`~megkernel._numerics.limits.MAX_TRIAL_BYTES`.
    record : str, default="its on-line loss"
        What the call keeps per trial, for the message.

    Returns
    -------
    float
        The number of trials, ``n_epochs * n_pairs``.

    Raises
    ------
    ValueError
        More than :data:`~megkernel._numerics.limits.MAX_TRIALS` trials, or
        more than ``MAX_TRIAL_BYTES`` of per-trial records.
    """
    epochs = float(n_epochs)  # 10**20 as a float: the product cannot overflow
    trials = epochs * float(n_pairs)
    if not trials <= MAX_TRIALS:
        raise limit_error(
            f"{name}={epochs:.6g} passes over {n_pairs} pairs are {trials:.3g} trials, "
            f"beyond the {MAX_TRIALS:.3g} one call runs (MAX_TRIALS: "
            f"{MAX_TRIALS * 1e-6 / 86400:.0f} days at 1 us a trial); lower {name}.",
            limit="MAX_TRIALS")
    needed = trials * bytes_per_trial
    if needed > MAX_TRIAL_BYTES:
        raise limit_error(
            f"{name}={epochs:.6g} passes over {n_pairs} pairs are {trials:.3g} trials, "
            f"each keeping {bytes_per_trial} bytes ({record}): {needed / 2**30:.3g} GiB, "
            f"beyond the {MAX_TRIAL_BYTES / 2**30:g} GiB one call may set aside "
            f"(MAX_TRIAL_BYTES); lower {name}.", limit="MAX_TRIAL_BYTES")
    return trials


#: The largest prediction ``tau ||X||`` of a MEG trial allowed: its squared
#: error (1e300) stays finite.
MAX_PREDICTION = 1e150


def check_target_range(y):
    """Refuse targets beyond ``MAX_TRACE``, whose squared errors leave double precision.

    Returns the largest absolute target.
    """
    largest_target = float(np.max(np.abs(y), initial=0.0))
    if largest_target > MAX_TRACE:
        raise ValueError(
            f"targets up to {largest_target:.3g} exceed {MAX_TRACE:g}: their squared "
            "errors leave double precision; rescale them (trace='auto' then adapts).")
    return largest_target


def check_meg_step(learning_rate, trace, y, *, instance_norm=2.0):
    """Refuse a learning rate, trace or targets whose MEG steps overflow.

    A trial changes the exponent by ``2 eta (yhat - y) / tau X_t`` with
    ``|yhat| <= tau ||X_t||``, so ``2 eta (||X|| + max |y| / tau) ||X||``
    bounds every step (``||X_t|| = 2`` for a pair, ``u u^T``); it must stay
    below :data:`MAX_STEP` (checked in logarithms: the bound itself may not
    be representable). Targets beyond ``MAX_TRACE`` are refused too (their
    squared errors would overflow). Returns ``(learning_rate, trace)`` as
    floats.
    """
    learning_rate = check_positive(learning_rate, "learning_rate")
    trace = check_trace(trace)
    largest_target = check_target_range(y)
    norm = float(instance_norm)
    # |yhat| <= tau ||X||: its squared error must stay finite (1e150 ** 2 = 1e300)
    if norm > 0 and math.log(trace) + math.log(norm) > math.log(MAX_PREDICTION):
        raise ValueError(
            f"instances up to norm {norm:.3g} under a kernel of trace {trace:.3g} give "
            f"predictions up to {trace * norm:.3g}, whose squared errors leave double "
            f"precision (at most {MAX_PREDICTION:.0e}): rescale the instances or the "
            "trace.")
    if norm > 0:
        log_step = (math.log(2.0 * learning_rate) + math.log(norm)
                    + math.log(norm + largest_target / trace))
        if log_step > math.log(MAX_STEP):
            raise ValueError(
                f"learning_rate={learning_rate:.3g} with targets up to "
                f"{largest_target:.3g} (trace {trace:.3g}) allows exponent steps of "
                f"e^{log_step:.1f} per trial, beyond {MAX_STEP:.0e}: the kernel would "
                "leave double precision. Use a smaller learning rate (0.5 is "
                "bound-optimal) or targets in the kernel's units (squared distances "
                "are at most 2 * trace).")
    return learning_rate, trace


def _first_odd_label(labels):
    """Return ``"; row r holds v"`` for the first label that is no number, else ``""``."""
    for row, value in enumerate(labels.tolist()):
        if isinstance(value, (str, bytes)) or value is None or (
                isinstance(value, float) and math.isnan(value)):
            return f"; row {row} holds {value!r}"
    return ""


def check_pair_labels(labels, pairs, *, name="y"):
    """Pair labels as floats ``+1`` (similar) / ``-1`` (dissimilar), one per pair.

    The one check of pair labels for every learner. Accepted encodings:
    ``+1`` / ``-1``, ``1`` / ``0`` and ``True`` / ``False`` (similar /
    dissimilar), as ints, floats or bools; ``None`` means every pair is
    similar. A column vector of shape (n, 1) is flattened.

    Parameters
    ----------
    labels : array-like of shape (n_pairs,) or None
        The labels.
    pairs : array-like of int, shape (n_pairs, 2), or int
        The pairs the labels belong to (validated object indices), or just
        their number ``n_pairs`` (no check of pairs of an object with
        itself then).
    name : str, default="y"
        The argument's name, for the messages.

    Returns
    -------
    ndarray of shape (n_pairs,)
        ``+1.0`` / ``-1.0``.

    Raises
    ------
    ValueError
        Wrong shape, a label outside one of the encodings (e.g. ``2``,
        ``"yes"``, NaN, or ``-1`` mixed with ``0``), or a dissimilar pair of
        an object with itself.
    """
    if isinstance(pairs, (int, np.integer)) and not isinstance(pairs, bool):
        n_pairs, pairs = int(pairs), None
    else:
        pairs = np.asarray(pairs)
        n_pairs = len(pairs)
    if labels is None:
        return np.ones(n_pairs)
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.shape != (n_pairs,):
        raise ValueError(f"{name} must have shape ({n_pairs},), one label per pair, "
                         f"got shape {labels.shape}.")
    try:
        values = set(np.unique(labels).tolist()) if labels.dtype != object else set(
            labels.tolist())
    except TypeError:
        values = {"<mixed types>"}
    if labels.dtype == object and all(isinstance(v, (int, float, np.number))
                                      for v in values):
        labels = labels.astype(float)  # e.g. a pandas column of Python numbers
    numeric = labels.dtype == bool or np.issubdtype(labels.dtype, np.number)
    if numeric and labels.dtype == bool:
        signs = np.where(labels, 1.0, -1.0)
    elif numeric and values <= {0, 1}:  # 1 / 0 (and all-1 or all-0)
        signs = np.where(labels == 1, 1.0, -1.0)
    elif numeric and values <= {1, -1}:
        signs = labels.astype(float)
    else:
        shown = sorted(map(str, values))
        raise ValueError(
            f"{name} must hold +1 (similar) or -1 (dissimilar) pair labels (or 1 / 0, "
            f"True / False), got {', '.join(shown[:5])}{', ...' if len(shown) > 5 else ''}"
            f"{' (dtype ' + str(labels.dtype) + ')' if not numeric else ''}"
            f"{_first_odd_label(labels)}.")
    if pairs is not None and pairs.ndim == 2 and len(pairs):
        loops = (pairs[:, 0] == pairs[:, 1]) & (signs < 0)
        if np.any(loops):
            rows = np.flatnonzero(loops)
            raise ValueError(f"{name}[{rows[0]}] labels a pair of an object with itself "
                             f"dissimilar ({rows.size} such pair(s), rows "
                             f"{', '.join(map(str, rows[:5]))}{', ...' if rows.size > 5 else ''})"
                             ": its distance is always 0.")
    return signs
