"""Layer 2, engines: interchangeable ways to run MEG and DefiniteBoost steps.

Each engine runs MEG trials and DefiniteBoost steps on an
:class:`~megkernel._numerics.state.ExponentState`.

Every engine is one module with the same two functions:

``pair_trials(state, a, b, y, learning_rate, trace, predictions, start=0, stats=None)``
    Runs MEG trials ``start, ...`` on ``state`` in place, writing each
    prediction ``yhat_t = tau tr(W_t X_t)`` (made before its update) into
    ``predictions``; returns the index of the first trial it did not run
    (``len(y)`` when done; a smaller index declines that trial, which
    :func:`run_pair_trials` then runs by the engine's ``fallback``). Counters
    go into the ``stats`` dict when one is given.
``pair_update(state, a, b, scale)``
    One step ``A <- A + scale v v^T`` with the eigenpairs kept current
    (DefiniteBoost's projection), or ``None`` if the engine has none.
``pair_sq_distance_after(state, z, scale)``
    ``v^T W' v`` after such a step, with ``z = V^T v``, without changing
    the state (the exact line search of DefiniteBoost's projection), or
    ``None``.

Squared distances of many pairs under a dense state, which every engine
shares, are :func:`pair_sq_distances`.

Solvers that run an engine's kernels in loops of their own (DefiniteBoost's
compiled greedy loop, :mod:`megkernel._solvers.definiteboost_fused`; its
lazy run, :mod:`megkernel._solvers.definiteboost_lazy`) take them from the
engine's record (:class:`Engine`: ``compiled_update``, ``make_workspace``
and ``refresh_every`` of the rank-one engine; ``pair_steps``, ``declined``
and ``runs_on`` of the Lanczos engine), never from an engine's private
modules (``_engines/_*.py``), which only the modules of ``_engines`` import.

All engines give the same results up to round-off. To add one: write the
module, and add one :class:`Engine` line to :data:`ENGINES` (and, if it
should ever be picked by ``"auto"``, its costs in :mod:`._cost` and
:func:`auto_plan`). Everything
else reads the registry: the ``method`` options the estimators accept
(:data:`METHOD_CONSTRAINT`, :data:`UPDATE_METHOD_CONSTRAINT`, checked
against :data:`ENGINES` as it is when the parameters are validated), their
listing in docstrings (:func:`methods_doc`) and the numba compile note
(:attr:`Engine.compiled`, :attr:`Engine.compile_seconds`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from types import ModuleType
from typing import NamedTuple

import numpy as np
from sklearn.utils._param_validation import Options, StrOptions

from .._numerics.threads import blas_threads
from .._warnings import warn_user
from . import _cost, _lanczos_kernels, _rank_one_kernels, eigh, lanczos, rank_one
from ._distances import factor_rows_sq_distances, pair_sq_distances

__all__ = [
    "Engine",
    "ENGINES",
    "METHOD_CONSTRAINT",
    "UPDATE_METHOD_CONSTRAINT",
    "MethodOptions",
    "methods",
    "methods_doc",
    "factor_rows_sq_distances",
    "pair_sq_distances",
    "select",
    "auto_plan",
    "run_pair_trials",
]


class Engine(NamedTuple):
    """An engine's entry points and what it can run.

    Attributes
    ----------
    name : str
        The ``method`` name, its key in :data:`ENGINES`.
    pair_trials : callable
        ``pair_trials(state, a, b, y, learning_rate, trace, predictions,
        start=0, stats=None)`` (see the module docs).
    pair_update : callable or None
        ``pair_update(state, a, b, scale)``, or ``None``: the engine then
        runs MEG trials only, and is no ``method`` of DefiniteBoost.
    low_rank : bool
        Whether it runs low-rank states (``state.basis`` set).
    fallback : str or None, default=None
        The engine that runs the trials this one declines.
    pair_sq_distance_after : callable or None, default=None
        ``pair_sq_distance_after(state, z, scale)`` (see the module docs),
        or ``None``: DefiniteBoost's exact projection then runs by the
        rank-one engine.
    compiled : module or None, default=None
        The module of its numba kernels, if any: the compile note checks
        their cache.
    compile_seconds : float, default=0.0
        How long a cold compile of those kernels takes (the compile note
        says so).
    runs_on : callable or None, default=None
        ``runs_on(state) -> bool``: whether the engine runs on ``state``
        without declining for its round-off or length, or ``None`` (no such
        limit beyond ``low_rank``).
    compiled_update : callable or None, default=None
        The numba kernel behind ``pair_update``, for compiled loops that
        call it themselves (the rank-one engine's, with the arguments of
        ``_rank_one_kernels.pair_trials``), or ``None``.
    make_workspace : callable or None, default=None
        ``make_workspace(n, m)``: the scratch tuple ``compiled_update`` takes
        last, for ``n`` eigenpairs of length ``m``.
    refresh_every : int or None, default=None
        Updates by ``compiled_update`` between two re-anchorings of the
        eigendecomposition on ``eigh`` (as ``pair_update`` re-anchors).
    pair_steps : type or None, default=None
        Matrix-free DefiniteBoost steps on a dense state
        (``pair_steps(state)`` with ``values(a, b)``, ``update(a, b, scale,
        value)``, ``log_partition()`` and ``finish()``, as the Lanczos
        engine's :class:`~.lanczos.PairSteps`), or ``None``.
    declined : type or None, default=None
        The exception ``pair_steps`` raises on a step it declines (the
        state's eigendecomposition then refreshed).
    """

    name: str
    pair_trials: Callable
    pair_update: Callable | None
    low_rank: bool
    fallback: str | None = None
    pair_sq_distance_after: Callable | None = None
    compiled: ModuleType | None = None
    compile_seconds: float = 0.0
    runs_on: Callable | None = None
    compiled_update: Callable | None = None
    make_workspace: Callable | None = None
    refresh_every: int | None = None
    pair_steps: type | None = None
    declined: type | None = None


#: The rank-one eigenproblem needs at least this many eigenpairs.
RANK_ONE_FROM = 3


def _lanczos_runs(state):
    """Tell whether the Lanczos engine can run trials on ``state``.

    It can in dense mode, with a quadrature it will not decline for its
    round-off or its length.
    """
    if state.basis is not None or state.size < RANK_ONE_FROM:
        return False
    lam = state.eigenvalues
    spread = float(lam[-1] - lam[0])
    return (lanczos.NOISE * spread <= lanczos.MAX_TOL
            and _cost.lanczos_steps(state) <= lanczos.MAX_STEPS)


#: The engines by ``method`` name. ``compile_seconds`` is the round figure
#: the compile note quotes for a cold cache (the measured compile times are
#: on the benchmarks page, "First use: the numba compile").
ENGINES = {
    "eigh": Engine("eigh", eigh.pair_trials, eigh.pair_update, low_rank=True,
                   pair_sq_distance_after=eigh.pair_sq_distance_after),
    "rank-one": Engine("rank-one", rank_one.pair_trials, rank_one.pair_update,
                       low_rank=True, pair_sq_distance_after=rank_one.pair_sq_distance_after,
                       compiled=_rank_one_kernels, compile_seconds=5,
                       compiled_update=_rank_one_kernels.pair_trials,
                       make_workspace=_rank_one_kernels.make_workspace,
                       refresh_every=rank_one.REFRESH_EVERY),
    "lanczos": Engine("lanczos", lanczos.pair_trials, None, low_rank=False,
                      fallback="eigh", compiled=_lanczos_kernels, compile_seconds=2,
                      runs_on=_lanczos_runs, pair_steps=lanczos.PairSteps,
                      declined=lanczos.Declined),
}


def methods(need="trials"):
    """Return the ``method`` values the registry offers now, ``"auto"`` first.

    Parameters
    ----------
    need : {"trials", "update"}, default="trials"
        ``"trials"``: every engine (MEG); ``"update"``: the engines with a
        ``pair_update`` (DefiniteBoost's projections).

    Returns
    -------
    tuple of str
        ``"auto"``, then the names of :data:`ENGINES` in registry order.
    """
    if need not in ("trials", "update"):
        raise ValueError(f"need must be 'trials' or 'update', got {need!r}.")
    return ("auto", *(name for name, engine in ENGINES.items()
                      if need == "trials" or engine.pair_update is not None))


def methods_doc(need="trials"):
    """Return the ``method`` options as numpydoc writes them: ``{"auto", "eigh", ...}``.

    For docstrings built from the registry (read when the calling module
    is imported).
    """
    return "{" + ", ".join(f'"{name}"' for name in methods(need)) + "}"


class MethodOptions(StrOptions):
    """scikit-learn constraint: ``"auto"`` or an engine of :data:`ENGINES`.

    The options are read from the registry whenever a parameter is
    validated, not when the estimator's module is imported, so that an
    engine registered later (one line in :data:`ENGINES`) is accepted as
    ``method=`` by every estimator at once.

    Parameters
    ----------
    need : {"trials", "update"}, default="trials"
        As for :func:`methods`.
    """

    def __init__(self, need="trials"):
        methods(need)  # validates need
        # the base constraint's set-up only: Options.__init__ would store a
        # fixed set of options
        super(Options, self).__init__()
        self.type = str
        self.deprecated = set()
        self.need = need

    @property
    def options(self):
        """The valid values now (:func:`methods`), in registry order."""
        return methods(self.need)

    def is_satisfied_by(self, val):
        """Whether ``val`` is ``"auto"`` or a fitting engine of the registry now."""
        if not isinstance(val, str):
            return False
        engine = ENGINES.get(val)
        return val == "auto" or (engine is not None and (
            self.need == "trials" or engine.pair_update is not None))


#: ``_parameter_constraints`` entry of an estimator's ``method`` running MEG
#: trials: ``"auto"`` or any engine.
METHOD_CONSTRAINT = MethodOptions("trials")

#: ... and of one running DefiniteBoost's projections: ``"auto"`` or an
#: engine with a ``pair_update``.
UPDATE_METHOD_CONSTRAINT = MethodOptions("update")

#: "auto" chooses again after each segment of a call (the state changes:
#: early in a run from ``I/d`` most rank-one updates deflate, later none do;
#: the spread of the eigenvalues, which sets the Lanczos steps, grows). A
#: rank-one segment runs as many trials as the call has run so far, between
#: these bounds, or the upper bound at once when no eigenpair deflates any
#: more (each choice costs a look at the state: segments grow so that its
#: share of a long call stays small).
AUTO_RANK_ONE_SEGMENT = (16, 4096)

#: ... a Lanczos segment ends with one ``eigh``: it runs as many trials as
#: the call has run so far, at least this many and enough trials for the
#: ``eigh`` to cost at most 1/20 of the segment (by the cost model), at most
#: 16 times that; and the rest of the call when less than that would be left,
#: or when Lanczos is at least :data:`AUTO_LANCZOS_MARGIN` times cheaper per
#: trial (a later switch to rank-one would then rarely pay for the segments'
#: ends, an ``eigh`` and a new choice each, which the benchmarks page
#: measured as a noticeable share of a Lanczos trial at small ``d``).
AUTO_LANCZOS_SEGMENT = 256
AUTO_LANCZOS_MARGIN = 2.0

#: With "auto", after this many declined trials in one call the rest of the
#: call runs by the rank-one engine: each declined trial costs an ``eigh``,
#: and a state whose trials Lanczos declines (e.g. under huge learning rates)
#: tends to make it decline nearly all of them.
AUTO_MAX_DECLINED = 4

#: Calls of fewer trials than this keep ``"auto"``'s choice between calls
#: (on the state, :attr:`~megkernel._numerics.state.ExponentState.engine_memo`):
#: the choice looks at the state (``k``, the spread, the exponent's
#: non-zeros) at about the cost of a rank-one trial at small ``d``, which a
#: stream of one-pair ``partial_fit`` calls would pay at every call. It is
#: made again when the calls change kind (their length class, or the state's
#: size or form) and after :data:`AUTO_MEMO_TRIALS` trials under it (the
#: spectrum drifts as the stream goes on).
AUTO_MEMO_BELOW = 256
AUTO_MEMO_TRIALS = 1024

#: A longer call whose whole work is expected to take less than this many
#: seconds (the cost model's, :func:`auto_plan` for all its trials, each of
#: which may keep one eigenpair more, over the eigenvalues its pairs see)
#: runs by that one engine instead of
#: segments: the first use of an engine in a process compiles its kernels
#: (seconds, :attr:`Engine.compile_seconds`), which switching to a second
#: engine within a short call cannot pay back (a d = 300 call of 2000 trials
#: from ``I/d`` ran five short rank-one segments before Lanczos, compiling
#: both engines). The rule reads the state and the call only, never the
#: numba cache, so the same data run by the same engines.
AUTO_ONE_ENGINE_BELOW = 0.1


#: A ``method`` the user names (not ``"auto"``) on a dense state is checked
#: against the cost model (:func:`auto_plan`, and ``eigh``'s ``O(d^3)``
#: trial) before its trials run. The rank-one engine's updates cost
#: ``O(d k^2)`` for the ``k`` eigenpairs that do not deflate, all of them once
#: the trials have touched every object (clustered spectra included), 100
#: times Lanczos' trials at ``d = 500``; the eigh engine's 15 to 300 times the
#: best engine's from ``d = 52`` to ``500`` (the benchmarks page). A warning
#: names the expected cost when it is this many times the cheapest engine's
#: ...
SAY_COST_RATIO = 3.0

#: ... and the excess is worth a word: at least this many seconds over the
#: call, or over :data:`AUTO_MEMO_TRIALS` trials of a stream of shorter calls
#: (a test's or a tutorial's few hundred trials at small ``d`` are not).
SAY_COST_SECONDS = 1.0

_WHY_SLOW = {
    "rank-one": "its eigen-updates cost O(d k^2) for the k of the d = {d} eigenpairs that "
                "do not deflate (most of them here)",
    "eigh": "it makes one eigendecomposition of the d = {d} exponent per trial, O(d^3)",
    "lanczos": "its quadrature needs many Lanczos steps over this spread of eigenvalues",
}


def _say_cost(state, method, a, b, n):
    """Warn when the named ``method`` will cost many times the cheapest engine.

    Once per state and method, and only when the excess is noticeable in
    seconds (:data:`SAY_COST_SECONDS`).
    """
    # the whole call, not its first trials: from the identity prior every
    # update deflates at first, and a long rank-one call grows to all of them
    _, _, seconds = auto_plan(state, a, b, n, whole_call=True)
    seconds = dict(seconds, eigh=_cost.eigh_trial(state.size))
    if method not in seconds:
        return
    cheapest = min(seconds, key=seconds.get)
    named = seconds[method]
    excess = (named - seconds[cheapest]) * max(n, AUTO_MEMO_TRIALS)
    if named <= SAY_COST_RATIO * seconds[cheapest] or excess < SAY_COST_SECONDS:
        return
    state.cost_said = state.cost_said + (method,)
    total = named * n
    why = _WHY_SLOW[method]
    end = _cost.lanczos_call(state.size) / max(n, 1)
    if method == "lanczos" and end > 0.5 * named:
        why = ("it ends each call with one eigendecomposition of the d = {d} exponent "
               f"({1e3 * end * n:.3g} ms), which a call of {_trials(n)} does not share out "
               "(pass more pairs per call)")
    warn_user(
        f"method={method!r} on this state costs about {1e3 * named:.3g} ms "
        f"per trial ({total:.3g} s for {_trials(n)}): "
        f"{why.format(d=state.size)}, "
        f"{named / seconds[cheapest]:.0f} times the {cheapest} engine's "
        f"{_duration(seconds[cheapest])} by the cost model. method='auto' or "
        f"'{cheapest}' runs the same trials (the same result up to round-off).",
        UserWarning)


def _trials(n):
    return "1 trial" if n == 1 else f"{n} trials"


def _duration(seconds):
    return f"{1e3 * seconds:.3g} ms" if seconds >= 1e-3 else f"{1e6 * seconds:.3g} us"


def _check_cost(state, method, a, b, n):
    """Name the cost of a ``method`` the user chose (:func:`_say_cost`).

    The check is made again only when the calls change kind or after
    :data:`AUTO_MEMO_TRIALS` trials: a stream of one-pair calls would
    otherwise pay for the cost model at every call.
    """
    if method == "auto" or method in state.cost_said or state.basis is not None:
        return
    if state.size < RANK_ONE_FROM or method not in ENGINES:
        return
    kind = (method,) + _call_kind(state, n)
    memo = dict(state.cost_checked or ())  # each kind of call its own count
    checked = memo.get(kind)
    memo[kind] = n if checked is None or checked >= AUTO_MEMO_TRIALS else checked + n
    state.cost_checked = tuple(memo.items())  # immutable: copies of the state share it
    if checked is None or checked >= AUTO_MEMO_TRIALS:
        _say_cost(state, method, a, b, n)


def _call_kind(state, n):
    """Return what an ``"auto"`` choice for a short call depends on besides the spectrum."""
    length = 0 if n <= 1 else (1 if n <= 16 else 2)
    return (state.size, state.basis is None, length)


#: Calls of fewer trials leave the BLAS threads as they are: setting and
#: restoring a limit costs about as much as a few small trials.
PIN_FROM_TRIALS = 8

def auto_plan(state, a=None, b=None, n_trials=None, done=0, whole_call=False):
    """Choose the engine ``"auto"`` runs MEG trials with on a dense ``state``, and for how long.

    Compares the cost model's (:mod:`._cost`) seconds per trial: the
    rank-one engine keeping the ``k`` eigenpairs the next trials do not
    deflate (estimated from ``z = V^T v`` of the first few), against the
    Lanczos engine's steps (from the spread of the eigenvalues) and
    products (sparse or dense exponent), with its closing ``eigh`` shared by
    the trials of the segment.

    Parameters
    ----------
    state : ExponentState
        Dense state (``basis is None``) of at least :data:`RANK_ONE_FROM`
        objects.
    a, b : ndarray of int, optional
        Object indices of the coming trials (without them, ``k`` is the
        number of distinct eigenvalues plus ``n_trials``).
    n_trials : int, optional
        Trials left in the call; ``None``: the steady state of a long call
        (every eigenpair kept, the ``eigh`` shared by many trials).
    done : int, default=0
        Trials the call has run (segments grow with it).
    whole_call : bool, default=False
        Price all ``n_trials`` trials, not the next segment: ``k`` as if
        each trial kept one eigenpair more (the first few trials do not
        show how many the later ones keep), the spread from the trials
        ``a, b`` if given (the eigenvalues the pairs see, as for a segment).

    Returns
    -------
    name : str
        ``"rank-one"`` or ``"lanczos"``.
    length : int or None
        Trials to run before choosing again (``None`` without ``n_trials``).
    seconds : dict
        The model's seconds per trial of both engines (rank-one, Lanczos
        with its share of the ``eigh``).
    """
    d = state.size
    if n_trials is None:
        k = float(d)
    elif a is None or whole_call:  # each trial may keep one eigenpair more
        k = min(float(d), _cost.kept_eigenpairs(state) + n_trials)
    else:
        k = _cost.kept_eigenpairs(state, a, b)
    rank_one_seconds = _cost.rank_one_trial(k, d)
    low, high = AUTO_RANK_ONE_SEGMENT
    grown = high if k >= 0.9 * d else max(low, min(done, high))
    rank_one_length = None if n_trials is None else min(n_trials, grown)
    if not _lanczos_runs(state):
        return "rank-one", rank_one_length, {"rank-one": rank_one_seconds}
    nnz = int(np.count_nonzero(state.exponent))
    spread = _cost.lanczos_spread(state, a, b)
    per_trial = _cost.lanczos_trial(d, _cost.steps_for_spread(spread), nnz,
                                    lanczos.DENSE_FRACTION, spread)
    end = _cost.lanczos_call(d)
    shortest = max(AUTO_LANCZOS_SEGMENT, int(np.ceil(20.0 * end / per_trial)))
    if n_trials is None:
        lanczos_length, lanczos_seconds = None, per_trial
    else:
        lanczos_length = max(shortest, min(done, 16 * shortest))
        if (n_trials - lanczos_length < shortest  # no short last segment
                or AUTO_LANCZOS_MARGIN * (per_trial + end / n_trials) <= rank_one_seconds):
            lanczos_length = n_trials
        lanczos_seconds = per_trial + end / lanczos_length
    seconds = {"rank-one": rank_one_seconds, "lanczos": lanczos_seconds}
    if lanczos_seconds < rank_one_seconds:
        return "lanczos", lanczos_length, seconds
    return "rank-one", rank_one_length, seconds


def select(method, state, n_trials=None, *, need="trials", pairs=None):
    """Return the engine for ``method`` on ``state``.

    Parameters
    ----------
    method : str
        ``"auto"`` or a key of :data:`ENGINES`. ``"auto"`` picks the
        fastest by a cost model of the state (:func:`auto_plan`) for MEG
        trials on dense states: rank-one or Lanczos; the rank-one engine
        for low-rank states and DefiniteBoost's steps; eigh below
        :data:`RANK_ONE_FROM` eigenpairs.
    state : ExponentState
    n_trials : int, optional
        Trials of the call, if known; ``None``: a long call.
    need : {"trials", "update", "exact-update"}
        What the caller will run: MEG trials, single DefiniteBoost steps,
        or those steps with their exact line search
        (``pair_sq_distance_after``).
    pairs : tuple of ndarray, optional
        ``(a, b)``, the object indices of the call's trials: ``"auto"``
        looks at the first few.

    Returns
    -------
    Engine
        An engine that can run ``need`` on ``state``: an engine that cannot
        (Lanczos on a low-rank state, or for single steps) is replaced by
        the rank-one engine.
    """
    if need not in ("trials", "update", "exact-update"):
        raise ValueError(f"need must be 'trials', 'update' or 'exact-update', got {need!r}.")
    if method != "auto" and method not in ENGINES:
        raise ValueError(f"Unknown method {method!r}; available: {sorted(methods())}.")
    size = state.size
    if method == "auto":
        method = "rank-one" if size >= RANK_ONE_FROM else "eigh"
        if need == "trials" and size >= RANK_ONE_FROM and state.basis is None:
            a, b = pairs if pairs is not None else (None, None)
            method = auto_plan(state, a, b, n_trials)[0]
    engine = ENGINES[method]
    steps = need in ("update", "exact-update")
    if ((state.basis is not None and not engine.low_rank)
            or (steps and engine.pair_update is None)
            or (need == "exact-update" and engine.pair_sq_distance_after is None)):
        engine = ENGINES["rank-one"]
    if steps and engine.name == "rank-one" and size < RANK_ONE_FROM:
        engine = ENGINES["eigh"]
    return engine


def run_pair_trials(state, a, b, y, *, learning_rate, trace=1.0, method="auto",
                    stats=None):
    """Run on-line MEG trials over distance pairs, updating ``state`` in place.

    Parameters
    ----------
    state : ExponentState
        Current exponent (``log W_t`` up to a multiple of the identity).
    a, b : ndarray of int, shape (n,)
        Object indices of each trial.
    y : ndarray of shape (n,)
        Squared distances, in the units of a kernel of trace ``trace``.
    learning_rate : float
        ``eta`` in eq. 4 (trace-one units; ``1/2`` is bound-optimal in the
        realizable case).
    trace : float, default=1.0
        Trace ``tau`` of the kernel ``tau W``.
    method : str, default="auto"
        ``"auto"`` or a key of :data:`ENGINES` (see :func:`select`); all
        give the same result up to round-off.
    stats : dict, optional
        Engine counters (Lanczos: steps, fallbacks, ...) are added to it;
        with ``"auto"`` on a dense state also ``"auto_segments"``, the list
        of ``(engine name, trials)`` it ran in turn (:func:`auto_plan`).

    Returns
    -------
    predictions : ndarray of shape (n,)
        ``yhat_t = tau tr(W_t X_t)``, each made before its update.
    """
    a = np.ascontiguousarray(a, dtype=np.intp)
    b = np.ascontiguousarray(b, dtype=np.intp)
    y = np.ascontiguousarray(y, dtype=float)
    learning_rate, trace = float(learning_rate), float(trace)
    n = len(y)
    # "auto" on a dense state chooses again after each segment of the call
    plan = (method == "auto" and state.basis is None and state.size >= RANK_ONE_FROM)
    engine = None if plan else select(method, state, n_trials=n)
    _check_cost(state, method, a, b, n)
    if plan and n < AUTO_MEMO_BELOW:  # a short call: the stream's choice, kept
        kind = _call_kind(state, n)
        memo = state.engine_memo
        if memo is None or memo[1] != kind or memo[2] >= AUTO_MEMO_TRIALS:
            memo = (auto_plan(state, a, b, n)[0], kind, 0)
        engine, plan = ENGINES[memo[0]], False
        state.engine_memo = (memo[0], kind, memo[2] + n)
        if stats is not None:
            stats.setdefault("auto_segments", []).append((memo[0], n))
    if plan:  # a short call: one engine (the second one's compile would not pay)
        name, _, seconds = auto_plan(state, a, b, n, whole_call=True)
        if seconds[name] * n < AUTO_ONE_ENGINE_BELOW:
            engine, plan = ENGINES[name], False
            if stats is not None:
                stats.setdefault("auto_segments", []).append((name, n))
    predictions = np.empty(n)
    t = declined = 0
    # pinning the BLAS threads costs about as much as a few small trials
    pin = blas_threads(state.size) if n >= PIN_FROM_TRIALS else nullcontext()
    with pin:
        while t < n:
            stop = n
            if plan:
                name, length, _ = auto_plan(state, a[t:], b[t:], n - t, done=t)
                engine = ENGINES[name]
                stop = t + length
                if stats is not None:
                    stats.setdefault("auto_segments", []).append((name, length))
            while t < stop:
                t = engine.pair_trials(state, a[:stop], b[:stop], y[:stop], learning_rate,
                                       trace, predictions[:stop], t, stats)
                if t < stop:  # declined: this one trial by the fallback
                    fallback = ENGINES[engine.fallback]
                    fallback.pair_trials(state, a[: t + 1], b[: t + 1], y[: t + 1],
                                         learning_rate, trace, predictions, t)
                    t += 1
                    declined += 1
                    if method == "auto" and declined >= AUTO_MAX_DECLINED:
                        # e.g. huge steps: Lanczos would decline nearly every
                        # trial; the rest of the call by the rank-one engine
                        engine = ENGINES["rank-one"]
                        plan = False
                        stop = n
    return predictions
