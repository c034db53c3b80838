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

All engines give the same results up to round-off. To add one: write the
module, and add one :class:`Engine` line to :data:`ENGINES` (and, if it
should ever be picked by ``"auto"``, a rule in :func:`select`). Everything
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
from . import _lanczos_kernels, _rank_one_kernels, eigh, lanczos, rank_one
from ._distances import pair_sq_distances

__all__ = [
    "Engine",
    "ENGINES",
    "METHOD_CONSTRAINT",
    "UPDATE_METHOD_CONSTRAINT",
    "MethodOptions",
    "methods",
    "methods_doc",
    "pair_sq_distances",
    "select",
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
    """

    name: str
    pair_trials: Callable
    pair_update: Callable | None
    low_rank: bool
    fallback: str | None = None
    pair_sq_distance_after: Callable | None = None
    compiled: ModuleType | None = None
    compile_seconds: float = 0.0


#: The engines by ``method`` name. Compile times measured on a 2-core
#: machine: rank-one 4.6 s, Lanczos 1.8 s.
ENGINES = {
    "eigh": Engine("eigh", eigh.pair_trials, eigh.pair_update, low_rank=True,
                   pair_sq_distance_after=eigh.pair_sq_distance_after),
    "rank-one": Engine("rank-one", rank_one.pair_trials, rank_one.pair_update,
                       low_rank=True, pair_sq_distance_after=rank_one.pair_sq_distance_after,
                       compiled=_rank_one_kernels, compile_seconds=5),
    "lanczos": Engine("lanczos", lanczos.pair_trials, None, low_rank=False,
                      fallback="eigh", compiled=_lanczos_kernels, compile_seconds=2),
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

#: "auto" runs dense-mode states of at least this size by the Lanczos engine
#: (measured faster than rank-one from d = 100 on, 10x at d = 200 from a
#: generic prior; see benchmarks/bench_speed.py).
AUTO_LANCZOS_FROM = 200

#: ... and only for calls of at least this many trials: a Lanczos call ends
#: with one ``eigh``, worth 6-8 rank-one trials at d = 200-2000 (measured: at
#: d = 500, 64 trials in calls of 1 / 4 / 8 trials cost 27.1 / 7.2 / 3.6 ms
#: per trial by Lanczos and 6.2 / 6.8 / 6.1 ms by rank-one), so on-line use,
#: one trial per ``partial_fit``, stays with the rank-one engine.
AUTO_LANCZOS_MIN_TRIALS = 8

#: With "auto", after this many declined trials in one call the rest of the
#: call runs by the rank-one engine (at a learning rate of 1e6, Lanczos
#: declined 1483 of 1500 trials at d = 500: 10.6 s against 0.7 s).
AUTO_MAX_DECLINED = 4

#: Calls of fewer trials leave the BLAS threads as they are (setting and
#: restoring a limit costs about 40 us, two rank-one trials at d = 52).
PIN_FROM_TRIALS = 8

#: The rank-one eigenproblem needs at least this many eigenpairs.
RANK_ONE_FROM = 3


def select(method, state, n_trials=None, *, need="trials"):
    """Return the engine for ``method`` on ``state``.

    Parameters
    ----------
    method : str
        ``"auto"`` or a key of :data:`ENGINES`. ``"auto"`` picks the
        fastest: rank-one, or Lanczos for dense states of at least
        :data:`AUTO_LANCZOS_FROM` objects in calls of at least
        :data:`AUTO_LANCZOS_MIN_TRIALS` trials; eigh below 3 eigenpairs.
    state : ExponentState
    n_trials : int, optional
        Trials of the call, if known.
    need : {"trials", "update", "exact-update"}
        What the caller will run: MEG trials, single DefiniteBoost steps,
        or those steps with their exact line search
        (``pair_sq_distance_after``).

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
        if (need == "trials" and size >= AUTO_LANCZOS_FROM and state.basis is None
                and (n_trials is None or n_trials >= AUTO_LANCZOS_MIN_TRIALS)):
            method = "lanczos"
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
        Engine counters (Lanczos: steps, fallbacks, ...) are added to it.

    Returns
    -------
    predictions : ndarray of shape (n,)
        ``yhat_t = tau tr(W_t X_t)``, each made before its update.
    """
    a = np.ascontiguousarray(a, dtype=np.intp)
    b = np.ascontiguousarray(b, dtype=np.intp)
    y = np.ascontiguousarray(y, dtype=float)
    learning_rate, trace = float(learning_rate), float(trace)
    engine = select(method, state, n_trials=len(y))
    predictions = np.empty(len(y))
    t = declined = 0
    # pinning the BLAS costs about two trials at d = 52: not for a few trials
    pin = blas_threads(state.size) if len(y) >= PIN_FROM_TRIALS else nullcontext()
    with pin:
        while t < len(y):
            t = engine.pair_trials(state, a, b, y, learning_rate, trace,
                                   predictions, t, stats)
            if t < len(y):  # declined: this one trial by the fallback
                fallback = ENGINES[engine.fallback]
                fallback.pair_trials(state, a[: t + 1], b[: t + 1], y[: t + 1],
                                     learning_rate, trace, predictions, t)
                t += 1
                declined += 1
                if method == "auto" and declined >= AUTO_MAX_DECLINED:
                    # e.g. huge steps: Lanczos would decline nearly every trial
                    engine = ENGINES["rank-one"]
    return predictions
