"""DefiniteBoost on labelled pairs: the rules of the estimator.

What :class:`megkernel.DefiniteBoostKernel` (and the public
:func:`definiteboost_pairs`) add to the algorithm of
:mod:`.definiteboost`: the thresholds of similar / dissimilar pairs in the
kernel's units, the constraints a prior can meet at all, the tolerance as a
margin, and the labels' check.
"""

from __future__ import annotations

import numpy as np

from .._numerics.limits import MAX_DENSE_OBJECTS
from .._numerics.state import SubspaceState, prior_state
from .._numerics.validation import (
    check_pair_indices,
    check_pair_labels,
    check_positive,
    check_trace,
)
from .._warnings import warn_user
from .definiteboost_projections import (
    ChosenCount,
    PairConstraints,
    _Settings,
    _warn_outcome,
    run_definiteboost,
)
from .holdout import canonical_order

__all__ = [
    "Chosen",
    "said",
    "definiteboost_pairs",
    "fit_pair_constraints",
    "pair_thresholds",
    "prior_mean_sq_distance",
    "satisfiable_pairs",
    "working_state",
    "dense_state",
]


def prior_mean_sq_distance(state):
    """Return the mean squared distance between distinct objects under trace-one ``W``.

    That is ``2 (d - 1^T W 1) / (d (d - 1))`` (``2 / d`` for ``I / d``).
    """
    d = state.n_objects
    if d < 2:  # no two distinct objects: no distance to average
        return 0.0
    return 2.0 * (d - state.entry_sum()) / (d * (d - 1))  # tr W = 1


class Chosen(float):
    """A threshold megkernel chose for a parameter set to ``"auto"`` (a float).

    Messages about it say so (:func:`said`): the user did not give the
    number, and the remedy differs (set the parameter, or change what the
    choice is made from).
    """

    __slots__ = ()


def said(name, value, *, clause=False):
    """Name the threshold ``name`` in a message: given, or chosen by ``"auto"``.

    ``clause``: the form that a verb follows (``"gamma_dissimilar='auto'
    chose 1.931, which"``, or ``"gamma_dissimilar=1.931"`` for a given value);
    else a noun (``"gamma_dissimilar ('auto' chose 1.931)"``).
    """
    if not isinstance(value, Chosen):
        return f"{name}={value:.4g}"
    if clause:
        return f"{name}='auto' chose {value:.4g}, which"
    return f"{name} ('auto' chose {value:.4g})"


def _chosen(value, name, source):
    """Return an ``"auto"`` threshold as a :class:`Chosen`; refuse it by its source."""
    if not (np.isfinite(value) and value > 0):
        raise ValueError(
            f"{name}='auto' chose {value:.4g} from {source}, which is not a positive "
            f"finite threshold: give {name} yourself (in the kernel's units), or a "
            "prior under which distinct objects are apart.")
    return Chosen(value)


def pair_thresholds(state, signs, *, gamma="auto", gamma_dissimilar="auto",
                    thresholds=None, trace=1.0):
    """Resolve the thresholds of pair constraints (kernel units).

    Returns ``(thresholds, gamma, gamma_dissimilar)``: one threshold per
    pair, and the similar / dissimilar thresholds. ``"auto"``: a tenth of
    the prior's mean squared distance between distinct objects for similar
    pairs (``0.2 tau / d`` for the identity prior, the paper's choice), the
    mean itself for dissimilar ones. Explicit per-pair ``thresholds``
    override both; ``gamma`` is then the smallest threshold of a similar
    pair (of any pair when none is similar).
    """
    trace = check_trace(trace)
    if state.n_objects < 2:
        raise ValueError("DefiniteBoost needs at least 2 objects (pairs of distinct "
                         f"objects), got a prior over {state.n_objects}.")
    mean_sq_distance = trace * prior_mean_sq_distance(state)
    if thresholds is not None:
        thresholds = np.broadcast_to(np.asarray(thresholds, dtype=float),
                                     signs.shape).copy()
        similar = thresholds[signs > 0]
        gamma = float((similar if similar.size else thresholds).min())
        dissimilar = thresholds[signs < 0]
        gamma_dissimilar = float(dissimilar.max()) if dissimilar.size else mean_sq_distance
        _check_thresholds(thresholds, signs, trace)
        return thresholds, gamma, gamma_dissimilar
    source = f"the prior's mean squared distance {mean_sq_distance:.4g}"
    gamma = (_chosen(0.1 * mean_sq_distance, "gamma", source) if gamma == "auto"
             else _checked(gamma, "gamma"))
    if gamma_dissimilar == "auto":  # checked only where some pair is held to it
        gamma_dissimilar = (_chosen(mean_sq_distance, "gamma_dissimilar", source)
                            if np.any(signs < 0) else Chosen(mean_sq_distance))
    else:
        gamma_dissimilar = _checked(gamma_dissimilar, "gamma_dissimilar")
    held_to = np.any(signs < 0) or not isinstance(gamma_dissimilar, Chosen)
    if held_to and gamma_dissimilar >= 2.0 * trace:  # an unused 'auto' one is only reported
        raise ValueError(
            f"{said('gamma_dissimilar', gamma_dissimilar, clause=True)} can never hold: "
            f"squared distances under a kernel of trace {trace:g} are below "
            f"{2.0 * trace:g}." + (
                " Give gamma_dissimilar yourself, or a trace in the units of the "
                "distances it was chosen from (trace='auto')."
                if isinstance(gamma_dissimilar, Chosen) else ""))
    thresholds = np.where(signs > 0, gamma, gamma_dissimilar)
    _check_thresholds(thresholds, signs, trace)
    return thresholds, gamma, gamma_dissimilar


def _checked(value, name):
    """Return a given threshold (a :class:`Chosen` one kept so), or refuse it by name."""
    if isinstance(value, Chosen):
        return _chosen(float(value), name, "the data")
    return check_positive(value, name)


#: Similar thresholds below this fraction of the trace are round-off level.
_MIN_RELATIVE_THRESHOLD = 1e-12


def _check_thresholds(thresholds, signs, trace):
    """Finite thresholds a kernel of trace ``trace`` can meet, or a ValueError."""
    if not np.all(np.isfinite(thresholds)):
        raise ValueError("The thresholds contain NaN or infinite values.")
    similar, dissimilar = thresholds[signs > 0], thresholds[signs < 0]
    if similar.size and similar.min() < _MIN_RELATIVE_THRESHOLD * trace:
        raise ValueError(
            f"A similar-pair threshold of {similar.min():.3g} is below "
            f"{_MIN_RELATIVE_THRESHOLD:g} * trace ({_MIN_RELATIVE_THRESHOLD * trace:.3g}): "
            "squared distances that small are round-off for a kernel of that trace "
            "(and 0 or less can never hold between distinct objects).")
    if dissimilar.size and dissimilar.max() >= 2.0 * trace:
        raise ValueError(
            f"A dissimilar-pair threshold of {dissimilar.max():.4g} can never hold: "
            f"squared distances under a kernel of trace {trace:g} are below "
            f"{2.0 * trace:g}.")


def _satisfiable(state, pairs, signs, thresholds, trace, target=None, gamma_dissimilar=None):
    """Return the mask of the constraints that some kernel in the prior's range can meet.

    A dissimilar pair needs ``trace * ||v||^2 > threshold``.

    ``target`` (trace-one units): the thresholds the run aims at, tightened
    by the tolerance's margin (:func:`fit_pair_constraints`). A dissimilar
    pair also needs ``||v||^2 > target``: otherwise its constraint matrix
    ``target I - v v^T`` has no negative eigenvalue, no kernel meets it and
    eq. 13's step is undefined (the log of a negative number).

    ``gamma_dissimilar``: the dissimilar threshold the messages name (a
    :class:`Chosen` one as chosen), or None: the smallest threshold of the
    pairs named.
    """
    sq_norms = state.pair_sq_norms(pairs[:, 0], pairs[:, 1])
    never = (signs < 0) & (trace * sq_norms <= thresholds)
    in_margin = np.zeros_like(never)
    if target is not None:
        in_margin = (signs < 0) & (sq_norms <= target) & ~never
        never |= in_margin
    margin_note = (
        f" ({np.count_nonzero(in_margin)} of them only within the tolerance's margin: "
        "the run aims at gamma_dissimilar + tol * gamma / 2, up to "
        f"{trace * target[in_margin].max():.4g}, beyond their reach.)"
        if in_margin.any() else "")
    def named(mask):
        value = thresholds[mask].min() if gamma_dissimilar is None else gamma_dissimilar
        return said("gamma_dissimilar", value)

    if np.all(never):
        lower = ("Give a smaller gamma_dissimilar" if isinstance(gamma_dissimilar, Chosen)
                 else "Lower gamma_dissimilar")
        raise ValueError(
            f"All {len(pairs)} constraints are dissimilar pairs that can never "
            f"hold: their squared distance is at most trace * ||P[a] - P[b]||^2 "
            f"<= {named(never)} under every kernel in "
            f"the prior's range. {lower}." + margin_note
        )
    if np.any(never):
        warn_user(
            f"Dropped {np.count_nonzero(never)} of {len(pairs)} constraints: dissimilar "
            f"pairs that can never reach {named(never)} "
            "in the prior's range (trace * ||P[a] - P[b]||^2 <= gamma_dissimilar); "
            "see dropped_constraints_." + margin_note,
            UserWarning,
        )
    return ~never


def _contradictions(pairs, signs, thresholds):
    """Name the pairs labelled both similar and dissimilar, which no kernel meets.

    A pair of objects labelled similar (``d <= t_s``) and dissimilar
    (``d >= t_d``) with ``t_s < t_d`` meets no kernel's both constraints.
    Returns a note naming them, ``""`` if there are none.
    """
    a, b = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    keys = a.astype(np.int64) * (int(b.max(initial=0)) + 1) + b
    order = np.argsort(keys, kind="stable")  # a pair's rows together, first row first
    starts = np.r_[0, np.flatnonzero(np.diff(keys[order])) + 1][:len(keys)]
    tightest = np.minimum.reduceat(np.where(signs > 0, thresholds, np.inf)[order], starts)
    loosest = np.maximum.reduceat(np.where(signs < 0, thresholds, -np.inf)[order], starts)
    found = order[starts[tightest < loosest]]
    if not found.size:
        return ""
    return (f" {found.size} pair(s) of objects are labelled both similar and dissimilar, "
            f"e.g. objects_[{a[found[0]]}] and objects_[{b[found[0]]}]: no kernel meets "
            "both. Remove the contradicting labels, or give slack.")


def satisfiable_pairs(state, pairs, signs, thresholds, trace):
    """Return the mask of the pairs some kernel in the prior's range can satisfy.

    Warns (or raises, if none) about the others, as :func:`fit_pair_constraints`.
    """
    return _satisfiable(state, pairs, signs, thresholds, trace)


def fit_pair_constraints(state, pairs, signs, *, gamma="auto", gamma_dissimilar="auto",
                         thresholds=None, trace=1.0, slack=None,
                         projection="approximate", corrective=False, max_iter=2000,
                         tol=1e-2, keep=None, method="auto", callback=None, warn=True,
                         callback_at=None, checkpoints=None, on_checkpoint=None):
    """DefiniteBoost on validated pairs from ``state`` (in place).

    The rules of :func:`definiteboost_pairs` (and of
    :class:`megkernel.DefiniteBoostKernel`), on a prior already made a
    state. Returns the log (see :func:`definiteboost_pairs`); ``warn=False``
    leaves the ConvergenceWarning to the caller (:func:`warn_outcome`);
    ``callback_at``, ``checkpoints``, ``on_checkpoint``: see
    :func:`~.definiteboost_projections.run_definiteboost`.
    """
    trace = check_trace(trace)
    tol = float(tol)  # a float32 tol would overflow in tol * gamma
    explicit = thresholds
    thresholds, gamma, gamma_dissimilar = pair_thresholds(
        state, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
        thresholds=thresholds, trace=trace)
    if not tol < 2.0:
        raise ValueError(
            f"tol={tol!r} would tighten the similar threshold gamma by tol * gamma / 2 "
            "to zero or below, which no kernel meets; use tol < 2 (default 0.01).")
    # aim at constraints tightened by half the tolerance, stop within the other
    # half: on convergence every constraint holds
    margin = 0.5 * max(tol, 0.0) * gamma
    with np.errstate(over="ignore"):  # overflow is caught just below
        target = (thresholds - signs * margin) / trace
    if not np.all(np.abs(target) < 1e300):  # with room for the violations' arithmetic
        raise ValueError(
            f"The thresholds (up to {np.abs(thresholds).max():.3g}) divided by "
            f"trace={trace:.3g} leave double precision: give the thresholds in the "
            "kernel's units (at most 2 * trace for a pair's squared distance).")
    kept = np.flatnonzero(_satisfiable(
        state, pairs, signs, thresholds, trace, target,
        gamma_dissimilar=gamma_dissimilar if explicit is None else None))
    # under a budget the greedy run's ties (under I / d every similar pair is as
    # violated as the next) go in a fixed scrambled order, not the table's: in
    # the table's (pairs of object 0 first, ...) a run stopped by the budget has
    # moved only the first objects
    budget = getattr(max_iter, "budgeted", False)
    if budget:
        kept = kept[np.random.default_rng(0).permutation(kept.size)]
    constraints = PairConstraints(pairs[kept, 0], pairs[kept, 1], signs[kept],
                                  target[kept], state)
    hard = slack is None
    if keep is None:
        # a budget stops a run long before the largest violation falls (under I / d
        # every similar pair starts equally violated: until each is projected on, the
        # largest stays the prior's): the last iterate, of the lowest dual objective,
        # is then the run's progress
        keep = "best" if hard and not budget else "last"
    if not hard:
        slack = check_positive(slack, "slack")
        with np.errstate(divide="ignore", over="ignore"):  # ||v|| = 0: never binding
            cap = np.where(constraints.sq_norms > 0,
                           slack / np.where(constraints.sq_norms > 0, constraints.sq_norms, 1),
                           np.inf)
    settings = _Settings(
        projection=projection, max_iter=max_iter, tol=0.5 * tol * gamma / trace,
        keep=keep, corrective=corrective,
        max_multiplier=None if hard else cap,
        min_prior_eigenvalue=(np.exp(state.eigenvalues[0] - state.log_partition())
                              if hard else None),
    )
    if callback is not None:
        user_callback = callback

        def callback(t, record):
            user_callback(t, {**record, "violation": record["violation"] * trace - margin,
                              "margin": margin})

    log = run_definiteboost(constraints, state, settings, method=method,
                            callback=callback, callback_at=callback_at,
                            checkpoints=checkpoints, on_checkpoint=on_checkpoint)
    # violations of the user's constraints, in kernel units
    log["violation"] = log["violation"] * trace - margin
    log["max_violation"] = log["max_violation"] * trace - margin
    log["constraint"] = kept[log["constraint"]]
    if budget:  # back in the table's order
        by_row = np.argsort(kept)
        kept, log["multipliers"] = kept[by_row], np.asarray(log["multipliers"])[by_row]
    log.update(keep=keep, kept=kept, dropped=np.setdiff1d(np.arange(len(pairs)), kept),
               gamma=gamma, gamma_dissimilar=gamma_dissimilar, margin=margin,
               thresholds=thresholds)
    # the warning's remedy: with hard constraints, name contradicting labels or offer slack
    log["hint"] = ((_contradictions(pairs, signs, thresholds)
                    or " If some labels may be wrong, give slack (soft constraints).")
                   if hard else "")
    if warn:
        warn_outcome(log, max_iter)
    return log


def warn_outcome(log, max_iter):
    """Issue the ConvergenceWarning of a :func:`fit_pair_constraints` log, if any.

    With hard constraints it names the contradicting labels, and slack as a
    remedy.
    """
    _warn_outcome(log, max_iter, units=f" against gamma={log['gamma']:.4g}",
                  hint=log.get("hint", ""))


def canonical_table(pairs, values):
    """Return a pair table in its canonical order, and the order.

    Pairs written smaller object first, rows in
    :func:`~megkernel._solvers.holdout.canonical_order`: the same pairs in
    any row order or orientation give the same fit.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Object indices.
    values : ndarray of shape (n,)
        The rows' labels or distances.

    Returns
    -------
    pairs, values : ndarray
        The table in canonical order.
    order : ndarray of int
        Row ``i`` of the result is row ``order[i]`` of the given table.
    """
    order = canonical_order(pairs, values)
    return np.sort(pairs, axis=1)[order], np.asarray(values)[order], order


def in_given_order(log, order):
    """Map a log's constraint indices from the canonical order back to the user's rows.

    The kept constraints (and their multipliers) come back sorted by the
    user's rows.

    Parameters
    ----------
    log : dict
        A :func:`fit_pair_constraints` log over the canonical table.
    order : ndarray of int
        The canonical order (:func:`canonical_table`).

    Returns
    -------
    log : dict
        The same log (changed in place), its indices into the user's rows.
    """
    kept = order[log["kept"]]
    by_row = np.argsort(kept, kind="stable")
    log["kept"] = kept[by_row]
    log["multipliers"] = np.asarray(log["multipliers"])[by_row]
    log["dropped"] = np.sort(order[log["dropped"]])
    log["constraint"] = order[log["constraint"]]
    return log


def definiteboost_pairs(pairs, signs=None, thresholds=None, *, gamma="auto",
                        gamma_dissimilar="auto", n_objects=None, prior=None,
                        prior_factor=None, trace=1.0, slack=None,
                        projection="approximate", corrective=False, max_iter=2000,
                        tol=1e-2, keep=None, method="auto", callback=None):
    """DefiniteBoost for similar / dissimilar pair constraints.

    The solver behind :class:`megkernel.DefiniteBoostKernel`: called with the
    estimator's parameters it returns the estimator's kernel.

    Parameters
    ----------
    pairs : array-like of int, shape (n, 2)
        Indices ``(a, b)`` of the objects of each constrained pair.
    signs : array-like of shape (n,), default=None
        ``+1`` similar (``||x_a - x_b||^2 <= threshold``), ``-1`` dissimilar
        (``>= threshold``); ``None``: all similar.
    thresholds : float or array-like of shape (n,), default=None
        Explicit thresholds (kernel units), instead of ``gamma`` and
        ``gamma_dissimilar``.
    gamma, gamma_dissimilar : float or "auto", default="auto"
        Thresholds of similar and dissimilar pairs (kernel units). ``"auto"``:
        a tenth of the prior's mean squared distance between distinct
        objects (``0.2 tau / d`` for ``I / d``, the paper's choice) and the
        mean itself.
    n_objects : int, optional
        ``d`` for the prior ``I / d`` when neither ``prior`` nor
        ``prior_factor`` is given.
    prior : array-like of shape (d, d), optional
        Symmetric positive definite ``W_1`` (scaled to trace one).
    prior_factor : array-like of shape (d, r), optional
        Low-rank prior ``W_1 = F F^T / ||F||_F^2``: every iterate stays in
        its range. Dissimilar pairs no kernel of that range can separate
        (``trace ||P[a] - P[b]||^2 <= threshold``) are dropped with a warning.
    trace : float, default=1.0
        Trace ``tau`` of the learned kernel.
    slack : float, optional
        ``None``: hard constraints (the paper). ``c > 0`` (beyond the paper):
        each multiplier is capped, ``alpha_j ||v_j||^2 <= c``, the box dual
        of the always-feasible soft-margin problem.
    projection : {"approximate", "exact"}, default="approximate"
        Step of eq. 13 (Theorem 4.1's bound holds) or the exact projection
        of eq. 11.
    corrective : bool, default=False
        Hildreth-style corrections (beyond the paper): converge to the exact
        Bregman projection (see :func:`run_definiteboost`).
    max_iter : int, default=2000
        Largest number of projections.
    tol : float, default=1e-2
        In units of ``gamma``: the run aims at the constraints tightened by
        ``tol * gamma / 2`` and stops when those hold within ``tol * gamma /
        2``, so on convergence every constraint holds. ``tol <= 0`` aims at
        the constraints themselves (``-inf``: run ``max_iter`` iterations).
    keep : {"best", "last"}, default=None
        Iterate returned when the run stops early; ``None``: "best" for hard
        constraints, "last" with ``slack``.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection; same result up to round-off.
    callback : callable, optional
        ``callback(t, record)`` after each iteration (violation in kernel units).

    Returns
    -------
    K : ndarray of shape (d, d) or None
        The learned kernel ``trace * W`` (``None`` for a low-rank prior over
        more than 5000 objects: use ``log["kernel_factor"]``).
    log : dict
        ``constraint`` (index into ``pairs`` of each projected pair),
        ``violation`` (largest violation before each projection, kernel
        units), ``alpha``, ``multipliers`` (of the kept constraints),
        ``dual_objective`` and ``dual_bound`` (Theorem 4.1), ``max_violation``
        (of the returned kernel), ``converged``, ``infeasible``, ``n_iter``,
        ``kept`` / ``dropped`` (indices into ``pairs``), ``gamma``,
        ``gamma_dissimilar``, ``margin``, ``thresholds``, ``state`` and
        ``kernel_factor`` (``F``, d x r, with ``K = F F^T``).
    """
    state = prior_state(n_objects, prior, prior_factor)
    pairs = check_pair_indices(pairs, state.n_objects, name="pairs")
    signs = check_pair_labels(signs, pairs, name="signs")
    pairs, signs, order = canonical_table(pairs, signs)
    if thresholds is not None and np.ndim(thresholds) == 1:
        thresholds = np.asarray(thresholds)[order]
    log = fit_pair_constraints(
        state, pairs, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
        thresholds=thresholds, trace=trace, slack=slack, projection=projection,
        corrective=corrective, max_iter=max_iter, tol=tol, keep=keep, method=method,
        callback=callback)
    log = in_given_order(log, order)
    if np.ndim(log["thresholds"]) == 1 and len(log["thresholds"]) == len(order):
        thresholds = np.empty_like(log["thresholds"])
        thresholds[order] = log["thresholds"]
        log["thresholds"] = thresholds
    log["state"] = state
    log["kernel_factor"] = np.sqrt(trace) * state.factor()
    if state.basis is None:
        return trace * state.matrix(), log
    if state.n_objects > MAX_DENSE_OBJECTS:
        return None, log
    return log["kernel_factor"] @ log["kernel_factor"].T, log


# -- the estimator's defaults: trace, gamma and length of a fit in the user's units --

#: ``gamma="auto"`` of :class:`~megkernel.DefiniteBoostKernel`: the candidate
#: similar-pair thresholds, as fractions of the prior's mean squared distance
#: between distinct objects, tried from the largest (least learning) down.
AUTO_GAMMA_FRACTIONS = (0.3, 0.1, 0.03)

#: ... the one used when no pairs can be held out to choose (the paper's
#: ``0.2 / d`` for ``I / d``).
DEFAULT_GAMMA_FRACTION = 0.1

#: ``max_iter="auto"``: projections allowed per constraint (per ``gamma``
#: tried), and at least :data:`MIN_AUTO_MAX_ITER` in all. The greedy run
#: projects each constraint about ten times at the default thresholds, so
#: this leaves it room to converge while bounding a run that cannot (the
#: figures are on the benchmarks page, ``docs/benchmarks.rst``).
ITERATIONS_PER_CONSTRAINT, MIN_AUTO_MAX_ITER = 25, 2000

#: ``max_iter="auto"``'s budget on many objects: at most this many
#: projections times objects per run (a projection's cost grows about
#: linearly with the objects: a few milliseconds at 1000-2000 objects), so a
#: run ends in under a minute there, 4000 projections at 2000 objects. The
#: held-out 1-NN of family data stops changing after a few thousand
#: projections at 1000-2000 objects while convergence to ``tol`` takes
#: hundreds of thousands (the figures are on the benchmarks page). A
#: count, not a clock: the same data gives the same kernel on any machine.
AUTO_BUDGET = 8_000_000


def prior_trace(init, init_factor):
    """``trace="auto"``: the trace of the prior as the user gave it.

    ``init`` a matrix: its trace; ``init_factor`` ``F``: ``||F||_F^2`` (the
    trace of ``F F^T``); the identity prior (no units given): 1. The learned
    kernel, ``gamma``, ``gamma_dissimilar`` and the squared distances are
    then in the units of the user's own prior kernel.
    """
    if init_factor is not None:
        factor = np.asarray(init_factor, dtype=float)
        scale = float(np.max(np.abs(factor), initial=0.0)) if factor.size else 0.0
        if not (np.isfinite(scale) and scale > 0):
            return check_trace(scale, name="the trace of init_factor")  # refused, named
        # ||F||_F^2 = scale^2 ||F / scale||_F^2: inf (refused by name) instead
        # of an overflow warning for entries near the float maximum
        with np.errstate(over="ignore"):
            trace = scale * scale * float(np.sum((factor / scale) ** 2))
        return check_trace(trace, name="the trace of init_factor")
    if isinstance(init, str):
        return 1.0
    return check_trace(float(np.trace(np.asarray(init, dtype=float))),
                       name="the trace of init")


def working_state(state, subspace, method, projection):
    """Return DefiniteBoost's working state for a prior fitted by MEG's batch fit.

    A prior the batch fit learned in a subspace plus its isotropic complement
    (``subspace``, from :data:`~megkernel._solvers.meg_batch.SUBSPACE_FROM`
    objects on) is continued in that form
    (:class:`~megkernel._numerics.state.SubspaceState`): the projections then
    stay in the same matrix algebra at ``O(k^3)`` per update instead of
    ``O(d^3)`` once the dense state's eigenpairs stop deflating. The exact
    projection and the rank-one engine need a dense state.

    Parameters
    ----------
    state : ExponentState
        The prior's dense state.
    subspace : SubspaceState or None
        The same prior in its subspace form, if the fit made one.
    method : str
        The update engine asked for.
    projection : str
        ``"approximate"`` or ``"exact"``.

    Returns
    -------
    state : ExponentState or SubspaceState
        The state the projections start from (a copy of the subspace form).
    """
    if subspace is not None and method in ("auto", "eigh") and projection == "approximate":
        return subspace.copy()
    return state


def dense_state(state):
    """``state`` as a dense :class:`~megkernel._numerics.state.ExponentState`."""
    return state.dense() if isinstance(state, SubspaceState) else state


def auto_max_iter(n_constraints, n_objects=None):
    """``max_iter="auto"``: :data:`ITERATIONS_PER_CONSTRAINT` per constraint, within a budget.

    At least :data:`MIN_AUTO_MAX_ITER`; over ``n_objects`` objects at most
    ``AUTO_BUDGET / n_objects`` (:data:`AUTO_BUDGET`; the budget never goes
    below :data:`MIN_AUTO_MAX_ITER` either). A
    :class:`~.definiteboost_projections.ChosenCount`: the warnings of a run
    that reaches it say that ``"auto"`` chose it, and when the budget did.
    """
    count = max(MIN_AUTO_MAX_ITER, ITERATIONS_PER_CONSTRAINT * int(n_constraints))
    if n_objects:
        budget = max(MIN_AUTO_MAX_ITER, AUTO_BUDGET // int(n_objects))
        if budget < count:
            return ChosenCount(budget, f"the budget for {int(n_objects)} objects, "
                                       f"{AUTO_BUDGET:.0e} / objects; give max_iter to "
                                       "run longer")
    return ChosenCount(count)


def prior_pair_summary(state, pairs, signs, trace):
    """Summarize the prior's squared distances over the pairs, for a message."""
    parts = []
    for kind, mask in (("similar", signs > 0), ("dissimilar", signs < 0)):
        if np.any(mask):
            sq = trace * state.pair_sq_distances(pairs[mask, 0], pairs[mask, 1])
            q = np.quantile(sq, [0.0, 0.05, 0.5, 0.95, 1.0])
            parts.append(f"{kind} pairs: min {q[0]:.4g}, 5% {q[1]:.4g}, median "
                         f"{q[2]:.4g}, 95% {q[3]:.4g}, max {q[4]:.4g}")
    return (f"the prior's squared distances (kernel of trace {trace:.4g}, mean "
            f"{trace * prior_mean_sq_distance(state):.4g} between distinct objects) "
            "over the " + "; ".join(parts))


def nothing_learned_message(state, pairs, signs, trace, log):
    """Word the warning of a fit that made no projection (the prior met every constraint)."""
    summary = prior_pair_summary(state, pairs, signs, trace)
    tried = ", ".join(f"{g:.4g}" for g in log["gamma_path"])
    return (f"DefiniteBoostKernel learned nothing: every constraint already holds under "
            f"the prior (gamma tried: {tried}; gamma_dissimilar="
            f"{log['gamma_dissimilar']:.4g}; the fit's margin tol * gamma / 2 = "
            f"{log['margin']:.3g}), so the kernel is the prior and converged_ is False. "
            f"Here {summary}. The thresholds are in the kernel's units: a gamma given "
            "in other units (e.g. your own distances') is usually the cause; use "
            "gamma='auto', a gamma below the similar pairs' squared distances above, "
            "or the prior in your units (init, with trace='auto').")


#: A pruned run (``fit_labelled_pairs(prune=True)``) scores its held-out
#: pairs after this many projections and at every doubling of it.
PRUNE_FIRST_CHECKPOINT = 64

#: ... and stops once they rank worse than under the prior at this many
#: checkpoints in a row: the run has fallen below the prior and stayed there
#: while it doubled its length.
PRUNE_CHECKPOINTS_BELOW = 2


#: ... and also stops once this many checkpoints in a row have not ranked
#: them better beyond noise (:func:`auc_noise`) than the last one that did
#: (at first the prior): the run's length is then the checkpoint that ranked
#: them best, as MEG's batch fit chooses its iterations with patience.
SETTLE_CHECKPOINTS = 2


class _Pruned(Exception):
    """A run stopped at a checkpoint: its held-out score stayed below the prior's.

    ``n_iter``: the projections made; ``score``: the held-out score there.
    ``best_iter``, ``best_score``: the checkpoint that scored best (for a
    run that stopped because its score settled, the length chosen).
    """

    def __init__(self, n_iter, score, best_iter=None, best_score=None):
        super().__init__(n_iter, score)
        self.n_iter, self.score = n_iter, score
        self.best_iter, self.best_score = best_iter, best_score


def auc_noise(auc, n_closer, n_farther):
    """Return the standard error of an AUC of ``n_closer`` against ``n_farther`` pairs.

    Hanley and McNeil's (1982) formula, with ``Q1 = A / (2 - A)`` and
    ``Q2 = 2 A^2 / (1 + A)``: the size of a difference in the held-out
    pairs' ranking that their number can tell from chance.
    """
    a = float(auc)
    if not (n_closer > 0 and n_farther > 0 and 0.0 <= a <= 1.0):
        return 0.0
    q1, q2 = a / (2.0 - a), 2.0 * a * a / (1.0 + a)
    variance = (a * (1.0 - a) + (n_closer - 1) * (q1 - a * a)
                + (n_farther - 1) * (q2 - a * a)) / (n_closer * n_farther)
    return float(np.sqrt(max(variance, 0.0)))


def prune_checkpoints(max_iter):
    """Return the iterations a pruned run is scored after (doubling, below ``max_iter``)."""
    checkpoints, t = [], PRUNE_FIRST_CHECKPOINT
    while t < int(max_iter):
        checkpoints.append(t)
        t *= 2
    return checkpoints


def _pruner(score, prior_score, noise):
    """``on_checkpoint`` of a pruned run: raise :class:`_Pruned` by the rules above.

    ``noise(auc)``: the noise of a held-out score (:func:`auc_noise`).
    """
    below = []
    best = [0, prior_score]  # the best checkpoint so far (0: the prior)
    reference, settled = [prior_score], [0]

    def on_checkpoint(t):
        now = score()
        below.append(now < prior_score)
        if now > best[1]:
            best[:] = [t, now]
        if len(below) >= PRUNE_CHECKPOINTS_BELOW and all(below[-PRUNE_CHECKPOINTS_BELOW:]):
            raise _Pruned(t, now, *best)
        if now > reference[0] + noise(reference[0]):
            reference[0], settled[0] = now, 0
        else:
            settled[0] += 1
            if settled[0] >= SETTLE_CHECKPOINTS:
                raise _Pruned(t, now, *best)

    return on_checkpoint


def fit_labelled_pairs(state, pairs, signs, *, gamma, gamma_dissimilar, trace,
                       max_iter, train=None, held_out=None, warm=True, callback=None,
                       prune=False, **options):
    """Fit :class:`~megkernel.DefiniteBoostKernel`'s kernel on ``state`` (in place).

    ``gamma="auto"``: with ``held_out`` pairs (see
    :mod:`.holdout`), each threshold of
    :data:`AUTO_GAMMA_FRACTIONS` of the prior's mean squared distance is
    fitted in turn, from the largest down, and the kernel that ranks the
    held-out pairs best is kept (ties: the larger ``gamma``). With ``warm``
    (hard constraints, no corrections) each fit starts from the kernel of
    the previous, larger ``gamma``: the multipliers only grow in the paper's
    algorithm, so this continues one run and the path costs about one fit at
    the smallest ``gamma``. The path stops after a ``gamma`` whose fit does
    not converge (infeasible, or ``max_iter`` reached): a smaller ``gamma``
    only tightens the similar pairs' constraints (infeasible too, or slower);
    it also stops at a ``gamma`` that scores below an earlier one (pruned
    early: the path has passed its best, and the smaller ones, the costliest
    fits, are not tried).
    Without held-out pairs: :data:`DEFAULT_GAMMA_FRACTION`.

    ``prune`` (with ``held_out``): each candidate's run is scored on the
    held-out pairs after :data:`PRUNE_FIRST_CHECKPOINT` projections and at
    every doubling, and stops once they rank worse than under the prior at
    :data:`PRUNE_CHECKPOINTS_BELOW` checkpoints in a row: a verdict that
    returns the prior when the projection loses need not wait for the run's
    end to see it lose. It also stops once :data:`SETTLE_CHECKPOINTS`
    checkpoints in a row have not ranked them better beyond noise than the
    last one that did: the held-out pairs then choose the run's length, the
    checkpoint that ranked them best (as MEG's batch fit chooses its
    iterations), if it ranked them better than the prior beyond noise. The
    path then stops; when its first candidate stopped early the log is that
    run's record only (``pruned``: its projections; ``run_length``: the best
    checkpoint's, 0 when none ranked them better than the prior beyond
    noise; ``validation_score``: the best checkpoint's score, else the last
    one, below ``prior_score``).

    The candidates are fitted on the pairs ``train`` (indices into
    ``pairs``) and scored on ``held_out``; the chosen ``gamma`` is then
    fitted on every pair from the prior, as scikit-learn's ``LassoCV``
    refits its chosen ``alpha``: the held-out score is that of the kernel
    trained without those pairs, a slightly pessimistic verdict on the
    returned one, which gains their information. The refit starts from the
    prior, not from the chosen candidate's kernel: the greedy algorithm
    stops at the first feasible kernel on its path, so a continuation would
    carry the split's own path into the result, and the same data would
    give another kernel with another ``random_state``.

    Returns
    -------
    log : dict
        The chosen fit's log (:func:`fit_pair_constraints`), plus
        ``n_iter_total`` (every projection made, along the path),
        ``gamma_path`` and ``gamma_scores`` (the candidates and their held-out
        scores; one entry for a given ``gamma``), ``prior_score`` and
        ``validation_score`` (``nan`` without held-out pairs).
    """
    if isinstance(state, SubspaceState):  # its updates: the eigh engine's, in the block
        options["method"] = "eigh"
    mean = trace * prior_mean_sq_distance(state)
    score = (lambda: np.nan) if held_out is None else (
        lambda: held_out.score(lambda a, b: trace * state.pair_sq_distances(a, b)))
    if held_out is not None:
        def noise(auc):
            return auc_noise(auc, len(held_out.closer), len(held_out.farther))
    prior_score = score()
    if gamma == "auto":
        fractions = AUTO_GAMMA_FRACTIONS if held_out is not None else (DEFAULT_GAMMA_FRACTION,)
        source = f"the prior's mean squared distance {mean:.4g}"
        candidates = [_chosen(fraction * mean, "gamma", source) for fraction in fractions]
    else:
        candidates = [gamma]
    prior = state.copy()
    best = None
    path, scores, n_iter_total = [], [], 0
    fit_on = slice(None) if train is None else train
    for candidate in candidates:
        if not warm:
            state.assign(prior.copy())
        pruning = ({} if not prune or held_out is None else
                   dict(checkpoints=prune_checkpoints(max_iter),
                        on_checkpoint=_pruner(score, prior_score, noise)))
        try:
            log = fit_pair_constraints(state, pairs[fit_on], signs[fit_on], gamma=candidate,
                                       gamma_dissimilar=gamma_dissimilar, trace=trace,
                                       max_iter=max_iter, callback=callback, warn=False,
                                       **pruning, **options)
        except _Pruned as pruned:
            n_iter_total += pruned.n_iter
            path.append(candidate)
            scores.append(pruned.score)
            if best is None:
                # the best checkpoint is chosen over the prior only beyond the
                # noise: noise alone does not move the choice
                above = pruned.best_iter > 0
                won = above and pruned.best_score > prior_score + noise(prior_score)
                return dict(pruned=pruned.n_iter, run_length=pruned.best_iter if won else 0,
                            gamma=candidate, n_iter_total=n_iter_total,
                            gamma_path=np.asarray(path), gamma_scores=np.asarray(scores),
                            prior_score=prior_score,
                            validation_score=pruned.best_score if above else pruned.score)
            break
        n_iter_total += log["n_iter"]
        path.append(candidate)
        scores.append(score())
        if best is None or scores[-1] > best[0]:
            best = (scores[-1], log, state.copy())
        if not log["converged"]:  # a smaller gamma only tightens what failed here
            break
        if scores[-1] < best[0]:  # past the best: a smaller gamma goes on away from it
            break
    validation_score, log, chosen = best
    if train is None:
        state.assign(chosen)
    else:
        state.assign(prior)
        log = fit_pair_constraints(state, pairs, signs, gamma=log["gamma"],
                                   gamma_dissimilar=gamma_dissimilar, trace=trace,
                                   max_iter=max_iter, callback=callback, warn=False,
                                   **options)
        n_iter_total += log["n_iter"]
    warn_outcome(log, max_iter)
    log.update(n_iter_total=n_iter_total, gamma_path=np.asarray(path),
               gamma_scores=np.asarray(scores), prior_score=prior_score,
               validation_score=validation_score)
    return log


def keep_the_prior(state, pairs, signs, *, gamma, gamma_dissimilar, trace, verdict,
                   **options):
    """Log a fit that returns its prior ``state`` (unchanged).

    For constraints megkernel chose itself (the closest and farthest tenth of
    observed distances): when the projection ranked the held-out constraint
    pairs worse than the prior did (``verdict``, a
    :func:`fit_labelled_pairs` log on the training pairs), the prior is the
    validated choice, as the batch MEG fit returns its prior when it
    overfits from the start. The log describes the prior against every
    constraint (no projection made); ``validation_score`` is the prior's and
    ``gamma_scores`` keeps the projection's, ``n_iter_total`` the verdict
    fit's iterations, ``projection_score`` the verdict's score, ``pruned``
    the projections after which the verdict's run was pruned (``None``: run
    to its end).
    """
    log = fit_pair_constraints(state, pairs, signs, gamma=gamma,
                               gamma_dissimilar=gamma_dissimilar, trace=trace, max_iter=0,
                               warn=False, **options)
    log.update(n_iter_total=verdict["n_iter_total"], gamma_path=verdict["gamma_path"],
               gamma_scores=verdict["gamma_scores"], prior_score=verdict["prior_score"],
               validation_score=verdict["prior_score"], converged=False,
               projection_score=verdict["validation_score"], pruned=verdict.get("pruned"))
    return log


def _pruned_note(log):
    """Say that the verdict's run stopped early, and why (``""`` if it ran to its end)."""
    if log.get("pruned") is None:
        return ""
    return (f", the run stopped there: it ranked them no better than the prior at "
            f"{PRUNE_CHECKPOINTS_BELOW} checkpoints in a row")


def prior_kept_message(log, held_out):
    """Word the warning of a fit that returned its prior (:func:`keep_the_prior`).

    A prior whose held-out AUC is 1 (every held-out similar pair ranked
    before every dissimilar one, as a fit of the distances that chose the
    pairs often does) leaves no projection room to rank them better: said
    so, for a verdict that could not have gone the other way.
    """
    ceiling = (" The prior already ranks every held-out similar pair before every "
               "dissimilar one (AUC 1): no projection can rank them better."
               if log["prior_score"] >= 1.0 else "")
    return (f"DefiniteBoostKernel returned its prior: projecting it onto the closest "
            f"and farthest tenth of the observed pairs ranked the {held_out} worse, "
            "or better by less than their noise "
            f"(AUC {log['projection_score']:.4g} against the prior's "
            f"{log['prior_score']:.4g}; {log['n_iter_total']} projections made without "
            f"them{_pruned_note(log)}).{ceiling} These constraints are megkernel's choice "
            "from your distances, not yours: give pair labels (y_kind='labels') with your "
            "own gamma to project anyway.")
