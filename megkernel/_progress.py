"""Progress output: tqdm bars on stderr, detail lines, the numba compile note.

Estimators with ``verbose`` and the command line draw their progress here:

- :func:`bar`: one tqdm bar (stderr, rate and ETA), or a silent stand-in;
- :func:`detail`: one line above the bars (``verbose=2``'s per-checkpoint
  detail), on stderr;
- :func:`note_compiling`: one line, "compiling the numba kernels (first run
  only, about N s)…", before the first use of an engine whose numba cache
  is cold — checked cheaply from numba's cache index files (``__pycache__``
  beside the engine modules, or ``NUMBA_CACHE_DIR``), without compiling.
  Which engines compile, and for how long, is the engine registry's
  (:attr:`~megkernel._engines.Engine.compiled`,
  :attr:`~megkernel._engines.Engine.compile_seconds`).
"""

from __future__ import annotations

import sys

from tqdm import tqdm

from ._engines import ENGINES

__all__ = ["bar", "detail", "note_compiling", "numba_cache_cold"]

#: Engines whose compile note was printed in this process.
_NOTED = set()


class _NoBar:
    """What :func:`bar` returns when disabled: nothing drawn, nothing paid.

    A disabled tqdm costs ~40 us, as much as a MEG trial at d = 52.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def close(self):
        pass


_NO_BAR = _NoBar()


def bar(*, total, desc, unit, enabled=True, leave=True):
    """Return a tqdm progress bar on stderr (a no-op stand-in when not ``enabled``)."""
    if not enabled:
        return _NO_BAR
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=leave,
                file=sys.stderr, dynamic_ncols=True, mininterval=0.2, smoothing=0.1)


def detail(message):
    """Write one detail line to stderr, above any bar."""
    tqdm.write(message, file=sys.stderr)


def _dispatchers(module):
    return [value for name, value in vars(module).items()
            if not name.startswith("_") and hasattr(value, "_cache")]


def numba_cache_cold(engine):
    """Whether the numba kernels of ``engine`` will compile on first use.

    True when a public compiled function of the engine has no valid cache
    entry (none written yet, or the source changed since). False for
    engines without numba kernels, and whenever numba's cache cannot be
    inspected (its index format is not a public interface).
    """
    module = ENGINES[engine].compiled if engine in ENGINES else None
    if module is None:
        return False
    try:
        return any(not dispatcher._cache._cache_file._load_index()
                   for dispatcher in _dispatchers(module) if len(dispatcher.overloads) == 0)
    except Exception:  # noqa: BLE001 - any numba-internal change: say nothing
        return False


def note_compiling(engines, *, file=None):
    """Print the compile note once per process if an engine's cache is cold.

    Parameters
    ----------
    engines : iterable of str
        Engine names about to run (``"rank-one"``, ``"lanczos"``, ...).
    file : file-like, default=sys.stderr

    Returns
    -------
    printed : bool
    """
    cold = [name for name in dict.fromkeys(engines)
            if name not in _NOTED and numba_cache_cold(name)]
    if not cold:
        return False
    _NOTED.update(cold)
    seconds = sum(ENGINES[name].compile_seconds for name in cold if name in ENGINES)
    tqdm.write(f"compiling the numba kernels (first run only, about {seconds:g} s)…",
               file=file or sys.stderr)
    return True
