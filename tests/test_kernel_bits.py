"""The compiled Lanczos kernel gives the same bits as its Python source and as recorded.

Compile options (optimisation level, inlining, wrappers, fastmath flags) and
how the arguments are typed may change how fast the kernel compiles, never
what it computes: every float operation is done in the source's order, so
the compiled kernel equals the same function run by the interpreter bit for
bit, and a fixed run equals the fingerprint recorded from the kernel as it
was when its compile time was cut (2026-12-05). The kernel is called directly
(no ``eigh`` between calls), so only IEEE arithmetic and the C library's
``exp`` and ``log`` enter the recorded bits.
"""

import hashlib

import numpy as np
import pytest

from megkernel._engines import _lanczos_kernels as kernels
from megkernel._engines import lanczos as _lanczos


def _arguments(d, n, learning_rate, seed=0):
    """A run of ``n`` trials from ``I/d`` towards a random rank-3 target."""
    rng = np.random.default_rng(seed)
    A = np.eye(d) / d
    nbr, deg, dense, values = kernels.build_structure(A, _lanczos.DENSE_FRACTION)
    vectors, coefficients = kernels.make_workspace(d, _lanczos.MAX_STEPS)
    a = rng.integers(0, d, n).astype(np.intp)
    b = (a + rng.integers(1, d, n)) % d
    X = rng.standard_normal((d, 3))
    K = X @ X.T / np.trace(X @ X.T)
    y = K[a, a] + K[b, b] - 2 * K[a, b]
    log_z = float(np.log(d) + 1.0 / d)  # log tr exp(I/d)
    return (A, values, nbr, deg, a, b, y, learning_rate, 1.0, np.zeros(n), 0, log_z, 0,
            bool(dense), *_lanczos._settings(), vectors, coefficients,
            kernels.make_counters())


def _outcome(kernel, args):
    status = kernel(*args)
    A, predictions, counters = args[0], args[9], args[-1]
    return status, A, predictions, counters


@pytest.mark.parametrize("d, n, learning_rate, what", [
    (30, 400, 0.5, "dense products, Gauss-Legendre panels, breakdowns"),
    (200, 150, 0.5, "sparse products throughout, Z' - Z from traces"),
    (20, 100, 400.0, "long steps: many panels, a re-anchor"),
])
def test_compiled_kernel_equals_its_source_interpreted(d, n, learning_rate, what):
    """``pair_trials`` compiled and run by the interpreter: same status, the
    same exponent, predictions and counters, bit for bit ({what})."""
    compiled = _outcome(kernels.pair_trials, _arguments(d, n, learning_rate))
    interpreted = _outcome(kernels.pair_trials.py_func, _arguments(d, n, learning_rate))
    assert compiled[0] == interpreted[0]
    for got, expected in zip(compiled[1:], interpreted[1:]):
        np.testing.assert_array_equal(got, expected)
    assert compiled[3][0] > 0  # trials were run


#: SHA-256 of a d = 52 run of 2000 trials (dense after a few hundred) and a
#: d = 300 run of 2000 (sparse throughout), as :func:`_fingerprint` hashes them.
RECORDED = {
    (52, 2000): "73f57beae5fd2a8e05f5b976ec6828bf3c8918ea6b80c66ebeac65c6c3384cba",
    (300, 2000): "b598a9d5814889c67955a050f1d8729a61fbe63e2f1988553a7b1c6754f4222f",
}


def _fingerprint(d, n):
    status, A, predictions, counters = _outcome(kernels.pair_trials,
                                                _arguments(d, n, 0.5, seed=1))
    digest = hashlib.sha256()
    digest.update(repr(tuple(float(x) if isinstance(x, float) else int(x)
                             for x in status)).encode())
    for array in (A, predictions, counters):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("d, n", list(RECORDED))
def test_kernel_fingerprint_is_unchanged(d, n):
    """The same bits as the kernel recorded before its compile was cut."""
    assert _fingerprint(d, n) == RECORDED[d, n]
