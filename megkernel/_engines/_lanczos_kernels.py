"""Compiled (numba) kernels of the matrix-free Lanczos MEG engine.

Imported by :mod:`megkernel._lanczos` only when numba is importable.

The exponent ``A`` is the dense array of :class:`ExponentState` (updated in
four entries per trial, exactly as :meth:`ExponentState.add_pair_outer`).
Products ``A x`` read it either through sorted per-row lists of the columns
that may be nonzero (sparse mode: ``O(nnz)``) or row by row (dense mode).
Both accumulate ``y_i = sum_j A_ij x_j`` over ascending ``j`` with one
multiply and one add per term, and terms that are exactly zero leave a sum
unchanged, so the two modes give bit-identical products: switching mode (or
rebuilding the lists in a new call) never changes a result.

One trial runs plain Lanczos on ``A`` from ``u = e_a - e_b`` (no
reorthogonalisation: only quadratic forms are needed). With the tridiagonal
``T_k``, ``u^T exp(A + tau/2 u u^T) u = 2 e1^T exp(T_k + tau e1 e1^T) e1``
once ``k`` is large enough (Gauss quadrature), because ``A`` and
``A + s u u^T`` have the same Krylov spaces from ``u``. The quadratures are
evaluated by Golub & Welsch's implicit QL iteration, which carries only the
first row of the eigenvectors (``O(k^2)``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Status codes of :func:`run_trials`.
DONE, REANCHOR, NOT_CONVERGED, QL_FAILED = 0, 1, 2, 3

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


# -- the structure of A ------------------------------------------------------
@njit(cache=True)
def build_structure(A, dense_fraction):
    """Sorted column lists of the entries of ``A`` that are nonzero.

    Returns ``(nbr, deg, dense)``: row ``i`` lists ``nbr[i, :deg[i]]``
    (ascending, the diagonal always included). ``dense`` is True when the
    lists hold more than ``dense_fraction * d^2`` entries (they are then
    not filled).
    """
    d = A.shape[0]
    deg = np.zeros(d, dtype=np.intp)
    total = 0
    for i in range(d):
        row = A[i]
        c = 0
        for j in range(d):
            if row[j] != 0.0 or j == i:
                c += 1
        deg[i] = c
        total += c
    if total > dense_fraction * d * d:
        return np.zeros((d, 1), dtype=np.int32), deg, True
    nbr = np.zeros((d, d), dtype=np.int32)
    for i in range(d):
        row = A[i]
        c = 0
        for j in range(d):
            if row[j] != 0.0 or j == i:
                nbr[i, c] = j
                c += 1
    return nbr, deg, False


@njit(cache=True)
def _insert(nbr, deg, i, j):
    """Insert column ``j`` into the sorted list of row ``i``; 1 if new."""
    n = deg[i]
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if nbr[i, mid] < j:
            lo = mid + 1
        else:
            hi = mid
    if lo < n and nbr[i, lo] == j:
        return 0
    for p in range(n, lo, -1):
        nbr[i, p] = nbr[i, p - 1]
    nbr[i, lo] = j
    deg[i] = n + 1
    return 1


@njit(cache=True)
def matvec(A, nbr, deg, dense, x, out):
    """``out = A x`` (``A`` symmetric), summed over ascending columns."""
    d = x.size
    if dense:
        for i in range(d):
            out[i] = 0.0
        for j in range(d):
            xj = x[j]
            if xj == 0.0:
                continue
            row = A[j]  # A[j, i] == A[i, j]
            for i in range(d):
                out[i] += row[i] * xj
    else:
        for i in range(d):
            acc = 0.0
            row = A[i]
            for p in range(deg[i]):
                j = nbr[i, p]
                acc += row[j] * x[j]
            out[i] = acc


# -- Gauss quadrature on the tridiagonal --------------------------------------
@njit(cache=True)
def tridiag_exp(alpha, beta, k, shift, bump, dd, ee, zz):
    """``(e1^T exp(M) e1, tr exp(M), ok)`` for ``M = T_k + bump e1 e1^T - shift I``.

    ``T_k`` has diagonal ``alpha[:k]`` and off-diagonal ``beta[:k-1]``.
    Eigenvalues and the first components of the eigenvectors by the
    implicit QL iteration of Golub & Welsch (``gausq2``), ``O(k^2)``.
    """
    for i in range(k):
        dd[i] = alpha[i] - shift
        ee[i] = beta[i] if i < k - 1 else 0.0
        zz[i] = 0.0
    dd[0] = (alpha[0] + bump) - shift
    zz[0] = 1.0
    ok = True
    for l in range(k):
        it = 0
        while True:
            m = l
            while m < k - 1:
                tst1 = abs(dd[m]) + abs(dd[m + 1])
                if tst1 + abs(ee[m]) == tst1:
                    break
                m += 1
            if m == l:
                break
            if it == 60:
                ok = False
                break
            it += 1
            p = dd[l]
            g = (dd[l + 1] - p) / (2.0 * ee[l])
            r = math.hypot(g, 1.0)
            g = dd[m] - p + ee[l] / (g + math.copysign(r, g))
            s = 1.0
            c = 1.0
            p = 0.0
            underflow = False
            for i in range(m - 1, l - 1, -1):
                f = s * ee[i]
                b = c * ee[i]
                r = math.hypot(f, g)
                ee[i + 1] = r
                if r == 0.0:
                    dd[i + 1] -= p
                    ee[m] = 0.0
                    underflow = True
                    break
                s = f / r
                c = g / r
                g = dd[i + 1] - p
                r = (dd[i] - g) * s + 2.0 * c * b
                p = s * r
                dd[i + 1] = g + p
                g = c * r - b
                f = zz[i + 1]
                zz[i + 1] = s * zz[i] + c * f
                zz[i] = c * zz[i] - s * f
            if underflow:
                continue
            dd[l] -= p
            ee[l] = g
            ee[m] = 0.0
        if not ok:
            break
    quad = 0.0
    trace = 0.0
    for i in range(k):
        e = math.exp(dd[i])
        quad += zz[i] * zz[i] * e
        trace += e
    return quad, trace, ok


@njit(cache=True)
def gauss_legendre_count(x, target, most):
    """Gauss-Legendre nodes for a panel of half-length ``x``.

    The integrand ``e1^T exp(T + tau e1 e1^T - shift) e1`` is entire in
    ``tau`` and bounded by ``exp(Re tau)`` (times the largest value on the
    panel), so on the Bernstein ellipse of parameter ``rho`` the error is
    about ``exp(x rho / 2) rho^(-2n)``; with ``rho = 4n / x`` this is
    ``(e x / (4 n))^(2n)``.
    """
    if x == 0.0:
        return 1
    for n in range(1, most + 1):
        if 2 * n * math.log(math.e * x / (4.0 * n)) <= target:
            return n
    return most


# -- one Lanczos step ---------------------------------------------------------
@njit(cache=True)
def _step(A, nbr, deg, dense, q_prev, q, w, beta_prev):
    """``w = A q - beta_prev q_prev - alpha q``; returns ``(alpha, ||w||)``."""
    d = q.size
    matvec(A, nbr, deg, dense, q, w)
    alpha = 0.0
    for i in range(d):
        w[i] -= beta_prev * q_prev[i]
        alpha += q[i] * w[i]
    norm2 = 0.0
    for i in range(d):
        w[i] -= alpha * q[i]
        norm2 += w[i] * w[i]
    return alpha, math.sqrt(norm2)


@njit(cache=True)
def _advance(q_prev, q, w, beta):
    """``q_prev <- q``, ``q <- w / beta``."""
    for i in range(q.size):
        q_prev[i] = q[i]
        q[i] = w[i] / beta


@njit(cache=True)
def _broke(alpha, beta, beta_prev):
    """Invariant Krylov space: ``beta`` at round-off level."""
    return beta <= 64.0 * 2.220446049250313e-16 * (abs(alpha) + beta_prev + 1e-300)


@njit(cache=True)
def make_workspace(d, kmax):
    """``(vectors (3, d), reals (5, kmax + 2), stats)``."""
    vectors = np.zeros((3, d))
    reals = np.zeros((5, kmax + 2))
    stats = np.zeros(8, dtype=np.int64)
    return vectors, reals, stats


# -- the trials -----------------------------------------------------------------
@njit(cache=True)
def run_trials(A, nbr, deg, dense, dense_fraction, a, b, y, learning_rate,
               trace, predictions, t, log_z, since_anchor, anchor_every, kmax,
               tol, noise, max_tol, ratio_min, gl_limit, panel_half, gl_nodes, gl_weights,
               workspace):
    """MEG trials from ``t`` on; returns at the end or when Python must act.

    ``log_z`` is ``log tr exp(A)`` for the current ``A``. A Lanczos run
    stops when its quadrature changes by at most ``max(tol, noise *
    ||T_k - log_z I||)`` relative: eigenvalues of ``T_k`` carry absolute
    round-off of about ``eps ||T_k - log_z I||``, which no further step
    removes. Returns
    ``(t, status, log_z, since_anchor, dense)``: ``status`` is
    :data:`DONE`; :data:`REANCHOR` (trial ``t - 1`` was the last applied
    and ``log_z`` must be recomputed exactly); or :data:`NOT_CONVERGED` /
    :data:`QL_FAILED` (trial ``t`` was not started: run it exactly).

    ``stats``: [trials, Lanczos steps, max steps, breakdowns, steps too
    long to integrate (re-anchored), quadrature nodes, endpoint extra steps, -].
    """
    vectors, reals, stats = workspace
    q_prev = vectors[0]
    q = vectors[1]
    w = vectors[2]
    alpha = reals[0]
    beta = reals[1]
    dd = reals[2]
    ee = reals[3]
    zz = reals[4]
    n = y.size
    d = A.shape[0]
    nnz = 0
    if not dense:
        for i in range(d):
            nnz += deg[i]
    target = math.log(1e-18)
    while t < n:
        ia = a[t]
        ib = b[t]
        if ia == ib:
            y_hat = trace * 0.0
            predictions[t] = y_hat
            scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
            if scale != 0.0:
                A[ia, ia] += scale
                A[ib, ib] += scale
                A[ia, ib] -= scale
                A[ib, ia] -= scale
                since_anchor += 1
            t += 1
            if since_anchor >= anchor_every:
                return t, REANCHOR, log_z, since_anchor, dense
            continue
        for i in range(d):
            q_prev[i] = 0.0
            q[i] = 0.0
        q[ia] = _INV_SQRT2
        q[ib] = -_INV_SQRT2
        beta_prev = 0.0
        k = 0
        quad_old = -1.0
        quad = 0.0
        broke = False
        converged = False
        spread = 0.0  # ||T_k - log_z I||, bounds the round-off of a quadrature
        tol_k = tol
        while k < kmax:
            al, be = _step(A, nbr, deg, dense, q_prev, q, w, beta_prev)
            alpha[k] = al
            beta[k] = be
            k += 1
            spread = max(spread, abs(al - log_z) + be + beta_prev)
            tol_k = max(tol, noise * spread)
            quad, _, ok = tridiag_exp(alpha, beta, k, log_z, 0.0, dd, ee, zz)
            if not ok:
                return t, QL_FAILED, log_z, since_anchor, dense
            if _broke(al, be, beta_prev):
                broke = True
                converged = True
                break
            if k >= 2 and abs(quad - quad_old) <= tol_k * quad:
                converged = True
                break
            quad_old = quad
            _advance(q_prev, q, w, be)
            beta_prev = be
        # exp(A - log Z) has eigenvalues <= 1, so quad <= 1; a run whose
        # round-off level is too high (exponents of enormous spread) is
        # left to eigh as well
        if not converged or not quad <= 1.0 + 1e-9 or tol_k > max_tol:
            return t, NOT_CONVERGED, log_z, since_anchor, dense
        y_hat = trace * 2.0 * quad
        scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        if scale == 0.0:
            predictions[t] = y_hat
            t += 1
            stats[0] += 1
            stats[1] += k
            continue
        bump = 2.0 * scale  # ||u||^2 scale: T_k + bump e1 e1^T
        shift_end = log_z + max(bump, 0.0)
        # the Gauss quadrature of the updated exponent must have converged too
        if not broke:
            h_old, _, ok1 = tridiag_exp(alpha, beta, k - 1, shift_end, bump, dd, ee, zz)
            h, _, ok2 = tridiag_exp(alpha, beta, k, shift_end, bump, dd, ee, zz)
            if not (ok1 and ok2):
                return t, QL_FAILED, log_z, since_anchor, dense
            tol_k = max(tol_k, noise * (spread + abs(bump)))
            while not abs(h - h_old) <= tol_k * h:
                if k >= kmax:
                    return t, NOT_CONVERGED, log_z, since_anchor, dense
                _advance(q_prev, q, w, beta[k - 1])
                beta_prev = beta[k - 1]
                al, be = _step(A, nbr, deg, dense, q_prev, q, w, beta_prev)
                alpha[k] = al
                beta[k] = be
                k += 1
                stats[6] += 1
                spread = max(spread, abs(al - log_z) + be + beta_prev)
                tol_k = max(tol_k, noise * (spread + abs(bump)))
                h_old = h
                h, _, ok = tridiag_exp(alpha, beta, k, shift_end, bump, dd, ee, zz)
                if not ok:
                    return t, QL_FAILED, log_z, since_anchor, dense
                if _broke(al, be, beta_prev):
                    break
            if not h <= 1.0 + 1e-9 or tol_k > max_tol:
                return t, NOT_CONVERGED, log_z, since_anchor, dense
        predictions[t] = y_hat
        # change of Z = tr exp(A): integral of the quadratic form over the step
        if abs(bump) <= gl_limit:
            # shifted by the largest possible eigenvalue: values <= 1
            shift = log_z + max(bump, 0.0)
            half = 0.5 * abs(bump)
            panels = max(1, int(math.ceil(half / panel_half)))
            width = bump / panels
            nodes = gauss_legendre_count(0.5 * abs(width), target,
                                         gl_nodes.shape[0])
            integral = 0.0
            for p in range(panels):
                centre = (p + 0.5) * width
                for r in range(nodes):
                    tau = centre + 0.5 * width * gl_nodes[nodes - 1, r]
                    val, _, ok = tridiag_exp(alpha, beta, k, shift, tau, dd, ee, zz)
                    if not ok:
                        return t, QL_FAILED, log_z, since_anchor, dense
                    integral += gl_weights[nodes - 1, r] * val
            stats[5] += panels * nodes
            integral *= 0.5 * width
            if bump > 0.0:
                new_log_z = shift + math.log(math.exp(log_z - shift) + integral)
                ratio = 1.0
            else:
                ratio = 1.0 + integral
                new_log_z = log_z + math.log1p(integral)
        else:
            new_log_z = math.nan  # re-anchor on eigh after the update
            ratio = math.nan
            stats[4] += 1
        # the exact exponent: same operations as ExponentState.add_pair_outer
        A[ia, ia] += scale
        A[ib, ib] += scale
        A[ia, ib] -= scale
        A[ib, ia] -= scale
        if not dense:
            added = _insert(nbr, deg, ia, ib)
            if added:
                _insert(nbr, deg, ib, ia)
                nnz += 2
                if nnz > dense_fraction * d * d:
                    dense = True
        log_z = new_log_z
        since_anchor += 1
        t += 1
        stats[0] += 1
        stats[1] += k
        if k > stats[2]:
            stats[2] = k
        if broke:
            stats[3] += 1
        if not (ratio >= ratio_min) or not math.isfinite(new_log_z):
            return t, REANCHOR, log_z, since_anchor, dense
        if since_anchor >= anchor_every:
            return t, REANCHOR, log_z, since_anchor, dense
    return t, DONE, log_z, since_anchor, dense
