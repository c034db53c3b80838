"""Compiled (numba) kernels of the rank-one eigen-update.

The compiled half of :mod:`megkernel._engines.rank_one`. The
eigendecomposition of ``diag(lam) + s z z^T`` follows LAPACK's divide and
conquer merge step: deflation of tiny ``z`` components and of near-equal
eigenvalues (``dlaed2``), the secular equation solved by ``dlaed4``'s
iteration with the sums over the poles vectorised (LAPACK's own ``dlaed4``,
called from compiled code through ``scipy.linalg.cython_lapack``, takes over
any root that does not converge), and Gu & Eisenstat's recomputed ``z`` for
numerically orthogonal eigenvectors (``dlaed3``/``dlaed9``). Eigenvectors
are stored as the *rows* of ``Vt`` (``Vt = V^T``, C-contiguous), so that the
rows touched by one update are contiguous and the eigenvector product is one
GEMM over the rows that did not deflate.

Arguments come in small named structures: :class:`Eigenpairs` (eigenvalues,
eigenvector rows and a spare buffer they trade places with) and
:class:`Workspace` (named scratch arrays, :func:`make_workspace`; in it, the
per-root state of the secular solver is a record array of dtype
:data:`SECULAR_STATE`).
:func:`pair_trials` runs MEG trials, :func:`rank_one_update` one update.
"""

from __future__ import annotations

from typing import NamedTuple

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


class Eigenpairs(NamedTuple):
    """Eigenpairs ``Vt^T diag(values) Vt`` being updated.

    Attributes
    ----------
    values : ndarray of shape (n,)
        Ascending eigenvalues, updated in place.
    rows : ndarray of shape (n, m), C-contiguous
        The eigenvectors, as rows (``Vt``).
    spare : ndarray of shape (n, m), C-contiguous
        A buffer of the same shape: an update that rotates every row writes
        the new rows into it, and the two trade places.
    """

    values: np.ndarray
    rows: np.ndarray
    spare: np.ndarray


#: Record type of the per-root state of :func:`_secular_roots_vectorised`
#: (``dlaed4``'s), one record per root: ``origin``, the pole the root is
#: measured from (the nearer one); ``tau``, its distance from that pole;
#: ``lower`` and ``upper``, the bracket of ``tau``; ``w_prev``, the secular
#: function at the previous step; ``middle_way``, 1.0 while the root takes
#: middle-way steps and 0.0 while fixed-weight ones (``dlaed4``'s switch).
SECULAR_STATE = np.dtype([("origin", np.intp), ("tau", np.float64),
                          ("lower", np.float64), ("upper", np.float64),
                          ("w_prev", np.float64), ("middle_way", np.float64)])


class Workspace(NamedTuple):
    """Scratch of :func:`rank_one_update` for ``n`` eigenpairs of length ``m``.

    Entries are in *working order*: eigenvalues sign-adjusted (negated for
    a negative update) and ascending.

    Attributes
    ----------
    pos : ndarray of intp, shape (n,)
        Eigenpair index of each working entry.
    kept : ndarray of intp, shape (n,)
        Working indices of the entries that did not deflate (first ``k``).
    order, done : ndarray of intp, shape (n,)
        Permutation and visited marks of the final sort.
    converged : ndarray of intp, shape (n,)
        1 for the secular roots the vectorised solver found.
    lapack_ints : ndarray of int32, shape (3,)
        ``dlaed4``'s integer arguments (``k``, root index, ``info``).
    lapack_reals : ndarray of shape (2,)
        ``dlaed4``'s real scalars (``rho``, the root).
    dw, zw : ndarray of shape (n,)
        Working eigenvalues and update vector (unit norm).
    dk, zk : ndarray of shape (n,)
        The same for the ``k`` kept entries (``zk`` of unit norm again).
    roots : ndarray of shape (n,)
        The new eigenvalues of the kept block.
    zhat : ndarray of shape (n,)
        Gu & Eisenstat's recomputed update vector.
    secular : ndarray of dtype SECULAR_STATE, shape (n,)
        Per-root state of the secular solver.
    delta : ndarray of shape (n * n,)
        ``delta[j, i] = dk_i - roots_j`` as a ``(k, k)`` block (then, for a
        negative update rotating every row, the reordered eigenvectors).
    small : ndarray of shape (n * n,)
        Eigenvectors of the kept block, as rows of a ``(k, k)`` block.
    gathered : ndarray of shape (n * m,)
        The kept eigenvector rows, as a ``(k, m)`` block (its first ``m``
        entries also buffer one row in the final sort).
    updated : ndarray of shape (n * m,)
        Their products with ``small``, as a ``(k, m)`` block.
    """

    pos: np.ndarray
    kept: np.ndarray
    order: np.ndarray
    done: np.ndarray
    converged: np.ndarray
    lapack_ints: np.ndarray
    lapack_reals: np.ndarray
    dw: np.ndarray
    zw: np.ndarray
    dk: np.ndarray
    zk: np.ndarray
    roots: np.ndarray
    zhat: np.ndarray
    secular: np.ndarray
    delta: np.ndarray
    small: np.ndarray
    gathered: np.ndarray
    updated: np.ndarray


def make_workspace(n, m):
    """A :class:`Workspace` for ``n`` eigenpairs of length ``m`` (uninitialised).

    Plain Python (no compilation); :func:`pair_trials` makes its own by the
    compiled twin :func:`_make_workspace`.
    """
    return Workspace(
        np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp),
        np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp),
        np.empty(n, dtype=np.intp), np.empty(3, dtype=np.int32), np.empty(2),
        np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
        np.empty(n),
        np.empty(n, dtype=SECULAR_STATE),
        np.empty(n * n), np.empty(n * n), np.empty(n * m), np.empty(n * m),
    )


_make_workspace = njit(cache=True)(make_workspace)


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
def _secular_step(dk, zk, rho, j, first, row, scratch):
    """One safeguarded rational step for root ``j`` (``dlaed4``'s rules).

    ``row`` holds ``dk - root`` at the current ``scratch[j].tau``; the
    other fields of its record ``scratch[j]`` (:data:`SECULAR_STATE`)
    are updated. The ``first`` step, taken from mid-interval, also picks the
    nearer pole as origin. Returns True if the root converged.
    """
    state = scratch[j]
    k = dk.size
    p = min(j, k - 2)
    psi, dpsi, phi, dphi = _row_sums(zk, row, p)
    w = 1.0 / rho + psi + phi
    dw = dpsi + dphi
    erretm = ((11.0 + k / 8.0) * (abs(phi) + abs(psi)) + 2.0 / rho
              + abs(state.tau) * dw)
    if abs(w) <= _EPS * erretm:
        return True
    if w < 0:
        state.lower = max(state.lower, state.tau)
    else:
        state.upper = min(state.upper, state.tau)
    if first and w < 0 and j < k - 1:
        # first step, root in the upper half: measure from the upper pole
        gap = dk[j + 1] - dk[j]
        state.origin = j + 1
        state.tau -= gap
        state.lower -= gap
        state.upper -= gap
    left = row[p]
    right = row[p + 1]
    a = (left + right) * w - left * right * dw
    b = left * right * w
    if j == k - 1 or state.middle_way != 0.0:
        c = w - left * dpsi - right * dphi
    elif state.origin == p:
        c = w - right * dw - (left - right) * (zk[p] / left) ** 2
    else:
        c = w - left * dw - (right - left) * (zk[p + 1] / right) ** 2
    disc = np.sqrt(abs(a * a - 4.0 * b * c))
    if j == k - 1:
        c = abs(c)
        if c == 0.0:
            eta = state.upper - state.tau
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
    if not state.lower < state.tau + eta < state.upper:
        eta = ((state.upper if w < 0 else state.lower) - state.tau) / 2
    state.tau += eta
    if abs(eta) <= 2.0 * _EPS * abs(state.tau):
        return True  # a rational step at round-off size: converged
    if state.w_prev * w > 0 and abs(w) > abs(state.w_prev) / 10:
        state.middle_way = 1.0 - state.middle_way
    state.w_prev = w
    return False


@_strict
def _secular_start(dk, rho, j, scratch):
    """Root ``j`` starts mid-interval, bracketed by its two poles."""
    k = dk.size
    gap = dk[j + 1] - dk[j] if j < k - 1 else rho
    state = scratch[j]
    state.origin = j
    state.tau = gap / 2
    state.lower = 0.0
    state.upper = gap
    state.w_prev = 0.0
    state.middle_way = 0.0


@_strict
def _secular_roots_vectorised(dk, zk, rho, roots, delta, converged, scratch):
    """Roots of ``1/rho + sum zk_i^2 / (dk_i - x)`` for ``k >= 3``.

    ``dlaed4``'s iteration (origin at the nearer pole, fixed-weight and
    middle-way rational steps, bisection safeguard, a rounding-error
    stopping test), with the pole distances of each root kept in its row of
    ``delta`` (``delta[j, i] = dk_i - roots_j``) and the secular sums
    vectorised over the poles. Roots not converged after
    :data:`_MAX_STEPS` steps keep ``converged[j] == 0`` for ``dlaed4``.
    ``scratch`` (record array of dtype :data:`SECULAR_STATE`) holds at least
    ``k`` roots.
    """
    k = dk.size
    for j in range(k):
        row = delta[j]
        state = scratch[j]  # a reference: sees the updates of the steps
        _secular_start(dk, rho, j, scratch)
        converged[j] = 0
        for step in range(_MAX_STEPS):
            _delta_row(dk, dk[state.origin], state.tau, row)
            if _secular_step(dk, zk, rho, j, step == 0, row, scratch):
                _delta_row(dk, dk[state.origin], state.tau, row)
                converged[j] = 1
                roots[j] = dk[state.origin] + state.tau
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
def rank_one_update(pairs, z, s, work):
    """Eigenpairs of ``Vt^T diag(lam) Vt + s (Vt^T z)(Vt^T z)^T``, in place.

    Parameters
    ----------
    pairs : Eigenpairs
        ``lam`` (``pairs.values``), overwritten with the new eigenvalues
        (ascending), and ``Vt`` (``pairs.rows``).
    z : ndarray (n,)
        Coordinates of the update vector in the eigenbasis (not modified).
    s : float
        Signed weight of the update.
    work : Workspace
        From :func:`make_workspace` with ``n`` and ``m``.

    Returns
    -------
    swapped : bool
        True if ``pairs.spare`` now holds the new eigenvectors.
    info : int
        Nonzero if LAPACK's root finder failed; ``lam`` and ``Vt`` are then
        inconsistent and must be recomputed from the exact matrix.
    """
    lam = pairs.values
    Vt = pairs.rows
    spare = pairs.spare
    n = lam.size
    m = Vt.shape[1]
    pos = work.pos
    kept = work.kept
    order = work.order
    done = work.done
    dw = work.dw
    zw = work.zw
    dk = work.dk
    zk = work.zk
    roots = work.roots
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
        _sort_in_place(lam, Vt, order, done, work.gathered[:m])
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
    delta = work.delta[:k * k].reshape((k, k))
    small = work.small[:k * k].reshape((k, k))
    converged = work.converged[:k]
    converged[:] = 0
    if k >= 3:
        _secular_roots_vectorised(dk[:k], zk[:k], rho_k, roots, delta,
                                  converged, work.secular)
    info = _secular_roots(dk[:k], zk[:k], rho_k, roots, delta, converged,
                          work.lapack_ints, work.lapack_reals)
    if info != 0:
        return False, info
    _secular_vectors(dk[:k], zk[:k], delta, work.zhat[:k], small)
    for j in range(k):
        lam[pos[kept[j]]] = sign * roots[j]
    swapped = k == n
    if swapped:
        target = spare
        if sign < 0:  # working order is reversed: reverse both axes
            full = work.delta[:n * n].reshape((n, n))
            for j in range(n):
                for i in range(n):
                    full[pos[j], pos[i]] = small[j, i]
            small = full
        np.dot(small, Vt, target)
    else:
        target = Vt
        gathered = work.gathered[:k * m].reshape((k, m))
        updated = work.updated[:k * m].reshape((k, m))
        for i in range(k):
            gathered[i] = Vt[pos[kept[i]]]
        np.dot(small, gathered, updated)
        for j in range(k):
            Vt[pos[kept[j]]] = updated[j]
    _sort_in_place(lam, target, order, done, work.gathered[:m])
    return swapped, 0


@njit(cache=True)
def pair_trials(pairs, exponent, basis, a, b, y, learning_rate, trace,
                predictions, start, budget):
    """MEG trials from ``start`` until the end or ``budget`` updates.

    Parameters
    ----------
    pairs : Eigenpairs
        Eigendecomposition of ``exponent`` (in the coordinates of
        ``basis``); ``pairs.values`` is updated in place.
    exponent : ndarray of shape (n, n)
        The exponent, updated exactly in place.
    basis : ndarray of shape (n_objects, n), or (0, 0) in dense mode
        Rows are the objects' coordinates; dense mode: ``v = e_a - e_b``.
    a, b, y, learning_rate, trace, predictions
        The trials and the output, as for every engine
        (:mod:`megkernel._engines`).
    start : int
        First trial to run.
    budget : int
        Most updates to make (the refresh policy stays in Python).

    Returns
    -------
    next_trial : int
        The first trial not run.
    updates : int
        Updates made (trials with a nonzero step).
    pairs : Eigenpairs
        The updated eigenpairs: ``rows`` and ``spare`` may have traded
        places.
    info : int
        Nonzero if the root finder failed in the last update: the
        eigenpairs must then be recomputed from ``exponent``.
    """
    lam = pairs.values
    Vt = pairs.rows
    spare = pairs.spare
    n = lam.size
    work = _make_workspace(n, Vt.shape[1])
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
        swapped, info = rank_one_update(Eigenpairs(lam, Vt, spare), z, scale,
                                        work)
        if info != 0:
            return t, updates, Eigenpairs(lam, Vt, spare), info
        if swapped:
            Vt, spare = spare, Vt
        updates += 1
    return t, updates, Eigenpairs(lam, Vt, spare), 0
