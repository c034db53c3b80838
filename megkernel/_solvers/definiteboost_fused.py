"""DefiniteBoost's greedy run on a small low-rank state, compiled in one loop.

:func:`~.definiteboost_projections.run_definiteboost` makes each projection
by several Python calls -- a scan of every pair constraint, the choice, eq.
13's step and the rank-one update of the exponent's eigenpairs -- which cost
more than their arithmetic when the rank is small (the metric learners on
data of a few dozen features; the benchmarks page has the measurements).
:func:`run_fused` makes the same iterations --
the paper's greedy choice at every step (a full scan), ties to the first,
eq. 13's approximate projection, ``keep``, the rank-one engine's
compiled update re-anchored on ``eigh`` as often -- in one compiled loop
that returns to Python only for the ``eigh``, a callback or more room in
its records (the same iterates up to the
round-off of the scan's sums; ``tests/test_definiteboost_fused.py``
checks runs against the generic loop). It applies where
:func:`fused_applies` says: pair constraints on a low-rank state, the
approximate projection (multiplier caps allowed), no corrections, every
iteration a scan, the rank-one engine, and a callback only at given
iterations (the validation's checkpoints).

The rank-one engine's compiled update, its workspace and its re-anchoring
interval come from its record in the engine registry
(:data:`megkernel._engines.ENGINES`), read once at import: numba binds the
update into :func:`_greedy_loop` when it compiles that loop.
"""

from __future__ import annotations

import numpy as np

from .._engines import ENGINES
from .._numerics.jit import cached_njit
from .._numerics.spectral import eigh_symmetric
from .._numerics.state import NEGLIGIBLE_WEIGHT, ExponentState
from .._numerics.threads import blas_threads
from .definiteboost_choice import TIE_RTOL, run_bounds, run_log

__all__ = ["fused_applies", "run_fused"]

#: Iterations the records first hold (they double when full).
_FIRST_RECORDS = 4096

#: The rank-one engine's compiled update (``pair_trials`` of its kernels),
#: which :func:`_greedy_loop` calls; a module global, so that numba binds it
#: when it compiles the loop.
_compiled_update = ENGINES["rank-one"].compiled_update
#: Its scratch (``make_workspace(n, m)``).
_make_workspace = ENGINES["rank-one"].make_workspace
#: Updates between two re-anchorings on ``eigh``, as the engine's
#: ``pair_update`` makes them.
REFRESH_EVERY = ENGINES["rank-one"].refresh_every


def fused_applies(constraints, state, settings, scan_every, callback, engine,
                  callback_at=None):
    """Tell whether :func:`run_fused` runs ``run_definiteboost``'s iterations.

    A callback is allowed only at the iterations ``callback_at`` names.
    """
    return ((callback is None or callback_at is not None) and scan_every == 1
            and type(state) is ExponentState
            and state.basis is not None and engine is ENGINES["rank-one"]
            and getattr(constraints, "vectors", None) is not None
            and settings.projection == "approximate" and not settings.corrective
            and settings.scan_every is None)


@cached_njit(error_model="numpy")
def _greedy_loop(basis, vectors, a, b, signs, thresholds, lam_max, lam_min, cap, exponent,
                 lam, Vt, spare, best_exponent, best_lam, best_Vt, workspace, tol,
                 max_iter, log_floor, by_factor, keep_best, refresh_every, pauses,
                 record_j, record_float, multipliers, counters, carry):
    """Greedy iterations from ``counters[0]`` until the end or a refresh is due.

    ``lam``, ``Vt`` (eigenvectors as rows) and ``exponent`` are updated in
    place by the rank-one engine's compiled update (``_compiled_update``,
    its record's ``compiled_update``), the one
    :func:`~megkernel._engines.rank_one.pair_update` runs; ``spare`` is its
    buffer. ``counters``: next iteration, updates since the last ``eigh``,
    iterations made, converged, infeasible, Vt swapped with spare, updates
    since the last ``eigh`` of the kept iterate, pauses made. ``carry``:
    the log-dual offset, the log bound and the kept iterate's largest
    violation. ``record_float[:, t]`` holds iteration ``t``'s violation, step,
    log dual objective and log bound (column 0: the start). ``cap``: the
    multipliers' upper bounds (``inf``: none). Returns 0 at the end, else
    the sum of 1 when the eigenpairs must be recomputed from ``exponent``
    (every ``refresh_every`` updates, a failed root finder, or a step that is
    not finite: the ``eigh`` then refuses the exponent, as the generic
    loop's refresh does) and 2 after an iteration listed in ``pauses``
    (ascending: the caller's callback looks at the state); 4 alone, before
    iteration ``t``'s scan, when the records hold no room for it.
    """
    floats, ints, lapack_ints = workspace
    m = len(a)
    n_objects, rank = basis.shape
    sq = np.empty(m)
    values = np.empty(m)
    scaled = np.empty((rank, rank))
    one_a = np.empty(1, dtype=a.dtype)
    one_b = np.empty(1, dtype=b.dtype)
    one_scale = np.empty(1)
    none = np.empty(0)
    for t in range(counters[0], max_iter + 1):
        counters[0] = t
        if t < max_iter and t >= len(record_j):  # the records are full: grow them
            return 4
        top = lam.max()
        weights = np.exp(lam - top)
        weights /= weights.sum()
        if by_factor:  # the points' factor P V sqrt(w), then a gather per pair
            largest_weight = weights.max()
            for k in range(rank):
                w = weights[k] if weights[k] >= NEGLIGIBLE_WEIGHT * largest_weight else 0.0
                root = np.sqrt(w)
                for i in range(rank):
                    scaled[i, k] = Vt[k, i] * root
            factor = basis @ scaled
            for j in range(m):
                total = 0.0
                if a[j] != b[j]:
                    for k in range(rank):
                        diff = factor[a[j], k] - factor[b[j], k]
                        total += diff * diff
                sq[j] = total
        else:  # the pairs' coordinates in the eigenbasis
            for k in range(rank):
                for i in range(rank):
                    scaled[i, k] = Vt[k, i]
            coords = vectors @ scaled
            for j in range(m):
                total = 0.0
                for k in range(rank):
                    total += coords[j, k] * coords[j, k] * weights[k]
                sq[j] = total
        largest = -np.inf
        top_score = -np.inf
        for j in range(m):
            values[j] = signs[j] * (sq[j] - thresholds[j])
            if values[j] > largest:
                largest = values[j]
            # a violated constraint whose multiplier reached its cap is optimal
            score = 0.0 if values[j] > 0.0 and multipliers[j] >= cap[j] else values[j]
            sq[j] = score
            if score > top_score:
                top_score = score
        cutoff = top_score - TIE_RTOL * abs(top_score)
        chosen = 0
        for j in range(m):
            if sq[j] >= cutoff:
                chosen = j
                break
        violation = sq[chosen]
        if keep_best and largest < carry[2]:  # keep="best"
            carry[2] = largest
            counters[6] = counters[1]
            best_exponent[:, :] = exponent
            best_lam[:] = lam
            best_Vt[:, :] = Vt
        if violation <= tol or violation <= 0.0:
            counters[3] = 1
            return 0
        if t == max_iter or counters[4] == 1:
            return 0
        high, low = lam_max[chosen], lam_min[chosen]
        r = min(violation, high * (1.0 - 1e-15))
        alpha = (np.log1p(-r / low) - np.log1p(-r / high)) / (high - low)
        limit = cap[chosen] - multipliers[chosen]
        clipped = alpha >= limit  # a clipped step has no Theorem 4.1 factor
        if clipped:
            alpha = limit
        one_a[0] = a[chosen]
        one_b[0] = b[chosen]
        one_scale[0] = -alpha * signs[chosen]
        _, _, swapped, info = _compiled_update(lam, Vt, spare, exponent, basis, one_a,
                                               one_b, none, one_scale, 0.0, 1.0, none, 0,
                                               1, floats, ints, lapack_ints)
        if swapped:
            Vt, spare = spare, Vt
            counters[5] = 1 - counters[5]
        counters[1] += 1
        carry[0] += alpha * signs[chosen] * thresholds[chosen]
        multipliers[chosen] += alpha
        top = lam.max()
        log_dual = top + np.log(np.sum(np.exp(lam - top))) + carry[0]
        if not clipped:
            span = high - low
            carry[1] += ((high / span) * np.log1p(-r / high)
                         - (low / span) * np.log1p(-r / low))
        record_j[t] = chosen
        record_float[0, t + 1] = violation
        record_float[1, t + 1] = alpha
        record_float[2, t + 1] = log_dual
        record_float[3, t + 1] = carry[1]
        counters[2] = t + 1
        counters[4] = 1 if log_dual < log_floor else 0
        status = 1 if info != 0 or counters[1] >= refresh_every or not np.isfinite(alpha) else 0
        if counters[7] < len(pauses) and pauses[counters[7]] == t + 1:
            counters[7] += 1
            status += 2
        if status:
            counters[0] = t + 1
            return status
    return 0


def run_fused(constraints, state, settings, callback=None, callback_at=(), *,
              checkpoints=frozenset(), on_checkpoint=None):
    """``run_definiteboost``'s run and log, in one compiled loop (in place).

    For the cases of :func:`fused_applies`: the iterations of the rank-one
    engine, its eigenpairs re-anchored on ``eigh(A)`` as
    :func:`~megkernel._engines.rank_one.pair_update` does; the state ends
    at the iterate ``settings.keep`` names. ``callback(t,
    record)`` is called after each iteration ``t`` of ``callback_at``, with
    ``state`` at that iterate, and ``on_checkpoint(t)`` after each of
    ``checkpoints``.
    """
    cap, log_floor = run_bounds(settings, len(constraints))
    max_iter = int(settings.max_iter)
    multipliers = np.zeros(len(constraints))
    # the records grow as the run goes: max_iter is a cap, not a size
    record_j = np.zeros(min(max_iter, _FIRST_RECORDS), dtype=np.intp)
    record_float = np.zeros((4, len(record_j) + 1))
    record_float[2, 0] = state.log_partition()
    counters = np.array([0, state.updates_since_refresh, 0, 0, 0, 0, 0, 0], dtype=np.int64)
    carry = np.array([0.0, 0.0, np.inf])
    wanted = set(callback_at) if callback is not None else set()
    pauses = np.unique(np.asarray(sorted(wanted | set(checkpoints)), dtype=np.int64))
    pauses = pauses[pauses >= 1]  # iterations are counted from 1
    basis = np.ascontiguousarray(state.basis, dtype=float)
    vectors = np.ascontiguousarray(constraints.vectors, dtype=float)
    exponent = np.array(state.exponent, dtype=float, order="C")
    lam = np.array(state.eigenvalues, dtype=float)
    Vt = np.ascontiguousarray(state.eigenvectors.T, dtype=float)
    best = [exponent.copy(), lam.copy(), Vt.copy()]
    workspace = _make_workspace(*Vt.shape)
    fixed = (basis, vectors, constraints.a, constraints.b, constraints.signs,
             constraints.thresholds, np.asarray(constraints.lam_max, dtype=float),
             np.asarray(constraints.lam_min, dtype=float),
             np.ascontiguousarray(np.broadcast_to(cap, (len(constraints),)), dtype=float))
    with blas_threads(state.size):
        while True:
            spare = np.empty_like(Vt)
            status = _greedy_loop(
                *fixed, exponent, lam, Vt, spare, *best, workspace, float(settings.tol),
                max_iter, float(log_floor), len(constraints) > state.n_objects,
                settings.keep == "best", REFRESH_EVERY, pauses, record_j, record_float,
                multipliers, counters, carry)
            if counters[5]:  # an odd number of trades: the rows are in spare
                Vt, counters[5] = spare, 0
            if status & 2:  # the callback sees the state at this iterate
                t = int(counters[2])
                state.exponent, state.eigenvalues, state.eigenvectors = exponent, lam, Vt.T
                if t in wanted:
                    callback(t, {"constraint": int(record_j[t - 1]),
                                 "violation": float(record_float[0, t]),
                                 "alpha": float(record_float[1, t]),
                                 "dual_objective": float(np.exp(record_float[2, t])),
                                 "dual_bound": float(np.exp(record_float[3, t]))})
                if t in checkpoints:
                    on_checkpoint(t)
            if status & 1:
                lam, vecs = eigh_symmetric(exponent, name="the exponent log W", check=False)
                Vt = np.ascontiguousarray(vecs.T)
                counters[1] = 0
            if status & 4:
                size = min(max_iter, 2 * len(record_j))
                record_j = np.concatenate([record_j, np.zeros(size - len(record_j), np.intp)])
                record_float = np.concatenate(
                    [record_float, np.zeros((4, size + 1 - record_float.shape[1]))], axis=1)
            if not status:
                break
    n_iter = int(counters[2])
    state.partition_anchor = None
    if settings.keep == "best":
        state.exponent, state.eigenvalues, state.eigenvectors = best[0], best[1], best[2].T
        state.updates_since_refresh = int(counters[6])
        max_violation = float(carry[2])
    else:  # the last iterate
        state.exponent, state.eigenvalues, state.eigenvectors = exponent, lam, Vt.T
        state.updates_since_refresh = int(counters[1])
        max_violation = float(constraints.values(state).max())
    record = {"constraint": record_j[:n_iter],
              "violation": record_float[0, 1:n_iter + 1],
              "alpha": record_float[1, 1:n_iter + 1],
              "dual_objective": record_float[2, :n_iter + 1],
              "dual_bound": record_float[3, :n_iter + 1]}
    converged, infeasible = bool(counters[3]), bool(counters[4])
    n_violated = (0 if converged else
                  int(np.count_nonzero(constraints.values(state) > settings.tol)))
    return run_log(record, multipliers, max_violation, converged, infeasible, n_violated)
