"""Compiled (numba) kernels of the rank-one eigen-update.

The compiled half of :mod:`megkernel._engines.rank_one`. The
eigendecomposition of ``diag(lam) + s z z^T`` follows LAPACK's divide and
conquer merge step: deflation of tiny ``z`` components and of near-equal
eigenvalues (``dlaed2``), the secular equation solved by ``dlaed4``'s
iteration with the roots side by side (their first steps taken together,
in passes over the poles vectorized over the roots; LAPACK's own
``dlaed4``, called from compiled code through ``scipy.linalg.cython_lapack``,
takes over any root that does not converge), and Gu & Eisenstat's
recomputed ``z`` for numerically orthogonal eigenvectors
(``dlaed3``/``dlaed9``), computed as the columns of a block so that every
loop runs over the roots. Eigenvectors are stored as the *rows* of ``Vt``
(``Vt = V^T``, C-contiguous), so that the rows touched by one update are
contiguous and the eigenvector product is one GEMM over the rows that did
not deflate.

Written to compile quickly (the first use of the engine compiles it): one
compiled entry point, :func:`pair_trials`, for MEG trials and single
updates alike (a compiled function calling another compiled function links
and generates the callee's code again), few and small helpers, plain arrays
as arguments (the scratch space is three flat arrays, :func:`make_workspace`,
carved up inside), loops instead of array slice assignments (whose error path
compiles string formatting) and an insertion sort instead of ``np.argsort``
(the eigenvalues are nearly sorted after an update).
"""

from __future__ import annotations

import math

import llvmlite.binding as llvm_binding
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

from .._numerics.jit import cached_njit

__all__ = ["make_workspace", "pair_trials"]

_DLAED4_SYMBOL = "megkernel_scipy_dlaed4"
llvm_binding.add_symbol(
    _DLAED4_SYMBOL,
    get_cython_function_address("scipy.linalg.cython_lapack", "dlaed4"),
)
_DGEMM_SYMBOL = "megkernel_scipy_dgemm"
llvm_binding.add_symbol(
    _DGEMM_SYMBOL,
    get_cython_function_address("scipy.linalg.cython_blas", "dgemm"),
)
# Bound by symbol name, not by address, so that ``cache=True`` works: the
# addresses are re-registered above in every process. BLAS directly, not
# ``np.dot``: the same routine, without compiling numba's dot machinery.
_dlaed4 = types.ExternalFunction(_DLAED4_SYMBOL, types.void(*[types.voidptr] * 8))
_dgemm = types.ExternalFunction(_DGEMM_SYMBOL, types.void(*[types.voidptr] * 13))

#: ``ord("N")``: BLAS's "no transpose", read as the first byte of an int32.
_NO_TRANSPOSE = 78
#: ``ord("T")``: BLAS's "transpose".
_TRANSPOSE = 84

#: LAPACK's relative machine precision ``dlamch('Epsilon')``.
_EPS = np.finfo(np.float64).eps / 2

#: Steps per root of the vectorized secular solver before ``dlaed4`` takes over.
_MAX_STEPS = 12

# Divisions never raise (numpy's error model: no exception paths to compile);
# no C-callable wrapper (nothing takes these kernels' addresses): less to
# generate and optimise on first use.
_strict = cached_njit(error_model="numpy", no_cfunc_wrapper=True)
# Reassociation only where it is harmless (sums of precomputed terms): it
# lets LLVM vectorize the reductions.
_reduction = cached_njit(error_model="numpy", fastmath={"reassoc"},
                         no_cfunc_wrapper=True)

#: Float scratch vectors of length ``n`` (before the blocks).
_VECTORS = 19
#: Float scratch scalars: LAPACK's two, BLAS's two, a root's known evaluation.
_SCALARS = 8
#: Integer scratch vectors of length ``n``.
_INDICES = 3


def make_workspace(n, m):
    """Scratch of :func:`pair_trials` for ``n`` eigenpairs of length ``m``.

    Returns ``(floats, ints, lapack_ints)``: a float array holding
    :data:`_VECTORS` vectors of length ``n`` (twelve of them the secular
    solver's per-root state), :data:`_SCALARS` scalars,
    two ``n x n`` blocks (the secular deltas, the small eigenvectors) and
    two ``n x m`` blocks (the gathered and the updated eigenvector rows);
    an ``intp`` array of :data:`_INDICES` index vectors;
    ``dlaed4``'s three and ``dgemm``'s five integer arguments (int32).
    Contents never matter (written before read).
    """
    floats = np.empty(_VECTORS * n + _SCALARS + 2 * n * n + 2 * n * m)
    return floats, np.empty(_INDICES * n, dtype=np.intp), np.empty(10, dtype=np.int32)


@_reduction
def _secular_sums(zk, shifted, tau, row, inverse, split):
    """Set ``row = shifted - tau`` and ``inverse = 1 / row``; return ``psi, psi', phi, phi'``.

    The sums are of ``zk_i^2 / row_i`` and its derivative; ``psi`` sums
    over the poles up to ``split``, ``phi`` over the rest. The reciprocals
    are kept: at the root they are the eigenvector's entries up to ``zhat``.
    """
    psi = 0.0
    dpsi = 0.0
    phi = 0.0
    dphi = 0.0
    for i in range(zk.size):
        r = shifted[i] - tau
        row[i] = r
        q = 1.0 / r
        inverse[i] = q
        t = zk[i] * q
        u = zk[i] * t
        v = t * t
        if i <= split:
            psi += u
            dpsi += v
        else:
            phi += u
            dphi += v
    return psi, dpsi, phi, dphi


@_strict
def _eigenvectors(dk, zk, deltaT, poles, vectorsT, zhat, norms, base, tau, stored):
    """Eigenvectors of the kept block, as the *columns* of ``vectorsT`` (``dlaed3``).

    Gu & Eisenstat's recomputed ``zhat`` makes them numerically orthogonal:
    ``zhat_i^2 = -(dk_i - root_i) prod_{j != i} (dk_i - root_j) / (dk_i -
    dk_j)``, with the pole reciprocals ``poles[j, i] = 1 / (dk_i - dk_j)``
    of :func:`_secular_roots` and the deltas ``dk_i - root_j = (dk_i -
    base_j) - tau_j`` recomputed as the secular solver formed them, or read
    from ``deltaT[i, j]`` where ``stored[j] != 0`` (a root from ``dlaed4``);
    the products run over ``j`` in order, vectorized over ``i``. On entry
    ``vectorsT[i, j]`` holds ``1 / (dk_i - root_j)``; the norms are sums down
    the columns, vectorized over the roots. Returns False if a vector is
    not finite (a root on a pole: the update must then be recomputed from
    the exponent), else True.
    """
    k = dk.size
    for i in range(k):
        zhat[i] = 1.0
    for j in range(k):
        # column j's factors, vectorized over i: (dk_i - root_j) / (dk_i - dk_j),
        # with 1 / (dk_i - dk_j) = poles[j, i]; the root's own delta alone
        inverse = poles[j]
        if stored[j] != 0.0:
            for i in range(k):
                r = deltaT[i, j]
                zhat[i] *= r if i == j else r * inverse[i]
        else:
            shift = base[j]
            t = tau[j]
            for i in range(k):
                r = (dk[i] - shift) - t
                zhat[i] *= r if i == j else r * inverse[i]
    for i in range(k):
        zhat[i] = math.sqrt(-zhat[i]) if zk[i] >= 0 else -math.sqrt(-zhat[i])
    for j in range(k):
        norms[j] = 0.0
    for i in range(k):
        vec = vectorsT[i]
        scale = zhat[i]
        for j in range(k):
            x = scale * vec[j]
            vec[j] = x
            norms[j] += x * x
    for j in range(k):
        if not 0.0 < norms[j] < math.inf:  # a NaN or infinite entry (or all zero)
            return False
        norms[j] = 1.0 / math.sqrt(norms[j])  # a product per entry, not a division
    for i in range(k):
        vec = vectorsT[i]
        for j in range(k):
            vec[j] *= norms[j]
    return True


@_strict
def _lane_sums(dk, zk, tau, total, slope, size, inverseT):
    """Sum the secular equation of every root ``j`` at its own ``tau[j]``, in one pass.

    ``total[j] = sum_i zk_i^2 q_ij``, ``slope[j] = sum_i zk_i^2 q_ij^2`` and
    ``size[j] = sum_i |zk_i^2 q_ij|`` with ``q_ij = 1 / ((dk_i - dk_j) -
    tau_j)`` (kept in ``inverseT[i, j]``), each summed in the order of
    ``i``: the poles are the outer loop and the roots the inner, vectorized
    one, so that no sum is a reduction.
    """
    k = dk.size
    for j in range(k):
        total[j] = 0.0
        slope[j] = 0.0
        size[j] = 0.0
    for i in range(k):
        weight = zk[i] * zk[i]
        di = dk[i]
        inverse = inverseT[i]
        for j in range(k):
            q = 1.0 / ((di - dk[j]) - tau[j])
            inverse[j] = q
            u = weight * q
            total[j] += u
            slope[j] += u * q
            size[j] += abs(u)


@_strict
def _secular_root(j, dk, zk, rho, row, inverse, shifted, tau, lower, upper, w_prev,
                  first_step, guessed, sums):
    """Root ``j`` of the secular equation alone, by ``dlaed4``'s iteration.

    From ``tau`` above pole ``j`` (bracketed by ``lower`` and ``upper``,
    the last evaluation's ``w_prev``) at step ``first_step``: origin at the
    nearer pole, fixed-weight and middle-way rational steps, bisection
    safeguard, ``dlaed4``'s rounding-error stopping test. ``sums``, if not
    empty, holds ``w``, ``w'`` and the error bound of the evaluation at
    ``tau`` (taken side by side), used for the first step. Returns ``(code,
    origin, tau)``: code 1, converged at an evaluation (``row = (dk -
    dk[origin]) - tau`` and ``inverse = 1 / row`` from it); 2, converged by a
    rational step of round-off size (``row`` set, ``inverse`` stale); 0, not
    converged within :data:`_MAX_STEPS` steps.
    """
    k = dk.size
    gap = dk[j + 1] - dk[j] if j < k - 1 else rho
    origin = j
    middle_way = False
    p = min(j, k - 2)
    base = dk[j]
    for i in range(k):
        shifted[i] = dk[i] - base
    for step in range(first_step, _MAX_STEPS):
        if step == first_step and sums.size > 0:
            # the evaluation at tau is known (p == j here: psi' and phi' apart
            # are not needed), and of the deltas only the two nearest poles'
            w = sums[0]
            dw = sums[1]
            erretm = sums[2]
            psi = dpsi = phi = dphi = 0.0
            row[p] = shifted[p] - tau
            row[p + 1] = shifted[p + 1] - tau
        else:
            psi, dpsi, phi, dphi = _secular_sums(zk, shifted, tau, row, inverse, p)
            w = 1.0 / rho + psi + phi
            dw = dpsi + dphi
            erretm = ((11.0 + k / 8.0) * (abs(phi) + abs(psi)) + 2.0 / rho
                      + abs(tau) * dw)
        if abs(w) <= _EPS * erretm:
            return 1, origin, tau
        if w < 0:
            lower = max(lower, tau)
        else:
            upper = min(upper, tau)
        if step == 0 and w < 0 and j < k - 1 and not guessed:
            # first step, root in the upper half: measure from the upper pole
            origin = j + 1
            tau -= gap
            lower -= gap
            upper -= gap
            base = dk[origin]
            for i in range(k):
                shifted[i] = dk[i] - base
        left = row[p]
        right = row[p + 1]
        a = (left + right) * w - left * right * dw
        b = left * right * w
        if j == k - 1 or middle_way:
            c = w - left * dpsi - right * dphi
        elif origin == p:
            ratio = zk[p] / left
            c = w - right * dw - (left - right) * (ratio * ratio)
        else:
            ratio = zk[p + 1] / right
            c = w - left * dw - (right - left) * (ratio * ratio)
        disc = math.sqrt(abs(a * a - 4.0 * b * c))
        if j == k - 1:
            c = abs(c)
            if c == 0.0:
                eta = upper - tau
            elif a >= 0:
                eta = (a + disc) / (2.0 * c)
            else:
                eta = 2.0 * b / (a - disc)
        elif c == 0.0:
            eta = b / a if a != 0.0 else 0.0
        elif a <= 0:
            eta = (a - disc) / (2.0 * c)
        else:
            eta = 2.0 * b / (a + disc)
        if w * eta >= 0:
            eta = -w / dw
        if not lower < tau + eta < upper:
            eta = ((upper if w < 0 else lower) - tau) / 2
        tau += eta
        if abs(eta) <= 2.0 * _EPS * abs(tau):
            for i in range(k):
                row[i] = shifted[i] - tau
            return 2, origin, tau
        if w_prev * w > 0 and abs(w) > abs(w_prev) / 10:
            middle_way = not middle_way
        w_prev = w
    return 0, origin, tau


@_strict
def _secular_roots(dk, zk, rho, roots, deltaT, inverseT, poles, lanes, state, ibuf,
                   rbuf):
    """Roots of ``1/rho + sum zk_i^2 / (dk_i - x)`` for ``k >= 3``.

    ``dlaed4``'s iteration, with the roots side by side: every root ``j <
    k - 1`` starts from its first-order perturbation ``rho zk_j^2 / (1 + rho
    sum_{i != j} zk_i^2 / (dk_i - dk_j))`` above its lower pole when that
    lies in the lower half of its interval (nearly always once the
    eigenvalues have spread), and all of them take their first evaluation
    of the secular sums, their first rational step and the evaluation
    after it together (:func:`_lane_sums`: one pass over the poles for all
    roots, no reductions; the roots' steps independent of each other). A
    root that then passes the stopping test (or whose step was of round-off
    size) is done; every other root continues alone
    (:func:`_secular_root`, from where it is, or from the start for the
    last root and a root without that first guess), and ``dlaed4`` (called
    from compiled code through ``scipy.linalg.cython_lapack``) takes over a
    root that does not converge in :data:`_MAX_STEPS` steps.

    On return ``roots[j] = base_j + tau_j`` with ``base``, ``tau`` the
    rows 1 and 0 of ``lanes``, so that ``dk_i - root_j = (dk_i - base_j) -
    tau_j`` as the solver formed it, except where ``lanes[8, j] != 0``
    (``dlaed4``'s roots: their deltas are in column ``j`` of ``deltaT``);
    ``inverseT[i, j] = 1 / (dk_i - root_j)``, and ``poles[i, j] = 1 / (dk_j
    - dk_i)`` (zero for ``i == j``), one division each, kept for Gu &
    Eisenstat's ``zhat`` (:func:`_eigenvectors`). ``lanes`` is ``12 x k``
    scratch (rows 0, 1 and 8 as said), ``state`` (intp, ``k``) too;
    ``ibuf`` (int32, 3) and ``rbuf`` (7) hold LAPACK's scalar arguments and a
    root's known evaluation. Returns LAPACK's ``info``.
    """
    k = dk.size
    tau = lanes[0]
    base = lanes[1]
    total = lanes[2]
    slope = lanes[3]
    size = lanes[4]
    lower = lanes[5]
    upper = lanes[6]
    w_first = lanes[7]
    stored = lanes[8]
    row = lanes[9]
    inverse = lanes[10]
    shifted = lanes[11]
    given = rbuf[4:7]
    cauchy = total  # free until the first sums
    for j in range(k):
        cauchy[j] = 0.0
    for i in range(k):
        inv = poles[i]
        pole = dk[i]
        for j in range(k):  # one full-length pass (vectorized)
            q = 1.0 / (dk[j] - pole)
            inv[j] = 0.0 if j == i else q
        # the sum over i of zk_i^2 / (dk_i - dk_j), accumulated in the order
        # of i, vectorized over j
        zi2 = zk[i] * zk[i]
        for j in range(k):
            cauchy[j] -= zi2 * inv[j]
    for j in range(k):
        gap = dk[j + 1] - dk[j] if j < k - 1 else rho
        tau[j] = gap / 2  # mid-interval: never on a pole
        base[j] = dk[j]
        stored[j] = 0.0
        state[j] = 0
        if j < k - 1:
            scale = 1.0 + rho * cauchy[j]
            first_order = rho * zk[j] * zk[j] / scale
            if scale > 0.0 and 0.0 < first_order < gap / 2:
                tau[j] = first_order
                state[j] = 1
    _lane_sums(dk, zk, tau, total, slope, size, inverseT)
    for j in range(k - 1):
        # one rational step of every guessed root (the others' are not used)
        t = tau[j]
        w = 1.0 / rho + total[j]
        dw = slope[j]
        erretm = (11.0 + k / 8.0) * size[j] + 2.0 / rho + abs(t) * dw
        gap = dk[j + 1] - dk[j]
        low = max(0.0, t) if w < 0 else 0.0
        high = gap if w < 0 else min(gap, t)
        left = -t
        right = gap - t
        a = (left + right) * w - left * right * dw
        b = left * right * w
        ratio = zk[j] / left
        c = w - right * dw - (left - right) * (ratio * ratio)
        disc = math.sqrt(abs(a * a - 4.0 * b * c))
        if c == 0.0:
            eta = b / a if a != 0.0 else 0.0
        elif a <= 0:
            eta = (a - disc) / (2.0 * c)
        else:
            eta = 2.0 * b / (a + disc)
        if w * eta >= 0:
            eta = -w / dw
        if not low < t + eta < high:
            eta = ((high if w < 0 else low) - t) / 2
        if abs(w) <= _EPS * erretm:  # converged at the guess: stay
            eta = 0.0
        tau[j] = t + eta
        lower[j] = low
        upper[j] = high
        w_first[j] = w
        if state[j] == 1 and abs(eta) <= 2.0 * _EPS * abs(t + eta):
            state[j] = 2  # a step of round-off size: converged
    _lane_sums(dk, zk, tau, total, slope, size, inverseT)
    for j in range(k - 1):
        if state[j] == 1:
            w = 1.0 / rho + total[j]
            erretm = (11.0 + k / 8.0) * size[j] + 2.0 / rho + abs(tau[j]) * slope[j]
            if abs(w) > _EPS * erretm:
                state[j] = 3  # not yet: continues alone
    for j in range(k):
        if state[j] == 1 or state[j] == 2:
            roots[j] = base[j] + tau[j]
            continue
        if state[j] == 3:
            given[0] = 1.0 / rho + total[j]
            given[1] = slope[j]
            given[2] = (11.0 + k / 8.0) * size[j] + 2.0 / rho + abs(tau[j]) * slope[j]
            code, origin, t = _secular_root(j, dk, zk, rho, row, inverse, shifted, tau[j],
                                            lower[j], upper[j], w_first[j], 1, True, given)
        else:
            gap = dk[j + 1] - dk[j] if j < k - 1 else rho
            code, origin, t = _secular_root(j, dk, zk, rho, row, inverse, shifted,
                                            gap / 2, 0.0, gap, 0.0, 0, False, given[:0])
        if code == 0:
            ibuf[0] = k
            ibuf[1] = j + 1
            rbuf[0] = rho
            _dlaed4(ibuf[0:].ctypes, ibuf[1:].ctypes, dk.ctypes, zk.ctypes,
                    row.ctypes, rbuf[0:].ctypes, rbuf[1:].ctypes, ibuf[2:].ctypes)
            if ibuf[2] != 0:
                return ibuf[2]
            roots[j] = rbuf[1]
            stored[j] = 1.0
            for i in range(k):
                deltaT[i, j] = row[i]
                inverseT[i, j] = 1.0 / row[i]
            continue
        base[j] = dk[origin]
        tau[j] = t
        roots[j] = base[j] + t
        for i in range(k):
            inverseT[i, j] = inverse[i] if code == 1 else 1.0 / row[i]
    return 0


@_strict
def _lapack_roots(dk, zk, rho, roots, delta, converged, ibuf, rbuf):
    """Roots of ``1 + rho sum zk_i^2 / (dk_i - x)`` by LAPACK ``dlaed4``.

    Solves for the roots ``j`` with ``converged[j] == 0``.
    ``delta[j, i] = dk_i - roots_j`` (for ``k = 2``, the eigenvectors
    themselves, as ``dlaed5`` returns them). ``ibuf`` (int32, 3) and
    ``rbuf`` (2) hold LAPACK's scalar arguments. Returns LAPACK's ``info``.
    """
    k = dk.size
    ibuf[0] = k
    rbuf[0] = rho
    for j in range(k):
        if converged[j]:
            continue
        ibuf[1] = j + 1
        row = delta[j]
        _dlaed4(ibuf[0:].ctypes, ibuf[1:].ctypes, dk.ctypes, zk.ctypes,
                row.ctypes, rbuf[0:].ctypes, rbuf[1:].ctypes, ibuf[2:].ctypes)
        if ibuf[2] != 0:
            return ibuf[2]
        roots[j] = rbuf[1]
    return 0


@_strict
def _sort_rows(lam, Vt, order, tmp):
    """Sort ``lam`` ascending, carrying the rows of ``Vt``.

    An insertion sort of the indices (the eigenvalues are nearly sorted
    after an update: few moves), then the permutation applied in cycles.
    ``order`` (intp) and ``tmp`` (one row) are scratch.
    """
    n = lam.size
    m = Vt.shape[1]
    unsorted = False
    for i in range(n - 1):
        if lam[i] > lam[i + 1]:
            unsorted = True
            break
    if unsorted:
        for i in range(n):
            order[i] = i
        for i in range(1, n):
            key = order[i]
            q = i - 1
            while q >= 0 and lam[order[q]] > lam[key]:
                order[q + 1] = order[q]
                q -= 1
            order[q + 1] = key
        # apply: position q receives entry order[q]; visited positions get -1
        for start in range(n):
            if order[start] < 0 or order[start] == start:
                continue
            for c in range(m):
                tmp[c] = Vt[start, c]
            tmp_lam = lam[start]
            q = start
            while order[q] != start:
                src = order[q]
                for c in range(m):
                    Vt[q, c] = Vt[src, c]
                lam[q] = lam[src]
                order[q] = -1
                q = src
            for c in range(m):
                Vt[q, c] = tmp[c]
            lam[q] = tmp_lam
            order[q] = -1


@_strict
def pair_trials(lam, Vt, spare, exponent, basis, a, b, y, scales, learning_rate,
                trace, predictions, start, budget, floats, ints, lapack_ints):
    """MEG trials (or given steps) from ``start`` until the end or ``budget`` updates.

    Trial ``t`` is the pair ``(a[t], b[t])``, ``v = e_a - e_b`` (dense mode)
    or ``basis[a] - basis[b]``; its step ``A <- A + s v v^T`` is MEG's,
    ``s = -2 eta (yhat_t - y_t) / tau`` after the prediction ``yhat_t``, or
    ``s = scales[t]`` when ``scales`` is not empty (single updates:
    DefiniteBoost's projections, no predictions). The one compiled entry
    point of the engine, so that a first use compiles it once.

    Parameters
    ----------
    lam : ndarray (n,)
        Ascending eigenvalues of ``exponent``, updated in place.
    Vt, spare : ndarray (n, n), C-contiguous
        The eigenvectors as rows (in the coordinates of ``basis``), and a
        buffer of the same shape: an update that rotates every row writes
        the new rows into the buffer and the two trade places.
    exponent : ndarray of shape (n, n)
        The exponent, updated exactly in place.
    basis : ndarray of shape (n_objects, n), or (0, 0) in dense mode
        Rows are the objects' coordinates.
    a, b, y, learning_rate, trace, predictions
        The trials and the output, as for every engine
        (:mod:`megkernel._engines`); ``y`` and ``predictions`` are not used
        with ``scales``.
    scales : ndarray
        Given steps, one per trial, or empty for MEG's.
    start : int
        First trial to run.
    budget : int
        Most updates to make (the refresh policy stays in Python).
    floats, ints, lapack_ints
        Scratch from :func:`make_workspace` with ``n`` and ``n``.

    Returns
    -------
    next_trial : int
        The first trial not run.
    updates : int
        Updates made (trials with a nonzero step).
    swapped : bool
        True if the eigenvectors are now in ``spare`` (an odd number of
        trades).
    info : int
        Nonzero if the last update failed (LAPACK's ``info`` of a root
        that did not converge, or -1 for eigenvectors that are not
        finite): its exponent is updated, but the eigenpairs must be
        recomputed from ``exponent``.
    """
    n = lam.size
    m = Vt.shape[1]
    dense = basis.shape[0] == 0
    given = scales.size > 0
    dw = floats[0:n]
    zw = floats[n:2 * n]
    dk = floats[2 * n:3 * n]
    zk = floats[3 * n:4 * n]
    roots = floats[4 * n:5 * n]
    zhat = floats[5 * n:6 * n]
    rbuf = floats[_VECTORS * n:_VECTORS * n + _SCALARS]
    blocks = _VECTORS * n + _SCALARS
    row_buffer = floats[blocks + 2 * n * n:blocks + 2 * n * n + m]
    pos = ints[0:n]
    kept = ints[n:2 * n]
    order = ints[2 * n:3 * n]
    z = np.empty(n)
    v = np.empty(n)
    updates = 0
    swapped = False
    t = start
    while t < a.size and updates < budget:
        at = a[t]
        bt = b[t]
        if dense:
            for j in range(n):
                z[j] = Vt[j, at] - Vt[j, bt]
        else:
            for i in range(n):
                v[i] = basis[at, i] - basis[bt, i]
            for j in range(n):
                acc = 0.0
                for i in range(n):
                    acc += Vt[j, i] * v[i]
                z[j] = acc
        if given:
            scale = scales[t]
        else:
            top = lam[n - 1]
            num = 0.0
            den = 0.0
            for j in range(n):
                weight = math.exp(lam[j] - top)
                num += z[j] * z[j] * weight
                den += weight
            y_hat = trace * num / den
            predictions[t] = y_hat
            scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        t += 1
        if scale == 0.0:
            continue
        if dense:
            exponent[at, at] += scale
            exponent[bt, bt] += scale
            exponent[at, bt] -= scale
            exponent[bt, at] -= scale
        else:
            for i in range(n):
                for j in range(n):
                    exponent[i, j] += scale * (v[i] * v[j])
        # -- the eigenpairs of diag(lam) + scale z z^T, in working order:
        # eigenvalues sign-adjusted (negated for a negative step), ascending
        sign = 1.0 if scale > 0 else -1.0
        znorm2 = 0.0
        dmax = 0.0
        for w in range(n):
            pos[w] = w if sign > 0 else n - 1 - w
            dw[w] = sign * lam[pos[w]]
            zw[w] = z[pos[w]]
            znorm2 += zw[w] * zw[w]
            dmax = max(dmax, abs(dw[w]))
        if znorm2 == 0.0:
            updates += 1
            continue
        znorm = math.sqrt(znorm2)
        for w in range(n):
            zw[w] /= znorm
        rho = abs(scale) * znorm2
        tol = 8.0 * _EPS * max(dmax, rho)
        # -- deflation (dlaed2's tests): tiny components of zw are dropped; a
        # near-equal pair is rotated so that one member carries the whole z
        # weight and the other deflates
        k = 0
        prev = -1
        for j in range(n):
            if rho * abs(zw[j]) <= tol:
                zw[j] = 0.0
                continue
            if prev >= 0:
                # |(d_j - d_prev) c s| <= tol with c s = -z_j z_prev / tau^2,
                # tested before any square root
                coupling = abs((dw[j] - dw[prev]) * zw[j] * zw[prev])
                if coupling <= tol * (zw[j] * zw[j] + zw[prev] * zw[prev]):
                    tau = math.hypot(zw[j], zw[prev])
                    c = zw[j] / tau
                    sn = -zw[prev] / tau
                    zw[j] = tau
                    zw[prev] = 0.0
                    row_p = Vt[pos[prev]]
                    row_j = Vt[pos[j]]
                    for i in range(m):  # LAPACK drot
                        xi = row_p[i]
                        yi = row_j[i]
                        row_p[i] = c * xi + sn * yi
                        row_j[i] = c * yi - sn * xi
                    # the rotated diagonal (dlaed2's d_prev c^2 + d_j s^2 and
                    # d_prev s^2 + d_j c^2), written as moves from one end by a
                    # share of the gap: each stays within [d_prev, d_j] to
                    # round-off. In the product form c^2 + s^2 is 1 only to
                    # round-off, and along the chain of a cluster of equal
                    # eigenvalues (the isotropic complement of a subspace fit:
                    # hundreds deflate into one) the carried eigenvalue drifts
                    # out of the cluster and can land on the pole kept before
                    # it: two equal poles, a division by zero in the eigenvectors
                    gap = dw[j] - dw[prev]
                    d_prev = dw[j] - (c * c) * gap
                    dw[j] = dw[prev] + (c * c) * gap
                    dw[prev] = d_prev
                    prev = j
                    continue
                kept[k] = prev
                k += 1
            prev = j
        if prev >= 0:
            kept[k] = prev
            k += 1
        for w in range(n):
            lam[pos[w]] = sign * dw[w]
        if k > 0:
            # -- the secular equation of the kept block
            knorm2 = 0.0
            for i in range(k):
                dk[i] = dw[kept[i]]
                zk[i] = zw[kept[i]]
                knorm2 += zk[i] * zk[i]
            knorm = math.sqrt(knorm2)
            for i in range(k):
                zk[i] /= knorm
            rho_k = rho * knorm2
            delta = floats[blocks:blocks + k * k].reshape((k, k))
            small = floats[blocks + n * n:blocks + n * n + k * k].reshape((k, k))
            # the pole reciprocals: in the block of the updated rows, which is
            # written only after the eigenvectors
            start_poles = blocks + 2 * n * n + n * m
            poles = floats[start_poles:start_poles + k * k].reshape((k, k))
            # the secular deltas and the eigenvectors (columns: vectorsT), both
            # transposed; the eigenvectors come in where the reciprocals were
            deltaT = delta
            vectorsT = small
            if k >= 3:
                lanes = floats[6 * n:18 * n].reshape((12, n))
                info = _secular_roots(dk[:k], zk[:k], rho_k, roots, deltaT, vectorsT, poles,
                                      lanes, order, lapack_ints, rbuf)
                if info != 0:
                    return t, updates, swapped, info
                # -- eigenvectors of the kept block, with Gu & Eisenstat's z
                # (dlaed3); never a non-finite one into the eigenpairs: the next
                # prediction would be NaN, and its step would spoil the exact
                # exponent
                if not _eigenvectors(dk[:k], zk[:k], deltaT, poles, vectorsT, zhat,
                                     floats[18 * n:19 * n], lanes[1], lanes[0], lanes[8]):
                    return t, updates, swapped, -1
            else:
                # one or two: dlaed4 (dlaed5 returns the eigenvectors in the
                # deltas' place)
                converged = order  # free until the final sort
                for j in range(k):
                    converged[j] = 0
                info = _lapack_roots(dk[:k], zk[:k], rho_k, roots, poles, converged,
                                     lapack_ints, rbuf)
                if info != 0:
                    return t, updates, swapped, info
                for j in range(k):
                    for i in range(k):
                        x = poles[j, i] if k == 2 else 1.0
                        if not math.isfinite(x):
                            return t, updates, swapped, -1
                        vectorsT[i, j] = x
            for j in range(k):
                lam[pos[kept[j]]] = sign * roots[j]
            # -- rotate the eigenvectors that did not deflate (in working order):
            # one GEMM
            offset = blocks + 2 * n * n
            gathered = floats[offset:offset + k * m].reshape((k, m))
            updated = floats[offset + n * m:offset + n * m + k * m].reshape((k, m))
            # new rows (k x m) = vectorsT^T (k x k) @ rows: column-major BLAS
            # sees the transposes, new^T = rows^T vectorsT (vectorsT, C-ordered,
            # is its own transpose to BLAS: "T")
            lapack_ints[3] = m
            lapack_ints[4] = k
            lapack_ints[5] = k
            lapack_ints[6] = _NO_TRANSPOSE
            lapack_ints[7] = _TRANSPOSE
            rbuf[2] = 1.0
            rbuf[3] = 0.0
            if k == n:  # nothing deflated: every row, written into the spare
                if sign < 0:  # working order is reversed: reverse both axes
                    full = poles  # free now
                    for j in range(n):
                        for i in range(n):
                            full[pos[j], pos[i]] = vectorsT[i, j]
                    vectorsT = full
                    lapack_ints[7] = _NO_TRANSPOSE
                source = Vt
                target = spare
            else:
                for i in range(k):
                    src = Vt[pos[kept[i]]]
                    dst = gathered[i]
                    for c in range(m):
                        dst[c] = src[c]
                source = gathered
                target = updated
            _dgemm(lapack_ints[6:].ctypes, lapack_ints[7:].ctypes, lapack_ints[3:].ctypes,
                   lapack_ints[4:].ctypes, lapack_ints[5:].ctypes, rbuf[2:].ctypes,
                   source.ctypes, lapack_ints[3:].ctypes, vectorsT.ctypes,
                   lapack_ints[5:].ctypes, rbuf[3:].ctypes, target.ctypes,
                   lapack_ints[3:].ctypes)
            if k == n:  # the two buffers trade places
                Vt, spare = spare, Vt
                swapped = not swapped
            else:
                for j in range(k):
                    src = updated[j]
                    dst = Vt[pos[kept[j]]]
                    for c in range(m):
                        dst[c] = src[c]
        _sort_rows(lam, Vt, order, row_buffer)
        updates += 1

    return t, updates, swapped, 0
