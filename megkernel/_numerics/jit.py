"""``cached_njit``: numba's ``njit(cache=True)`` that survives a damaged cache file.

numba keeps each compiled kernel in ``__pycache__`` (an index ``.nbi`` and
data ``.nbc`` per function) and unpickles them on first use without any
check that they are whole: a truncated, emptied or garbled file (a crash
after the write, a full disk, a bad copy of the folder) makes every later
call of the kernel raise (``EOFError``, ``UnpicklingError``), in every
session, until someone finds the file and removes it. Here such a file is
discarded with a warning naming its folder, and the kernel compiles again
and replaces it. (Like ``.pyc`` files, numba's cache files are trusted not
to be planted: they live beside the package's source.)
"""

from __future__ import annotations

from contextlib import suppress

from numba import njit
from numba.core.caching import FunctionCache

from .._warnings import warn_user

__all__ = ["cached_njit"]

#: Cache folders this process has warned about.
_WARNED = set()


class _DiscardingCache(FunctionCache):
    """numba's cache of a function, compiling anew when its files cannot be read."""

    def __init__(self, py_func):
        super().__init__(py_func)
        self._function = f"{py_func.__module__}.{py_func.__qualname__}"

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as error:  # noqa: BLE001 - whatever the files hold
            # an empty index in its place: the fresh compile's entry is saved
            # over it (numba reads the index again before each save)
            with suppress(Exception):
                self.flush()
            if self.cache_path not in _WARNED:  # once per folder: its kernels alike
                _WARNED.add(self.cache_path)
                warn_user(f"numba's cache of megkernel's compiled kernels in "
                          f"{self.cache_path} could not be read ({self._function}: "
                          f"{type(error).__name__}: {error}); compiling them again (once) "
                          "and replacing the damaged files.", UserWarning)
            return None


def cached_njit(**options):
    """``numba.njit(cache=True, **options)``, discarding cache files it cannot read.

    Parameters
    ----------
    **options
        numba's ``njit`` options.

    Returns
    -------
    decorator : callable
        Compiles a function as ``njit`` does.
    """
    def decorate(function):
        dispatcher = njit(cache=True, **options)(function)
        if isinstance(getattr(dispatcher, "_cache", None), FunctionCache):  # not without JIT
            dispatcher._cache = _DiscardingCache(dispatcher.py_func)
        return dispatcher

    return decorate
