"""BLAS thread pinning for small dense linear algebra.

Products of matrices below :data:`SINGLE_THREAD_BELOW` rows are faster on one
BLAS thread than on several (measured in ``benchmarks/bench_speed.py``).
"""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

__all__ = ["SINGLE_THREAD_BELOW", "blas_threads"]

#: Exponents smaller than this run with the BLAS pinned to one thread.
SINGLE_THREAD_BELOW = 1000

_controller = None


def blas_threads(size):
    """Context pinning the BLAS to one thread for exponents of ``size`` rows."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    limit = 1 if size < SINGLE_THREAD_BELOW else None
    return _controller.limit(limits=limit, user_api="blas")
