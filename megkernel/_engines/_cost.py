"""Cost model behind ``method="auto"``: which engine runs MEG trials fastest.

The choice looks at the state, not at its size alone: the rank-one engine
costs ``O(k^2 m)`` per trial, ``k`` the eigenpairs an update does not
deflate (all of them once every object has been in a trial, whatever the
spectrum looks like: clustered and random spectra alike), ``m`` their
length; the Lanczos engine costs a number of Lanczos steps that grows with
the spread of the exponent's eigenvalues (the Gauss quadrature of ``exp``),
each a product with the exponent (sparse or dense), plus one ``eigh`` at the
end of every call. The constants are CPU seconds on one BLAS thread,
fitted to the rows of ``benchmarks/bench_spectra.py``, which also checks
that the choice stays close to the fastest engine (see the benchmarks
page). Only their ratios matter, so a uniformly faster or slower machine
picks the same; a machine whose GEMM and secular loops are slower relative
to the Lanczos kernels calls for refitting the rank-one constants from that
script's rows (``R1`` from the smallest ``d``, ``R2`` from the largest).

Fitted forms (seconds):

* rank-one trial: ``4.5e-6 + 2.5e-9 k^2 + 3.9e-11 k^2 m`` (the secular
  equation and Gu-Eisenstat's eigenvectors, ``O(k^2)``; the eigenvector
  product, a ``k x k`` by ``k x m`` GEMM);
* Lanczos trial of ``s`` steps: ``8e-6 + 1.1e-8 n s^2`` for its ``n``
  evaluations of an ``s x s`` tridiagonal quadrature (QL, ``O(s^2)``): two
  (the quadrature and the updated exponent's, at the last step) while
  Gauss's error bound stops the run before step ``QL_FROM``, one more per
  step from ``QL_FROM - 1`` on (consecutive quadratures compared), and four
  Gauss-Legendre nodes where the change of ``Z`` as a difference of traces
  would be too noisy (estimated as the engine does, ``4 eps ||T_s - log Z||
  (tr exp(T_s - log Z) + ...) > TRACE_TOL``, with ``||T_s - log Z|| ~ log d
  + spread`` and the Ritz values' weights ``~ 2 s / d``); plus ``s``
  products, each ``1e-10 d^2 + 2e-9 d`` (dense) or ``1.5e-8 d + 2e-9 nnz``
  (sparse lists); ``s`` is one more than the real ``j`` (a mean over
  trials) with
  ``(spread / 8)^(2 j) / (2 j)! <= 1e-16``, ``spread = lam_max - lam_min``
  over the eigenvalues the coming pairs have weight on (all of them
  without trials; the error of a ``j``-point Gauss quadrature of ``exp`` on
  an interval of that width; ``benchmarks/bench_spectra.py`` compares it
  with the engine's step counts);
* the end of a Lanczos call: ``2e-4 + 5e-8 d^2 + 1.7e-10 d^3`` (``eigh``
  and the column lists);
* an eigh trial (the reference engine): ``4e-5 + 5e-8 d^2 + 1.5e-10 d^3``
  (one ``eigh`` of the exponent and its exponential weights; within 30 % of
  the measured 45 us to 24 ms from ``d = 10`` to ``500``). It only names
  the cost of ``method="eigh"``: ``"auto"`` never runs it on dense states.
"""

from __future__ import annotations

import math

import numpy as np

from . import lanczos

__all__ = ["kept_eigenpairs", "lanczos_spread", "lanczos_steps", "steps_for_spread",
           "rank_one_trial", "lanczos_trial", "lanczos_call", "eigh_trial", "SAMPLES"]

#: Trials of the call looked at to estimate ``k`` (their ``z = V^T v``).
SAMPLES = 4

_EPS = np.finfo(float).eps

#: Rank-one trial: seconds ``R0 + R1 k^2 + R2 k^2 m``.
R0, R1, R2 = 4.5e-6, 2.5e-9, 3.9e-11
#: Lanczos trial: ``L0 + QL n s^2`` (``n`` evaluations) plus ``s`` products.
L0, QL = 8e-6, 1.1e-8
#: Gauss-Legendre nodes of a trial whose ``Z' - Z`` is integrated (the
#: engine's ``QL_FROM``, ``TRACE_TOL`` and ``NOISE`` are read from
#: :mod:`.lanczos` itself).
GL_NODES = 4
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
#: An eigh trial: ``H0 + H2 d^2 + H3 d^3``.
H0, H2, H3 = 4e-5, 5e-8, 1.5e-10


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


def lanczos_spread(state, a=None, b=None):
    """Spread of the eigenvalues the Krylov spaces of the coming trials see.

    With trials ``a, b``: the largest spread, over the first :data:`SAMPLES`
    of them, of the eigenvalues ``u = e_a - e_b`` has a weight on
    (``z_i^2 > SUPPORT_WEIGHT ||z||^2``, ``z = V^T u``): the Krylov space
    from ``u`` sees only those (a diffusion or centred kernel's constant
    eigenvector, often its extreme eigenvalue, has no weight on any pair,
    so the pairs' spread predicts the steps more closely than the whole
    spectrum's). Without trials, the whole spectrum's.
    """
    lam = np.asarray(state.eigenvalues)
    if a is not None and len(a) > 0:
        z = state.pair_coordinates(np.asarray(a[:SAMPLES]), np.asarray(b[:SAMPLES]))
        weights = z * z
        seen = weights > SUPPORT_WEIGHT * weights.sum(axis=1, keepdims=True)
        high = np.where(seen, lam, -np.inf).max(axis=1)
        low = np.where(seen, lam, np.inf).min(axis=1)
        spreads = np.where(seen.any(axis=1), high - low, 0.0)
        return float(spreads.max())
    return float(lam[-1] - lam[0])


def steps_for_spread(spread, most=200):
    """Lanczos steps per trial on eigenvalues of that spread (at most ``most``).

    One more than the real ``j`` (``lgamma`` for the factorial) solving
    ``(spread / STEPS_SCALE)^(2 j) / (2 j)! = STEPS_TOL``: a mean over trials,
    not a whole number (the cost of a trial grows as the steps squared).
    """
    if not spread > 0.0:
        return 2.0
    log_x = math.log(spread / STEPS_SCALE)
    target = math.log(STEPS_TOL)

    def excess(j):
        return 2 * j * log_x - math.lgamma(2 * j + 1) - target

    if excess(most - 1) > 0:
        return float(most)
    low, high = 0.0, float(most - 1)  # excess(0) = -target > 0
    for _ in range(30):  # to 2e-7 of a step
        mid = 0.5 * (low + high)
        low, high = (mid, high) if excess(mid) > 0 else (low, mid)
    return high + 1.0


def lanczos_steps(state, a=None, b=None, most=200):
    """Estimate the Lanczos steps per trial from the spread of the eigenvalues.

    :func:`steps_for_spread` of :func:`lanczos_spread`.
    """
    return steps_for_spread(lanczos_spread(state, a, b), most)


def rank_one_trial(k, m):
    """Seconds of one rank-one trial keeping ``k`` eigenpairs of length ``m``."""
    return R0 + (R1 + R2 * m) * k * k


def lanczos_trial(d, steps, nnz, dense_fraction, spread=0.0):
    """Estimate the seconds of one Lanczos trial of ``steps`` steps.

    On an exponent with ``nnz`` nonzero entries (dense products beyond
    ``dense_fraction d^2``) whose eigenvalues seen by the trials spread over
    ``spread``.
    """
    if nnz > dense_fraction * d * d:
        product = DENSE_ENTRY * d * d + DENSE_ROW * d
    else:
        product = SPARSE_ROW * d + SPARSE_ENTRY * nnz
    evaluations = 2.0
    if steps >= lanczos.QL_FROM:
        evaluations += steps - lanczos.QL_FROM + 2.0
    noise = lanczos.NOISE * (math.log(d) + spread) * 2.0 * min(1.0, 2.0 * steps / d)
    if noise > lanczos.TRACE_TOL:
        evaluations += GL_NODES
    return L0 + QL * evaluations * steps * steps + steps * product


def lanczos_call(d):
    """Seconds a Lanczos call spends at its end (``eigh`` and set-up)."""
    return E0 + (E2 + E3 * d) * d * d


def eigh_trial(d):
    """Seconds of one trial of the eigh engine on ``d`` objects."""
    return H0 + (H2 + H3 * d) * d * d
