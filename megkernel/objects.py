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
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import pickle
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import NamedTuple

import joblib
import numpy as np
import pandas as pd
from sklearn.base import (
    BaseEstimator,
    TransformerMixin,
    _fit_context,
    clone,
    is_regressor,
)
from sklearn.utils._param_validation import HasMethods
from sklearn.utils.validation import check_is_fitted

from . import _version
from ._numerics.limits import MAX_DENSE_OBJECTS
from ._numerics.spectral import check_symmetric, induced_sq_distances
from ._numerics.validation import check_n_trials, check_pair_indices
from ._pair_estimator import (
    MAX_INFERRED_OBJECTS,
    ObjectIndex,
    _as_index_array,
    _categories,
    check_id_kinds,
    declared_n_objects,
    initial_state,
    unchanged_on_error,
)
from ._solvers.meg import auto_learning_rate
from ._warnings import warn_user
from .meg_regressor import MEGKernelRegressor
from .neighbors import _power_of_four_scale, _warn_if_not_psd

try:  # an exclusive lock per kernel in the on-disk cache (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: processes may learn a kernel twice
    fcntl = None

__all__ = ["KernelDistances", "MISSING_DISTANCE", "cache_info", "clear_cache"]

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

#: Bytes of learned kernels the in-process cache keeps (most recently used;
#: the newest entry is kept whatever its size).
CACHE_BYTES = 256 * 2**20

_cache = OrderedDict()
_cache_stats = {"hits": 0, "misses": 0, "fits": 0}
#: Who is learning each kernel in this process: key -> _Holder. No lock is
#: held while a kernel is learned (see _become_learner).
_holders = {}
#: The lock files of ``memory`` folders this process holds: key -> open file.
_disk_handles = {}


class _Holder(NamedTuple):
    """The block learning a kernel: its thread and frame, and the event its
    waiters wait on."""

    thread: int
    frame: object
    done: threading.Event


class _Entry(NamedTuple):
    """A learned kernel and the ids of its rows (read-only arrays)."""

    kernel: np.ndarray
    objects: np.ndarray


def _read_only(array):
    """A read-only view of ``array`` (made read-only): its holder cannot make
    it writeable again (numpy refuses while the base is read-only)."""
    if array.flags.writeable:
        array.setflags(write=False)
    view = array.view()
    view.setflags(write=False)
    return view


def _frozen(array):
    """A read-only copy of ``array`` that nothing can make writeable again: its
    memory is an immutable ``bytes`` object (ids of object dtype: a read-only
    copy)."""
    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        array = array.copy()
        array.setflags(write=False)
        return array
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def cache_info():
    """The learned-kernel cache of this process.

    Returns
    -------
    info : dict
        ``hits`` (kernels reused from this process's cache), ``misses``
        (kernels not in it: learned, or read from the on-disk cache of
        ``memory``), ``fits`` (kernels this process learned), ``size``
        (entries) and ``bytes`` (their memory).
    """
    return dict(_cache_stats, size=len(_cache),
                bytes=sum(_entry_bytes(entry) for entry in list(_cache.values())))


def clear_cache():
    """Forget the learned kernels of this process (an on-disk ``memory`` stays)."""
    _cache.clear()
    _holders.clear()
    _cache_stats.update(hits=0, misses=0, fits=0)


def _entry_bytes(entry):
    return entry.kernel.nbytes + entry.objects.nbytes


def _pickle_digest(value):
    """sha256 of ``value`` pickled without memo (``fast``): equal contents give
    equal bytes whatever objects they share, in C speed (joblib's hasher walks
    Python objects one by one: ~0.2 s for 8,000 string ids)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=4)
    pickler.fast = True
    pickler.dump(value)
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _canonical(value):
    """``value`` with its object arrays, lists and pandas columns replaced by
    digests of their content (types kept: the id ``1`` is not ``"1"``)."""
    try:
        if isinstance(value, pd.DataFrame):
            return ("DataFrame", [(name, _canonical(value.iloc[:, i]))
                                  for i, name in enumerate(value.columns.tolist())])
        if isinstance(value, pd.Series):
            dtype = value.dtype
            categories = ((_canonical(np.asarray(dtype.categories)), dtype.ordered)
                          if isinstance(dtype, pd.CategoricalDtype) else None)
            return ("Series", str(dtype), categories, _canonical(value.to_numpy()))
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            return ("object array", value.shape, _pickle_digest(value.tolist()))
        if isinstance(value, (list, tuple)) and len(value) > 16:
            return (type(value).__name__, _pickle_digest(value))
    except (pickle.PicklingError, TypeError, ValueError, RecursionError):
        pass  # joblib's hasher takes it as it is
    return value


def _key(learner, data):
    """Everything that determines a learned kernel: the learner's module,
    class and parameters (deep), this package's version, and the data."""
    cls = type(learner)
    params = {name: _canonical(value) for name, value in learner.get_params(deep=True).items()}
    data = tuple(_canonical(item) for item in data)
    return joblib.hash((cls.__module__, cls.__qualname__, _version.__version__, params,
                        data))


def _check_memory(memory):
    """``memory`` as an object with ``cache`` (None: no on-disk cache)."""
    if memory is None:
        return None
    if isinstance(memory, (str, os.PathLike)):
        return joblib.Memory(os.fspath(memory), verbose=0)
    return memory


@contextmanager
def _disk_lock(memory, key):
    """Hold an exclusive lock on ``key`` in ``memory``'s folder, so that
    processes wanting the same kernel learn it once (the others wait, then
    read it).

    Called by this process's one learner of ``key`` only (_become_learner),
    so a lock file of ``key`` still open here was left by an interrupted
    block: it is closed first (which releases its lock; flock locks of two
    open files conflict even within one process)."""
    location = getattr(memory, "location", None)
    if fcntl is None or not isinstance(location, (str, os.PathLike)):
        yield
        return
    folder = os.path.join(os.fspath(location), "megkernel_locks")
    os.makedirs(folder, exist_ok=True)
    abandoned = _disk_handles.pop(key, None)
    if abandoned is not None:
        abandoned.close()
    handle = open(os.path.join(folder, key + ".lock"), "a")  # noqa: SIM115
    try:
        _disk_handles[key] = handle  # before the lock: whoever comes next can close it
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # releases the lock; until then, registered (for whoever comes next)
        if _disk_handles.get(key) is handle:
            del _disk_handles[key]


def _learn(key, fit):
    """``fit()``'s ``(kernel, objects)``; the on-disk cache keys it by ``key``."""
    result = fit()
    _cache_stats["fits"] += 1
    return result


_warned_in_worker = []


def _warn_in_worker(learner):
    """Once per worker process (loky, Dask, multiprocessing): without
    ``memory`` each process learns every kernel it needs again."""
    if _warned_in_worker or multiprocessing.parent_process() is None:
        return
    _warned_in_worker.append(True)
    warn_user(
        f"KernelDistances is learning a {type(learner).__name__} kernel in a worker "
        "process without memory: every process of a parallel search (n_jobs > 1) learns "
        "each kernel again, which can make n_jobs=2 slower than n_jobs=1. Give "
        "KernelDistances(memory='<folder>') to learn each kernel once.", UserWarning)


def _running(holder):
    """Whether ``holder``'s block still runs: its frame is on its thread's stack."""
    frame = sys._current_frames().get(holder.thread)
    while frame is not None:
        if frame is holder.frame:
            return True
        frame = frame.f_back
    return False


def _become_learner(key, frame):
    """Wait until ``key`` is cached (return None) or this block may learn it
    (return its holder).

    **The rule: nothing here can be left held by an exception** (issue 22,
    as for the BLAS pin): no lock is held while a kernel is learned. The
    learner is registered with its frame; threads wanting the same kernel
    wait for its event in short slices and take its place when its frame has
    left its thread's stack (its block was abandoned by an interrupt, before
    or after the event was set) or when it runs on their own thread. So a
    later fit can never wait forever; after an abandoned learning, two
    threads may at worst learn the same kernel twice.
    """
    mine = _Holder(threading.get_ident(), frame, threading.Event())
    while key not in _cache:
        holder = _holders.setdefault(key, mine)  # atomic: one thread wins
        if holder is mine:
            return mine
        if holder.thread == mine.thread or not _running(holder):
            if _holders.get(key) is holder:
                _holders[key] = mine  # the abandoned holder's place
                return mine
            continue
        holder.done.wait(0.05)
    return None


def _release_learner(key, mine):
    mine.done.set()
    if _holders.get(key) is mine:
        _holders.pop(key, None)


def _cached_hit(key):
    try:
        entry = _cache[key]
        _cache.move_to_end(key)
    except KeyError:  # cleared meanwhile (clear_cache in another thread)
        return None
    _cache_stats["hits"] += 1
    return entry


def _cached_entry(learner, key, fit, memory):
    """The entry of ``key``: from this process's cache, else from the on-disk
    ``memory``, else learned by ``fit()`` (and stored in both); one thread
    learns it, the others wait (:func:`_become_learner`)."""
    process_key = (type(learner), key)  # the class itself: same-named classes differ
    entry = _cached_hit(process_key)
    while entry is None:
        mine = _become_learner(process_key, sys._getframe())
        if mine is not None:
            break
        entry = _cached_hit(process_key)
    else:
        return entry
    try:
        entry = _cached_hit(process_key)  # stored between the check and the holding
        if entry is not None:
            return entry
        _cache_stats["misses"] += 1
        memory = _check_memory(memory)
        if memory is None:
            _warn_in_worker(learner)
            kernel, objects = _learn(key, fit)
        else:
            with _disk_lock(memory, key):
                cached = memory.cache(_learn, ignore=["fit"])
                if hasattr(cached, "check_call_in_cache"):
                    # joblib skips recording the function in a folder when this
                    # process recorded it in another; a process that never did
                    # then misses there. Checking first records it.
                    cached.check_call_in_cache(key, fit)
                kernel, objects = cached(key, fit)
        entry = _Entry(_frozen(np.asarray(kernel, dtype=float)), _frozen(np.asarray(objects)))
        _store(process_key, entry)
        return entry
    finally:
        _release_learner(process_key, mine)


def _store(key, entry):
    """Cache ``entry``, then drop the least recently used entries beyond
    :data:`CACHE_BYTES` (single dictionary operations: no lock)."""
    _cache[key] = entry
    total = sum(_entry_bytes(kept) for kept in list(_cache.values()))
    while total > CACHE_BYTES and len(_cache) > 1:
        try:
            total -= _entry_bytes(_cache.popitem(last=False)[1])
        except KeyError:  # emptied meanwhile
            break


def _fitted_entry(learner, pairs, targets):
    """``fit`` for arrays of side information: a clone, fitted."""
    def fit():
        model = clone(learner)
        model = model.fit(pairs) if targets is None else model.fit(pairs, targets)
        return model.kernel_, np.asarray(model.objects_)
    return fit


# -- streams of (pairs, targets) chunks -------------------------------------------

class _StreamScan(NamedTuple):
    """What the first pass over a stream learns: its digest and the sums the
    scale needs."""

    digest: str
    n_chunks: int
    ids: object            # distinct ids (ndarray), or None for integer indices
    max_index: int
    sum_targets: float     # over pairs of distinct objects
    n_moving: int
    n_pairs: int = 0       # every pair of a pass (the trials of one epoch)


def _chunks(stream):
    """``(i, pairs, targets, values, y)`` for each chunk of the stream, checked."""
    iterator = stream()
    if isinstance(iterator, (str, bytes, np.ndarray, pd.DataFrame)) or not hasattr(
            iterator, "__iter__"):
        raise ValueError("pairs, a stream, must be a callable returning an iterable of "
                         f"(pairs, targets) chunks; it returned {type(iterator).__name__}.")
    for i, chunk in enumerate(iterator):
        try:
            pairs, targets = chunk
        except (TypeError, ValueError):
            raise ValueError(f"Chunk {i} of the stream is not a (pairs, targets) pair "
                             f"(got {type(chunk).__name__}).") from None
        values = np.asarray(pairs)
        if values.ndim != 2 or values.shape[1] != 2 or len(values) == 0:
            raise ValueError(f"Chunk {i} of the stream: pairs must have shape (n_pairs, 2) "
                             f"with n_pairs >= 1, got shape {values.shape}.")
        try:
            y = np.asarray(targets, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"Chunk {i} of the stream: targets must be numbers.") from None
        if y.shape != (len(values),):
            raise ValueError(f"Chunk {i} of the stream: targets must have shape "
                             f"({len(values)},) like its pairs, got {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError(f"Chunk {i} of the stream has NaN or infinite targets.")
        yield i, pairs, targets, values, y


def _chunk_digest(values, y):
    return joblib.hash((values, y)).encode()


def _scan_stream(stream):
    """First pass: digest, ids and the targets' sums over distinct pairs."""
    digest = hashlib.sha256()
    ids = {}
    indices, max_index, sum_targets, n_moving, n_chunks, n_pairs = True, -1, 0.0, 0, 0, 0
    for i, _, _, values, y in _chunks(stream):
        digest.update(_chunk_digest(values, y))
        numbers = _as_index_array(values)
        if numbers is not None:
            numbers = check_pair_indices(numbers, name=f"Chunk {i} of the stream: pairs")
            max_index = max(max_index, int(numbers.max()))
        else:
            indices = False
        ids.update(dict.fromkeys(pd.unique(values.ravel()).tolist()))
        moving = values[:, 0] != values[:, 1]
        sum_targets += float(y[moving].sum())
        n_moving += int(np.count_nonzero(moving))
        n_pairs += len(values)
        n_chunks += 1
    if n_chunks == 0:
        raise ValueError("The stream yielded no chunks: a stream must give at least one "
                         "(pairs, targets) chunk, and the same ones at every call.")
    distinct = None
    if not indices:
        distinct = np.asarray(list(ids), dtype=object)
        try:
            distinct = np.sort(distinct)
        except TypeError:  # ids of mixed types: order of first appearance
            pass
    return _StreamScan(digest.hexdigest(), n_chunks, distinct, max_index, sum_targets,
                       n_moving, n_pairs)


def _stream_params(learner, stream, scan):
    """Parameters that make the learner's ``partial_fit`` over the chunks learn
    what its one-shot on-line fit of their concatenation learns: the objects
    (all chunks' ids), and ``trace="auto"`` (and low-rank
    ``learning_rate="auto"``) computed over all chunks, not the first."""
    params = learner.get_params(deep=False)
    if not isinstance(learner, MEGKernelRegressor):
        if params.get("trace") == "auto" or params.get("learning_rate") == "auto":
            raise ValueError(
                f"A stream fixes the scale up front, which KernelDistances knows how to "
                f"do for MEGKernelRegressor only: give {type(learner).__name__} a numeric "
                "trace and learning_rate.")
        return {}
    fixed = {}
    index = None
    if params["objects"] is not None:
        index = ObjectIndex(params["objects"])
    elif scan.ids is not None:
        fixed["objects"] = scan.ids
        index = ObjectIndex(scan.ids)
    elif declared_n_objects(learner) is None:
        n_objects = max(scan.max_index + 1, 2)
        if n_objects > MAX_INFERRED_OBJECTS:
            raise ValueError(
                f"The stream names object index {n_objects - 1}: with n_objects unset "
                f"the model would hold {n_objects} objects. Give the learner n_objects "
                "(or objects=[...]) to mean it.")
        fixed["n_objects"] = n_objects
    model = clone(learner).set_params(**fixed)
    n_objects = declared_n_objects(model) if index is None else len(index)
    state = initial_state(model, np.zeros((1, 2), dtype=np.intp), index)
    identity = isinstance(params["init"], str) and params["init_factor"] is None
    low_rank_rate = params["learning_rate"] == "auto" and state.basis is not None
    prior_sum, best_pair, best_norm = 2.0 / state.n_objects * scan.n_moving, None, -1.0
    if not identity or low_rank_rate:  # the prior's distances: a pass over the rows
        prior_sum = 0.0
        for i, _, _, values, _ in _chunks(stream):
            rows = (index.rows(values, name=f"Chunk {i} of the stream: pairs")
                    if index is not None else check_pair_indices(
                        _as_index_array(values), n_objects,
                        name=f"Chunk {i} of the stream: pairs"))
            moving = rows[:, 0] != rows[:, 1]
            a, b = rows[moving, 0], rows[moving, 1]
            prior_sum += float(state.pair_sq_distances(a, b).sum())
            if low_rank_rate and len(a):
                norms = state.pair_sq_norms(a, b)
                if norms.max() > best_norm:
                    best_norm, best_pair = norms.max(), int(np.argmax(norms))
                    best_pair = (a[best_pair:best_pair + 1], b[best_pair:best_pair + 1])
    if params["trace"] == "auto":  # auto_trace of meg_regressor, from the sums
        trace = 1.0
        if scan.n_moving and prior_sum > 0 and scan.sum_targets > 0:
            with np.errstate(over="ignore"):
                trace = (scan.sum_targets / scan.n_moving) / (prior_sum / scan.n_moving)
            if not np.isfinite(trace):
                raise ValueError("The stream's mean squared distance is too large for "
                                 "double precision at this number of objects.")
        fixed["trace"] = float(trace)
    if low_rank_rate:
        empty = np.zeros(0, dtype=np.intp)
        a, b = best_pair if best_pair is not None else (empty, empty)
        fixed["learning_rate"] = float(auto_learning_rate(state, a, b))
    return fixed


def _stream_epochs(learner):
    """Passes over the stream: the learner's ``n_epochs`` (MEG), else 1; a
    stream is replayed in its order, so ``shuffle=True`` is refused."""
    params = learner.get_params(deep=False)
    if params.get("shuffle"):
        raise ValueError(f"{type(learner).__name__}(shuffle=True) cannot shuffle a "
                         "stream: it is replayed in its order (shuffle the chunks in the "
                         "stream, and leave shuffle=False).")
    epochs = params.get("n_epochs", 1)
    return epochs if isinstance(epochs, int) and epochs >= 1 else 1


def _streamed_entry(learner, stream, scan):
    """``fit`` for a stream: the scale fixed over the whole stream, then the
    learner's ``partial_fit`` chunk by chunk, for each of its epochs."""
    def fit():
        model = clone(learner).set_params(**_stream_params(learner, stream, scan))
        for _ in range(_stream_epochs(learner)):
            digest = hashlib.sha256()
            for i, pairs, targets, values, y in _chunks(stream):
                digest.update(_chunk_digest(values, y))
                try:
                    model.partial_fit(pairs, targets)
                except ValueError as error:
                    raise ValueError(f"Chunk {i} of the stream: {error}") from error
            if digest.hexdigest() != scan.digest:
                raise ValueError("The stream gave other chunks on a later pass than on "
                                 "its first: it must replay the same chunks at every call.")
        return model.kernel_, np.asarray(model.objects_)
    return fit


# -- the user's own distances -------------------------------------------------------

def _shown(value):
    """An id as users wrote it (``0``, not ``np.int64(0)``) for messages."""
    return value.item() if isinstance(value, np.generic) else value


def _as_float(values, name):
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers (NaN for a missing distance).") from None


def _checked_distances(matrix, observed, objects, name, what):
    """Refuse negative or infinite distances and non-zero self-distances."""
    if np.isinf(matrix).any():
        raise ValueError(f"{name} holds infinite {what}; mark a missing distance "
                         "with NaN.")
    negative = observed & (np.nan_to_num(matrix, nan=0.0) < 0)
    if negative.any():
        i, j = np.argwhere(negative)[0]
        raise ValueError(f"{name} holds a negative {what[:-1]} ({matrix[i, j]:.6g}, "
                         f"between {_shown(objects[i])!r} and {_shown(objects[j])!r}).")
    diagonal = np.diag(matrix)
    self_distance = ~np.isnan(diagonal) & (diagonal != 0)
    if self_distance.any():
        i = int(np.argmax(self_distance))
        raise ValueError(f"{name} gives {_shown(objects[i])!r} a distance {diagonal[i]:.6g} to "
                         "itself; an object's distance to itself is 0.")


def _given_matrix(distances, objects):
    """The user's distance matrix, validated: (matrix with NaN where missing and
    a zero diagonal, its objects)."""
    if isinstance(distances, pd.DataFrame):
        rows, columns = distances.index, distances.columns
        if objects is not None and not np.array_equal(
                np.asarray(objects, dtype=object), rows.to_numpy(dtype=object)):
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
               else np.asarray(objects, dtype=object))
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
    """Rows of the pairs and the objects, by the learners' rules: declared ids,
    integer indices ``0..max``, or the distinct ids (sorted)."""
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


def _table_matrix(pairs, targets, objects):
    """The user's pair table of distances as a matrix (NaN where missing;
    repeated pairs, in either order, averaged)."""
    values = _pair_values(pairs)
    if targets is None:
        raise ValueError("Observed distances without a learner need targets: the "
                         "distance of each pair.")
    y = _as_float(targets, "targets")
    if y.shape != (len(values),):
        raise ValueError(f"targets must have shape ({len(values)},) like pairs, got "
                         f"{y.shape}.")
    rows, objects = _pair_index(pairs, values, objects)
    if np.isinf(y).any():
        raise ValueError("targets holds infinite distances; mark a missing distance with "
                         "NaN.")
    known = ~np.isnan(y)
    negative = known & (np.nan_to_num(y) < 0)
    if negative.any():
        t = int(np.argmax(negative))
        raise ValueError(f"targets holds a negative distance ({y[t]:.6g}, for the pair "
                         f"{_shown(values[t, 0])!r}, {_shown(values[t, 1])!r}).")
    loop = known & (rows[:, 0] == rows[:, 1]) & (np.nan_to_num(y) != 0)
    if loop.any():
        t = int(np.argmax(loop))
        raise ValueError(f"targets gives {_shown(values[t, 0])!r} a distance {y[t]:.6g} to itself; "
                         "an object's distance to itself is 0.")
    d = len(objects)
    if d > MAX_DENSE_OBJECTS:  # before the d x d matrix
        raise ValueError(
            f"The pair table names {d} objects: its distance matrix would take "
            f"{d} x {d} doubles ({8 * float(d) ** 2 / 2**30:.3g} GiB); KernelDistances "
            f"holds the user's distances for at most {MAX_DENSE_OBJECTS} objects "
            "(MAX_DENSE_OBJECTS).")
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


def _user_kernel_scale(kernel, *, squared, check_psd):
    """The power of four the distances of ``kernel`` are computed at.

    :mod:`megkernel.neighbors`' rule for kernels from the user: distances
    computed on the kernel divided by a power of four near its largest entry
    (exact), so that any finite kernel gives finite distances, and a kernel
    that cannot be positive semidefinite named in a ``UserWarning``
    (``check_psd``: the fixed kernel; learned ones are PSD by construction).
    Squared distances beyond the float range are refused (``squared``).
    """
    scale = _power_of_four_scale(np.abs(kernel).max(initial=0.0))
    if not (check_psd or squared):
        return scale
    unit = kernel / scale
    sq_distances = induced_sq_distances(unit)
    if check_psd:
        _warn_if_not_psd(unit, np.diag(unit), sq_distances, name="The kernel")
    largest = float(sq_distances.max(initial=0.0))
    if squared and scale > 1.0 and largest > np.finfo(float).max / scale:
        raise ValueError(
            f"The kernel's largest squared distance, {largest:.6g} x {scale:.6g}, exceeds "
            "the float range; use squared=False (the distances are finite) or scale the "
            "kernel down.")
    return scale


def _ids(X):
    """Object ids from ``X``: 1-D, a single column, or a Series / DataFrame; a
    list of tuples is a list of tuple ids (numpy would split them into
    columns: the same ids in an object array work)."""
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


class KernelDistances(TransformerMixin, BaseEstimator):
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
        A kernel learner instance with ``kernel_`` and ``objects_`` after
        ``fit`` (:class:`~megkernel.MEGKernelRegressor`,
        :class:`~megkernel.DefiniteBoostKernel`); cloned, never fitted in place.
        Its parameters are searchable as ``learner__<name>``; ``None``
        (searchable too) means the given distances themselves.
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
        ``n_jobs > 1``). A first pass fixes the scale over the whole stream
        (for :class:`~megkernel.MEGKernelRegressor`: its objects, ``trace="auto"``
        and low-rank ``learning_rate="auto"``, as its one-shot on-line fit on
        the chunks' concatenation would), then ``partial_fit`` runs chunk by
        chunk, over the whole stream once per ``n_epochs`` of the learner (in
        the stream's order: ``shuffle=True`` is refused).
    targets : array-like of shape (n_pairs,), default=None
        With a learner: its targets (squared distances for MEG, pair labels
        for DefiniteBoost; ``None``: all similar). Without: the pairs'
        distances (NaN where missing), squared or not as ``given_squared``
        says.
    objects : array-like of shape (n_objects,), default=None
        Ids of the rows of ``kernel`` or ``distances`` (default ``0..n-1``),
        or, for a pair table without a learner, all the objects (default: the
        distinct ids of the pairs, sorted, or ``0..max`` for integer indices).
        With a ``learner``, its ``objects_`` are used.
    given_squared : bool, default=False
        Whether the user's distances (``distances``, or ``targets`` without a
        learner) are squared distances. ``False``: plain distances, as most
        users have them (squared for a learner given ``distances``). Note that
        :class:`~megkernel.MEGKernelRegressor` takes squared distances as
        ``targets``: to share its ``targets`` with the no-learner baseline, set
        ``given_squared=True``.
    squared : bool, default=False
        Return squared distances from :meth:`transform` and ``distances_``.
    memory : str, path, joblib.Memory or None, default=None
        On-disk cache of learned kernels (a folder, or an object with
        joblib.Memory's interface), shared by the processes of a parallel
        search: each kernel is learned once (processes wanting the same
        kernel wait for the first) and read from disk by the others. Keyed
        like the in-process cache: the learner's module, class and
        parameters, megkernel's version, and the data. ``None``: the
        in-process cache only.

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
    """

    _parameter_constraints: dict = {
        "kernel": ["array-like", None],
        "learner": [HasMethods(["fit"]), None],
        "distances": ["array-like", None],
        "pairs": ["array-like", callable, None],
        "targets": ["array-like", None],
        "objects": ["array-like", None],
        "given_squared": ["boolean"],
        "squared": ["boolean"],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
    }

    def __init__(self, *, kernel=None, learner=None, distances=None, pairs=None,
                 targets=None, objects=None, given_squared=False, squared=False,
                 memory=None):
        self.kernel = kernel
        self.learner = learner
        self.distances = distances
        self.pairs = pairs
        self.targets = targets
        self.objects = objects
        self.given_squared = given_squared
        self.squared = squared
        self.memory = memory

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
        y : ignored
            Labels never reach the kernel learner.

        Returns
        -------
        self : object
        """
        fit_objects = _ids(X)
        if isinstance(self.learner, type):  # has fit, but unbound: not a learner
            raise ValueError(
                f"learner must be an estimator instance, e.g. {self.learner.__name__}(), "
                f"not the class {self.learner.__name__}.")
        kernel, given, objects = self._source()
        scale = (_user_kernel_scale(kernel, squared=self.squared,
                                    check_psd=self.kernel is not None)
                 if given is None else 1.0)
        index = ObjectIndex(objects)
        rows = index.rows(fit_objects, hint=_UNKNOWN_HINT if given is None
                          else _UNKNOWN_HINT_GIVEN)
        with unchanged_on_error(self):  # an interrupt up to the return restores it
            self.__dict__.update(kernel_=kernel, objects_=objects, fit_objects_=fit_objects,
                                 n_features_in_=1, _index=index, _fit_rows=rows,
                                 _given=given, _given_is_squared=bool(self.given_squared),
                                 _kernel_scale=scale)
            return self

    def transform(self, X):
        """Distances from the objects ``X`` to the fitted objects.

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
        hint = _UNKNOWN_HINT if self._given is None else _UNKNOWN_HINT_GIVEN
        rows = self._index.rows(_ids(X), hint=hint)
        return self._block(rows, self._fit_rows)

    def get_feature_names_out(self, input_features=None):
        """``distance_to_<id>`` for each fitted object."""
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
        # at the kernel's power-of-four scale (exact): finite near the float maximum
        scale = getattr(self, "_kernel_scale", 1.0)
        diagonal = np.diag(self.kernel_) / scale
        squared = np.maximum(induced_sq_distances(
            self.kernel_[np.ix_(rows, cols)] / scale, diagonal[rows], diagonal[cols]), 0.0)
        return squared * scale if self.squared else np.sqrt(squared) * np.sqrt(scale)

    def _source(self):
        """``(kernel, given, objects)``: read-only, validated, before any change."""
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
                       else np.asarray(self.objects, dtype=object))  # ids kept as given
            if len(objects) != len(kernel):
                raise ValueError(f"objects has {len(objects)} ids for a kernel over "
                                 f"{len(kernel)} objects.")
            return _read_only(kernel), None, _read_only(np.array(objects))
        if callable(self.pairs) and not hasattr(self.pairs, "__array__"):
            return self._streamed()
        if source == "distances":
            matrix, objects = _given_matrix(self.distances, self.objects)
        elif self.learner is not None:
            entry = self._learned(self.learner, self.pairs, self.targets)
            return _read_only(entry.kernel), None, _read_only(entry.objects)
        else:
            matrix, objects = _table_matrix(self.pairs, self.targets, self.objects)
        largest = float(np.nanmax(matrix))
        if self.squared and not self.given_squared:
            with np.errstate(over="ignore"):
                largest = largest ** 2 if largest < 1e154 else np.inf
        if not largest < MISSING_DISTANCE / 10:  # overflow to inf included
            raise ValueError(f"The distances (up to {np.nanmax(matrix):.4g}) leave no room "
                             f"for the missing ones ({MISSING_DISTANCE:g}): rescale them.")
        if self.learner is None:
            return None, _read_only(matrix), _read_only(np.array(objects))
        return self._learned_from_matrix(matrix, objects)

    def _learned(self, learner, pairs, targets):
        key = _key(learner, ("arrays", pairs, targets))
        return _cached_entry(learner, key, _fitted_entry(learner, pairs, targets),
                             self.memory)

    def _learned_from_matrix(self, matrix, objects):
        learner = self.learner
        if not is_regressor(learner):
            raise ValueError(
                f"distances= gives a learner the squared distances of its observed pairs "
                f"as targets, which regressors of distances take (MEGKernelRegressor); "
                f"{type(learner).__name__} is not one: give it pairs= and targets= "
                "(e.g. pair labels).")
        if "objects" in learner.get_params(deep=False) and learner.objects is None:
            learner = clone(learner).set_params(objects=objects)
        upper = np.triu_indices(len(objects), 1)
        observed = ~np.isnan(matrix[upper])
        if not observed.any():
            raise ValueError("distances has no observed pair of distinct objects to learn "
                             "from.")
        a, b = upper[0][observed], upper[1][observed]
        ids = objects if objects.dtype == object else objects.astype(object)
        pairs = np.column_stack([ids[a], ids[b]])
        targets = matrix[a, b] if self.given_squared else matrix[a, b] ** 2
        entry = self._learned(learner, pairs, targets)
        return _read_only(entry.kernel), None, _read_only(entry.objects)

    def _streamed(self):
        if self.learner is None:
            raise ValueError("A stream of (pairs, targets) chunks needs a learner with "
                             "partial_fit (pairs is a callable).")
        if not hasattr(self.learner, "partial_fit"):
            raise ValueError(f"A stream of chunks is learned by partial_fit, which "
                             f"{type(self.learner).__name__} does not have.")
        if self.targets is not None:
            raise ValueError("A stream's chunks hold their targets: leave targets=None "
                             "when pairs is a callable.")
        if hasattr(self.learner, "_validate_params"):  # its errors, not a chunk's
            self.learner._validate_params()
        epochs = _stream_epochs(self.learner)
        scan = _scan_stream(self.pairs)
        # partial_fit keeps each trial's loss (losses_): 8 bytes a trial
        check_n_trials(epochs, scan.n_pairs, name=f"{type(self.learner).__name__}"
                       ".n_epochs", bytes_per_trial=8, record="its on-line loss in losses_")
        key = _key(self.learner, ("stream", scan.digest))
        entry = _cached_entry(self.learner, key,
                              _streamed_entry(self.learner, self.pairs, scan), self.memory)
        return _read_only(entry.kernel), None, _read_only(entry.objects)

    #: Parameters holding the user's data: shared by clones, never copied.
    _SHARED_DATA = ("kernel", "distances", "pairs", "targets", "objects")

    def __sklearn_clone__(self):
        """A clone that shares the side information and distances (which
        KernelDistances never modifies) instead of deep-copying them: a
        search clones the estimator for every split and candidate, and deep
        copies of object arrays of ids cost more than the k-NN (25 ms for
        8,000 string ids). The learner and other parameters are cloned."""
        params = self.get_params(deep=False)
        return type(self)(**{name: value if name in self._SHARED_DATA
                             else clone(value, safe=False)
                             for name, value in params.items()})

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.one_d_array = True
        tags.requires_fit = True
        return tags
