"""Object-level estimators: ``X`` holds object ids, the kernel comes from elsewhere.

:class:`KernelDistances` turns object ids into their distances to the fitted
objects under a kernel given or learned from side information (distance
examples or pair constraints), or under the user's own distances (a matrix
or a pair table, with missing entries where the user has none). As the first
step of a Pipeline it feeds scikit-learn's own
``KNeighborsClassifier(metric="precomputed")``, so the paper's whole
evaluation, and the baseline without learning, are one ``GridSearchCV`` over
the kernel learner's parameters and ``n_neighbors``, with the splits over the
objects::

    pipe = Pipeline([
        ("distances", KernelDistances(learner=MEGKernelRegressor(), pairs=pairs,
                                      targets=sq_distances, given_squared=True)),
        ("knn", KNeighborsClassifier(metric="precomputed")),
    ])
    GridSearchCV(pipe, [{"distances__learner": [None]},  # the observed distances
                        {"distances__learner__learning_rate": [0.5, 5.0]}],
                 cv=ShuffleSplit(10, test_size=0.5)).fit(object_ids, labels)

The labels never reach the kernel learner: it sees only ``pairs`` and
``targets``. Its kernel does not depend on the split either, so it is learned
once per parameter setting and reused by every split: an in-process cache
keyed by the learner's module, class, parameters and data, and, with
``memory=`` (a folder), an on-disk cache that processes share, so that
``n_jobs=2`` learns each kernel once too. A stream of ``(pairs, targets)``
chunks (``pairs=`` a callable) is learned with the learner's ``partial_fit``,
its scale fixed by a first pass over the whole stream.

``KernelDistances`` asks its learner for kernels through the kernel-learner
protocol of :class:`KernelLearnerMixin` (``learn_kernel``, ``check_stream``,
``learn_kernel_stream``, ``targets_are_distances``,
``learns_from_distances``; see :mod:`megkernel._kernel_learner`), never by
reading its parameters: a learner of one's own plugs in by subclassing the
mixin.
"""

from __future__ import annotations

import inspect
import os

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context, clone
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._kernel_learner import (
    PROTOCOL_METHODS,
    KernelLearnerMixin,
    LearnedKernel,
    PairStream,
    declared_objects_of,
)
from ._numerics.extension import extension_basis, place_objects, placed_sq_distances
from ._numerics.spectral import check_symmetric, kernel_distance_block, kernel_pair_sq_distances
from ._numerics.validation import (
    SelfDistanceError,
    refuse_bad_distances,
    row_name,
    squares_of_distances,
)
from ._objects_cache import CACHE_BYTES as CACHE_BYTES  # set it in _objects_cache
from ._objects_cache import (
    _cached_entry,
    _key,
    _read_only,
    cache_info,
    clear_cache,
    expected_ids,
)
from ._objects_given import (
    _UNKNOWN_HINT,
    _UNKNOWN_HINT_GIVEN,
    MISSING_DISTANCE,
    SELF_DISTANCE_ROUNDING,
    GivenSquaredDistances,
    _as_float,
    _converted,
    _given_matrix,
    _ids,
    _pair_index,
    _pair_values,
    _shown,
    _table_matrix,
    _user_kernel_scale,
    refuse_self_distances,
    round_off_self_distances,
)
from ._objects_new import (
    _known,
    check_units,
    matched_unit,
    new_object_table,
    reference_sq_distance,
    rows_of_new,
    unit_factor,
)
from ._objects_paths import cross_fitted_block, path_evidence
from ._objects_stream import _pair_stream, _scan_stream
from ._objects_verdict import (
    KEEP_GIVEN_MODES,
    UNLABELLED_MODE,
    WEAK_KERNEL_MODE,
    class_labels,
    neighbour_verdict,
    observed_distances_known,
    scale_map,
    verdict_message,
    verdict_rows,
    with_given,
)
from ._pair_estimator import (
    ObjectIndex,
    ShortReprMixin,
    _id_vector,
    check_id_kinds,
    unchanged_on_error,
    without_missing_distances,
)
from ._warnings import NoImprovementWarning, warn_user

__all__ = ["KernelDistances", "KernelLearnerMixin", "LearnedKernel", "MISSING_DISTANCE",
           "PairStream", "cache_info", "clear_cache"]


def _unset_message(name):
    """Return the deprecation of a learner's targets read without ``given_squared``."""
    return (
        f"KernelDistances: given_squared is not set, so {name} read its targets as "
        "squared distances, as it does alone. From megkernel 0.4 the default, "
        "given_squared=False (plain distances, as for the given distances without a "
        "learner), will cover a learner's targets too: these would be read as plain "
        "distances and squared. Set given_squared=True if they are squared distances "
        "(this result), or given_squared=False if they are plain distances (the learner "
        "is told, and learns from their squares).")


_NEW_HINT = (" An object the fit never saw is placed from its distances to known "
             "objects: give them as new_pairs= and new_distances=.")


def _warn_single_partners(new_ids, rows):
    """Warn of new objects whose distances are all to one known object (none kept)."""
    single = [key for key, at in zip(new_ids, rows) if np.unique(at).size < 2]
    if not single:
        return
    warn_user(
        f"KernelDistances: {len(single)} of the {len(new_ids)} new objects placed (the "
        f"first: {_shown(single[0])!r}) have distances to only one known object. One "
        "distance does not say where an object lies (the placement's unknown norm "
        "absorbs it): each is placed at the known objects' centre, whoever its partner, "
        "so its neighbours are the kernel's guess, the same for all of them. Give each "
        "new object distances to two or more known objects (learner=None serves the "
        "given distance itself).", UserWarning)


_NEW_FIT_HINT = (" The objects of new_pairs are placed by transform and predict, never "
                 "fitted: fit on ids of objects_ (in a search, split those and predict "
                 "the new ones after).")


def _new_fit_hint(new_pairs, index, fit_objects):
    """Return :data:`_NEW_FIT_HINT` where the first id ``fit`` cannot find is one of new_pairs'."""
    if new_pairs is None or callable(new_pairs):
        return ""
    try:
        keys = np.asarray(fit_objects, dtype=object).ravel().tolist()
        unknown = next((key for key in keys if index.row_or_missing(key) < 0), None)
        table = (new_pairs.to_numpy(dtype=object) if isinstance(new_pairs, pd.DataFrame)
                 else np.asarray(new_pairs, dtype=object))
        named = set(table.ravel().tolist())
    except (TypeError, ValueError):  # ids the messages of fit explain themselves
        return ""
    return _NEW_FIT_HINT if unknown is not None and unknown in named else ""


def _check_kernel_learner(learner):
    """Refuse a learner without the kernel-learner protocol, naming what it lacks."""
    missing = [name for name in PROTOCOL_METHODS if not callable(getattr(learner, name, None))]
    if missing:
        name = type(learner).__name__
        raise ValueError(
            f"KernelDistances asks its learner for a kernel through the kernel-learner "
            f"protocol, which {name} lacks ({', '.join(missing)}): make {name} a "
            "subclass of megkernel.objects.KernelLearnerMixin (whose defaults fit a "
            "clone and read its kernel_ and objects_), or implement these methods.")


def _checked_kernel(learned, learner, method):
    """Return the ``LearnedKernel`` a learner's ``method`` returned, shapes checked."""
    try:
        kernel, objects, *weak = learned
        if len(weak) > 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{type(learner).__name__}.{method} must return a LearnedKernel "
                         f"(kernel, objects[, weak]), got {type(learned).__name__}.") from None
    shape, n_objects = np.shape(kernel), len(np.asarray(objects).reshape(-1))
    if shape != (n_objects, n_objects):
        raise ValueError(f"{type(learner).__name__}.{method} returned a kernel of shape "
                         f"{shape} for {n_objects} objects; it must be (n_objects, "
                         "n_objects), its rows the objects.")
    return LearnedKernel(kernel, objects, bool(weak[0]) if weak else False)


def _one_class_each(fit_objects, rows, labels):
    """Refuse an object fitted twice with two class labels (which would count depends on order)."""
    rows = np.asarray(rows)
    codes = np.unique(np.asarray(labels), return_inverse=True)[1].ravel()
    order = np.lexsort((codes, rows))
    same_row = rows[order][1:] == rows[order][:-1]
    clash = same_row & (codes[order][1:] != codes[order][:-1])
    if clash.any():
        where = order[1:][clash][0]
        raise ValueError(
            f"Object {fit_objects[where]!r} is fitted more than once with different class "
            "labels; give each object one label (keep_given='paths' and 'auto' read an "
            "object's class off its label).")


def _with_copies(block, copies):
    """``block`` over distinct objects expanded to repeated ones (copies at 0)."""
    expanded = block[np.ix_(copies, copies)]
    expanded[copies[:, None] == copies[None, :]] = 0.0
    return expanded


def _check_pair_table(pairs, targets, learner):
    """Refuse a distance matrix given as ``pairs``, and a learner of distances without targets.

    Checked before the learner sees them, in the terms of ``KernelDistances``.
    """
    shape = np.shape(pairs) if isinstance(pairs, (np.ndarray, pd.DataFrame)) else None
    if shape is not None and len(shape) == 2 and shape[1] != 2:
        square = " (a square matrix: give it as distances=)" if shape[0] == shape[1] else ""
        raise ValueError(f"pairs must be a table of object pairs of shape (n_pairs, 2), got "
                         f"shape {shape}{square}.")
    if learner is not None and targets is None and learner.learns_from_distances():
        raise ValueError(f"{type(learner).__name__} learns from distances: give targets= "
                         "(the pairs' observed distances), or the matrix as distances=.")


def _explain_refused_table(pairs, targets, learner, kind, error):
    """Refuse, in the terms of ``KernelDistances``, a pair table that its learner refused.

    Its ``pairs`` and ``targets`` as the user gave them (NaN rows included,
    so rows are named as written): a missing id, ids of several kinds, or
    an id beyond the learner's declared objects, named by its row and column
    in ``pairs`` (the learner would call them ``X``); where the learner's
    refusal ``error`` is of a distance of an object to itself
    (:class:`SelfDistanceError`), that distance, named as without a learner
    (the learner would name its own row and squared value). Called when the
    learner refused the table, so a table it takes costs no second pass.
    A refusal of the learner's parameters (scikit-learn's
    ``InvalidParameterError``, a ``TypeError`` too) is left as it is.
    """
    if isinstance(error, TypeError):
        return
    _check_pair_ids(pairs, learner)
    if (not isinstance(error, SelfDistanceError) or targets is None or callable(pairs)
            or not learner.targets_are_distances(targets)):
        return
    values = (pairs.to_numpy(dtype=object) if isinstance(pairs, pd.DataFrame)
              else np.asarray(pairs, dtype=object))
    y = _as_float(targets, "targets")
    if values.ndim == 2 and values.shape[1] == 2 and y.shape == (len(values),):
        refuse_self_distances(values, targets, y, values[:, 0] == values[:, 1], kind=kind)


def _check_pair_ids(pairs, learner):
    """Refuse a missing id, ids of several kinds, or an id beyond the learner's ``objects``."""
    check_id_kinds(pairs, name="pairs")
    own = declared_objects_of(learner)
    if own is None or callable(pairs):
        return
    frame = isinstance(pairs, pd.DataFrame)
    try:
        index = ObjectIndex(own)
        values = pairs.to_numpy(dtype=object) if frame else np.asarray(pairs, dtype=object)
    except (TypeError, ValueError):
        return  # the learner's own message explains such objects or pairs
    if values.ndim != 2:
        return
    for position, key in enumerate(values.ravel().tolist()):
        if index.row_or_missing(key) < 0:
            i, j = divmod(position, values.shape[1])
            where = (f"row {row_name(pairs, i)}, column {pairs.columns[j]!r}" if frame
                     else f"row {i}, column {j}")
            raise ValueError(
                f"pairs names the object {_shown(key)!r} ({where}), which is not one of "
                f"the {len(index)} objects {type(learner).__name__} declares: list "
                "every object of the table in the learner's objects, or leave that row "
                "out.")


def _without_missing(learner, pairs, targets, *, warn=True, kind="distance"):
    """Drop the rows whose distance is NaN (a missing pair), for a learner of distances.

    The one rule of a NaN distance, with or without a learner: a missing
    pair, left out with a ``UserWarning`` counting them (``warn=False``: a
    second reading of the same table). Text, an infinite or a negative
    distance (``kind``: as the user's convention names it) in the targets is
    refused, named by its row as given.
    """
    if targets is None:
        return pairs, targets
    try:
        values = np.asarray(targets, dtype=float)
    except (TypeError, ValueError):
        if learner.targets_are_distances(targets):
            _as_float(targets, "targets")  # names the row that is no number
        return pairs, targets
    if values.ndim != 1:
        return pairs, targets  # (a shape the learner's validation explains)
    if not learner.targets_are_distances(values[~np.isnan(values)]):
        return pairs, targets  # labels: a NaN is no label, refused by the learner by its row
    targets = _self_pairs_rounded(pairs, targets, values)
    # before the missing pairs are left out, so that a list's positions name its rows
    refuse_bad_distances(np.asarray(targets, dtype=float), targets, name="targets",
                         kind=kind)
    if not np.isnan(values).any():
        return pairs, targets
    return without_missing_distances(pairs, targets, who="KernelDistances", warn=warn)


def _self_pairs_rounded(pairs, targets, values):
    """Return the targets with round-off self-distances set to 0, as without a learner.

    A melted distance matrix lists each object with itself at ``1e-8`` or
    ``-2e-16`` (``sqrt(2 - 2 cos)``, ``1 - cos``); the table's own reading
    takes them as 0 (:func:`round_off_self_distances`), and the learner is
    taught the same.
    """
    known = np.abs(values[~np.isnan(values)])
    if not np.any((known > 0) & (known <= SELF_DISTANCE_ROUNDING * known.max(initial=0.0))):
        return targets  # nothing small enough: no pass over the ids
    ends = np.asarray(pairs, dtype=object) if not callable(pairs) else None
    if ends is None or ends.shape != (len(values), 2):
        return targets  # (a shape the learner's validation explains)
    self_pair = ends[:, 0] == ends[:, 1]
    scale = np.abs(values[np.isfinite(values) & ~self_pair]).max(initial=0.0)
    rounding = self_pair & round_off_self_distances(values, scale)
    if not rounding.any():
        return targets
    if isinstance(targets, pd.Series):
        return targets.mask(rounding, 0.0)
    rounded = values.copy()
    rounded[rounding] = 0.0
    return rounded


def _accepts_squared(method):
    """Whether a protocol method takes the ``squared`` keyword (a learner of one's own may not)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return True
    return "squared" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _targets_of_table(targets, given_squared):
    """Return a learner's targets as squared distances, read by ``given_squared``.

    (Text, infinite and negative values were refused by their rows as given,
    by :func:`_without_missing`.)
    """
    values = _as_float(targets, "targets")
    if values.ndim != 1:
        return targets  # the learner's validation explains the shape
    return values if given_squared else squares_of_distances(values, "targets (distances)")


class KernelDistances(ShortReprMixin, TransformerMixin, BaseEstimator):
    """Object ids -> distances to the fitted objects under a kernel or given distances.

    The distances come from one of:

    - a fixed ``kernel``;
    - a kernel ``learner`` with its side information: arrays ``pairs`` and
      ``targets``, a stream of chunks (``pairs`` a callable), or the observed
      entries of ``distances``;
    - the user's own distances, without learning: a ``distances`` matrix, or
      ``pairs`` and ``targets`` with no learner (the baseline a learned
      kernel must beat, in the same Pipeline and the same grid:
      ``{"distances__learner": [None, MEGKernelRegressor()]}``).

    :meth:`fit` remembers the ids it is given (the training objects of a
    split); :meth:`transform` returns, for each id, its distances to them
    (``sqrt(K_ii + K_jj - 2 K_ij)`` under a kernel): the input of
    ``KNeighborsClassifier(metric="precomputed")`` (or any estimator taking
    precomputed distances), with the test objects' own distances included,
    so ``weights="distance"`` works under cross-validation.

    **Missing distances.** A pair of the user's distances nobody measured
    (NaN, or absent from the pair table) is returned as
    :data:`MISSING_DISTANCE` (``1e300``): finite, because scikit-learn's
    ``metric="precomputed"`` refuses ``inf``, and beyond every given distance
    (larger ones are refused), so a missing pair is never a nearest neighbor
    while ``k`` measured ones exist, and weighs ``1e-300`` under
    ``weights="distance"``. An object with fewer than ``k`` measured
    distances to the training objects gets missing ones among its ``k``
    (sklearn breaks the tie by column order).

    **The learned kernel is learned once** per learner parameters and data,
    whatever the split: an in-process cache (:func:`cache_info`; threads
    wanting the same kernel wait for the first) and, with ``memory``, an
    on-disk cache shared by processes. Without ``memory``, every process of
    ``n_jobs > 1`` (joblib's loky backend, Dask) learns each kernel again,
    and says so (a ``UserWarning`` once per worker process): measured by
    ``benchmarks/bench_search.py`` (200 objects, 3 learning rates,
    ``GridSearchCV`` of 30 fits), ``n_jobs=2`` took 1.6x the time of
    ``n_jobs=1`` without ``memory`` (7 kernels learned instead of 3) and
    0.9x with it (3 learned). Give ``memory`` (a folder) for parallel
    searches. The splits of one setting need the same kernel, so its
    learning is not split across processes: ``n_jobs`` speeds up the rest.

    Parameters
    ----------
    kernel : array-like of shape (n_objects, n_objects), default=None
        A fixed symmetric PSD kernel over the objects, at any scale: by the
        rule of :mod:`megkernel.neighbors` its distances are computed at a
        power of four near its largest entry (finite anywhere in the float
        range), and an indefinite kernel is named in a ``UserWarning``.
    learner : estimator, default=None
        A kernel learner instance (:class:`~megkernel.MEGKernelRegressor`,
        :class:`~megkernel.DefiniteBoostKernel`, or one of your own): asked
        for its kernel through the kernel-learner protocol only
        (:class:`~megkernel.objects.KernelLearnerMixin`: ``learn_kernel``
        fits a clone, never the learner in place). A learner whose ``fit``
        sets ``kernel_`` and ``objects_`` plugs in by subclassing
        ``KernelLearnerMixin``; one without the protocol is refused, naming
        what it lacks. Its parameters are searchable as
        ``learner__<name>``; ``None`` (searchable too) means the given
        distances themselves.
    distances : array-like or DataFrame of shape (n_objects, n_objects), default=None
        The user's distances between the objects, NaN where missing (one of
        ``distances[i, j]``, ``distances[j, i]`` suffices; when both are
        given they must agree). A DataFrame's index names the objects (its
        columns must hold the same ids, in any order). Squared or not, as
        ``given_squared`` says. With a ``learner``, its training pairs are the
        observed pairs of distinct objects (each once, row by row of the
        upper triangle) and its targets their squared distances (for learners
        whose targets are squared distances, as
        :class:`~megkernel.MEGKernelRegressor`).
    pairs : array-like of shape (n_pairs, 2), or callable, default=None
        Pairs of objects (ids or indices), e.g. a DataFrame's two id columns:
        the learner's training pairs, or, without a learner, the pairs whose
        distances ``targets`` gives (repeated pairs, in either order, are
        averaged; pairs not given are missing). With a learner that has
        ``partial_fit``, a callable returning an iterable of ``(pairs_chunk,
        targets_chunk)`` streams the side information: each fit replays it
        (so it must give the same chunks at every call, and be picklable for
        ``n_jobs > 1``). A first pass checks the chunks; the learner's
        ``learn_kernel_stream`` then fixes its scale over the whole stream
        (for :class:`~megkernel.MEGKernelRegressor`: its objects,
        ``trace="auto"`` and low-rank ``learning_rate="auto"``, as its
        one-shot on-line fit on the chunks' concatenation would) and runs
        ``partial_fit`` chunk by chunk, over the whole stream once per
        ``n_epochs`` of the learner (in the stream's order: ``shuffle=True``
        is refused).
    targets : array-like of shape (n_pairs,), default=None
        The pairs' distances (NaN where missing: left out, counted in a
        ``UserWarning``), squared or not as ``given_squared`` says; with a
        learner of pair labels (DefiniteBoost), its labels (``None``: all
        similar).
    objects : array-like of shape (n_objects,), default=None
        Ids of the rows of ``kernel`` or ``distances`` (default ``0..n-1``),
        or, for a pair table without a learner, all the objects (default: the
        distinct ids of the pairs, sorted, or ``0..max`` for integer indices).
        With a ``learner``, its ``objects_`` are used.
    given_squared : bool or None, default=None
        Whether the user's distances are squared distances: the one switch of
        a Pipeline's convention, for every distance it is given
        (``distances``, ``targets``, a stream's chunks, ``new_distances``).
        ``False``: plain distances, as most users have them; ``True``:
        squared. A learner of distances is given them as squared distances
        (plain ones squared) and told so through the kernel-learner
        protocol (``learn_kernel(..., squared=True)``), whatever its own
        ``squared`` or ``y_kind``, so the learner and the no-learner baseline
        read one table alike. ``None`` (not set): plain, except a learner's
        ``targets`` (or stream), which are read as the learner reads them
        alone (:class:`~megkernel.MEGKernelRegressor` by its ``squared``,
        squared distances by default), with a ``FutureWarning`` where that
        reads them as squared: from megkernel 0.4 the default will be
        ``False`` for them too.
    squared : bool, default=False
        Return squared distances from :meth:`transform` and ``distances_``.
    keep_given : {"auto", "never", "where_given", "first", "blend", "paths"}, default="auto"
        With a ``learner`` taught distances (``pairs`` and ``targets`` of a
        learner of distances, or ``distances``), whether the distances it
        was given are kept beside its kernel. ``"never"``: the learned
        kernel's distances everywhere. ``"where_given"``: the given distance
        for every pair that has one (the mean of repeats, in the learned
        kernel's units as the learner reads its targets), the learned one
        for the others. ``"first"``: as ``"where_given"``, with the learned
        distances placed beyond every given one (the largest given squared
        distance added), so that a measured pair is nearer than any other:
        the observed distances' neighbours, completed by the kernel.
        ``"blend"``: the learned squared distances mapped onto the given
        ones' scale (the isotonic regression of the given squared distances
        on the learned ones over the given pairs, through the origin), and
        for a pair that has a given distance the mean of the two: where the
        kernel explains little, its distances shrink towards the typical
        given one and rarely outrank a measured pair; where it explains
        much, it re-ranks the measured pairs too. ``"paths"`` (needs the
        class labels of :meth:`fit`): an object's chance of each class from
        all its given distances at once (naive Bayes): the chance of one
        class of a given pair read off its distance by a decreasing isotonic
        regression over the labelled given pairs, weighed for its partner's
        class where the partner is a fit object, and for the classes its
        partner's own labelled partners imply where it is not; the squared
        distance to a fit object is ``-log`` of the object's chance of that
        object's class, the learned kernel ordering the objects of one class,
        and objects without a given partner come after all others, ordered
        by the learned kernel. Its distances are class chances, not a
        metric (nor symmetric): they serve a neighbours classifier.
        Where few pairs are given it weighs all of an object's measured
        partners, where the given distances' 1-NN reads only the nearest.
        ``"auto"`` decides at :meth:`fit` from the class labels a Pipeline
        passes: leave-one-out 1-NN accuracy on the fit objects under each,
        a later mode in this list replacing the kept one only when it is
        more accurate by more than one standard error of their paired
        difference (``verdict_`` holds the figures, ``keeps_given_`` the
        choice); without labels, ``"blend"``: a score without labels can
        only judge a mode by how it reproduces the given distances, which
        cannot tell where the kernel ranks neighbours better than they do;
        but ``"first"`` where the learner found that its kernel explains
        little of its held-out pairs (:class:`~megkernel.LearnedKernel`'s
        ``weak``; ``MEGKernelRegressor`` then warns so).
        Where few pairs are given, a learned kernel can rank an object's
        neighbours worse than the distances it was taught (it fits all the
        pairs, mostly the large distances; 1-NN needs the small ones): the
        given distances then carry the nearest neighbours, the kernel the
        pairs nobody measured. See the user guide's conventions, "Labels
        stay out of the kernel".
    memory : str, path, joblib.Memory or None, default=None
        On-disk cache of learned kernels: a folder (``~`` expanded, made
        absolute), or a ``joblib.Memory`` whose ``location`` is one
        (``joblib.Memory(None)``: no on-disk cache), shared by the
        processes of a parallel search: each kernel is learned once
        (processes wanting the same kernel wait for the first, at most
        ten minutes, then a ``TimeoutError`` names the lock file and its
        holder) and read from disk by the others. Keyed like the
        in-process cache: the learner's module, class and parameters,
        megkernel's version, and the data. Stored in its subfolders
        ``megkernel_kernels`` (per kernel a JSON header with the key, the
        shapes and the ids, and ``.npy`` arrays: no pickle) and
        ``megkernel_locks`` (lock files, never followed if a link). Keep
        the folder private to your user: whoever can write there can make
        your searches use a kernel of their choosing. Nothing read from it
        is trusted, though: nothing there can run code, and an entry that
        is not a valid one (another key or ids, shapes, a kernel that is
        not finite, symmetric and PSD, torn or corrupted files) is
        discarded with a ``UserWarning`` naming the file and learned
        again. Ids that are neither a numeric or string array nor str,
        int, float, bool or tuples of them cannot be stored without
        pickle: such kernels stay in the in-process cache (with a
        warning). A folder that cannot be written is read: its kernels are
        used, the others learned without being stored (a ``UserWarning``
        once per folder). ``None``: the in-process cache only.
    new_pairs : array-like of shape (n_new_pairs, 2), default=None
        Objects the fit never saw, each paired with known objects (ids of
        ``objects_``), e.g. a DataFrame's two id columns: :meth:`transform`
        places an id that is not among ``objects_`` from its distances
        ``new_distances`` to the known objects it is paired with (any of them,
        not all are needed), by the out-of-sample extension of the kernel
        (:mod:`megkernel._numerics.extension`; without a kernel, the user's
        own distances, its given distances are its distances and the others
        missing). Rows of two known or two new ids are left out. Set it
        with the new objects' table before ``predict`` (``set_params
        (<step>__new_pairs=..., <step>__new_distances=...)``, no refit);
        it changes no fitted kernel and is not part of the cache key (given
        at :meth:`fit`, the kernel's eigendecomposition the placement needs
        is done there; set after, at the first :meth:`transform`). When
        ``keeps_given_``, a new object's given distances are kept too, as
        the known objects' are. See the user guide's page "New objects
        after the fit".
    new_distances : array-like of shape (n_new_pairs,), default=None
        The distances of ``new_pairs`` (NaN where missing), squared or not
        as ``given_squared`` says, in the fit's units: those of the
        side information's distances (a learner's targets are read by its
        ``squared_distances_of``) or of the fixed kernel. New distances whose
        median (over the table, whichever ids a call asks for) is more than
        10 times (in distance) from the fit's typical distance warn, more
        than 100 times are refused (other units). A learner of pair labels
        gives the kernel no units: the table's median is then taken as the
        kernel's typical distance.

    Attributes
    ----------
    kernel_ : ndarray of shape (n_objects, n_objects) or None
        The kernel (given, or learned from the side information), read-only
        (shared with the cache); ``None`` for the user's own distances.
    objects_ : ndarray of shape (n_objects,)
        Ids of its rows (read-only).
    fit_objects_ : ndarray of shape (n_fit,)
        The ids given to :meth:`fit` (the columns of :meth:`transform`).
    distances_ : ndarray of shape (n_objects, n_objects)
        All pairwise distances between ``objects_`` (a new array at each
        access), squared if ``squared``, missing ones as
        :data:`MISSING_DISTANCE`.
    n_features_in_ : int
        Always 1 (an object id per row).
    keeps_given_ : {"never", "where_given", "first", "blend", "paths"}
        How the distances the learner was taught are kept beside its kernel
        (``keep_given``, or what ``"auto"`` chose at :meth:`fit`); "never"
        without such distances.
    verdict_ : dict or None
        With a learner and class labels ``y`` in :meth:`fit`: ``learned`` and
        ``observed``, the leave-one-out 1-NN accuracies on the fit objects
        (at most 2000 of them, a seeded sample beyond) under the learned
        kernel and under the observed distances it was given (NaN when its
        targets are not distances, e.g. pair labels, or come as a stream),
        ``n_objects``, ``sampled``, ``z`` (their paired difference in standard
        errors, positive when the learned kernel is better) and ``worse``
        (``z < -2``: a :class:`~megkernel.NoImprovementWarning` said so).
        ``None`` otherwise.

    See Also
    --------
    megkernel.objects.cache_info : Hits and misses of the learned-kernel cache.
    megkernel.kernel_to_distances : All distances of a kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> from megkernel import KernelDistances
    >>> points = np.array([[0.0], [0.1], [1.0], [1.1]])
    >>> pipe = make_pipeline(KernelDistances(kernel=points @ points.T + 1.0,
    ...                                      objects=["a", "b", "c", "d"]),
    ...                      KNeighborsClassifier(1, metric="precomputed"))
    >>> pipe.fit(["a", "c"], [0, 1]).predict(["b", "d"])
    array([0, 1])

    The user's own distances, one of them missing:

    >>> D = np.array([[0.0, 0.1, 1.0, np.nan],
    ...               [0.1, 0.0, 0.9, 1.0],
    ...               [1.0, 0.9, 0.0, 0.1],
    ...               [np.nan, 1.0, 0.1, 0.0]])
    >>> step = KernelDistances(distances=D, objects=["a", "b", "c", "d"])
    >>> step.fit(["a", "c"]).transform(["d"]).tolist()
    [[1e+300, 0.1]]

    An object the fit never saw, placed from its distances to two known ones:

    >>> step = KernelDistances(kernel=points @ points.T + 1.0, objects=["a", "b", "c", "d"],
    ...                        new_pairs=[["e", "a"], ["e", "c"]],
    ...                        new_distances=[0.9, 0.1])
    >>> step.fit(["a", "b", "c", "d"]).transform(["e"]).round(1)
    array([[0.9, 0.8, 0.1, 0.2]])
    """

    _parameter_constraints: dict = {
        "kernel": ["array-like", None],
        "learner": [HasMethods(["fit"]), None],
        "distances": ["array-like", None],
        "pairs": ["array-like", callable, None],
        "targets": ["array-like", None],
        "objects": ["array-like", None],
        "given_squared": ["boolean", None],
        "squared": ["boolean"],
        "keep_given": [StrOptions({"auto", *KEEP_GIVEN_MODES})],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "new_pairs": ["array-like", None],
        "new_distances": ["array-like", None],
    }

    def __init__(self, *, kernel=None, learner=None, distances=None, pairs=None,
                 targets=None, objects=None, given_squared=None, squared=False,
                 keep_given="auto", memory=None, new_pairs=None, new_distances=None):
        self.kernel = kernel
        self.learner = learner
        self.distances = distances
        self.pairs = pairs
        self.targets = targets
        self.objects = objects
        self.given_squared = given_squared
        self.squared = squared
        self.keep_given = keep_given
        self.memory = memory
        self.new_pairs = new_pairs
        self.new_distances = new_distances

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Remember the objects ``X`` (learning the kernel if there is a learner).

        Everything is validated (and the kernel learned) before the estimator
        changes: on any error it is as before, and a refit replaces all its
        fitted attributes in one step.

        Parameters
        ----------
        X : array-like of shape (n_objects_fit,) or (n_objects_fit, 1)
            Object ids.
        y : array-like of shape (n_objects_fit,), default=None
            Labels never reach the kernel learner. Class labels (as a
            Pipeline passes them) give the verdict ``verdict_``: leave-one-out
            1-NN accuracy on these objects under the learned kernel against
            the observed distances it was given, with a
            :class:`~megkernel.NoImprovementWarning` when the learned kernel
            is worse by more than two standard errors.

        Returns
        -------
        self : object
            The fitted step.
        """
        fit_objects = _ids(X)
        labels = None if self.learner is None else class_labels(
            y, len(fit_objects),
            required_by="keep_given='paths'" if self.keep_given == "paths" else None,
            chooses="keep_given='auto'" if self.keep_given == "auto" else None)
        if isinstance(self.learner, type):  # has fit, but unbound: not a learner
            raise ValueError(
                f"learner must be an estimator instance, e.g. {self.learner.__name__}(), "
                f"not the class {self.learner.__name__}.")
        if self.learner is not None:
            _check_kernel_learner(self.learner)
            if self.keep_given in KEEP_GIVEN_MODES[1:] and not self._teaches_distances():
                raise ValueError(
                    f"keep_given={self.keep_given!r} keeps the distances a learner was "
                    f"taught, but {type(self.learner).__name__} is given none to keep (its "
                    "targets are no distances, or come as a stream): use "
                    "keep_given='auto' or 'never'.")
        kernel, given, objects, matrix, weak = self._source()
        scale = (_user_kernel_scale(kernel, squared=self.squared,
                                    check_psd=self.kernel is not None)
                 if given is None else 1.0)
        index = ObjectIndex(objects)
        try:
            rows = index.rows(fit_objects, hint=_UNKNOWN_HINT if given is None
                              else _UNKNOWN_HINT_GIVEN)
        except ValueError as error:  # the new objects' hint only where it applies
            extra = _new_fit_hint(self.new_pairs, index, fit_objects)
            if not extra:
                raise
            raise ValueError(f"{error}{extra}") from None
        # the given distances, for the verdict (labels) or to keep beside the kernel
        needed = labels is not None or self.keep_given != "never"
        given_sq = self._given_squared_distances(index, matrix) if needed else None
        learned_given = None if given_sq is None else (
            kernel_pair_sq_distances(kernel / scale, given_sq.a, given_sq.b) * scale)
        blend = None if given_sq is None else scale_map(learned_given, given_sq.sq)
        if self.keep_given == "paths" and (labels is None or given_sq is None):
            raise ValueError(
                "keep_given='paths' reads the chance of one class off the given distances "
                "and needs the fit objects' class labels: call fit(ids, y) with labels (a "
                "Pipeline passes them), or use keep_given='auto'.")
        # the graph's evidence only where it may be kept (its blocks cost sparse products)
        paths = None
        if (labels is not None and given_sq is not None
                and self.keep_given in ("auto", "paths")):
            _one_class_each(fit_objects, rows, labels)
            # the learned distances that break its ties, in a unit of the fit
            unit = float(np.max(learned_given)) if learned_given.size else 1.0
            paths = path_evidence(given_sq, rows, labels, learned_unit=unit)
        verdict = (None if labels is None  # (no learner: no labels either)
                   else self._verdict(kernel, scale, rows, labels, given_sq, blend, paths,
                                      start=WEAK_KERNEL_MODE if weak else None))
        if given_sq is None:
            keeps_given = "never"
        elif self.keep_given == "auto":
            unlabelled = WEAK_KERNEL_MODE if weak else UNLABELLED_MODE
            keeps_given = unlabelled if verdict is None else verdict["keep_given"]
        else:
            keeps_given = self.keep_given
        if verdict is not None:
            verdict["keep_given"] = keeps_given
        if verdict is not None and verdict["worse"]:
            warn_user(verdict_message(type(self.learner).__name__, verdict),
                      NoImprovementWarning, problem="KernelDistances")
        with unchanged_on_error(self):  # an interrupt up to the return restores it
            self.__dict__.update(kernel_=kernel, objects_=objects, fit_objects_=fit_objects,
                                 n_features_in_=1, _index=index, _fit_rows=rows,
                                 _given=given, _given_is_squared=bool(self.given_squared),
                                 _kernel_scale=scale, verdict_=verdict,
                                 keeps_given_=keeps_given,
                                 _kept_given=None if keeps_given == "never" else given_sq,
                                 _scale_map=blend,
                                 _paths=paths if keeps_given == "paths" else None,
                                 _extension=None)
            if self.new_pairs is not None and self._given is None:
                self._extension_state()  # the eigendecomposition now, not at the first predict
            return self

    def _verdict(self, kernel, scale, rows, labels, given_sq, blend, paths=None, start=None):
        """Compare by leave-one-out 1-NN on the fit objects.

        The learned kernel, the observed distances, and the learned kernel
        with the given distances kept, compared as squared distances in the
        kernel's units (1-NN ranks them as the distances).
        """
        chosen = verdict_rows(len(rows))
        # each object once (a fit may repeat ids): copies are at distance 0
        unique_rows, copies = np.unique(rows[chosen], return_inverse=True)
        learned = kernel_distance_block(kernel, unique_rows, unique_rows, scale=scale,
                                        squared=True)
        observed, combined = None, None
        if given_sq is not None:
            observed = given_sq.block(unique_rows, unique_rows)
            combined = {mode: _with_copies(with_given(learned, observed, mode,
                                                      given_sq.largest, blend), copies)
                        for mode in KEEP_GIVEN_MODES[1:] if mode != "paths"}
            if paths is not None:  # each row scored by a map that has not seen its pairs
                combined["paths"] = _with_copies(cross_fitted_block(
                    given_sq, rows, labels, unique_rows, learned, paths.learned_unit), copies)
        return neighbour_verdict(
            _with_copies(learned, copies),
            None if observed is None else _with_copies(observed, copies),
            np.asarray(labels)[chosen], sampled=len(chosen) < len(rows), combined=combined,
            start=start)

    def _reading_of_new_distances(self):
        """Return how ``new_distances`` become squared distances: as the fit read its own.

        ``given_squared`` says; unset, a learner taught a pair table (or a
        stream of its chunks) reads the new distances as it read its targets
        (``squared_distances_of``, in the units the kernel was fitted to),
        otherwise they are plain.
        """
        if self.given_squared is not None:
            return (lambda y: y) if self.given_squared else np.square
        streamed = callable(self.pairs) and not hasattr(self.pairs, "__array__")
        if streamed and self.learner is not None:  # its chunks as the learner read them
            of = self._stream_reading()
            return np.square if of is None else of
        of = getattr(self.learner, "squared_distances_of", None)
        if (of is not None and self.distances is None and self.pairs is not None
                and observed_distances_known(self.learner, self.targets)):
            return of
        return np.square

    def _taught_sq_distances(self, targets):
        """Return the squared distances (the kernel's units) the learner was taught, or None.

        Read by ``given_squared``, or, unset, by the learner's own reading
        (``squared_distances_of``); ``None`` for targets that are no
        distances.
        """
        if not self.learner.targets_are_distances(targets):
            return None
        if self.given_squared is None:
            of = getattr(self.learner, "squared_distances_of", None)
            return None if of is None else of(targets)
        values = np.asarray(targets, dtype=float)
        return values if self.given_squared else values**2

    def _teaches_distances(self):
        """Whether the learner is taught distances (a matrix, or a table of them)."""
        if self.distances is not None:
            return True
        streamed = callable(self.pairs) and not hasattr(self.pairs, "__array__")
        return not streamed and observed_distances_known(self.learner, self.targets)

    def _given_squared_distances(self, index, matrix):
        """Return the squared distances the learner was taught, kept beside its kernel.

        ``None`` without a learner, for a stream, or for targets that are no
        distances (pair labels). ``matrix``: the user's validated distances
        with their ids, when the learner was taught them.
        """
        if self.learner is None or not self._teaches_distances():
            return None
        if matrix is not None:
            values, ids = matrix
            sq = values if self.given_squared else values**2
            upper = np.triu_indices(len(values), 1)
            keep = ~np.isnan(sq[upper])
            ids = np.asarray(ids, dtype=object)
            return GivenSquaredDistances(len(index), index.rows(ids[upper[0][keep]]),
                                         index.rows(ids[upper[1][keep]]), sq[upper][keep])
        pairs, targets = _without_missing(self.learner, self.pairs, self.targets, warn=False)
        sq = self._taught_sq_distances(targets)
        if sq is None:
            return None
        pair_rows, _ = _pair_index(pairs, _pair_values(pairs), index.objects)
        return GivenSquaredDistances(len(index), pair_rows[:, 0], pair_rows[:, 1], sq)

    def transform(self, X):
        """Return the distances from the objects ``X`` to the fitted objects.

        Parameters
        ----------
        X : array-like of shape (n_query,) or (n_query, 1)
            Object ids.

        Returns
        -------
        D : ndarray of shape (n_query, n_objects_fit)
            Distances (squared if ``squared``); a missing one of the user's
            distances is :data:`MISSING_DISTANCE`.
        """
        check_is_fitted(self, "objects_")
        ids = _ids(X)
        hint = _UNKNOWN_HINT if self._given is None else _UNKNOWN_HINT_GIVEN
        lookup = self._index.lookup
        is_new = np.array([not _known(lookup, key) for key in ids.tolist()], dtype=bool)
        if not is_new.any():
            return self._block(self._index.rows(ids, hint=hint), self._fit_rows)
        if self.new_pairs is None:
            self._index.rows(ids, hint=hint + _NEW_HINT)  # names the first unknown id
        new_ids = list(dict.fromkeys(ids[is_new].tolist()))
        table = new_object_table(self.new_pairs, self.new_distances, self._index,
                                 read=self._reading_of_new_distances())
        neither = [key for key in new_ids if key not in table.named]
        if neither:
            raise ValueError(
                f"X names {len(neither)} object(s) neither known (objects_) nor given "
                f"distances in new_pairs, e.g. {_shown(neither[0])!r}. {hint}{_NEW_HINT}")
        rows_of_new(table, new_ids)
        out = np.empty((len(ids), len(self._fit_rows)))
        known_at = np.flatnonzero(~is_new)
        if known_at.size:
            out[known_at] = self._block(self._index.rows(ids[known_at]), self._fit_rows)
        new_block = self._new_block(table, new_ids)
        position = {key: i for i, key in enumerate(new_ids)}
        new_at = np.flatnonzero(is_new)
        out[new_at] = new_block[[position[key] for key in ids[new_at].tolist()]]
        return out

    def _new_block(self, table, new_ids):
        """Distances of the new objects ``new_ids`` to the fit objects."""
        rows = [table.rows[key] for key in new_ids]
        given_sq = [table.sq_distances[key] for key in new_ids]
        state = self._extension_state()
        if self._given is not None:  # the user's own distances: the given ones, no more
            check_units(table.median_sq, state["reference"],
                        fitted_units="the given distances")
            position = np.full(len(self.objects_), -1)
            position[self._fit_rows] = np.arange(len(self._fit_rows))
            block = np.full((len(new_ids), len(self._fit_rows)), np.nan)
            for i, (at, sq) in enumerate(zip(rows, given_sq)):
                # repeats averaged in the table's convention, as a known pair's are
                known, first, where = np.unique(at, return_index=True, return_inverse=True)
                values = sq if self._given_is_squared else np.sqrt(sq)
                counts = np.bincount(where)
                mean = np.bincount(where, values) / counts
                mean = np.where(counts > 1, mean if self._given_is_squared else mean**2,
                                sq[first])  # a single distance as given, to the bit
                inside = position[known] >= 0
                block[i, position[known[inside]]] = mean[inside]
            return _converted(block, True, self.squared)
        unit = state["unit"]
        if unit is None:  # no units from the fit: the table's typical distance is the fit's
            unit = matched_unit(table.median_sq, state["reference"])
        else:
            check_units(unit * table.median_sq, state["reference"],
                        fitted_units="squared in the kernel's units")
        if getattr(self, "_paths", None) is None and getattr(self, "_kept_given", None) is None:
            _warn_single_partners(new_ids, rows)
        placement = place_objects(state["basis"], rows, [unit * sq for sq in given_sq])
        sq = placed_sq_distances(state["basis"], placement, self._fit_rows)
        if getattr(self, "_paths", None) is not None:  # their given partners' evidence
            sq = self._paths.new_rows(rows, given_sq, self._fit_rows, sq)
        elif getattr(self, "_kept_given", None) is not None:  # keeps_given_: as known objects
            for i, (at, given) in enumerate(zip(rows, given_sq)):
                known, where = np.unique(at, return_inverse=True)  # repeats: their mean
                mean = np.bincount(where, given) / np.bincount(where)
                kept = np.full(len(self.objects_), np.nan)
                kept[known] = mean  # as the known objects' kept distances: as given
                kept = kept[self._fit_rows]
                sq[i] = with_given(sq[i], kept, self.keeps_given_, self._kept_given.largest,
                                   self._scale_map)
        return sq if self.squared else np.sqrt(sq)

    def _extension_state(self):
        """Return the extension basis, the unit factor and the typical distance (computed once)."""
        if self._extension is not None:
            return self._extension
        if self._given is not None:
            observed = self._given[~np.isnan(self._given)]
            observed = observed if self._given_is_squared else observed**2
            state = {"reference": float(np.median(observed[observed > 0]))
                     if (observed > 0).any() else 0.0}
        else:
            scale = getattr(self, "_kernel_scale", 1.0)
            unit, misfit = self._unit_factor(scale)
            state = {"basis": extension_basis(self.kernel_, sq_noise=misfit),
                     "reference": reference_sq_distance(self.kernel_, scale),
                     "unit": unit}
        self._extension = state
        return state

    def _unit_factor(self, scale):
        """Return the squared kernel units per squared unit of the user's, and the misfit.

        ``(None, None)`` when the side information holds no distances; the
        misfit (root mean square, squared distances in the kernel's units) of
        the kernel to the distances it was learned from sets the placement's
        noise.
        """
        if self.learner is None:
            return 1.0, None  # a fixed kernel: its distances are the user's
        if self.distances is not None:
            matrix, _ = _given_matrix(self.distances, self.objects)
            observed = matrix if self.given_squared else matrix**2
            upper = np.triu_indices(len(matrix), 1)
            keep = ~np.isnan(observed[upper])
            ids = np.asarray(_given_matrix(self.distances, self.objects)[1], dtype=object)
            a = self._index.rows(ids[upper[0][keep]])
            b = self._index.rows(ids[upper[1][keep]])
            observed_sq = observed[upper][keep]
        elif callable(self.pairs) and not hasattr(self.pairs, "__array__"):
            return None, None  # a stream: read once by the learner
        else:
            if self.targets is None:
                return None, None
            pairs, targets = _without_missing(self.learner, self.pairs, self.targets,
                                              warn=False)
            observed_sq = self._taught_sq_distances(targets)
            if observed_sq is None:
                return None, None
            values = np.asarray(pairs, dtype=object)
            a, b = self._index.rows(values[:, 0]), self._index.rows(values[:, 1])
        kernel_sq = kernel_pair_sq_distances(self.kernel_ / scale, a, b) * scale
        unit = unit_factor(kernel_sq, observed_sq)
        if unit is None:
            return None, None
        return unit, float(np.sqrt(np.mean((unit * np.asarray(observed_sq) - kernel_sq) ** 2)))

    def get_feature_names_out(self, input_features=None):
        """Name the output columns: ``distance_to_<id>`` for each fitted object.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Ignored: the columns are named after the fitted objects.

        Returns
        -------
        feature_names_out : ndarray of str objects
            ``distance_to_<id>`` for each id of ``fit_objects_``.
        """
        check_is_fitted(self, "objects_")
        return np.asarray([f"distance_to_{obj}" for obj in self.fit_objects_.tolist()],
                          dtype=object)

    @property
    def distances_(self):
        """All pairwise distances between ``objects_``, as :meth:`transform` gives them."""
        check_is_fitted(self, "objects_")
        everything = np.arange(len(self.objects_))
        block = self._block(everything, everything)
        np.fill_diagonal(block, 0.0)
        return block

    def _block(self, rows, cols):
        if self._given is not None:
            return _converted(self._given[np.ix_(rows, cols)], self._given_is_squared,
                              self.squared)
        kept = getattr(self, "_kept_given", None)
        block = kernel_distance_block(self.kernel_, rows, cols,
                                      scale=getattr(self, "_kernel_scale", 1.0),
                                      squared=self.squared or kept is not None)
        if kept is None:
            return block
        if getattr(self, "_paths", None) is not None:
            block = self._paths.block(rows, cols, block)
        else:
            block = with_given(block, kept.block(rows, cols), self.keeps_given_, kept.largest,
                               self._scale_map)
        # an object is at 0 from itself (no given distance; "first" and "paths" would
        # place it among the others)
        block[np.asarray(rows)[:, None] == np.asarray(cols)[None, :]] = 0.0
        return block if self.squared else np.sqrt(block)

    def _source(self):
        """``(kernel, given, objects, matrix, weak)``: read-only, validated, before any change.

        ``matrix``: the user's validated ``distances`` with their ids, when a
        learner learns from them (the verdict compares with them), else None.
        ``weak``: the learner found that its kernel explains little of its
        held-out pairs (:class:`~megkernel.LearnedKernel`).
        """
        given_by = [name for name in ("kernel", "distances") if getattr(self, name) is not None]
        if self.pairs is not None:
            given_by.append("pairs")
        if len(given_by) > 1:
            raise ValueError(f"Give one source of distances, not {' and '.join(given_by)}: "
                             "kernel (fixed), distances (a matrix), or pairs (a table).")
        if not given_by:
            if self.learner is not None:
                raise ValueError("A learner needs its side information: pairs (and "
                                 "targets), or distances.")
            raise ValueError("Give either kernel (a fixed kernel), distances, or pairs "
                             "and targets (observed distances), with or without a "
                             "learner; got none of them.")
        source = given_by[0]
        if source == "kernel":
            if self.learner is not None:
                raise ValueError("Give either kernel (a fixed kernel) or learner (with "
                                 "pairs and targets), not both.")
            kernel = check_symmetric(self.kernel, name="kernel")
            objects = (np.arange(len(kernel)) if self.objects is None
                       else np.asarray(self.objects) if isinstance(self.objects, np.ndarray)
                       else _id_vector(self.objects))  # ids kept as given, tuples whole
            if len(objects) != len(kernel):
                raise ValueError(f"objects has {len(objects)} ids for a kernel over "
                                 f"{len(kernel)} objects.")
            return _read_only(kernel), None, _read_only(np.array(objects)), None, False
        if callable(self.pairs) and not hasattr(self.pairs, "__array__"):
            kernel, given, objects, weak = self._streamed()
            return kernel, given, objects, None, weak
        if source == "distances":
            matrix, objects = _given_matrix(self.distances, self.objects)
        elif self.learner is not None:
            _check_pair_table(self.pairs, self.targets, self.learner)
            entry = self._learned(self.pairs, self.targets)
            return _read_only(entry.kernel), None, _read_only(entry.objects), None, entry.weak
        else:
            _check_pair_table(self.pairs, self.targets, None)
            matrix, objects = _table_matrix(
                self.pairs, self.targets, self.objects,
                kind=self._given_kind())
        largest = float(np.nanmax(matrix))
        if self.squared and not self.given_squared:
            with np.errstate(over="ignore"):
                largest = largest ** 2 if largest < 1e154 else np.inf
        if not largest < MISSING_DISTANCE / 10:  # overflow to inf included
            raise ValueError(f"The distances (up to {np.nanmax(matrix):.4g}) leave no room "
                             f"for the missing ones ({MISSING_DISTANCE:g}): rescale them.")
        if self.learner is None:
            return None, _read_only(matrix), _read_only(np.array(objects)), None, False
        kernel, given, objects, weak = self._learned_from_matrix(matrix, objects)
        return kernel, given, objects, (matrix, objects), weak

    def _learned(self, pairs, targets, objects=None):
        """Return the learner's kernel of a pair table (``objects``: a matrix's ids).

        A NaN distance is a missing pair, as without a learner: its row is
        left out of what the learner sees. Distances reach the learner as
        squared distances read by ``given_squared`` (a matrix's entries
        are squared already), and the learner is told so.
        """
        learner = self.learner
        told = None
        given = (pairs, targets)  # as the user wrote them, for messages
        if objects is None:
            pairs, targets = _without_missing(learner, pairs, targets,
                                              kind=self._given_kind())
            if targets is not None and learner.targets_are_distances(targets):
                targets, told = self._squared_targets(targets)
        else:
            told = True
        if told and not _accepts_squared(learner.learn_kernel):
            told = None  # a learner of one's own with the protocol before the switch
        data = ("arrays", pairs, targets) if objects is None else (
            "arrays", pairs, targets, "objects", objects)
        told_kw = {"squared": True} if told else {}
        if told:
            data = (*data, "squared", True)

        def fit():
            try:
                learned = learner.learn_kernel(pairs, targets, objects=objects, **told_kw)
            except ValueError as error:
                if objects is None:  # the step's words for its own table
                    try:
                        _explain_refused_table(*given, learner, self._given_kind(), error)
                    except ValueError as explained:  # the learner's words as its cause
                        raise explained from error
                raise
            return _checked_kernel(learned, learner, "learn_kernel")
        return _cached_entry(learner, _key(learner, data), fit, self.memory,
                             lambda: expected_ids(learner, objects=objects, pairs=pairs))

    def _squared_targets(self, targets):
        """Return a learner's distance targets as it is to read them, and whether it is told.

        ``given_squared`` set: squared distances, checked in the user's
        convention, told (``True``). Unset: the learner's own reading
        (``squared_distances_of``); a learner that reads them as squared
        distances is told so (the same kernel), and a ``FutureWarning``
        says that the default ``given_squared=False`` will read them as
        plain distances.
        """
        if self.given_squared is not None:
            return _targets_of_table(targets, self.given_squared), True
        of = getattr(self.learner, "squared_distances_of", None)
        sq = None if of is None else of(targets)
        if sq is None:
            return targets, None
        values = np.asarray(targets, dtype=float)
        with np.errstate(over="ignore", invalid="ignore"):
            plain_reading = np.square(values)
        if np.array_equal(np.asarray(sq, dtype=float), plain_reading):
            return targets, None  # read as plain distances: as the default will
        warn_user(_unset_message(type(self.learner).__name__), FutureWarning)
        return targets, True

    def _learned_from_matrix(self, matrix, objects):
        learner = self.learner
        if not learner.learns_from_distances():
            raise ValueError(
                f"distances= gives a learner the squared distances of its observed pairs "
                f"as targets, which regressors of distances take (MEGKernelRegressor); "
                f"{type(learner).__name__} is not one: give it pairs= and targets= "
                "(e.g. pair labels).")
        upper = np.triu_indices(len(objects), 1)
        observed = ~np.isnan(matrix[upper])
        if not observed.any():
            raise ValueError("distances has no observed pair of distinct objects to learn "
                             "from.")
        a, b = upper[0][observed], upper[1][observed]
        ids = objects if objects.dtype == object else objects.astype(object)
        pairs = np.column_stack([ids[a], ids[b]])
        targets = (matrix[a, b] if self.given_squared
                   else squares_of_distances(matrix[a, b], "distances"))
        entry = self._learned(pairs, targets, objects)
        return _read_only(entry.kernel), None, _read_only(entry.objects), entry.weak

    def _given_kind(self):
        """Return what the user's given distances are, as messages name them."""
        return "squared distance" if self.given_squared else "distance"

    def _stream_reading(self):
        """Return how the learner reads a stream's targets alone (``squared_distances_of``).

        ``None`` when they are no distances to it (or it cannot say).
        """
        probe = np.array([0.5, 2.0])
        if not self.learner.targets_are_distances(probe):
            return None
        return getattr(self.learner, "squared_distances_of", None)

    def _streamed(self):
        if self.learner is None:
            raise ValueError("A stream of (pairs, targets) chunks needs a learner with "
                             "partial_fit (pairs is a callable).")
        learner = self.learner
        if self.targets is not None:
            raise ValueError("A stream's chunks hold their targets: leave targets=None "
                             "when pairs is a callable.")
        learner.check_stream()  # the learner's refusals, before a pass over the stream
        scan = _scan_stream(self.pairs)
        if self.given_squared is None:
            probe = np.array([0.5, 2.0])  # squared or plain: the two readings differ
            of = self._stream_reading()
            sq = None if of is None else of(probe)
            if sq is not None and not np.array_equal(np.asarray(sq, dtype=float), probe**2):
                warn_user(_unset_message(type(learner).__name__), FutureWarning)
            plain, key = False, ("stream", scan.digest)
        else:
            plain, key = not self.given_squared, ("stream", scan.digest, "squared", True)

        def fit():
            stream = _pair_stream(self.pairs, scan, plain=plain,
                                  told=self.given_squared is not None)
            return _checked_kernel(learner.learn_kernel_stream(stream),
                                   learner, "learn_kernel_stream")
        entry = _cached_entry(learner, _key(learner, key), fit,
                              self.memory, lambda: expected_ids(learner, named=scan.ids))
        return _read_only(entry.kernel), None, _read_only(entry.objects), entry.weak

    #: Parameters holding the user's data: shared by clones, never copied.
    _SHARED_DATA = ("kernel", "distances", "pairs", "targets", "objects", "new_pairs",
                    "new_distances")

    #: Data parameters the repr summarises (what their entries are called).
    _SUMMARISED = {"kernel": "rows", "distances": "rows", "pairs": "pairs",
                   "targets": "targets", "objects": "ids", "new_pairs": "pairs",
                   "new_distances": "distances"}

    def __sklearn_clone__(self):
        """Clone, sharing the side information and distances instead of deep-copying them.

        KernelDistances never modifies them, and a search clones the
        estimator for every split and candidate: deep copies of object arrays
        of ids cost more than the k-NN (25 ms for 8,000 string ids). The
        learner and other parameters are cloned.
        """
        params = self.get_params(deep=False)
        return type(self)(**{name: value if name in self._SHARED_DATA
                             else clone(value, safe=False)
                             for name, value in params.items()})

    def __sklearn_tags__(self):
        """Declare object ids as input: one per row, 1-D accepted."""
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.one_d_array = True
        tags.requires_fit = True
        return tags


