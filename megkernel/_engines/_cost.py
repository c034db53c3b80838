"""Cost model behind ``method="auto"``: which engine runs MEG trials fastest.

The choice looks at the state, not at its size alone: the rank-one engine
costs ``O(k^2 m)`` per trial, ``k`` the eigenpairs an update does not
deflate (all of them once every object has been in a trial, whatever the
spectrum looks like: clustered and random spectra alike), ``m`` their
length; the Lanczos engine costs a number of Lanczos steps that grows with
the spread of the exponent's eigenvalues (the Gauss quadrature of ``exp``),
each a product with the exponent (sparse or dense), plus one ``eigh`` at the
end of every call. The constants are CPU seconds measured on one BLAS
thread (2-core AMD EPYC, numpy with OpenBLAS; ``benchmarks/bench_spectra.py``
checks the choices: within 1.25x of the fastest engine on every row). Only
their ratios matter, so a uniformly faster or slower machine picks the same.

Fitted forms (seconds):

* rank-one trial: ``2.6e-6 + 6.07e-9 k^2 + 3.75e-11 k^2 m`` (the secular
  equation and Gu-Eisenstat's eigenvectors, ``O(k^2)``; the eigenvector
  product, a ``k x k`` by ``k x m`` GEMM);
* Lanczos trial of ``s`` steps: ``1e-6 + 2.06e-7 s^2 + 5.7e-9 s^3`` (the
  tridiagonal quadratures, one per step and per Gauss-Legendre node) plus
  ``s`` products, each ``1e-10 d^2 + 2e-9 d`` (dense) or ``1.5e-8 d + 2e-9
  nnz`` (sparse lists); ``s`` is one more than the smallest ``j`` with
  ``(spread / 8)^(2 j) / (2 j)! <= 1e-16``, ``spread = lam_max - lam_min``
  over the eigenvalues the coming pairs have weight on (all of them
  without trials; the error of a ``j``-point Gauss quadrature of ``exp`` on
  an interval of that width; measured 3 to 31 steps, mostly within one
  step of this);
* the end of a Lanczos call: ``2e-4 + 5e-8 d^2 + 1.7e-10 d^3`` (``eigh``
  and the column lists).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["kept_eigenpairs", "lanczos_steps", "rank_one_trial", "lanczos_trial",
           "lanczos_call", "SAMPLES"]

#: Trials of the call looked at to estimate ``k`` (their ``z = V^T v``).
SAMPLES = 4

_EPS = np.finfo(float).eps

#: Rank-one trial: seconds ``R0 + R1 k^2 + R2 k^2 m``.
R0, R1, R2 = 2.6e-6, 6.07e-9, 3.75e-11
#: Lanczos trial: ``L0 + Q2 s^2 + Q3 s^3`` plus ``s`` products.
L0, Q2, Q3 = 1e-6, 2.06e-7, 5.7e-9
#: A dense product: ``DENSE_ENTRY d^2 + DENSE_ROW d``; a sparse one:
#: ``SPARSE_ROW d + SPARSE_ENTRY nnz``.
DENSE_ENTRY, DENSE_ROW, SPARSE_ROW, SPARSE_ENTRY = 1e-10, 2e-9, 1.5e-8, 2e-9
#: Lanczos steps: one more than the smallest ``j`` with ``(spread /
#: STEPS_SCALE)^(2 j) / (2 j)! <= STEPS_TOL``.
STEPS_SCALE, STEPS_TOL = 8.0, 1e-16
#: Eigenvalues whose share of a pair's ``||z||^2`` is at most this do not
#: widen the spread the quadrature sees (their error terms are weighted by it).
SUPPORT_WEIGHT = 1e-16
#: The end of a Lanczos call: ``E0 + E2 d^2 + E3 d^3``.
E0, E2, E3 = 2e-4, 5e-8, 1.7e-10


def _groups(lam):
    """Index of the first eigenvalue of each group of (numerically) equal ones.

    Eigenvalues closer than LAPACK's deflation tolerance (``8 eps`` of the
    largest magnitude, twice: a pair that close always deflates) count once.
    """
    tol = 16.0 * _EPS * max(float(np.abs(lam).max()), 1e-300)
    return np.flatnonzero(np.concatenate([[True], np.diff(lam) > tol]))


def kept_eigenpairs(state, a=None, b=None):
    """Estimated eigenpairs a rank-one update of the next trials keeps (``k``).

    Without trials, the number of distinct eigenvalues. With trials
    ``a, b``, the mean over the first :data:`SAMPLES` of them of the groups
    of equal eigenvalues on which ``z = V^T v`` has a component above round-off
    (``8 eps ||z||``): early in a run from ``I/d`` most eigenvectors miss both
    objects of a pair, or share one eigenvalue, and deflate.
    """
    lam = np.asarray(state.eigenvalues)
    starts = _groups(lam)
    if a is None or len(a) == 0:
        return float(starts.size)
    a = np.asarray(a[:SAMPLES])
    b = np.asarray(b[:SAMPLES])
    z = np.abs(state.pair_coordinates(a, b))
    big = z > 8.0 * _EPS * np.sqrt((z * z).sum(axis=1, keepdims=True))
    return float(np.maximum.reduceat(big, starts, axis=1).sum(axis=1).mean())


def lanczos_steps(state, a=None, b=None, most=200):
    """Estimate the Lanczos steps per trial from the spread of the eigenvalues.

    With trials ``a, b``: the largest spread, over the first :data:`SAMPLES`
    of them, of the eigenvalues ``u = e_a - e_b`` has a weight on
    (``z_i^2 > SUPPORT_WEIGHT ||z||^2``, ``z = V^T u``): the Krylov space
    from ``u`` sees only those (a diffusion or centred kernel's constant
    eigenvector, often its extreme eigenvalue, has no weight on any pair;
    k-NN graph kernel at d = 52: spread 5.5, 7.7 steps measured, 10
    estimated from the whole spectrum, 9 from the pairs'). At most ``most``.
    """
    lam = np.asarray(state.eigenvalues)
    if a is not None and len(a) > 0:
        z = state.pair_coordinates(np.asarray(a[:SAMPLES]), np.asarray(b[:SAMPLES]))
        weights = z * z
        seen = weights > SUPPORT_WEIGHT * weights.sum(axis=1, keepdims=True)
        high = np.where(seen, lam, -np.inf).max(axis=1)
        low = np.where(seen, lam, np.inf).min(axis=1)
        spreads = np.where(seen.any(axis=1), high - low, 0.0)
        spread = float(spreads.max())
    else:
        spread = float(lam[-1] - lam[0])
    if not spread > 0.0:
        return 2.0
    log_x = math.log(spread / STEPS_SCALE)
    target = math.log(STEPS_TOL)
    for j in range(1, most):
        if 2 * j * log_x - math.lgamma(2 * j + 1) <= target:
            return float(j + 1)
    return float(most)


def rank_one_trial(k, m):
    """Seconds of one rank-one trial keeping ``k`` eigenpairs of length ``m``."""
    return R0 + (R1 + R2 * m) * k * k


def lanczos_trial(d, steps, nnz, dense_fraction):
    """Estimate the seconds of one Lanczos trial of ``steps`` steps.

    On an exponent with ``nnz`` nonzero entries (dense products beyond
    ``dense_fraction d^2``).
    """
    if nnz > dense_fraction * d * d:
        product = DENSE_ENTRY * d * d + DENSE_ROW * d
    else:
        product = SPARSE_ROW * d + SPARSE_ENTRY * nnz
    return L0 + (Q2 + Q3 * steps) * steps * steps + steps * product


def lanczos_call(d):
    """Seconds a Lanczos call spends at its end (``eigh`` and set-up)."""
    return E0 + (E2 + E3 * d) * d * d
