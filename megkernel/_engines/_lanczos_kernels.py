"""Compiled (numba) kernels of the matrix-free Lanczos MEG engine.

The compiled half of :mod:`megkernel._engines.lanczos`, which holds the
policy (tolerances, re-anchoring on ``eigh``, fallbacks) and calls
:func:`pair_trials` here with its arguments in small named structures:

* :class:`Settings`, the constant tolerances, limits and Gauss-Legendre
  tables of a call;
* :class:`ColumnLists`, the sparsity structure of ``A``
  (:func:`build_structure`);
* :class:`Progress`, what a run of trials carries from one call to the next
  (next trial, ``log Z``, updates since the last anchor, dense mode);
* :class:`Workspace`, the named scratch vectors (:func:`make_workspace`);
* a one-element record array of named ``int64`` counters
  (:data:`COUNTERS`, :func:`make_counters`).

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
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["Settings", "ColumnLists", "Progress", "Workspace", "COUNTERS",
           "DONE", "REANCHOR", "NOT_CONVERGED", "QL_FAILED", "build_structure",
           "make_workspace", "make_counters", "pair_trials"]

#: Status codes of :func:`pair_trials`.
DONE, REANCHOR, NOT_CONVERGED, QL_FAILED = 0, 1, 2, 3

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


class Settings(NamedTuple):
    """The constant settings of a call of :func:`pair_trials`.

    Built by :mod:`megkernel._engines.lanczos` from its module constants
    (which document them); pass ``int`` and ``float`` fields as such (a
    different type compiles the kernel anew).

    Attributes
    ----------
    anchor_every : int
        Updates after which ``log Z`` is re-anchored (:data:`REANCHOR`).
    kmax : int
        Largest Lanczos run; the workspace holds ``kmax + 2`` coefficients.
    tol : float
        Relative change of the quadrature below which a run stops.
    noise : float
        The tolerance is raised to ``noise * ||T_k - log Z||`` (round-off
        level of the quadrature).
    max_tol : float
        A trial whose tolerance had to be raised above this is declined.
    ratio_min : float
        A step with ``Z'/Z`` below this re-anchors ``log Z``.
    gl_limit : float
        Steps ``|2 s|`` up to this are integrated by Gauss-Legendre panels;
        longer ones re-anchor after the update.
    panel_half : float
        Largest half-length of a Gauss-Legendre panel (in ``tau = 2 sigma``).
    gl_nodes, gl_weights : ndarray of shape (m, m)
        Row ``n - 1`` holds the ``n`` Gauss-Legendre nodes / weights on
        ``[-1, 1]`` (zero-padded); at most ``m`` nodes per panel.
    dense_fraction : float
        Products switch to dense mode once the column lists hold more than
        this fraction of ``d^2`` entries.
    """

    anchor_every: int
    kmax: int
    tol: float
    noise: float
    max_tol: float
    ratio_min: float
    gl_limit: float
    panel_half: float
    gl_nodes: np.ndarray
    gl_weights: np.ndarray
    dense_fraction: float


class ColumnLists(NamedTuple):
    """Sorted per-row lists of the columns of ``A`` that may be nonzero.

    Attributes
    ----------
    nbr : ndarray of int32, shape (d, d), or (d, 1) in dense mode
        Row ``i`` lists its columns in ``nbr[i, :deg[i]]``, ascending (the
        diagonal always included). Not filled in dense mode.
    deg : ndarray of intp, shape (d,)
        Length of each row's list.
    """

    nbr: np.ndarray
    deg: np.ndarray


class Progress(NamedTuple):
    """Where a run of trials stands; passed to and returned by :func:`pair_trials`.

    Attributes
    ----------
    t : int
        The next trial to run.
    log_z : float
        ``log tr exp(A)`` for the current ``A`` (carried, not recomputed;
        NaN after a step too long to integrate).
    since_anchor : int
        Updates since ``log_z`` was last computed exactly.
    dense : bool
        Products by rows of ``A`` (the column lists are not kept).
    """

    t: int
    log_z: float
    since_anchor: int
    dense: bool


class Workspace(NamedTuple):
    """Scratch arrays of :func:`pair_trials` (see :func:`make_workspace`).

    Attributes
    ----------
    q_prev, q : ndarray of shape (d,)
        The previous and the current Lanczos vector.
    w : ndarray of shape (d,)
        The next (unnormalised) Lanczos vector.
    alpha : ndarray of shape (kmax + 2,)
        Diagonal of the tridiagonal ``T_k``.
    beta : ndarray of shape (kmax + 2,)
        Off-diagonal of ``T_k`` (``beta[k - 1]`` is the norm of ``w``).
    dd, ee, zz : ndarray of shape (kmax + 2,)
        Scratch of :func:`tridiag_exp`: eigenvalues, off-diagonal and first
        eigenvector components during the QL iteration.
    """

    q_prev: np.ndarray
    q: np.ndarray
    w: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    dd: np.ndarray
    ee: np.ndarray
    zz: np.ndarray


#: Record type of the counters :func:`pair_trials` adds to (all ``int64``):
#: ``trials`` run here, Lanczos ``steps`` in total, ``max_steps`` of one
#: trial, ``breakdowns`` (invariant Krylov spaces), ``too_long`` steps (not
#: integrated: re-anchored), quadrature ``nodes`` evaluated, and
#: ``endpoint_steps`` (extra steps for the updated exponent's quadrature).
COUNTERS = np.dtype([(name, np.int64) for name in (
    "trials", "steps", "max_steps", "breakdowns", "too_long", "nodes",
    "endpoint_steps")])


def make_workspace(d, kmax):
    """A zeroed :class:`Workspace` for ``d`` objects and runs of ``kmax`` steps."""
    return Workspace(*(np.zeros(d) for _ in range(3)),
                     *(np.zeros(kmax + 2) for _ in range(5)))


def make_counters():
    """Zeroed counters: a record array of shape (1,) and dtype :data:`COUNTERS`."""
    return np.zeros(1, dtype=COUNTERS)


# -- the structure of A ------------------------------------------------------
@njit(cache=True)
def build_structure(A, dense_fraction):
    """Sorted column lists of the entries of ``A`` that are nonzero.

    Returns
    -------
    columns : ColumnLists
        Row ``i`` lists ``columns.nbr[i, :columns.deg[i]]`` (ascending, the
        diagonal always included).
    dense : bool
        True when the lists would hold more than ``dense_fraction * d^2``
        entries (they are then not filled).
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
        return ColumnLists(np.zeros((d, 1), dtype=np.int32), deg), True
    nbr = np.zeros((d, d), dtype=np.int32)
    for i in range(d):
        row = A[i]
        c = 0
        for j in range(d):
            if row[j] != 0.0 or j == i:
                nbr[i, c] = j
                c += 1
    return ColumnLists(nbr, deg), False


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
def matvec(A, columns, dense, x, out):
    """``out = A x`` (``A`` symmetric), summed over ascending columns.

    Dense mode reads ``A`` by rows; otherwise through ``columns``
    (:class:`ColumnLists`).
    """
    d = x.size
    nbr = columns.nbr
    deg = columns.deg
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
            r = math.hypot(g, 1.0)
            g = dd[m] - p + ee[low] / (g + math.copysign(r, g))
            s = 1.0
            c = 1.0
            p = 0.0
            underflow = False
            for i in range(m - 1, low - 1, -1):
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
def _step(A, columns, dense, work, beta_prev):
    """``w = A q - beta_prev q_prev - alpha q``; returns ``(alpha, ||w||)``.

    ``q_prev``, ``q`` and ``w`` are those of ``work`` (:class:`Workspace`).
    """
    q_prev = work.q_prev
    q = work.q
    w = work.w
    d = q.size
    matvec(A, columns, dense, q, w)
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
def _advance(work, beta):
    """``q_prev <- q``, ``q <- w / beta`` (the vectors of ``work``)."""
    q_prev = work.q_prev
    q = work.q
    w = work.w
    for i in range(q.size):
        q_prev[i] = q[i]
        q[i] = w[i] / beta


@njit(cache=True)
def _broke(alpha, beta, beta_prev):
    """Invariant Krylov space: ``beta`` at round-off level."""
    return beta <= 64.0 * 2.220446049250313e-16 * (abs(alpha) + beta_prev + 1e-300)


# -- the trials -----------------------------------------------------------------
@njit(cache=True)
def pair_trials(A, columns, a, b, y, learning_rate, trace, predictions,
                progress, settings, work, counters):
    """MEG trials from ``progress.t`` on; returns at the end or when Python must act.

    A Lanczos run stops when its quadrature changes by at most
    ``max(tol, noise * ||T_k - log_z I||)`` relative: eigenvalues of ``T_k``
    carry absolute round-off of about ``eps ||T_k - log_z I||``, which no
    further step removes.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        The exponent (C-contiguous, symmetric), updated in place.
    columns : ColumnLists
        Its column lists (from :func:`build_structure`), kept current in
        sparse mode.
    a, b, y, learning_rate, trace, predictions
        The trials and the output, as for every engine
        (:mod:`megkernel._engines`).
    progress : Progress
        Where to start: the first trial, ``log tr exp(A)``, updates since
        the last exact anchor, and the product mode.
    settings : Settings
        Tolerances and limits.
    work : Workspace
        Scratch, from :func:`make_workspace` with ``d`` and
        ``settings.kmax``.
    counters : ndarray of shape (1,) and dtype :data:`COUNTERS`
        Incremented in place.

    Returns
    -------
    status : int
        :data:`DONE`; :data:`REANCHOR` (trial ``t - 1`` was the last
        applied and ``log_z`` must be recomputed exactly); or
        :data:`NOT_CONVERGED` / :data:`QL_FAILED` (trial ``t`` was not
        started: run it exactly).
    progress : Progress
        Where the run stopped.
    """
    t, log_z, since_anchor, dense = progress
    anchor_every = settings.anchor_every
    kmax = settings.kmax
    tol = settings.tol
    noise = settings.noise
    max_tol = settings.max_tol
    gl_nodes = settings.gl_nodes
    gl_weights = settings.gl_weights
    dense_fraction = settings.dense_fraction
    count = counters[0]
    q_prev = work.q_prev
    q = work.q
    alpha = work.alpha
    beta = work.beta
    dd = work.dd
    ee = work.ee
    zz = work.zz
    nbr = columns.nbr
    deg = columns.deg
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
                return REANCHOR, Progress(t, log_z, since_anchor, dense)
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
            al, be = _step(A, columns, dense, work, beta_prev)
            alpha[k] = al
            beta[k] = be
            k += 1
            spread = max(spread, abs(al - log_z) + be + beta_prev)
            tol_k = max(tol, noise * spread)
            quad, _, ok = tridiag_exp(alpha, beta, k, log_z, 0.0, dd, ee, zz)
            if not ok:
                return QL_FAILED, Progress(t, log_z, since_anchor, dense)
            if _broke(al, be, beta_prev):
                broke = True
                converged = True
                break
            if k >= 2 and abs(quad - quad_old) <= tol_k * quad:
                converged = True
                break
            quad_old = quad
            _advance(work, be)
            beta_prev = be
        # exp(A - log Z) has eigenvalues <= 1, so quad <= 1; a run whose
        # round-off level is too high (exponents of enormous spread) is
        # left to eigh as well
        if not converged or not quad <= 1.0 + 1e-9 or tol_k > max_tol:
            return NOT_CONVERGED, Progress(t, log_z, since_anchor, dense)
        y_hat = trace * 2.0 * quad
        scale = -2.0 * learning_rate * (y_hat - y[t]) / trace
        if scale == 0.0:
            predictions[t] = y_hat
            t += 1
            count.trials += 1
            count.steps += k
            continue
        bump = 2.0 * scale  # ||u||^2 scale: T_k + bump e1 e1^T
        shift_end = log_z + max(bump, 0.0)
        # the Gauss quadrature of the updated exponent must have converged too
        if not broke:
            h_old, _, ok1 = tridiag_exp(alpha, beta, k - 1, shift_end, bump, dd, ee, zz)
            h, _, ok2 = tridiag_exp(alpha, beta, k, shift_end, bump, dd, ee, zz)
            if not (ok1 and ok2):
                return QL_FAILED, Progress(t, log_z, since_anchor, dense)
            tol_k = max(tol_k, noise * (spread + abs(bump)))
            while not abs(h - h_old) <= tol_k * h:
                if k >= kmax:
                    return NOT_CONVERGED, Progress(t, log_z, since_anchor, dense)
                _advance(work, beta[k - 1])
                beta_prev = beta[k - 1]
                al, be = _step(A, columns, dense, work, beta_prev)
                alpha[k] = al
                beta[k] = be
                k += 1
                count.endpoint_steps += 1
                spread = max(spread, abs(al - log_z) + be + beta_prev)
                tol_k = max(tol_k, noise * (spread + abs(bump)))
                h_old = h
                h, _, ok = tridiag_exp(alpha, beta, k, shift_end, bump, dd, ee, zz)
                if not ok:
                    return QL_FAILED, Progress(t, log_z, since_anchor, dense)
                if _broke(al, be, beta_prev):
                    break
            if not h <= 1.0 + 1e-9 or tol_k > max_tol:
                return NOT_CONVERGED, Progress(t, log_z, since_anchor, dense)
        predictions[t] = y_hat
        # change of Z = tr exp(A): integral of the quadratic form over the step
        if abs(bump) <= settings.gl_limit:
            # shifted by the largest possible eigenvalue: values <= 1
            shift = log_z + max(bump, 0.0)
            half = 0.5 * abs(bump)
            panels = max(1, int(math.ceil(half / settings.panel_half)))
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
                        return QL_FAILED, Progress(t, log_z, since_anchor, dense)
                    integral += gl_weights[nodes - 1, r] * val
            count.nodes += panels * nodes
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
            count.too_long += 1
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
        count.trials += 1
        count.steps += k
        if k > count.max_steps:
            count.max_steps = k
        if broke:
            count.breakdowns += 1
        if not (ratio >= settings.ratio_min) or not math.isfinite(new_log_z):
            return REANCHOR, Progress(t, log_z, since_anchor, dense)
        if since_anchor >= anchor_every:
            return REANCHOR, Progress(t, log_z, since_anchor, dense)
    return DONE, Progress(t, log_z, since_anchor, dense)
