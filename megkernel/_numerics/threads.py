"""BLAS thread pinning for small dense linear algebra.

Products of matrices below :data:`SINGLE_THREAD_BELOW` rows are faster on one
BLAS thread than on several: the threads' start-up and synchronisation cost
more than they share (``benchmarks/bench_speed.py`` times both).

**The rule: nothing here can be left held by an exception.** A
``KeyboardInterrupt`` can arrive between any two lines, also inside an
``__exit__`` or a ``finally`` clause, so no lock is taken (only the main
thread ever changes the state below, so none is needed) and no counter is
kept: the pin's holders are the running ``with`` blocks themselves, each
remembered with the frame that runs it. A holder whose frame has left the
call stack (its block was abandoned by an interrupt before its exit
finished) is dropped by the next entry or exit, and the BLAS thread counts
saved by the first holder are restored when no running holder is left. An
interrupt at any point can therefore leave at most a pin that the next call
finishes (``tests/test_interrupts.py`` checks this by raising one at every
line of this module); it can never make a later call wait.
"""

from __future__ import annotations

import sys
import threading

from threadpoolctl import ThreadpoolController

__all__ = ["SINGLE_THREAD_BELOW", "blas_threads"]

#: Exponents smaller than this run with the BLAS pinned to one thread.
SINGLE_THREAD_BELOW = 1000

_holders = []  # the main thread's running pinning blocks, outermost first
_saved = None  # [(library, thread count)] saved by the pin, None when unpinned
_controller = None  # made once: finding the BLAS libraries costs milliseconds


class blas_threads:  # noqa: N801 - used like a function: ``with blas_threads(d):``
    """Context pinning the BLAS to one thread for exponents of ``size`` rows.

    A BLAS limit is process-wide, and OpenBLAS does not reliably restore one
    set while other threads use it (two threads pinning in turn can leave
    it at one thread). So only the main thread pins
    (nested blocks share the outermost's pin, which the last one to leave
    restores); blocks in other threads, and large exponents, run with the
    BLAS as configured. See the module docstring for what an interrupt
    leaves.
    """

    __slots__ = ("_size", "_frame")

    def __init__(self, size):
        self._size = size
        self._frame = None

    def __enter__(self):
        if (self._size < SINGLE_THREAD_BELOW
                and threading.current_thread() is threading.main_thread()):
            frame = sys._getframe(1)
            _drop_abandoned(frame)
            if _saved is None:
                _pin()
            elif not _holders:  # a release was interrupted half-way: pin again
                _set_all(1)
            self._frame = frame
            _holders.append(self)  # last: an interrupt before it leaves no holder
        return self

    def __exit__(self, *exc_info):
        if self._frame is not None:
            _drop_abandoned(sys._getframe(1), leaving=self)
            if not _holders:
                _release()
            self._frame = None  # no frame <-> holder cycle outlives the block


def _drop_abandoned(frame, leaving=None):
    """Drop ``leaving`` and every holder whose frame has left the call stack.

    The call stack is the one that ends at ``frame``; a holder off it is a
    block an interrupt abandoned.
    """
    if not _holders:
        return
    running = set()
    while frame is not None:
        running.add(id(frame))  # holders keep their frames alive: ids are unique
        frame = frame.f_back
    _holders[:] = [holder for holder in _holders
                   if holder is not leaving and id(holder._frame) in running]


def _pin():
    """Save every BLAS library's thread count (first), then set each to one."""
    global _saved, _controller
    if _controller is None:
        _controller = ThreadpoolController()
    libraries = _controller.select(user_api="blas").lib_controllers
    _saved = [(library, library.get_num_threads()) for library in libraries]
    _set_all(1)


def _set_all(threads):
    for library, _ in _saved:
        library.set_num_threads(threads)


def _release():
    """Restore the saved counts, then forget them.

    Idempotent, so an interrupted release is simply done again.
    """
    global _saved
    if _saved is not None:
        for library, threads in _saved:
            library.set_num_threads(threads)
        _saved = None
