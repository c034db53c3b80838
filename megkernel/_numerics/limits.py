"""The package's numeric limits, each defined once.

Validation (:mod:`.validation`), the solvers and the estimators import them
from here; none of them writes the numbers again.
"""

from __future__ import annotations

__all__ = ["MIN_SCALE", "MAX_SCALE", "MIN_TRACE", "MAX_TRACE", "MAX_STEP",
           "MAX_DENSE_OBJECTS", "MAX_TRIALS", "MAX_TRIAL_BYTES"]

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

#: Most trials (pair updates) one call may be asked to run: ``n_epochs``
#: passes over the pairs (or a stream) beyond it are refused before the
#: first trial. ``2**40`` (about 1.1e12) trials would take days even at the
#: fastest engines' rate; a larger ``n_epochs`` is a mistake, not a plan.
MAX_TRIALS = 2**40

#: Most bytes a call may set aside for per-trial records (the on-line loss
#: of each trial, ``losses_``, and each epoch's order): 8 GiB, 2**30 trials.
MAX_TRIAL_BYTES = 2**33
