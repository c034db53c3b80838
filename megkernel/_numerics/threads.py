"""BLAS thread pinning for small dense linear algebra.

Products of matrices below :data:`SINGLE_THREAD_BELOW` rows are faster on one
BLAS thread than on several (measured in ``benchmarks/bench_speed.py``).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

__all__ = ["SINGLE_THREAD_BELOW", "blas_threads"]

#: Exponents smaller than this run with the BLAS pinned to one thread.
SINGLE_THREAD_BELOW = 1000

_lock = threading.Lock()
_holders = 0  # calls inside blas_threads, across threads
_limiter = None  # the one active limit, entered by the first holder
_controller = None  # made once: finding the BLAS libraries costs milliseconds


@contextmanager
def blas_threads(size):
    """Context pinning the BLAS to one thread for exponents of ``size`` rows.

    A BLAS limit is process-wide, and OpenBLAS does not reliably restore one
    set while other threads use it (measured: two threads pinning in turn
    left it at one thread in one run of two). So only the main thread pins
    (nested calls count: the outermost sets, it restores); calls from other
    threads, and large exponents, run with the BLAS as configured.
    """
    global _holders, _limiter, _controller
    if size >= SINGLE_THREAD_BELOW or threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        if _holders == 0:
            if _controller is None:
                _controller = ThreadpoolController()
            _limiter = _controller.limit(limits=1, user_api="blas")
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _limiter.restore_original_limits()
                _limiter = None
