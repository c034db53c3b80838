"""Progress output: tqdm bars on stderr, detail lines, the numba compile note.

Estimators with ``verbose`` and the command line draw their progress here:

- :func:`bar`: one tqdm bar (stderr, rate and ETA), or a silent stand-in.
  The rate and the ETA are measured from the end of the bar's first update
  on, and shown as ``?`` until a later update: the first chunk of work pays
  for numba's compilation (seconds, once) and would otherwise give an ETA of
  hours at the first refresh;
- :class:`ToleranceBar`: a bar that counts towards a run's tolerance (the
  share of the way on a log scale), for fits that end by a stopping rule;
- :func:`detail`: one line above the bars (``verbose=2``'s per-checkpoint
  detail), on stderr;
- :func:`note_compiling`: one line, "compiling the numba kernels (first run
  only, about N s)…", before the first use of an engine whose numba cache
  is cold — checked cheaply from numba's cache index files (``__pycache__``
  beside the engine modules, or ``NUMBA_CACHE_DIR``), without compiling.
  The next bar then reads "compiling" until every engine noted has compiled
  (checked at its updates), then writes the time it took ("compiled … in
  14.2 s"), and its rate leaves out the updates that waited on it: the wait
  is named for what it is, measured, rather than shown as a stalled bar or
  a false ETA.
  Which engines compile, and for how long, is the engine registry's
  (:attr:`~megkernel._engines.Engine.compiled`,
  :attr:`~megkernel._engines.Engine.compile_seconds`).
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ._engines import ENGINES
from ._solvers.definiteboost_choice import tolerance_share

__all__ = ["bar", "detail", "note_compiling", "numba_cache_cold", "tolerance_share",
           "ToleranceBar"]

#: Engines whose compile note was printed in this process.
_NOTED = set()

#: The compile a note announced and no bar has yet seen finish:
#: ``(time.perf_counter() at the note, engine names)``, else ``None``.
_COMPILING = None

#: The postfix of a bar while the numba kernels compile.
COMPILING_POSTFIX = "compiling the numba kernels (first run only)"


class _NoBar:
    """What :func:`bar` returns when disabled: nothing drawn, nothing paid.

    A disabled tqdm still costs about as much as a MEG trial on a small kernel.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def reset(self, total=None):
        pass

    def close(self):
        pass


_NO_BAR = _NoBar()


class _WarmingBar(tqdm):
    """A tqdm bar whose rate and ETA leave out its first update.

    The first chunk of work (the first trials, the first iteration) is also
    when numba compiles the engine, a few seconds once, and when caches and
    decompositions are first built: a rate that counts it predicts hours for
    a run of seconds, and tqdm's smoothing carries the error over many
    refreshes. So the rate is measured from the end of the first update
    (its items are counted on the bar, its time is not), and until a later
    update has been measured the rate and the ETA read ``?``. A finished bar
    shows the average rate over the whole run.

    Parameters
    ----------
    clock : callable, optional
        Seconds as a float (default: tqdm's, ``time.time``); tests pass a
        fake clock.
    **kwargs
        As for :class:`tqdm.tqdm`.
    """

    def __init__(self, *args, clock=None, **kwargs):
        #: ``(time, n)`` at the end of the first update; ``None`` before it.
        self._warm_mark = None
        super().__init__(*args, **kwargs)
        if clock is not None:
            self._time = clock
            self.start_t = self.last_print_t = clock()
        #: Whether this bar waits on the compile a note announced.
        self._compiling = _COMPILING is not None and not self.disable
        if self._compiling:
            self.set_postfix_str(COMPILING_POSTFIX)

    def update(self, n=1):
        compiling = self._compiling
        if compiling:
            self.check_compiled(n)
        self._hide_rate = compiling  # this update's interval waited on the compile
        displayed = super().update(n)
        self._hide_rate = False
        # the rate starts afresh after the first update, and after each one
        # that waited on the compile (a second engine may compile later on)
        if (self._warm_mark is None or compiling) and not self.disable:
            now = self._time()
            self._warm_mark = (now, self.n)
            # forget the first interval: the next one starts the rate afresh
            self._ema_dn = type(self._ema_dn)(self.smoothing)
            self._ema_dt = type(self._ema_dt)(self.smoothing)
            self.last_print_t, self.last_print_n = now, self.n
        return displayed

    def check_compiled(self, n=0):
        """Write how long the compile took once every noted engine has compiled.

        Called at each update while the bar waits on the compile (``n``: the
        items that update adds). An engine counts as compiled once one of
        its numba kernels has been (the call has run it).
        """
        global _COMPILING
        if _COMPILING is None:  # another bar reported it
            self._stop_compiling()
            return
        since, engines = _COMPILING
        if not all(_engine_compiled(name) for name in engines):
            return
        _COMPILING = None
        self._stop_compiling()
        seconds = time.perf_counter() - since
        done = self.n + n
        unit = self.unit if done == 1 else f"{self.unit}s"
        work = "" if self.unit == "%" or not done else f", with the first {done:g} {unit},"
        self.write(f"compiled the numba kernels{work} in {seconds:.1f} s "
                   "(cached: later runs skip this)", file=self.fp)

    def _stop_compiling(self):
        self._compiling = False
        if self.postfix and self.postfix.endswith(COMPILING_POSTFIX):
            self.set_postfix_str("", refresh=False)

    @property
    def format_dict(self):
        values = super().format_dict
        if self.disable or (self.total is not None and self.n >= self.total):
            return values  # finished: the average rate, and no time remaining
        if self._warm_mark is None or getattr(self, "_hide_rate", False):
            # the first update, or one that waited on the compile: its rate counts it
            values["rate"] = 0.0  # tqdm prints "?" for a rate of 0 and for its ETA
        elif values["rate"] is None:  # no refresh since the first update: its average
            since, done = self._warm_mark
            elapsed = self._time() - since
            values["rate"] = (self.n - done) / elapsed if self.n > done and elapsed > 0 else 0.0
        return values


def bar(*, total, desc, unit, enabled=True, leave=True, clock=None, bar_format=None):
    """Return a tqdm progress bar on stderr (a no-op stand-in when not ``enabled``).

    Parameters
    ----------
    total : int
        Items the bar counts to.
    desc, unit : str
        The bar's label and the name of its items.
    enabled : bool, default=True
        ``False``: a stand-in that draws nothing and costs nothing.
    leave : bool, default=True
        Keep the finished bar on screen.
    clock : callable, optional
        Time source of the bar (tests: a fake clock).
    bar_format : str, optional
        tqdm's ``bar_format`` (default: tqdm's).

    Returns
    -------
    bar : tqdm.tqdm or _NoBar
        A context manager with ``update``, ``set_postfix_str`` and
        ``close``; its rate and ETA leave out the first update (numba's
        compilation), see :class:`_WarmingBar`.
    """
    if not enabled:
        return _NO_BAR
    return _WarmingBar(total=total, desc=desc, unit=unit, disable=not enabled, leave=leave,
                       file=sys.stderr, dynamic_ncols=True, mininterval=0.2, smoothing=0.1,
                       clock=clock, bar_format=bar_format)


class ToleranceBar:
    """A bar that counts towards a run's tolerance, not towards ``max_iter``.

    A run that stops when its largest violation reaches a tolerance ends by
    that rule, long before ``max_iter`` as a rule: a bar of iterations out of
    ``max_iter`` would show a false ETA. This one shows the percentage of the
    way from the first violation to the tolerance on a log scale (its best so
    far, so the bar never runs back), the ETA to the tolerance at that pace,
    and the iterations made, their rate and the current violation in its
    postfix.

    Parameters
    ----------
    desc : str
        The bar's label.
    enabled : bool, default=True
        ``False``: nothing drawn.
    clock : callable, optional
        Time source of the bar (tests: a fake clock).
    measure : str, default="violation"
        What the postfix calls the run's measure above its tolerance.
    """

    def __init__(self, desc, *, enabled=True, clock=None, measure="violation"):
        self.bar = bar(total=100, desc=desc, unit="%", enabled=enabled, clock=clock,
                       bar_format=("{desc}: {percentage:3.0f}% of the way to tol|{bar}| "
                                   "[{elapsed}<{remaining}{postfix}]"))
        self.first = self.best = None
        self.iterations = 0
        self.measure = measure
        self.clock = clock or time.perf_counter
        self.start = self.clock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
        return False

    def update(self, iterations, excess, goal):
        """Show the run after ``iterations``: ``excess`` above 0, ``goal`` the tolerance.

        ``excess`` is the largest violation in units where the run stops at
        ``excess <= goal`` (``goal > 0``). Fewer ``iterations`` than at the
        last call start a new run (the next ``gamma`` tried, the refit): the
        bar starts again.
        """
        if getattr(self.bar, "_compiling", False):
            self.bar.check_compiled()
        if self.first is None or iterations < self.iterations:  # a new run: afresh
            if self.first is not None:
                self.bar.reset()
                self.start = self.clock()
            self.first = self.best = excess
        self.iterations = iterations
        self.best = min(self.best, excess)
        share = int(100 * tolerance_share(self.first, self.best, goal))
        if share > self.bar.n:
            self.bar.update(share - self.bar.n)
        elapsed = self.clock() - self.start
        rate = f"{iterations / elapsed:.3g} iter/s, " if elapsed > 0 else ""
        self.bar.set_postfix_str(f"iter {iterations}, {rate}{self.measure} "
                                 f"{excess - goal:.3g}", refresh=False)


def detail(message):
    """Write one detail line to stderr, above any bar."""
    tqdm.write(message, file=sys.stderr)


def _dispatchers(module):
    return [value for name, value in vars(module).items()
            if not name.startswith("_") and hasattr(value, "_cache")]


def _engine_compiled(engine):
    """Whether one of ``engine``'s numba kernels is compiled in this process."""
    module = ENGINES[engine].compiled if engine in ENGINES else None
    return module is None or any(len(dispatcher.overloads) > 0
                                 for dispatcher in _dispatchers(module))


def numba_cache_cold(engine):
    """Whether the numba kernels of ``engine`` will compile on first use.

    True when a public compiled function of the engine has no valid cache
    entry (none written yet, the source changed since, or an index numba
    cannot read, which it then compiles anew). False for engines without
    numba kernels, and whenever numba's cache cannot be inspected (its index
    format is not a public interface).
    """
    module = ENGINES[engine].compiled if engine in ENGINES else None
    if module is None:
        return False
    for dispatcher in _dispatchers(module):
        try:
            if len(dispatcher.overloads) > 0:
                continue
            load_index = dispatcher._cache._cache_file._load_index
        except AttributeError:  # any numba-internal change: say nothing
            return False
        try:
            if not load_index():
                return True
        except Exception:  # noqa: BLE001 - an index numba cannot read: compiled anew
            return True
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
    global _COMPILING
    _NOTED.update(cold)
    seconds = sum(ENGINES[name].compile_seconds for name in cold if name in ENGINES)
    tqdm.write(f"compiling the numba kernels (first run only, about {seconds:g} s on an "
               "idle core)…", file=file or sys.stderr)
    _COMPILING = (time.perf_counter(), tuple(cold))
    return True
