"""The cache of learned kernels behind :class:`~megkernel.KernelDistances`.

A kernel does not depend on the split of the objects, so it is learned once
per learner and data: an in-process cache (least recently used entries
dropped beyond :data:`CACHE_BYTES`) keyed by the learner's module, class,
parameters, this package's version and the data, and, with ``memory=`` (a
folder), an on-disk cache that processes share. No in-process lock is held
while a kernel is learned (:func:`_become_learner`), so an interrupt can
leave none held; the on-disk cache's lock of a kernel (a file lock, so
processes learn it once) is waited for :data:`LOCK_TIMEOUT` seconds at most.

The on-disk cache trusts nothing it reads (:func:`_load_entry`): no pickle,
each file read up to its expected size, every entry checked, and whatever
fails a check is discarded with a warning and learned again.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import multiprocessing
import os
import pickle
import socket
import stat
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager, suppress
from typing import NamedTuple

import joblib
import numpy as np
import pandas as pd

from . import _version
from ._kernel_learner import declared_objects_of
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


class _Holder(NamedTuple):
    """The block learning a kernel.

    Its thread and frame, and the event its waiters wait on.
    """

    thread: int
    frame: object
    done: threading.Event


class _Entry(NamedTuple):
    """A learned kernel and the ids of its rows (read-only arrays), and whether it is weak.

    ``weak``: its learner found that it explains little of its held-out
    pairs (:class:`~megkernel.LearnedKernel`).
    """

    kernel: np.ndarray
    objects: np.ndarray
    weak: bool = False


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


# -- the on-disk cache of ``memory`` ------------------------------------------------
#
# Nothing read from the folder is trusted: an entry is a JSON header and
# ``.npy`` arrays read with ``allow_pickle=False`` (no code can run), each
# file read up to its expected size only, and the entry is used only if the
# key, shapes, ids and digest agree and the kernel is finite, symmetric and
# PSD; anything else is discarded with a warning and the kernel learned
# again.

#: Seconds a process waits for another's lock on a kernel before giving up
#: (the holder may be a session interrupted while holding it).
LOCK_TIMEOUT = 600.0
#: Longest sleep between two tries of a lock (the first ones are shorter).
LOCK_POLL = 0.5
#: Largest header read from the folder (its ids in JSON).
HEADER_BYTES = 64 * 2**20

_FORMAT = "megkernel-kernel-cache"
_FORMAT_VERSION = 1
_ENTRIES = "megkernel_kernels"
_LOCKS = "megkernel_locks"
#: A PSD kernel's smallest eigenvalue is at least this times its largest.
_PSD_TOLERANCE = 1e-8
#: Symmetric to round-off: |K - K.T| at most this times max |K|.
_SYMMETRY_TOLERANCE = 1e-10
_ID_DEPTH = 16  # the deepest tuple id the header may hold
_NPY_ID_KINDS = "biuUS"  # ids a .npy file holds without pickle

#: The lock files of ``memory`` folders this process holds: key -> open file.
_disk_handles = {}
#: Folders (and kinds of trouble) this process has warned about once.
_warned_once = set()


class Expected(NamedTuple):
    """What the ids of a learned kernel must be, as far as the data says.

    ``exact``: the ids themselves, in order (the learner's own ``objects``
    or a matrix's ids), else None; ``named``: ids the data names (the
    pairs'), all of which must be among them, else None.
    """

    exact: object = None
    named: object = None


class _Invalid(Exception):
    """An entry of the folder that cannot be used (the reason)."""


def _check_memory(memory):
    """Return the folder of ``memory``, absolute (None: no on-disk cache).

    The one path rule for data and locks alike: ``os.path.expanduser``
    then ``os.path.abspath``, applied here once.
    """
    if memory is None:
        return None
    location = memory if isinstance(memory, (str, os.PathLike)) else getattr(
        memory, "location", None)
    if location is None:  # joblib.Memory(None) caches nothing
        return None
    if not isinstance(location, (str, os.PathLike)):
        raise ValueError(f"memory must be a folder, a joblib.Memory with a folder as "
                         f"location, or None; got {type(memory).__name__} whose location "
                         f"is {location!r}.")
    return os.path.abspath(os.path.expanduser(os.fspath(location)))


def _warn_once(what, message):
    if what not in _warned_once:
        _warned_once.add(what)
        warn_user(message, UserWarning)


# -- ids in the header: JSON, typed, never pickled

def _encode_id(value, depth=0):
    kind = type(value)
    if kind is str:
        return ["s", value]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", str(value)]  # exact at any size, whatever the JSON reader
    if kind is float:
        return ["f", value.hex()]
    if kind is tuple and depth < _ID_DEPTH:
        return ["t", [_encode_id(item, depth + 1) for item in value]]
    raise TypeError(f"an id of type {kind.__name__}")


def _decode_id(value, depth=0):
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise _Invalid("an id of the header is not one megkernel writes")
    tag, item = value
    if tag == "s" and type(item) is str:
        return item
    if tag == "b" and type(item) is bool:
        return item
    if tag == "i" and type(item) is str and len(item) <= 64:
        return int(item)
    if tag == "f" and type(item) is str and len(item) <= 64:
        return float.fromhex(item)
    if tag == "t" and type(item) is list and depth < _ID_DEPTH:
        return tuple(_decode_id(part, depth + 1) for part in item)
    raise _Invalid("an id of the header is not one megkernel writes")


def _same_ids(a, b):
    """Whether two id sequences are equal, id by id and type by type."""
    a, b = list(a), list(b)
    return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b))


def _as_list(ids):
    return ids.tolist() if isinstance(ids, np.ndarray) else list(ids)


def _ids_problem(objects, n, expected):
    """Why ``objects`` are not the ids of a kernel over ``n`` objects (None: they are)."""
    if objects.shape != (n,):
        return f"{objects.shape[0] if objects.ndim == 1 else objects.shape} ids for {n} rows"
    values = objects.tolist()
    try:
        if len(set(values)) != n:
            return "repeated ids"
        if expected.exact is not None:
            if not _same_ids(values, _as_list(expected.exact)):
                return "other ids than this data's"
        elif expected.named is not None and not set(expected.named) <= set(values):
            return "ids that lack some of this data's"
    except TypeError:  # unhashable ids
        return "ids that cannot be compared"
    return None


def _kernel_problem(kernel):
    """Why ``kernel`` is not a finite symmetric PSD kernel (None: it is)."""
    if not np.all(np.isfinite(kernel)):
        return "a kernel with non-finite entries"
    scale = float(np.max(np.abs(kernel))) if kernel.size else 0.0
    if float(np.max(np.abs(kernel - kernel.T), initial=0.0)) > _SYMMETRY_TOLERANCE * scale:
        return "a kernel that is not symmetric"
    if scale > 0:
        eigenvalues = np.linalg.eigvalsh(kernel / scale)
        if eigenvalues[0] < -_PSD_TOLERANCE * max(eigenvalues[-1], 0.0) or \
                eigenvalues[-1] <= 0:
            return (f"a kernel that is not positive semi-definite (eigenvalues "
                    f"{eigenvalues[0] * scale:.3g} to {eigenvalues[-1] * scale:.3g})")
    return None


def _digest(key, kernel, ids_record, ids_bytes):
    """Return the sha256 of an entry's key, kernel and ids (a torn or mixed entry differs)."""
    digest = hashlib.sha256()
    for part in (key.encode(), kernel.astype("<f8").tobytes(),
                 json.dumps(ids_record, sort_keys=True).encode(), ids_bytes):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _ids_record(objects):
    """``(record, npy array or None)`` of the ids; TypeError when unsafe to store."""
    if objects.dtype.kind in _NPY_ID_KINDS and objects.dtype.fields is None \
            and objects.ndim == 1:
        array = objects.astype(objects.dtype.newbyteorder("<"))
        return {"kind": "npy", "dtype": array.dtype.str, "shape": [len(array)]}, array
    if objects.dtype == object and objects.ndim == 1:
        return {"kind": "json", "values": [_encode_id(value) for value in objects.tolist()]}, None
    raise TypeError(f"ids of dtype {objects.dtype}")


# -- reading: bounded, no symbolic link, no pickle

def _open_regular(path):
    """Open ``path`` to read: a regular file, never through a symbolic link.

    ``O_NONBLOCK``: a FIFO planted there cannot block the open.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise
        raise _Invalid(f"it cannot be opened as a file ({error.strerror})") from None
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise _Invalid("it is not a regular file")
    return handle


def _read_bounded(handle, size):
    data = handle.read(size + 1)
    if len(data) != size:
        raise _Invalid(f"{len(data)} bytes where {size} were expected")
    return data


def _read_npy(path, shape, dtype):
    """Read a ``.npy`` file's array, only if its header says ``shape`` and ``dtype``."""
    with _open_regular(path) as handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            found_shape, fortran, found_dtype = read_header(handle)
        except (ValueError, SyntaxError, TypeError) as error:
            raise _Invalid(f"no .npy header ({error})") from None
        if tuple(found_shape) != shape or found_dtype != dtype or fortran:
            raise _Invalid(f"an array of shape {tuple(found_shape)} and dtype {found_dtype} "
                           f"where {shape} and {dtype} were expected")
        size = int(np.prod(shape)) * dtype.itemsize
        if os.fstat(handle.fileno()).st_size - handle.tell() != size:
            raise _Invalid(f"a file of another size than its header's {shape} array")
        data = _read_bounded(handle, size)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _entry_paths(entries, key):
    return {name: os.path.join(entries, f"{key}.{name}")
            for name in ("json", "kernel.npy", "ids.npy")}


def _read_header(path):
    with _open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > HEADER_BYTES:
            raise _Invalid(f"a header of {size} bytes")
        text = handle.read(HEADER_BYTES + 1)
    try:
        header = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise _Invalid(f"no JSON header ({type(error).__name__})") from None
    if not isinstance(header, dict):
        raise _Invalid("no JSON header")
    return header


def _load_entry(entries, key, expected):
    """Return the valid entry of ``key`` (FileNotFoundError: none; _Invalid: unusable)."""
    paths = _entry_paths(entries, key)
    header = _read_header(paths["json"])
    if header.get("format") != _FORMAT or header.get("version") != _FORMAT_VERSION:
        raise _Invalid("another format or format version")
    if header.get("key") != key:
        raise _Invalid("the entry of another key")
    n = header.get("n")
    if type(n) is not int or n < 1 or (expected.exact is not None
                                       and n != len(expected.exact)):
        raise _Invalid(f"a kernel over {n!r} objects")
    if header.get("kernel") != {"dtype": "<f8", "shape": [n, n]}:
        raise _Invalid("a kernel of another dtype or shape")
    record = header.get("ids")
    if not isinstance(record, dict):
        raise _Invalid("no ids")
    ids_bytes = b""
    if record.get("kind") == "json":
        values = record.get("values")
        if not isinstance(values, list) or len(values) != n:
            raise _Invalid("not one id per row")
        objects = np.empty(n, dtype=object)
        for i, value in enumerate(values):
            objects[i] = _decode_id(value)  # one by one: a tuple id stays whole
    elif record.get("kind") == "npy":
        try:
            dtype = np.dtype(str(record.get("dtype")))
        except TypeError:
            raise _Invalid("ids of an unknown dtype") from None
        if dtype.kind not in _NPY_ID_KINDS or dtype.fields is not None \
                or dtype.subdtype is not None or record.get("shape") != [n]:
            raise _Invalid("ids of another dtype or shape")
        try:
            objects = _read_npy(paths["ids.npy"], (n,), dtype)
        except FileNotFoundError:
            raise _Invalid(f"{paths['ids.npy']} is missing") from None
        ids_bytes = objects.tobytes()
    else:
        raise _Invalid("ids of an unknown kind")
    problem = _ids_problem(objects, n, expected)
    if problem is not None:
        raise _Invalid(problem)
    try:
        kernel = _read_npy(paths["kernel.npy"], (n, n), np.dtype("<f8"))
    except FileNotFoundError:
        raise _Invalid(f"{paths['kernel.npy']} is missing") from None
    if header.get("sha256") != _digest(key, kernel, record, ids_bytes):
        raise _Invalid("its content does not match its digest (torn or mixed files)")
    problem = _kernel_problem(kernel)
    if problem is not None:
        raise _Invalid(problem)
    weak = header.get("weak", False)  # absent in entries stored before the flag existed
    if type(weak) is not bool:
        raise _Invalid("a weak flag that is not true or false")
    return kernel.astype(float), objects, weak


def _read_entry(entries, key, expected, warned):
    """Return the valid entry of ``key`` in ``entries``, else None.

    An entry that cannot be used is named in a warning (once per call:
    ``warned``) and left to be replaced.
    """
    path = _entry_paths(entries, key)["json"]
    try:
        return _load_entry(entries, key, expected)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        reason = f"{entries} is not a folder"
    except _Invalid as error:
        reason = str(error)
    except Exception as error:  # noqa: BLE001 - whatever the folder holds, the user is not to blame
        reason = f"{type(error).__name__}: {error}"
    if not warned:
        warned.append(True)
        warn_user(f"Discarded the cached kernel {path} of KernelDistances(memory=...): "
                  f"{reason}. Learning it again (and storing it anew).", UserWarning)
    return None


# -- writing: atomic, into folders that are megkernel's own

#: Why a folder cannot be written: permissions, a read-only file system, a
#: full disk or quota. The kernel is then learned without being stored.
_UNWRITABLE = frozenset(getattr(errno, name) for name in (
    "EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT") if hasattr(errno, name))

def _own_folder(path, *, link_ok=False):
    """Make the folder ``path`` (False: the memory folder cannot be written).

    A file there, or a symbolic link (unless ``link_ok``: the user's own
    folder), is refused with a ValueError naming it.
    """
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        pass  # a file there: refused below
    except NotADirectoryError:  # a file among its parents
        blocker = next((parent for parent in _parents(path)
                        if os.path.lexists(parent) and not os.path.isdir(parent)), path)
        raise ValueError(f"KernelDistances(memory=...) cannot make the folder {path}: "
                         f"{blocker} is not a folder. Give another memory folder.") from None
    except OSError as error:
        if error.errno in _UNWRITABLE:
            return False
        raise
    info = os.stat(path) if link_ok else os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
        raise ValueError(f"{path} is {what}: KernelDistances(memory=...) keeps its kernels "
                         "and locks in folders of its own there. Remove it, or give "
                         "another memory folder.")
    return True


def _parents(path):
    """``path`` and the folders above it, the outermost first."""
    chain = [path]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    return chain[::-1]


def _write_atomic(folder, final, write):
    """Write ``final`` by ``write(handle)``: a temporary file of ``folder``, then moved.

    The move is one step: readers see the old file or the new one.
    """
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(temporary, final)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _write_entry(entries, key, kernel, objects, weak=False):
    """Store an entry: the arrays first, the header (which names them) last."""
    record, array = _ids_record(objects)
    kernel = np.ascontiguousarray(kernel, dtype="<f8")
    ids_bytes = b"" if array is None else array.tobytes()
    header = {"format": _FORMAT, "version": _FORMAT_VERSION, "key": key, "n": len(objects),
              "kernel": {"dtype": "<f8", "shape": list(kernel.shape)}, "ids": record,
              "sha256": _digest(key, kernel, record, ids_bytes), "weak": bool(weak)}
    paths = _entry_paths(entries, key)
    if array is not None:
        _write_atomic(entries, paths["ids.npy"],
                      lambda handle: np.lib.format.write_array(handle, array,
                                                               allow_pickle=False))
    _write_atomic(entries, paths["kernel.npy"],
                  lambda handle: np.lib.format.write_array(handle, kernel, allow_pickle=False))
    _write_atomic(entries, paths["json"],
                  lambda handle: handle.write(json.dumps(header).encode()))


# -- locks: no symbolic link followed, a bounded wait

def _open_lock(path):
    """Open (or create) the lock file ``path``: a regular file, never a link."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"The lock file {path} is a symbolic link: KernelDistances "
                             "never follows one in its memory folder. Remove it.") from None
        if error.errno == errno.EISDIR:
            raise ValueError(f"The lock file {path} is a folder: remove it, or give "
                             "KernelDistances another memory folder.") from None
        raise
    handle = os.fdopen(fd, "r+b", buffering=0)
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        handle.close()
        raise ValueError(f"The lock file {path} is not a plain file of its own (a device, "
                         "a FIFO or a hard link): remove it.")
    return handle


def _holder_of(handle):
    """Who holds the lock of ``handle``, as its holder wrote it (None: unknown)."""
    try:
        text = os.pread(handle.fileno(), 200, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return "".join(c for c in text if c.isprintable())[:120] or None


#: What ``flock`` says on a file system without file locks (some NFS, SMB and
#: FUSE mounts): no lock can be had there, however long one waits.
_NO_LOCKS = frozenset(getattr(errno, name) for name in (
    "ENOLCK", "EOPNOTSUPP", "ENOTSUP", "ENOSYS", "EINVAL") if hasattr(errno, name))


def _wait_for_lock(handle, path):
    """Take the exclusive lock of ``handle``, waiting at most :data:`LOCK_TIMEOUT` s.

    Return False when the file system has no file locks (nothing taken).
    """
    deadline = time.monotonic() + LOCK_TIMEOUT
    pause = 0.01
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            pass
        except OSError as error:
            if error.errno in _NO_LOCKS:
                return False
            raise
        if time.monotonic() >= deadline:
            holder = _holder_of(handle)
            raise TimeoutError(
                f"Waited {LOCK_TIMEOUT:g} s for the lock {path} of a kernel another "
                f"process is learning ({'held by ' + holder if holder else 'holder unknown'})."
                " If that process is stuck or was interrupted while holding it, end it (or "
                "its interactive session); the lock is released when it exits.")
        time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        pause = min(2 * pause, LOCK_POLL)
    with suppress(OSError):  # say who holds it, for whoever waits
        holder = f"pid {os.getpid()} on {socket.gethostname()}".encode()
        os.ftruncate(handle.fileno(), 0)
        os.pwrite(handle.fileno(), holder, 0)
    return True


@contextmanager
def _disk_lock(folder, key):
    """Hold an exclusive lock on ``key`` in ``folder``.

    So processes wanting the same kernel learn it once (the others wait,
    then read it). Yields False when the folder cannot be written (no lock).

    Called by this process's one learner of ``key`` only (_become_learner),
    so a lock file of ``key`` still open here was left by an interrupted
    block: it is closed first (which releases its lock; flock locks of two
    open files conflict even within one process).
    """
    locks = os.path.join(folder, _LOCKS)
    if fcntl is None:  # pragma: no cover - Windows: processes may learn a kernel twice
        yield True
        return
    if not _own_folder(locks):
        yield False
        return
    abandoned = _disk_handles.pop(key, None)
    if abandoned is not None:
        abandoned.close()
    try:
        handle = _open_lock(os.path.join(locks, key + ".lock"))
    except OSError as error:
        if error.errno not in _UNWRITABLE:
            raise
        yield False
        return
    try:
        _disk_handles[key] = handle  # before the lock: whoever comes next can close it
        if not _wait_for_lock(handle, os.path.join(locks, key + ".lock")):
            # entries are still written atomically: at worst learned twice
            _warn_once(("no locks", folder),
                       f"KernelDistances cannot lock files in its memory folder {folder} "
                       "(its file system has no file locks): processes sharing it may "
                       "each learn a kernel, which they store and read as usual.")
        yield True
    finally:
        handle.close()  # releases the lock; until then, registered (for whoever comes next)
        if _disk_handles.get(key) is handle:
            del _disk_handles[key]


def _learn(fit):
    """``fit()``'s ``(kernel, objects, weak)``, counted."""
    kernel, objects, *weak = fit()
    _cache_stats["fits"] += 1
    return kernel, objects, bool(weak[0]) if weak else False


def _disk_cached(folder, key, fit, expected):
    """``(kernel, objects, weak)`` of ``key`` from ``folder``, else learned and stored there.

    A valid entry is read without any lock (so a read-only folder serves
    its kernels); else, under the key's lock, read again (another process
    may have stored it meanwhile) or learned and stored. A folder that
    cannot be written is read only: the kernel is learned without being
    stored, with a warning once per folder.
    """
    entries = os.path.join(folder, _ENTRIES)
    warned = []
    if os.path.isdir(folder):
        found = _read_entry(entries, key, expected, warned)
        if found is not None:
            return found
    writable = (_own_folder(folder, link_ok=True) and _own_folder(entries)
                and os.access(entries, os.W_OK))
    if writable:
        with _disk_lock(folder, key) as writable:
            if writable:
                found = _read_entry(entries, key, expected, warned)
                if found is not None:
                    return found
                kernel, objects, weak = _learn(fit)
                _store_on_disk(entries, key, kernel, objects, expected, weak)
                return kernel, objects, weak
    _warn_once(("read-only", folder),
               f"KernelDistances cannot write to its memory folder {folder} (read-only or "
               "full): it reads the kernels stored there but learns the others without "
               "storing them.")
    return _learn(fit)


def _store_on_disk(entries, key, kernel, objects, expected, weak=False):
    """Store a learned kernel, unless no process could use it (with a warning once)."""
    kernel = np.asarray(kernel, dtype=float)
    kernel = 0.5 * kernel + 0.5 * kernel.T  # as the in-process cache keeps it
    objects = np.asarray(objects)
    if objects.ndim != 1 or kernel.shape != (len(objects), len(objects)):
        return  # the caller refuses it
    problem = _ids_problem(objects, len(objects), expected) or _kernel_problem(kernel)
    if problem is None:
        try:
            _ids_record(objects)
        except TypeError as error:
            problem = (f"{error} cannot be stored without pickle (only str, int, float, "
                       "bool and tuples of them can)")
    if problem is not None:
        _warn_once(("unstored", entries, problem),
                   f"KernelDistances keeps a learned kernel in this process only, not in "
                   f"its memory folder: {problem}, which no process could check on reading.")
        return
    try:
        _write_entry(entries, key, kernel, objects, weak)
    except OSError as error:
        _warn_once(("unwritten", entries),
                   f"KernelDistances could not store a learned kernel in {entries} "
                   f"({error}); it stays in this process only.")


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

    **The rule: nothing here can be left held by an exception** (as for
    the BLAS pin): no lock is held while a kernel is learned. The
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


def _cached_entry(learner, key, fit, memory, expected=None):
    """Return the entry of ``key``, learning it if no cache holds it.

    From this process's cache, else from the on-disk ``memory``, else
    learned by ``fit()`` (and stored in both); one thread learns it, the
    others wait (:func:`_become_learner`). ``expected()``: the
    :class:`Expected` ids, checked on what the folder holds.
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
        folder = _check_memory(memory)
        if folder is None:
            _warn_in_worker(learner)
            kernel, objects, weak = _learn(fit)
        else:
            kernel, objects, weak = _disk_cached(folder, key, fit,
                                           Expected() if expected is None else expected())
        kernel = np.asarray(kernel, dtype=float)
        # a learner's kernel (eigenvectors' products) is symmetric to round-off only:
        # made exactly so, its distances are too (halves first: no overflow near the max)
        entry = _Entry(_frozen(0.5 * kernel + 0.5 * kernel.T), _frozen(np.asarray(objects)),
                       bool(weak))
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



def expected_ids(learner, *, objects=None, pairs=None, named=None):
    """Return what a learned kernel's ids must be (:class:`Expected`).

    The ids the learner declares (``declared_objects`` of the protocol),
    else ``objects`` (a matrix's ids, which a learner without its own learns
    over), exactly; else the ids ``pairs`` names (or ``named``), all present.
    """
    own = declared_objects_of(learner)
    exact = own if own is not None else objects
    if exact is not None:
        return Expected(exact=_as_list(exact))
    if pairs is not None:
        try:
            values = (pairs.to_numpy(dtype=object) if isinstance(pairs, pd.DataFrame)
                      else np.asarray(pairs, dtype=object))
            named = pd.unique(values.ravel()).tolist() if values.ndim == 2 else None
        except (TypeError, ValueError):  # the learner refuses such pairs itself
            named = None
    return Expected(named=None if named is None else _as_list(named))
