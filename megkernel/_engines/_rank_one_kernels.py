"""Compiled (numba) kernels of the rank-one eigen-update.

Imported by :mod:`megkernel._rank_one` only when numba is importable. The
eigendecomposition of ``diag(lam) + s z z^T`` follows LAPACK's divide and
conquer merge step: deflation of tiny ``z`` components and of near-equal
eigenvalues (``dlaed2``), the secular equation solved by ``dlaed4``'s
iteration with the sums over the poles vectorised (LAPACK's own ``dlaed4``,
called from compiled code through ``scipy.linalg.cython_lapack``, takes over
any root that does not converge), and Gu & Eisenstat's recomputed ``z`` for
numerically orthogonal eigenvectors (``dlaed3``/``dlaed9``). Eigenvectors are stored as the *rows* of ``Vt``
(``Vt = V^T``, C-contiguous), so that the rows touched by one update are
contiguous and the eigenvector product is one GEMM over the rows that did
not deflate.
"""

from __future__ import annotations

import llvmlite.binding as llvm_binding
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address

_DLAED4_SYMBOL = "megkernel_scipy_dlaed4"
llvm_binding.add_symbol(
    _DLAED4_SYMBOL,
    get_cython_function_address("scipy.linalg.cython_lapack", "dlaed4"),
)
# Bound by symbol name, not by address, so that ``cache=True`` works: the
# address is re-registered above in every process.
_dlaed4 = types.ExternalFunction(_DLAED4_SYMBOL, types.void(*[types.voidptr] * 8))

#: LAPACK's relative machine precision ``dlamch('Epsilon')``.
_EPS = np.finfo(np.float64).eps / 2


@njit(cache=True)
def make_workspace(n, m):
    """Buffers for updates of ``n`` eigenpairs with eigenvectors of length ``m``.

    Returns a tuple ``(ints, lapack_ints, reals, square, rows)``: index
    scratch ``(6, n)``, LAPACK's integer arguments, real scratch ``(12, n)``,
    two ``n*n`` blocks for the secular deltas and the small eigenvector
    matrix, and two ``n*m`` blocks for the gathered and the updated
    eigenvector rows.
    """
    ints = np.empty((6, n), dtype=np.intp)
    lapack_ints = np.empty(3, dtype=np.int32)
    reals = np.empty((12, max(n, 2)))
    square = np.empty((2, n * n))
    rows = np.empty((2, n * m))
    return ints, lapack_ints, reals, square, rows


@njit(cache=True)
def _deflate(dw, zw, rho, tol, Vt, pos, kept):
    """Deflate ``diag(dw) + rho zw zw^T`` in place (``dlaed2``'s tests).

    ``dw`` ascending, ``zw`` of unit norm, ``rho > 0``. Tiny components of
    ``zw`` are dropped; a near-equal pair is rotated (the rotation is applied
    to the eigenvector rows ``Vt[pos[.]]``) so that one member carries the
    whole ``z`` weight and the other deflates. Writes the working indices of
    the kept (non-deflated) entries into ``kept`` and returns their count.
    """
    n = dw.size
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
                tau = np.hypot(zw[j], zw[prev])
                c = zw[j] / tau
                s = -zw[prev] / tau
                zw[j] = tau
                zw[prev] = 0.0
                _rotate_rows(Vt[pos[prev]], Vt[pos[j]], c, s)
                d_prev = dw[prev] * c * c + dw[j] * s * s
                dw[j] = dw[prev] * s * s + dw[j] * c * c
                dw[prev] = d_prev
                prev = j
                continue
            kept[k] = prev
            k += 1
        prev = j
    if prev >= 0:
        kept[k] = prev
        k += 1
    return k


@njit(cache=True)
def _rotate_rows(x, y, c, s):
    """``x, y <- c x + s y, c y - s x`` (LAPACK ``drot``)."""
    for i in range(x.size):
        xi = x[i]
        yi = y[i]
        x[i] = c * xi + s * yi
        y[i] = c * yi - s * xi


@njit(cache=True)
def _secular_roots(dk, zk, rho, roots, delta, converged, ibuf, rbuf):
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


#: Steps per root of the vectorised secular solver before ``dlaed4`` takes over.
_MAX_STEPS = 12

_strict = njit(cache=True, error_model="numpy")
# Reassociation only where it is harmless (sums of precomputed terms): it
# lets LLVM vectorise the reductions. Divisions never raise (numpy model).
_reduction = njit(cache=True, error_model="numpy", fastmath={"reassoc"})


@_strict
def _delta_row(dk, base, tau, row):
    """``row_i = (dk_i - base) - tau``: distances to the poles, accurately."""
    for i in range(dk.size):
        row[i] = (dk[i] - base) - tau


@_reduction
def _row_sums(zk, row, split):
    """``psi, psi', phi, phi'`` of ``zk_i^2 / row_i``, split after ``split``."""
    psi = 0.0
    dpsi = 0.0
    phi = 0.0
    dphi = 0.0
    for i in range(zk.size):
        t = zk[i] / row[i]
        if i <= split:
            psi += zk[i] * t
            dpsi += t * t
        else:
            phi += zk[i] * t
            dphi += t * t
    return psi, dpsi, phi, dphi


@_reduction
def _sum_squares(x):
    total = 0.0
    for i in range(x.size):
        total += x[i] * x[i]
    return total


@_strict
def _secular_step(dk, zk, rho, j, first, row, origin, tau, bounds, state):
    """One safeguarded rational step for root ``j`` (``dlaed4``'s rules).

    ``row`` holds ``dk - root`` at the current ``tau[j]``; ``bounds[:, j]``
    brackets ``tau[j]``; ``state[:, j]`` is the previous ``w`` and the
    fixed-weight / middle-way switch. The ``first`` step, taken from
    mid-interval, also picks the nearer pole as origin. Returns True if the
    root converged.
    """
    k = dk.size
    p = min(j, k - 2)
    psi, dpsi, phi, dphi = _row_sums(zk, row, p)
    w = 1.0 / rho + psi + phi
    dw = dpsi + dphi
    erretm = ((11.0 + k / 8.0) * (abs(phi) + abs(psi)) + 2.0 / rho
              + abs(tau[j]) * dw)
    if abs(w) <= _EPS * erretm:
        return True
    if w < 0:
        bounds[0, j] = max(bounds[0, j], tau[j])
    else:
        bounds[1, j] = min(bounds[1, j], tau[j])
    if first and w < 0 and j < k - 1:
        # first step, root in the upper half: measure from the upper pole
        gap = dk[j + 1] - dk[j]
        origin[j] = j + 1
        tau[j] -= gap
        bounds[0, j] -= gap
        bounds[1, j] -= gap
    left = row[p]
    right = row[p + 1]
    a = (left + right) * w - left * right * dw
    b = left * right * w
    if j == k - 1 or state[1, j] != 0.0:
        c = w - left * dpsi - right * dphi
    elif origin[j] == p:
        c = w - right * dw - (left - right) * (zk[p] / left) ** 2
    else:
        c = w - left * dw - (right - left) * (zk[p + 1] / right) ** 2
    disc = np.sqrt(abs(a * a - 4.0 * b * c))
    if j == k - 1:
        c = abs(c)
        if c == 0.0:
            eta = bounds[1, j] - tau[j]
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
    if not bounds[0, j] < tau[j] + eta < bounds[1, j]:
        eta = (bounds[1 if w < 0 else 0, j] - tau[j]) / 2
    tau[j] += eta
    if abs(eta) <= 2.0 * _EPS * abs(tau[j]):
        return True  # a rational step at round-off size: converged
    if state[0, j] * w > 0 and abs(w) > abs(state[0, j]) / 10:
        state[1, j] = 1.0 - state[1, j]
    state[0, j] = w
    return False


@_strict
def _secular_start(dk, rho, j, origin, tau, bounds, state):
    """Root ``j`` starts mid-interval, bracketed by its two poles."""
    k = dk.size
    gap = dk[j + 1] - dk[j] if j < k - 1 else rho
    origin[j] = j
    tau[j] = gap / 2
    bounds[0, j] = 0.0
    bounds[1, j] = gap
    state[0, j] = 0.0
    state[1, j] = 0.0


@_strict
def _secular_roots_vectorised(dk, zk, rho, roots, delta, converged, origin,
                              reals):
    """Roots of ``1/rho + sum zk_i^2 / (dk_i - x)`` for ``k >= 3``.

    ``dlaed4``'s iteration (origin at the nearer pole, fixed-weight and
    middle-way rational steps, bisection safeguard, a rounding-error
    stopping test), with the pole distances of each root kept in its row of
    ``delta`` (``delta[j, i] = dk_i - roots_j``) and the secular sums
    vectorised over the poles. Roots not converged after
    :data:`_MAX_STEPS` steps keep ``converged[j] == 0`` for ``dlaed4``.
    """
    k = dk.size
    tau = reals[0, :k]
    bounds = reals[1:3, :k]
    state = reals[3:5, :k]
    for j in range(k):
        row = delta[j]
        _secular_start(dk, rho, j, origin, tau, bounds, state)
        converged[j] = 0
        for step in range(_MAX_STEPS):
            _delta_row(dk, dk[origin[j]], tau[j], row)
            if _secular_step(dk, zk, rho, j, step == 0, row, origin, tau,
                             bounds, state):
                _delta_row(dk, dk[origin[j]], tau[j], row)
                converged[j] = 1
                roots[j] = dk[origin[j]] + tau[j]
                break


@_strict
def _scale_by_ratios(zhat, row, dk, pole, stop):
    """``zhat_i *= row_i / (dk_i - pole)`` for ``i < stop``."""
    for i in range(stop):
        zhat[i] *= row[i] / (dk[i] - pole)


@_strict
def _secular_vectors(dk, zk, delta, zhat, out):
    """Eigenvectors from the secular deltas with Gu-Eisenstat's ``z``.

    Writes ``out[j, i]``: component ``i`` of eigenvector ``j`` (``dlaed3``);
    ``zhat`` is scratch of length ``k``.
    """
    k = dk.size
    if k <= 2:
        for j in range(k):
            for i in range(k):
                out[j, i] = delta[j, i] if k == 2 else 1.0
        return
    for i in range(k):
        zhat[i] = delta[i, i]
    for j in range(k):
        _scale_by_ratios(zhat, delta[j], dk, dk[j], j)
        _scale_by_ratios(zhat[j + 1:], delta[j, j + 1:], dk[j + 1:], dk[j],
                         k - j - 1)
    for i in range(k):
        zhat[i] = np.sqrt(-zhat[i]) if zk[i] >= 0 else -np.sqrt(-zhat[i])
    for j in range(k):
        vec = out[j]
        row = delta[j]
        for i in range(k):
            vec[i] = zhat[i] / row[i]
        norm = np.sqrt(_sum_squares(vec))
        for i in range(k):
            vec[i] /= norm


@njit(cache=True)
def _sort_in_place(lam, Vt, order, done, tmp):
    """Sort ``lam`` ascending, carrying the rows of ``Vt`` (cycle moves)."""
    n = lam.size
    for i in range(n - 1):
        if lam[i] > lam[i + 1]:
            break
    else:
        return
    order[:] = np.argsort(lam, kind="mergesort")
    done[:] = 0
    for start in range(n):
        if done[start] or order[start] == start:
            continue
        tmp[:] = Vt[start]
        tmp_lam = lam[start]
        q = start
        while order[q] != start:
            src = order[q]
            Vt[q] = Vt[src]
            lam[q] = lam[src]
            done[q] = 1
            q = src
        Vt[q] = tmp
        lam[q] = tmp_lam
        done[q] = 1


@njit(cache=True)
def rank_one_update(lam, Vt, spare, z, s, work):
    """Eigenpairs of ``Vt^T diag(lam) Vt + s (Vt^T z)(Vt^T z)^T``, in place.

    Parameters
    ----------
    lam : ndarray (n,)
        Ascending eigenvalues; overwritten with the new ones (ascending).
    Vt : ndarray (n, m), C-contiguous
        Eigenvectors as rows.
    spare : ndarray (n, m), C-contiguous
        Buffer that may receive the new rows (see Returns).
    z : ndarray (n,)
        Coordinates of the update vector in the eigenbasis (not modified).
    s : float
        Signed weight of the update.
    work : tuple
        From :func:`make_workspace`.

    Returns
    -------
    swapped : bool
        True if ``spare`` now holds the new eigenvectors.
    info : int
        Nonzero if LAPACK's root finder failed; ``lam`` and ``Vt`` are then
        inconsistent and must be recomputed from the exact matrix.
    """
    n = lam.size
    m = Vt.shape[1]
    ints, lapack_ints, reals, square, rows_buf = work
    pos, kept, order, done = ints[0], ints[1], ints[2], ints[3]
    dw, zw, dk, zk, roots = (reals[0, :n], reals[1, :n], reals[2, :n],
                             reals[3, :n], reals[4, :n])
    rbuf = reals[5]
    if s == 0.0:
        return False, 0
    sign = 1.0 if s > 0 else -1.0
    znorm2 = 0.0
    dmax = 0.0
    for w in range(n):
        pos[w] = w if sign > 0 else n - 1 - w
        dw[w] = sign * lam[pos[w]]
        zw[w] = z[pos[w]]
        znorm2 += zw[w] * zw[w]
        dmax = max(dmax, abs(dw[w]))
    if znorm2 == 0.0:
        return False, 0
    znorm = np.sqrt(znorm2)
    for w in range(n):
        zw[w] /= znorm
    rho = abs(s) * znorm2
    tol = 8.0 * _EPS * max(dmax, rho)
    k = _deflate(dw, zw, rho, tol, Vt, pos, kept)
    for w in range(n):
        lam[pos[w]] = sign * dw[w]
    if k == 0:
        _sort_in_place(lam, Vt, order, done, rows_buf[0, :m])
        return False, 0
    knorm2 = 0.0
    for i in range(k):
        dk[i] = dw[kept[i]]
        zk[i] = zw[kept[i]]
        knorm2 += zk[i] * zk[i]
    knorm = np.sqrt(knorm2)
    for i in range(k):
        zk[i] /= knorm
    rho_k = rho * knorm2
    delta = square[0, :k * k].reshape((k, k))
    small = square[1, :k * k].reshape((k, k))
    converged = ints[5, :k]
    converged[:] = 0
    if k >= 3:
        _secular_roots_vectorised(dk[:k], zk[:k], rho_k, roots, delta,
                                  converged, ints[4, :k], reals[6:11])
    info = _secular_roots(dk[:k], zk[:k], rho_k, roots, delta, converged,
                          lapack_ints, rbuf)
    if info != 0:
        return False, info
    _secular_vectors(dk[:k], zk[:k], delta, reals[11, :k], small)
    for j in range(k):
        lam[pos[kept[j]]] = sign * roots[j]
    swapped = k == n
    if swapped:
        target = spare
        if sign < 0:  # working order is reversed: reverse both axes
            full = square[0, :n * n].reshape((n, n))
            for j in range(n):
                for i in range(n):
                    full[pos[j], pos[i]] = small[j, i]
            small = full
        np.dot(small, Vt, target)
    else:
        target = Vt
        gathered = rows_buf[0, :k * m].reshape((k, m))
        updated = rows_buf[1, :k * m].reshape((k, m))
        for i in range(k):
            gathered[i] = Vt[pos[kept[i]]]
        np.dot(small, gathered, updated)
        for j in range(k):
            Vt[pos[kept[j]]] = updated[j]
    _sort_in_place(lam, target, order, done, rows_buf[0, :m])
    return swapped, 0


@njit(cache=True)
def pair_trials(lam, Vt, spare, exponent, basis, a, b, y, learning_rate,
                trace, predictions, start, budget, work):
    """MEG trials from ``start`` until the end or ``budget`` updates.

    ``basis`` of shape ``(0, 0)`` means dense mode (``v = e_a - e_b``).
    Returns ``(next_trial, updates, Vt, spare, info)``; ``Vt`` and
    ``spare`` may come back swapped.
    """
    n = lam.size
    dense = basis.shape[0] == 0
    z = np.empty(n)
    v = np.empty(n)
    updates = 0
    t = start
    while t < y.size and updates < budget:
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
        top = lam[n - 1]
        num = 0.0
        den = 0.0
        for j in range(n):
            weight = np.exp(lam[j] - top)
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
        swapped, info = rank_one_update(lam, Vt, spare, z, scale, work)
        if info != 0:
            return t, updates, Vt, spare, info
        if swapped:
            Vt, spare = spare, Vt
        updates += 1
    return t, updates, Vt, spare, 0
