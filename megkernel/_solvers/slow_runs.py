"""A run that will take long says so once, from the pace of its first iterations.

An iterative fit's end is the sooner of ``max_iter`` and its tolerance: an
ordinary run converges long before ``max_iter``, so an estimate from
``max_iter`` alone alarms about minutes for a run of seconds. Progress
towards the tolerance is the share of the way a quantity that falls
geometrically to it (a run's largest violation, the gain of an iteration)
has come from its first value down to the tolerance on a log scale
(:func:`~.definiteboost_choice.tolerance_share`); the time left at the pace
so far is ``elapsed * (1 - share) / share``. A run that stalls short of its
tolerance sees that estimate grow with its elapsed time, and says so.

The pace is that of the iterations after the first: the setup before it (a
first eigendecomposition, a prior's fit: seconds at thousands of objects) is
paid once, not per iteration. The estimate is made once the run has taken
:data:`SLOW_RUN_AFTER` seconds and said (by the caller, in its own words)
when it exceeds :data:`SLOW_RUN_SECONDS`: a run that ends sooner says
nothing, so a test's small fits never do.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from .definiteboost_choice import tolerance_share

__all__ = ["SLOW_RUN_AFTER", "SLOW_RUN_SECONDS", "PaceEstimate", "SlowRun", "clock",
           "duration"]

#: A run whose projected time exceeds this many seconds says so once, even
#: without ``verbose``.
SLOW_RUN_SECONDS = 30.0

#: The projection is made after the run has taken this many seconds (an
#: estimate from its first iterations).
SLOW_RUN_AFTER = 3.0

#: The default clock of :class:`PaceEstimate` (seconds; tests put a fake one here).
clock = time.perf_counter


class SlowRun(NamedTuple):
    """What :class:`PaceEstimate` found when a run will take long.

    Attributes
    ----------
    done : int
        Iterations done.
    elapsed : float
        Seconds since the estimate started (setup included).
    pace : float
        Seconds per iteration after the first.
    to_max_iter : float
        Projected seconds of the whole run to ``max_iter``.
    share : float
        Share of the way to the tolerance (log scale, 0 without a measure).
    to_tol : float
        Projected seconds of the whole run to the tolerance (``inf`` without a measure).
    """

    done: int
    elapsed: float
    pace: float
    to_max_iter: float
    share: float
    to_tol: float


class PaceEstimate:
    """Project a run's end from its pace; report it once if beyond :data:`SLOW_RUN_SECONDS`.

    Parameters
    ----------
    max_iter : int
        The run's largest number of iterations.
    goal : float, optional
        The tolerance: the run stops once the measure given to each call
        is at most ``goal``; without it the end is ``max_iter``'s.
    clock : callable, optional
        Time source (default: this module's :data:`clock`, read at each call).
    min_done : int, default=0
        No estimate before this many iterations: a run whose measure moves
        only after a few (a mean over a window) shows no progress at first,
        and its estimate to ``max_iter`` would alarm for nothing.
    """

    def __init__(self, max_iter, goal=None, clock=None, min_done=0):
        self.max_iter = int(max_iter)
        self.goal = goal
        self.min_done = int(min_done)
        self._clock = clock
        self.start = self._now()
        self.first = None  # (time, done) at the first call
        self.first_excess = self.best_excess = None
        self.said = False

    def _now(self):
        return (self._clock or clock)()

    def _share(self, excess):
        """Share of the way to ``goal`` made so far (0 without a measure)."""
        if excess is None or self.goal is None or not self.goal > 0:
            return 0.0
        if self.first_excess is None:
            self.first_excess = self.best_excess = excess
        self.best_excess = min(self.best_excess, excess)
        return tolerance_share(self.first_excess, self.best_excess, self.goal)

    def __call__(self, done, excess=None, goal=None):
        """After ``done`` iterations (``excess``: the run's measure): a :class:`SlowRun` or None.

        ``goal``: the tolerance, where the run knows it only once it has
        started (it then replaces the one given at construction). Returns a
        :class:`SlowRun` once, at the first call that projects the run
        beyond :data:`SLOW_RUN_SECONDS` after :data:`SLOW_RUN_AFTER`
        seconds; ``None`` otherwise.
        """
        if self.said or done <= 0:
            return None
        if goal is not None:
            self.goal = goal
        share = self._share(excess)
        now = self._now()
        if self.first is None:
            self.first = (now, done)
            return None
        elapsed = now - self.start
        if elapsed < SLOW_RUN_AFTER or done <= max(self.first[1], self.min_done):
            return None
        setup, running = self.first[0] - self.start, now - self.first[0]
        pace = running / (done - self.first[1])
        to_max_iter = setup + pace * (self.max_iter - self.first[1])
        to_tol = setup + running / share if share > 0 else np.inf
        if min(to_max_iter, to_tol) <= SLOW_RUN_SECONDS:
            return None
        self.said = True
        return SlowRun(int(done), elapsed, pace, to_max_iter, share, to_tol)


def duration(seconds):
    """``seconds`` in words: ``"45 s"``, ``"12 min"``, ``"3.2 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
