"""Matrix-free Lanczos MEG engine: exact trials without eigendecompositions.

A distance trial needs ``yhat = tau u^T exp(A) u / Z`` (``u = e_a - e_b``,
``Z = tr exp(A)``) and then ``A <- A + s u u^T``. A ``k``-step Lanczos run on
``A`` from ``u`` gives a tridiagonal ``T_k``, and since ``A`` and
``A + sigma u u^T`` have the same Krylov spaces from ``u`` (the update only
changes ``T_k`` in its corner, by ``sigma ||u||^2``),

* ``u^T exp(A) u = 2 e1^T exp(T_k) e1`` (Gauss quadrature), and
* ``Z' - Z = int_0^s u^T exp(A + sigma u u^T) u dsigma``
  ``= int_0^{2s} e1^T exp(T_k + tau e1 e1^T) e1 dtau``,

both exact to round-off once ``k`` is large enough. ``k`` is adaptive: the
Lanczos run stops when Gauss's error bound ``prod_j beta_j^2 / (2k)!``
(times ``exp(eta - log Z) <= 1``: every even derivative of ``exp`` is
positive and at most 1 on the shifted spectrum) is below :data:`TOL`
(relative; raised to the round-off level ``NOISE * ||T_k - log Z||`` of the
quadrature itself) of a lower bound of the quadrature (Jensen's
``exp(alpha_1 - log Z)``, or the last Gauss value: Gauss quadratures of
``exp`` are lower bounds); from step :data:`QL_FROM` on also when two
consecutive quadratures agree to that tolerance (wide spectra, where the
bound is pessimistic), or when the Krylov space is invariant. The updated
exponent's quadrature must pass the same test (same ``beta_j``). The bound
needs no evaluation: a trial evaluates the quadrature once, at its last
step, and once for the updated exponent.

The change of ``Z`` is ``tr exp(T_k + 2s e1 e1^T) - tr exp(T_k)``, exact in
exact arithmetic for any symmetric ``T_k`` (the integral of the quadratic
form over the step), and read off the two evaluations at no extra cost;
each Ritz value's round-off (``NOISE * ||T_k - log Z||``) counts in it
weighted by its exponential, so where that exceeds :data:`TRACE_TOL` of
``Z`` (wide spectra, many Ritz values near the top: plain Lanczos repeats
converged ones) the integral is taken by Gauss-Legendre on panels of
length at most 2 in ``tau`` (the integrand is entire of exponential type
one, so a few nodes reach 1e-18 of ``Z``; panels of half-length up to
:data:`PANEL_HALF` for longer steps), whose nodes are quadratic forms,
immune to repeated Ritz values.

Everything runs shifted by ``log Z`` (eq. 7), so a huge learning rate
cannot overflow.

``log Z`` is carried from trial to trial and re-anchored on the exact
``eigh(A)`` every :data:`ANCHOR_EVERY` updates (and whenever the step
shrank ``Z`` so much that ``1 + (Z' - Z)/Z`` cancels). A trial whose
quadrature does not converge within :data:`MAX_STEPS` steps runs by ``eigh``
instead, and so does a trial whose quadrature is too noisy to trust
(round-off level above :data:`MAX_TOL`: exponents of enormous spread). The
exponent itself is updated exactly, in four entries per trial,
and with the identity prior it stays sparse: products ``A x`` then cost
``O(nnz)`` through per-row column lists (see :mod:`._lanczos_kernels`,
which runs the trials; this module holds the policy).

At the end of each call the eigendecomposition of the state is refreshed
(one ``eigh``), so ``kernel_``, ``predict`` and the other engines see a
valid state. The carried ``log Z`` and the re-anchoring counter are stored
on the state (``state.partition_anchor``), so splitting a run into several
calls (``partial_fit``, pickling in between) gives bit-identical results.

This engine runs dense states only; the selector (:func:`megkernel._engines.select`)
gives low-rank states to the rank-one engine, and runs a trial this engine
declines (see :func:`pair_trials`) by its ``fallback``.
"""

from __future__ import annotations

import numpy as np

from .._numerics.spectral import log_trace_exp
from .._numerics.state import PartitionAnchor
from . import _lanczos_kernels as kernels

__all__ = ["ANCHOR_EVERY", "MAX_STEPS", "STEPS_ANCHOR_EVERY", "TOL", "Declined", "PairSteps",
           "pair_trials"]

#: Relative change of the quadrature below which the Lanczos run stops.
TOL = 1e-15
#: The tolerance is raised to ``NOISE * ||T_k - log Z||``: the round-off
#: level of the quadrature itself (eigenvalues of ``T_k`` are only known to
#: ``eps ||T_k||``).
NOISE = 4 * np.finfo(float).eps
#: Trials whose quadrature round-off level exceeds this run by eigh.
MAX_TOL = 1e-11
#: Largest Lanczos run; a trial needing more runs by eigh.
MAX_STEPS = 60
#: Updates between two exact re-anchorings of ``log Z`` on ``eigh(A)``.
ANCHOR_EVERY = 5000
#: ... and between two of :class:`PairSteps` (DefiniteBoost): an anchor is a
#: full ``eigh``, which at the shorter interval would be a large share of a
#: run on a large state; ``log Z`` drifts by round-off only (the test of the
#: lazy run compares it with the exact one).
STEPS_ANCHOR_EVERY = 25_000
#: A step with ``Z'/Z`` below this re-anchors ``log Z`` (cancellation).
RATIO_MIN = 1.0 / 16.0
#: Steps ``|2 s|`` up to this integrate by Gauss-Legendre panels (longer
#: ones re-anchor on eigh after the update).
GL_LIMIT = 2000.0
#: Largest half-length of a Gauss-Legendre panel (in ``tau = 2 sigma``).
PANEL_HALF = 8.0
#: Sparse products while the column lists hold at most this fraction of d^2:
#: a sparse product costs many times more per entry than a dense one (the
#: cost model's constants, :mod:`megkernel._engines._cost`), so only a
#: sparse-enough exponent gains; both give bit-identical products.
DENSE_FRACTION = 0.05
#: Consecutive quadratures are compared (one ``O(k^2)`` QL evaluation per
#: step) only from this step on; before, a run stops on Gauss's error bound
#: alone (no evaluation).
QL_FROM = 8
#: ``Z' - Z`` is taken as ``tr exp(T_k + 2s e1 e1^T) - tr exp(T_k)`` when the
#: round-off of the Ritz values it sums is below this fraction of ``Z``;
#: otherwise by Gauss-Legendre panels.
TRACE_TOL = 1e-15

#: Counters :func:`pair_trials` adds to its ``stats``: those of the compiled
#: kernel (:data:`._lanczos_kernels.COUNTERS`), then ``fallbacks`` (trials
#: declined) and ``anchors`` (exact re-anchorings of ``log Z``).
STATS = (*kernels.COUNTERS, "fallbacks", "anchors")


def _gauss_legendre_table(size=24):
    nodes = np.zeros((size, size))
    weights = np.zeros((size, size))
    for n in range(1, size + 1):
        x, w = np.polynomial.legendre.leggauss(n)
        nodes[n - 1, :n] = x
        weights[n - 1, :n] = w
    return nodes, weights


_GL_NODES, _GL_WEIGHTS = _gauss_legendre_table()


def _settings():
    """Return the module constants as the kernel's settings arguments, in order.

    Read at each call (tests patch the constants); converted to ``int`` and
    ``float`` so that the compiled kernel always sees the same types.
    """
    return (int(ANCHOR_EVERY), int(MAX_STEPS), float(TOL), float(NOISE), float(MAX_TOL),
            float(RATIO_MIN), float(GL_LIMIT), float(PANEL_HALF), _GL_NODES, _GL_WEIGHTS,
            float(DENSE_FRACTION), int(QL_FROM), float(TRACE_TOL))


def _stamp(state):
    lam = state.eigenvalues
    return (float(log_trace_exp(lam)), float(lam[0]), float(lam[-1]),
            state.exponent.shape[0])


def _start(state):
    """Carried ``(log Z, updates since anchor)`` or a fresh exact anchor."""
    anchor = state.partition_anchor
    if anchor is not None and anchor.stamp == _stamp(state):
        return anchor.log_partition, anchor.updates_since_anchor
    return float(log_trace_exp(state.eigenvalues)), 0


def pair_trials(state, a, b, y, learning_rate, trace, predictions, start=0,
                stats=None):
    """MEG trials from ``start`` by Lanczos quadrature (dense states only).

    Same results as the eigh engine, to round-off. Runs until the end or
    until a trial whose quadrature does not converge (or is too noisy to
    trust): that trial is declined, the state's eigendecomposition is
    refreshed and its index returned, for the caller to run it by another
    engine.

    Parameters
    ----------
    state : ExponentState
        Dense state (``basis is None``), updated in place.
    a, b, y, learning_rate, trace
        As for every engine (see :mod:`megkernel._engines`).
    predictions : ndarray of shape (n,)
        Receives ``yhat_t`` for the trials run.
    start : int, default=0
        First trial to run.
    stats : dict, optional
        Counters (:data:`STATS`) are added to it.

    Returns
    -------
    int
        ``n`` when every trial ran, else the index of the declined trial.
    """
    n = len(y)
    counts = dict.fromkeys(STATS, 0)
    if start >= n:
        return n
    state.exponent = np.ascontiguousarray(state.exponent, dtype=float)
    settings = _settings()
    log_z, since = _start(state)
    nbr, deg, dense, values = kernels.build_structure(state.exponent,
                                                      float(DENSE_FRACTION))
    t = int(start)
    since = int(since)
    vectors, coefficients = kernels.make_workspace(state.size, int(MAX_STEPS))
    counters = kernels.make_counters()
    while True:
        status, t, log_z, since, dense = kernels.pair_trials(
            state.exponent, values, nbr, deg, a, b, y, learning_rate, trace, predictions,
            t, float(log_z), since, bool(dense), *settings, vectors, coefficients,
            counters,
        )
        if status != kernels.REANCHOR or t >= n:
            break
        state.refresh()
        counts["anchors"] += 1
        log_z, since = float(log_trace_exp(state.eigenvalues)), 0
    state.refresh()
    if status == kernels.REANCHOR:  # the final refresh anchors
        counts["anchors"] += 1
        log_z, since = float(log_trace_exp(state.eigenvalues)), 0
    declined = status in (kernels.NOT_CONVERGED, kernels.QL_FAILED)
    counts["fallbacks"] = int(declined)
    state.partition_anchor = PartitionAnchor(log_z, since, _stamp(state))
    for name, value in zip(kernels.COUNTERS, counters):
        counts[name] = int(value)
    if stats is not None:
        for name, value in counts.items():
            stats[name] = (max(stats.get(name, 0), value) if name == "max_steps"
                           else stats.get(name, 0) + value)
        stats["dense"] = bool(dense)
        stats["log_z_drift"] = log_z - float(log_trace_exp(state.eigenvalues))
    return t if declined else n


class PairSteps:
    """DefiniteBoost's evaluations and steps on a dense state by Lanczos quadrature.

    Matrix-free counterpart of the rank-one engine's ``pair_update`` for
    pair constraints ``v = e_a - e_b``: squared distances ``v^T W v`` of any
    pairs (:meth:`values`) and steps ``A <- A + scale v v^T``
    (:meth:`update`), each a run of the compiled trial kernel (an
    evaluation is a trial at learning rate 0; a step, a trial whose target
    is chosen so that the MEG rule takes the wanted step). ``log Z`` is
    carried as in :func:`pair_trials` and re-anchored on ``eigh`` every
    :data:`STEPS_ANCHOR_EVERY` steps; the eigendecomposition is otherwise
    stale until :meth:`finish`.

    A quadrature the kernel declines (it does not converge, or its
    round-off level is too high) raises :class:`Declined` after the state's
    eigendecomposition is refreshed; the exponent is then exactly as after
    the last step taken.

    Parameters
    ----------
    state : ExponentState
        Dense state (``basis is None``) with a current eigendecomposition;
        its exponent is updated in place.
    """

    def __init__(self, state):
        self.state = state
        state.exponent = np.ascontiguousarray(state.exponent, dtype=float)
        self.log_z, self.since = _start(state)
        self.since = int(self.since)
        self.nbr, self.deg, self.dense, self.entries = kernels.build_structure(
            state.exponent, float(DENSE_FRACTION))
        self.dense = bool(self.dense)
        self.settings = (int(STEPS_ANCHOR_EVERY), *_settings()[1:])
        self.vectors, self.coefficients = kernels.make_workspace(state.size,
                                                                 int(MAX_STEPS))
        self.counters = kernels.make_counters()
        self.anchors = 0

    def _run(self, a, b, y, learning_rate, out):
        status, t, log_z, since, dense = kernels.pair_trials(
            self.state.exponent, self.entries, self.nbr, self.deg, a, b, y, learning_rate,
            1.0, out, 0,
            float(self.log_z), self.since, self.dense, *self.settings, self.vectors,
            self.coefficients, self.counters)
        self.dense = bool(dense)
        return status, t, log_z, since

    def _anchor(self):
        self.state.refresh()
        self.log_z, self.since = float(log_trace_exp(self.state.eigenvalues)), 0
        self.anchors += 1

    def values(self, a, b):
        """Return ``v^T W v`` (trace-one ``W``) for the pairs ``(a[i], b[i])``."""
        a = np.ascontiguousarray(a, dtype=np.intp)
        b = np.ascontiguousarray(b, dtype=np.intp)
        out = np.empty(a.size)
        status, t, _, _ = self._run(a, b, np.zeros(a.size), 0.0, out)
        if status != kernels.DONE or t < a.size:
            self._anchor()
            raise Declined(int(a[t]), int(b[t]))
        return out

    def update(self, a, b, scale, value):
        """Take ``A <- A + scale' v v^T`` for the pair ``(a, b)``.

        ``value`` is the pair's ``v^T W v`` from :meth:`values` on the
        current state. Returns ``scale'``, the step taken: ``scale`` up to
        round-off (the kernel's MEG rule ``-2 (yhat - y)`` with the target
        ``y = value + scale / 2``), computed by the same operations.
        """
        target = value + 0.5 * scale
        y = np.array([target])
        out = np.empty(1)
        status, t, log_z, since = self._run(np.array([a], dtype=np.intp),
                                            np.array([b], dtype=np.intp), y, 1.0, out)
        if t == 0:  # declined before the step
            self._anchor()
            raise Declined(int(a), int(b))
        taken = -2.0 * 1.0 * (out[0] - target) / 1.0
        self.log_z, self.since = log_z, since
        if status == kernels.REANCHOR:
            self._anchor()
        return taken

    def log_partition(self):
        """``log tr exp(A)`` (carried)."""
        return self.log_z

    def finish(self):
        """Refresh the eigendecomposition and store the carried ``log Z`` on the state."""
        self.state.refresh()
        self.state.partition_anchor = PartitionAnchor(self.log_z, self.since,
                                                      _stamp(self.state))


class Declined(Exception):
    """A quadrature :class:`PairSteps` could not trust (the pair is in ``args``)."""
