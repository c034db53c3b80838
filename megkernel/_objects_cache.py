"""The cache of learned kernels behind :class:`~megkernel.KernelDistances`.

A kernel does not depend on the split of the objects, so it is learned once
per learner and data: an in-process cache (least recently used entries
dropped beyond :data:`CACHE_BYTES`) keyed by the learner's module, class,
parameters, this package's version and the data, and, with ``memory=`` (a
folder), an on-disk cache that processes share. No lock is held while a
kernel is learned (:func:`_become_learner`), so an interrupt can leave none
held.
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

from . import _version
from ._warnings import warn_user

try:  # an exclusive lock per kernel in the on-disk cache (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: processes may learn a kernel twice
    fcntl = None

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
    """The block learning a kernel.

    Its thread and frame, and the event its waiters wait on.
    """

    thread: int
    frame: object
    done: threading.Event


class _Entry(NamedTuple):
    """A learned kernel and the ids of its rows (read-only arrays)."""

    kernel: np.ndarray
    objects: np.ndarray


def _read_only(array):
    """Return a read-only view of ``array``, made read-only itself.

    The view's holder cannot make it writeable again (numpy refuses while the
    base is read-only).
    """
    if array.flags.writeable:
        array.setflags(write=False)
    view = array.view()
    view.setflags(write=False)
    return view


def _frozen(array):
    """Return a read-only copy of ``array`` that nothing can make writeable again.

    Its memory is an immutable ``bytes`` object (ids of object dtype: a
    read-only copy).
    """
    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        array = array.copy()
        array.setflags(write=False)
        return array
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def cache_info():
    """Report on the learned-kernel cache of this process.

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
    """Return the sha256 of ``value`` pickled without memo (``fast``).

    Equal contents give equal bytes whatever objects they share, in C speed
    (joblib's hasher walks Python objects one by one: ~0.2 s for 8,000
    string ids).
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=4)
    pickler.fast = True
    pickler.dump(value)
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _canonical(value):
    """Replace the object arrays, lists and pandas columns of ``value`` by digests.

    The digests are of their content, types kept: the id ``1`` is not
    ``"1"``.
    """
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
    """Hash everything that determines a learned kernel.

    That is the learner's module, class and parameters (deep), this
    package's version, and the data.
    """
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
    """Hold an exclusive lock on ``key`` in ``memory``'s folder.

    So processes wanting the same kernel learn it once (the others wait,
    then read it).

    Called by this process's one learner of ``key`` only (_become_learner),
    so a lock file of ``key`` still open here was left by an interrupted
    block: it is closed first (which releases its lock; flock locks of two
    open files conflict even within one process).
    """
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
    """Warn once per worker process (loky, Dask, multiprocessing) that learns.

    Without ``memory`` each process learns every kernel it needs again.
    """
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
    """Wait until ``key`` is cached or this block may learn it.

    Return None when it is cached, else this block's holder.

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
    """Return the entry of ``key``, learning it if no cache holds it.

    From this process's cache, else from the on-disk ``memory``, else
    learned by ``fit()`` (and stored in both); one thread learns it, the
    others wait (:func:`_become_learner`).
    """
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
        kernel = np.asarray(kernel, dtype=float)
        # a learner's kernel (eigenvectors' products) is symmetric to round-off only:
        # made exactly so, its distances are too (halves first: no overflow near the max)
        entry = _Entry(_frozen(0.5 * kernel + 0.5 * kernel.T), _frozen(np.asarray(objects)))
        _store(process_key, entry)
        return entry
    finally:
        _release_learner(process_key, mine)


def _store(key, entry):
    """Cache ``entry``, then drop the least recently used entries beyond the budget.

    The budget is :data:`CACHE_BYTES`; single dictionary operations, so no
    lock.
    """
    _cache[key] = entry
    total = sum(_entry_bytes(kept) for kept in list(_cache.values()))
    while total > CACHE_BYTES and len(_cache) > 1:
        try:
            total -= _entry_bytes(_cache.popitem(last=False)[1])
        except KeyError:  # emptied meanwhile
            break

