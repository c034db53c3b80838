"""Compiled (numba) kernels of the matrix-free Lanczos MEG engine.

The compiled half of :mod:`megkernel._engines.lanczos`, which holds the
policy (tolerances, re-anchoring on ``eigh``, fallbacks) and calls
:func:`pair_trials` here with plain arrays and numbers: the sparsity
structure of ``A`` (:func:`build_structure`, in numpy), the scratch arrays
(:func:`make_workspace`), the ``int64`` counters (:data:`COUNTERS`,
:func:`make_counters`), the constant settings and what a run of trials
carries from one call to the next (next trial, ``log Z``, updates since the
last anchor, dense mode).

Written to compile quickly (the first use of the engine compiles it): one
compiled entry point with few helpers (a compiled function calling another
links and generates the callee's code again), no named tuples or record
arrays.

The exponent ``A`` is the dense array of :class:`ExponentState` (updated in
four entries per trial, exactly as :meth:`ExponentState.add_pair_outer`).
Products ``A x`` read it either through sorted per-row lists of the columns
that may be nonzero (sparse mode: ``O(nnz)``) or row by row (dense mode).
Both accumulate ``y_i = sum_j A_ij x_j`` over ascending ``j`` with one
multiply and one add per term, and terms that are exactly zero leave a sum
unchanged, so the two modes give bit-identical products: switching mode (or
rebuilding the lists in a new call) never changes a result.

One trial runs plain Lanczos on ``A`` from ``u = e_a - e_b`` (no
reorthogonalization: only quadratic forms are needed). With the tridiagonal
``T_k``, ``u^T exp(A + tau/2 u u^T) u = 2 e1^T exp(T_k + tau e1 e1^T) e1``
once ``k`` is large enough (Gauss quadrature), because ``A`` and
``A + s u u^T`` have the same Krylov spaces from ``u``. The quadratures are
evaluated by Golub & Welsch's implicit QL iteration, which carries only the
first row of the eigenvectors (``O(k^2)``).
"""

from __future__ import annotations

import math

import numpy as np

from .._numerics.jit import cached_njit

__all__ = ["COUNTERS", "DONE", "REANCHOR", "NOT_CONVERGED", "QL_FAILED",
           "build_structure", "make_workspace", "make_counters", "pair_trials"]

#: Status codes of :func:`pair_trials`.
DONE, REANCHOR, NOT_CONVERGED, QL_FAILED = 0, 1, 2, 3

_INV_SQRT2 = 1.0 / math.sqrt(2.0)

# Divisions never raise (numpy's error model: no exception paths to compile);
# no C-callable wrapper (nothing takes these kernels' addresses): less to
# generate and optimise on first use. The Python wrapper stays (tests call
# the helpers).
_compiled = cached_njit(error_model="numpy", no_cfunc_wrapper=True)

#: Names of the ``int64`` counters :func:`pair_trials` adds to, in order:
#: ``trials`` run here, Lanczos ``steps`` in total, ``max_steps`` of one
#: trial, ``breakdowns`` (invariant Krylov spaces), ``too_long`` steps (not
#: integrated: re-anchored), quadrature ``nodes`` evaluated, and
#: ``endpoint_steps`` (extra steps for the updated exponent's quadrature),
#: ``trace_steps`` (changes of ``Z`` read off two traces, not integrated).
COUNTERS = ("trials", "steps", "max_steps", "breakdowns", "too_long", "nodes",
            "endpoint_steps", "trace_steps")
(_TRIALS, _STEPS, _MAX_STEPS, _BREAKDOWNS, _TOO_LONG, _NODES,
 _ENDPOINT_STEPS, _TRACE_STEPS) = range(len(COUNTERS))


def make_workspace(d, kmax):
    """Zeroed scratch for ``d`` objects and runs of ``kmax`` steps.

    Returns ``(vectors, coefficients)``: rows ``q_prev, q, w`` (the previous
    and current Lanczos vectors and the next, unnormalized one), shape
    ``(3, d)``; rows ``alpha, beta`` (diagonal and off-diagonal of ``T_k``,
    ``beta[k - 1]`` the norm of ``w``) and ``dd, ee, zz`` (scratch of
    :func:`tridiag_exp`), shape ``(5, kmax + 2)``.
    """
    return np.zeros((3, d)), np.zeros((5, kmax + 2))


def make_counters():
    """Zeroed counters, ``int64`` in the order of :data:`COUNTERS`."""
    return np.zeros(len(COUNTERS), dtype=np.int64)


# -- the structure of A ------------------------------------------------------
def build_structure(A, dense_fraction):
    """Sorted column lists of the entries of ``A`` that are nonzero.

    Returns
    -------
    nbr : ndarray of int32, shape (d, d), or (d, 1) in dense mode
        Row ``i`` lists its columns in ``nbr[i, :deg[i]]``, ascending (the
        diagonal always included). Not filled in dense mode.
    deg : ndarray of intp, shape (d,)
        Length of each row's list.
    dense : bool
        True when the lists would hold more than ``dense_fraction * d^2``
        entries (they are then not filled).
    values : ndarray of shape (d, d), or (d, 1) in dense mode
        ``values[i, p] = A[i, nbr[i, p]]``: the listed entries of each row,
        contiguous (a sparse product reading them from ``A`` itself would
        touch one cache line per entry). Kept equal to ``A`` by
        :func:`pair_trials`.
    """
    d = A.shape[0]
    mask = A != 0.0
    mask[np.diag_indices(d)] = True
    deg = np.ascontiguousarray(mask.sum(axis=1), dtype=np.intp)
    if deg.sum() > dense_fraction * d * d:
        return np.zeros((d, 1), dtype=np.int32), deg, True, np.zeros((d, 1))
    rows, cols = np.nonzero(mask)  # row-major: ascending columns in each row
    starts = np.concatenate([[0], np.cumsum(deg)[:-1]])
    nbr = np.zeros((d, d), dtype=np.int32)
    values = np.zeros((d, d))
    slots = np.arange(rows.size) - starts[rows]
    nbr[rows, slots] = cols
    values[rows, slots] = A[rows, cols]
    return nbr, deg, False, values


@_compiled
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


# -- Gauss quadrature on the tridiagonal --------------------------------------
@_compiled
def _radius(f, g):
    """Return ``sqrt(f^2 + g^2)`` without over- or underflow.

    By the plain formula where it cannot (QL sweeps 40 % faster than with
    ``math.hypot`` alone), else by ``math.hypot``.
    """
    r2 = f * f + g * g
    if 1e-280 < r2 < 1e280:
        return math.sqrt(r2)
    return math.hypot(f, g)


@_compiled
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
    for low in range(k):
        it = 0
        while True:
            m = low
            while m < k - 1:
                tst1 = abs(dd[m]) + abs(dd[m + 1])
                if tst1 + abs(ee[m]) == tst1:
                    break
                m += 1
            if m == low:
                break
            if it == 60:
                ok = False
                break
            it += 1
            p = dd[low]
            g = (dd[low + 1] - p) / (2.0 * ee[low])
            r = _radius(g, 1.0)
            g = dd[m] - p + ee[low] / (g + math.copysign(r, g))
            s = 1.0
            c = 1.0
            p = 0.0
            underflow = False
            for i in range(m - 1, low - 1, -1):
                f = s * ee[i]
                b = c * ee[i]
                r = _radius(f, g)
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
            dd[low] -= p
            ee[low] = g
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


@_compiled
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
@_compiled
def _step(A, values, nbr, deg, dense, vectors, beta_prev):
    """``w = A q - beta_prev q_prev - alpha q``; returns ``(alpha, ||w||)``.

    ``q_prev, q, w`` are the rows of ``vectors``. ``A q`` (``A``
    symmetric) is summed over ascending columns: by rows of ``A`` in dense
    mode, otherwise through the column lists ``nbr[i, :deg[i]]`` and their
    entries ``values[i, :deg[i]]``.
    """
    q_prev = vectors[0]
    q = vectors[1]
    w = vectors[2]
    d = q.size
    if dense:
        for i in range(d):
            w[i] = 0.0
        # eight rows of A (A[j, i] == A[i, j]) per sweep of w: the same terms
        # added in the same (ascending) order as one row at a time, with a
        # third of the loads and stores of w (the product is memory-bound)
        j = 0
        while j + 8 <= d:
            q0 = q[j]
            q1 = q[j + 1]
            q2 = q[j + 2]
            q3 = q[j + 3]
            q4 = q[j + 4]
            q5 = q[j + 5]
            q6 = q[j + 6]
            q7 = q[j + 7]
            if (q0 == 0.0 and q1 == 0.0 and q2 == 0.0 and q3 == 0.0 and q4 == 0.0
                    and q5 == 0.0 and q6 == 0.0 and q7 == 0.0):
                j += 8
                continue
            r0 = A[j]
            r1 = A[j + 1]
            r2 = A[j + 2]
            r3 = A[j + 3]
            r4 = A[j + 4]
            r5 = A[j + 5]
            r6 = A[j + 6]
            r7 = A[j + 7]
            for i in range(d):
                w[i] = (((((((w[i] + r0[i] * q0) + r1[i] * q1) + r2[i] * q2)
                            + r3[i] * q3) + r4[i] * q4) + r5[i] * q5)
                        + r6[i] * q6) + r7[i] * q7
            j += 8
        while j < d:
            qj = q[j]
            if qj != 0.0:
                row = A[j]
                for i in range(d):
                    w[i] += row[i] * qj
            j += 1
    else:
        for i in range(d):
            acc = 0.0
            for p in range(deg[i]):
                acc += values[i, p] * q[nbr[i, p]]
            w[i] = acc
    alpha = 0.0
    for i in range(d):
        w[i] -= beta_prev * q_prev[i]
        alpha += q[i] * w[i]
    norm2 = 0.0
    for i in range(d):
        w[i] -= alpha * q[i]
        norm2 += w[i] * w[i]
    return alpha, math.sqrt(norm2)


#: ``beta`` at this multiple of round-off (relative) means an invariant
#: Krylov space.
_BROKE = 64.0 * 2.220446049250313e-16


# -- the trials -----------------------------------------------------------------
@_compiled
def pair_trials(A, values, nbr, deg, a, b, y, learning_rate, trace, predictions,
                t, log_z, since_anchor, dense, anchor_every, kmax, tol, noise,
                max_tol, ratio_min, gl_limit, panel_half, gl_nodes, gl_weights,
                dense_fraction, ql_from, trace_tol, vectors, coefficients, counters):
    """MEG trials from ``t`` on; returns at the end or when Python must act.

    A Lanczos run stops when Gauss's error bound ``prod beta_j^2 / (2k)!``
    or (from step ``ql_from`` on) the change of its quadrature from the
    previous step is at most ``max(tol, noise * ||T_k - log_z I||)`` of the
    quadrature (a lower bound of it: Jensen's, or the last Gauss value):
    eigenvalues of ``T_k`` carry absolute round-off of about
    ``eps ||T_k - log_z I||``, which no further step removes.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        The exponent (C-contiguous, symmetric), updated in place.
    values, nbr, deg : ndarray
        Its column lists and their entries (from :func:`build_structure`),
        kept current in sparse mode.
    a, b, y, learning_rate, trace, predictions
        The trials and the output, as for every engine
        (:mod:`megkernel._engines`).
    t, log_z, since_anchor, dense
        Where to start: the first trial, ``log tr exp(A)`` (carried, not
        recomputed), updates since the last exact anchor, and the product
        mode (by rows of ``A``: the column lists are not kept).
    anchor_every, kmax, tol, noise, max_tol, ratio_min, gl_limit, panel_half,
    gl_nodes, gl_weights, dense_fraction
        The settings (:mod:`megkernel._engines.lanczos` documents them):
        updates between anchors; the largest Lanczos run; the stopping
        tolerance and its round-off floor ``noise * ||T_k - log Z||``; the
        largest floor a trial may have; the smallest ``Z'/Z`` not
        re-anchored; the longest step integrated; the largest half-length
        of a Gauss-Legendre panel; the Gauss-Legendre tables (row ``n - 1``:
        the ``n`` nodes / weights on ``[-1, 1]``); the fraction of ``d^2``
        entries beyond which products switch to dense mode.
    ql_from, trace_tol
        The first step at which consecutive quadratures are compared
        (before, only Gauss's error bound stops a run); the largest
        round-off, relative to ``Z``, of a change of ``Z`` taken as a
        difference of traces (else by Gauss-Legendre).
    vectors, coefficients
        Scratch, from :func:`make_workspace` with ``d`` and ``kmax``.
    counters : ndarray of int64
        Incremented in place (:data:`COUNTERS`).

    Returns
    -------
    status : int
        :data:`DONE`; :data:`REANCHOR` (trial ``t - 1`` was the last
        applied and ``log_z`` must be recomputed exactly); or
        :data:`NOT_CONVERGED` / :data:`QL_FAILED` (trial ``t`` was not
        started: run it exactly).
    t, log_z, since_anchor, dense
        Where the run stopped (``log_z`` NaN after a step too long to
        integrate).
    """
    q_prev = vectors[0]
    q = vectors[1]
    w = vectors[2]
    alpha = coefficients[0]
    beta = coefficients[1]
    dd = coefficients[2]
    ee = coefficients[3]
    zz = coefficients[4]
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
                if not dense:  # round-off may leave A[ia, ia] changed
                    for p in range(deg[ia]):
                        values[ia, p] = A[ia, nbr[ia, p]]
                since_anchor += 1
            t += 1
            if since_anchor >= anchor_every:
                return REANCHOR, t, log_z, since_anchor, dense
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
        trace0 = 0.0
        broke = False
        converged = False
        spread = 0.0  # ||T_k - log_z I||, bounds the round-off of a quadrature
        tol_k = tol
        log_error = 0.0  # log of the Gauss error bound prod beta_j^2 / (2k)!
        log_lower = -math.inf  # log of a lower bound of the exact quadrature
        quad_k = 0  # steps of the last evaluated quadrature
        while k < kmax:
            al, be = _step(A, values, nbr, deg, dense, vectors, beta_prev)
            alpha[k] = al
            beta[k] = be
            k += 1
            spread = max(spread, abs(al - log_z) + be + beta_prev)
            tol_k = max(tol, noise * spread)
            if k == 1:  # Jensen: e1^T exp(T - log_z) e1 >= exp(alpha_1 - log_z)
                log_lower = al - log_z
            if be <= _BROKE * (abs(al) + beta_prev + 1e-300):
                broke = True
                converged = True
                break
            log_error += 2.0 * math.log(be) - math.log((2.0 * k - 1.0) * (2.0 * k))
            if log_error <= math.log(tol_k) + log_lower:
                converged = True
                break
            if k >= ql_from - 1:
                quad, trace0, ok = tridiag_exp(alpha, beta, k, log_z, 0.0, dd, ee, zz)
                if not ok:
                    return QL_FAILED, t, log_z, since_anchor, dense
                quad_k = k
                if quad > 0.0:  # Gauss quadratures of exp are lower bounds
                    log_lower = max(log_lower, math.log(quad))
                if k >= ql_from and abs(quad - quad_old) <= tol_k * quad:
                    converged = True
                    break
                quad_old = quad
            for i in range(d):  # q_prev <- q, q <- w / beta
                q_prev[i] = q[i]
                q[i] = w[i] / be
            beta_prev = be
        # exp(A - log Z) has eigenvalues <= 1, so quad <= 1; a run whose
        # round-off level is too high (exponents of enormous spread) is
        # left to eigh as well
        if not converged:
            return NOT_CONVERGED, t, log_z, since_anchor, dense
        if quad_k != k:
            quad, trace0, ok = tridiag_exp(alpha, beta, k, log_z, 0.0, dd, ee, zz)
            if not ok:
                return QL_FAILED, t, log_z, since_anchor, dense
        if not quad <= 1.0 + 1e-9 or tol_k > max_tol:
            return NOT_CONVERGED, t, log_z, since_anchor, dense
        y_hat = trace * 2.0 * quad
        scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        if scale == 0.0:
            predictions[t] = y_hat
            t += 1
            counters[_TRIALS] += 1
            counters[_STEPS] += k
            continue
        bump = 2.0 * scale  # ||u||^2 scale: T_k + bump e1 e1^T
        shift = log_z + max(bump, 0.0)  # >= the largest eigenvalue after the step
        # the Gauss quadrature of the updated exponent must have converged too:
        # the same bound (same beta_j), else consecutive quadratures
        h, trace1, ok = tridiag_exp(alpha, beta, k, shift, bump, dd, ee, zz)
        if not ok:
            return QL_FAILED, t, log_z, since_anchor, dense
        tol_k = max(tol_k, noise * (spread + abs(bump)))
        if not broke and not (h > 0.0 and log_error <= math.log(tol_k * h)):
            k_start = k
            h_old, _, ok = tridiag_exp(alpha, beta, k - 1, shift, bump, dd, ee, zz)
            if not ok:
                return QL_FAILED, t, log_z, since_anchor, dense
            while not abs(h - h_old) <= tol_k * h:
                if k >= kmax:
                    return NOT_CONVERGED, t, log_z, since_anchor, dense
                beta_prev = beta[k - 1]
                for i in range(d):
                    q_prev[i] = q[i]
                    q[i] = w[i] / beta_prev
                al, be = _step(A, values, nbr, deg, dense, vectors, beta_prev)
                alpha[k] = al
                beta[k] = be
                k += 1
                counters[_ENDPOINT_STEPS] += 1
                spread = max(spread, abs(al - log_z) + be + beta_prev)
                tol_k = max(tol_k, noise * (spread + abs(bump)))
                h_old = h
                h, trace1, ok = tridiag_exp(alpha, beta, k, shift, bump, dd, ee, zz)
                if not ok:
                    return QL_FAILED, t, log_z, since_anchor, dense
                if be <= _BROKE * (abs(al) + beta_prev + 1e-300):
                    break
            if k != k_start:  # tr exp(T_k - log_z) of the same T_k
                _, trace0, ok = tridiag_exp(alpha, beta, k, log_z, 0.0, dd, ee, zz)
                if not ok:
                    return QL_FAILED, t, log_z, since_anchor, dense
        if not h <= 1.0 + 1e-9 or tol_k > max_tol:
            return NOT_CONVERGED, t, log_z, since_anchor, dense
        predictions[t] = y_hat
        # change of Z = tr exp(A): int_0^bump e1^T exp(T_k + tau e1 e1^T) e1 dtau,
        # shifted by the largest possible eigenvalue (values <= 1)
        if abs(bump) <= gl_limit:
            before = trace0 * math.exp(log_z - shift)  # tr exp(T_k - shift)
            # = tr exp(T_k + bump e1 e1^T - shift) - tr exp(T_k - shift) exactly,
            # each eigenvalue's round-off (noise * spread) weighted by its exp
            if noise * (spread + abs(bump)) * (before + trace1) <= (
                    trace_tol * math.exp(log_z - shift)):
                integral = trace1 - before
                counters[_TRACE_STEPS] += 1
            else:  # by Gauss-Legendre panels: immune to round-off of many Ritz values
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
                            return QL_FAILED, t, log_z, since_anchor, dense
                        integral += gl_weights[nodes - 1, r] * val
                counters[_NODES] += panels * nodes
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
            counters[_TOO_LONG] += 1
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
            if not dense:  # the two rows' entries, copied from A (O(deg))
                for p in range(deg[ia]):
                    values[ia, p] = A[ia, nbr[ia, p]]
                for p in range(deg[ib]):
                    values[ib, p] = A[ib, nbr[ib, p]]
        log_z = new_log_z
        since_anchor += 1
        t += 1
        counters[_TRIALS] += 1
        counters[_STEPS] += k
        if k > counters[_MAX_STEPS]:
            counters[_MAX_STEPS] = k
        if broke:
            counters[_BREAKDOWNS] += 1
        if not (ratio >= ratio_min) or not math.isfinite(new_log_z):
            return REANCHOR, t, log_z, since_anchor, dense
        if since_anchor >= anchor_every:
            return REANCHOR, t, log_z, since_anchor, dense
    return DONE, t, log_z, since_anchor, dense
