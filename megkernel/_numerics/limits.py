"""The package's numeric limits, each defined once.

Validation (:mod:`.validation`), the solvers and the estimators import them
from here; none of them writes the numbers again.
"""

from __future__ import annotations

__all__ = ["MIN_SCALE", "MAX_SCALE", "MIN_TRACE", "MAX_TRACE", "MAX_STEP",
           "MAX_DENSE_OBJECTS"]

#: Magnitudes within this range keep squared distances, their squared errors
#: and every threshold derived from them in double precision: a kernel's
#: trace, the targets, and the largest entry of a (scale-free) constraint
#: matrix must lie in it.
MIN_SCALE, MAX_SCALE = 1e-100, 1e100

#: Traces (and targets) of kernels: the range above.
MIN_TRACE, MAX_TRACE = MIN_SCALE, MAX_SCALE

#: Largest exponent change one MEG trial may make: far below overflow of the
#: exponent, its eigenvalues and the rank-one eigenproblem (whose arithmetic
#: squares the step), and far beyond any useful step (a step of 50 already
#: makes W a projection to double precision).
MAX_STEP = 1e100

#: Largest number of objects ``d`` for which a low-rank model is formed as
#: its ``d x d`` kernel (``kernel_``, DefiniteBoost's result): 0.2 GiB.
MAX_DENSE_OBJECTS = 5000
