"""DefiniteBoostKernel's fit, end to end: from pair labels or from observed distances.

Arrays and options in, a :class:`DefiniteBoostFit` out. From labels, the
paper's problem: a held-out share of each kind of pair chooses ``gamma``
(:func:`~megkernel._solvers.definiteboost_rules.fit_labelled_pairs`). From
observed distances, the constraints are the closest and farthest tenth of
the pairs (:func:`~megkernel._solvers.definiteboost_distances.distance_constraints`)
and the prior is the kernel that fits the distances (MEG's batch fit,
:func:`~megkernel._solvers.meg_batch.fit_batch`): a verdict fit whose
prior and kernel never see the held-out constraint pairs decides whether the
projection, refitted on every pair, or the prior is returned. With the prior
fitted to the distances, one batch fit gives both priors: the held-out
constraint pairs are the constraint pairs among those it holds out, so its
run on its training pairs is the verdict's prior and its refit on every pair
the prior returned.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._warnings import deferred_warnings, replay
from .definiteboost_distances import distance_constraints
from .definiteboost_projections import ChosenCount
from .definiteboost_rules import (
    Chosen,
    auto_max_iter,
    canonical_table,
    dense_state,
    fit_labelled_pairs,
    in_given_order,
    keep_the_prior,
    prior_trace,
    working_state,
)
from .holdout import split_labelled_pairs
from .meg_batch import fit_batch

__all__ = ["DefiniteBoostFit", "fit_from_distances", "fit_from_labels"]


#: What the note of a slow prior fit names (MEG's batch fit of the distances).
PRIOR_FIT = "DefiniteBoostKernel (its prior, MEG's fit of the distances)"
#: What shortens that fit (DefiniteBoostKernel's own tol and max_iter do not reach it).
PRIOR_FIT_SHORTEN = ("give DefiniteBoostKernel a prior of your own, init=MEGKernelRegressor("
                     "tol=..., max_iter=...).fit(X, y).kernel_ over the same objects, with "
                     "squared=False where y holds plain distances (y_kind='distances'); its "
                     "own tol and max_iter are its projections'.")

#: Why a refit from distances stops where it does (for its warnings).
CHOSEN_LENGTH = ("the length at which the held-out pairs ranked best; their score "
                 "stopped rising")


class DefiniteBoostFit(NamedTuple):
    """What :func:`fit_from_labels` and :func:`fit_from_distances` return.

    Attributes
    ----------
    state : ExponentState
        The learned kernel's exponent (trace one).
    trace : float
        Its trace.
    log : dict
        The chosen fit's log (:func:`fit_labelled_pairs`); from distances,
        constraint indices are into the given pairs.
    pairs, signs : ndarray
        The constrained pairs and their labels.
    n_train : int
        Constraints the returned kernel's verdict was trained on.
    held_out : HeldOutPairs or None
        The held-out ranking of the verdict.
    split_reason : str
        Why nothing was held out although asked (empty otherwise).
    """

    state: object
    trace: float
    log: dict
    pairs: np.ndarray
    signs: np.ndarray
    n_train: int
    held_out: object
    split_reason: str


def _split(pairs, signs, n_objects, validation_fraction, random_state):
    if validation_fraction is None:
        return None, None, ""
    return split_labelled_pairs(pairs, signs, n_objects, validation_fraction, random_state)


def _run(state, pairs, signs, *, gamma, gamma_dissimilar, trace, max_iter, options, progress,
         train=None, held_out=None, prune=False):
    """One run of :func:`fit_labelled_pairs` under a progress context."""
    with progress(state, max_iter, len(pairs)) as callback:
        return fit_labelled_pairs(
            state, pairs, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar, trace=trace,
            max_iter=max_iter, train=train, held_out=held_out, prune=prune,
            warm=options["slack"] is None and not options["corrective"], callback=callback,
            **options)


def fit_from_labels(pairs, signs, *, prior, trace, gamma, gamma_dissimilar, max_iter,
                    validation_fraction, random_state, progress, **options):
    """Fit the kernel closest to ``prior`` under labelled pair constraints.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Validated object indices.
    signs : ndarray of shape (n,)
        ``+1`` similar, ``-1`` dissimilar.
    prior : ExponentState
        ``W_1``; the projections run on it in place.
    trace : float
        The kernel's trace.
    gamma, gamma_dissimilar : float or "auto"
        Thresholds (see :class:`~megkernel.DefiniteBoostKernel`).
    max_iter : int or "auto"
        Projections per ``gamma`` tried.
    validation_fraction : float or None
        Share of each kind of pair held out for the verdict and ``gamma``.
    random_state : int, RandomState instance or None
        The split's randomness.
    progress : callable
        ``progress(state, max_iter, n_constraints)``: a context manager
        yielding the runs' callback (or ``None``).
    **options : dict
        ``slack``, ``projection``, ``corrective``, ``tol``, ``method``.

    Returns
    -------
    fit : DefiniteBoostFit
        The kernel and its record.
    """
    given_pairs, given_signs = pairs, signs
    # the same pairs in any row order give the same fit
    pairs, signs, order = canonical_table(pairs, signs)
    train, held_out, reason = _split(pairs, signs, prior.n_objects, validation_fraction,
                                     random_state)
    n_train = len(pairs) if train is None else len(train)
    max_iter = (auto_max_iter(n_train, prior.n_objects) if max_iter == "auto"
                else max_iter)
    log = _run(prior, pairs, signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
               trace=trace, max_iter=max_iter, options=options, progress=progress,
               train=train, held_out=held_out)
    return DefiniteBoostFit(prior, trace, in_given_order(log, order), given_pairs,
                            given_signs, n_train, held_out, reason)


def distance_prior(pairs, sq_distances, *, prior, data_prior, init_trace, trace,
                   random_state, method, projection):
    """Return the prior's state and trace (the distances' units) from observed distances.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Object indices.
    sq_distances : ndarray of shape (n,)
        Their observed squared distances.
    prior : ExponentState
        The prior as given (``I / d`` for ``init="auto"`` or ``"identity"``).
    data_prior : bool
        Fit the prior to the distances (``init="auto"``): MEG's batch fit at
        ``MEGKernelRegressor``'s defaults.
    init_trace : float or None
        The trace of a prior given as a matrix or factor; ``None`` for the
        identity.
    trace : float or "auto"
        The kernel's trace.
    random_state : int, RandomState instance or None
        The batch fit's split.
    method, projection : str
        The projections' engine and step (the subspace form is kept for the
        approximate step of the eigh engine).

    Returns
    -------
    state : ExponentState or SubspaceState
        The prior's working state (a new one).
    trace : float
        Its trace.
    """
    if data_prior:
        fitted = fit_batch(pairs, sq_distances, prior=prior.copy(), spectral=True,
                           random_state=random_state, who=PRIOR_FIT, shorten=PRIOR_FIT_SHORTEN)
        return _fitted_prior(fitted, fitted.trace, trace, method, projection)
    state = prior.copy()
    if init_trace is None and state.basis is None:
        distinct = pairs[:, 0] != pairs[:, 1]
        fitted_trace = 0.5 * state.n_objects * float(np.mean(sq_distances[distinct]))
    else:
        fitted_trace = init_trace if init_trace is not None else 1.0
    return state, fitted_trace if trace == "auto" else float(trace)


def _fitted_prior(fitted, fitted_trace, trace, method, projection):
    """Return a batch fit's kernel (or its training run's) as the projections' prior and trace."""
    state = working_state(fitted.state, fitted.subspace, method, projection)
    return state, fitted_trace if trace == "auto" else float(trace)


def fit_from_distances(pairs, sq_distances, *, prior, data_prior, init_trace, trace, gamma,
                       gamma_dissimilar, max_iter, validation_fraction, random_state,
                       progress, **options):
    """Fit DefiniteBoost's kernel from observed squared distances of pairs.

    The verdict's prior and kernel never see the held-out constraint pairs;
    the returned ones are refitted on every pair, or the prior is kept when
    the held-out pairs rank worse after projection (the verdict's run is
    pruned: see ``prune`` of :func:`fit_labelled_pairs`).

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Validated object indices.
    sq_distances : ndarray of shape (n,)
        Their observed squared distances.
    prior, data_prior, init_trace, trace
        As for :func:`distance_prior`.
    gamma, gamma_dissimilar : float or "auto"
        ``"auto"``: the closest tenth's largest and the farthest tenth's
        smallest squared distance.
    max_iter : int or "auto"
        Projections allowed.
    validation_fraction : float or None
        Share of each kind of constraint held out for the verdict. With a
        prior fitted to the distances, the share of the pairs its batch fit
        holds out (``None``: the batch fit's default), the constraint pairs
        among them held out for the verdict.
    random_state : int, RandomState instance or None
        The splits' randomness.
    progress : callable
        As for :func:`fit_from_labels`.
    **options : dict
        ``slack``, ``projection``, ``corrective``, ``tol``, ``method``.

    Returns
    -------
    fit : DefiniteBoostFit
        The kernel and its record (constraint indices into ``pairs``).
    """
    # the same pairs in any row order give the same fit
    pairs, sq_distances, order = canonical_table(pairs, sq_distances)
    chosen, signs, auto_gamma, auto_gamma_d = distance_constraints(pairs, sq_distances)
    # thresholds chosen here, not given: their messages say so
    gamma = Chosen(auto_gamma) if gamma == "auto" else gamma
    gamma_dissimilar = Chosen(auto_gamma_d) if gamma_dissimilar == "auto" else gamma_dissimilar
    constrained = pairs[chosen]
    max_iter = (auto_max_iter(len(chosen), prior.n_objects) if max_iter == "auto"
                else max_iter)
    run = dict(gamma=gamma, gamma_dissimilar=gamma_dissimilar, max_iter=max_iter,
               options=options, progress=progress)
    make_prior = dict(prior=prior, data_prior=data_prior, init_trace=init_trace, trace=trace,
                      random_state=random_state, method=options["method"],
                      projection=options["projection"])
    if data_prior:
        # one batch fit gives both priors: the held-out constraint pairs are
        # those among the pairs it held out, so its run on its training pairs
        # is the verdict's prior and its refit on every pair the one returned
        fitted = fit_batch(pairs, sq_distances, prior=prior.copy(), spectral=True,
                           random_state=random_state, who=PRIOR_FIT, shorten=PRIOR_FIT_SHORTEN,
                           **({} if validation_fraction is None
                              else {"validation_fraction": validation_fraction}))
        state, fitted_trace = _fitted_prior(fitted, fitted.trace, trace, options["method"],
                                            options["projection"])
        train, held_out, reason = None, None, ""
        if validation_fraction is not None and fitted.held_pairs is not None:
            train, held_out, reason = split_labelled_pairs(
                constrained, signs, prior.n_objects, validation_fraction, random_state,
                held=np.flatnonzero(np.isin(chosen, fitted.held_pairs)))
    shared = data_prior and held_out is not None
    if not shared:
        # no prior fit, or too few constraint pairs among the pairs the batch
        # fit held out (a small table): a share of each kind is held out, and
        # a fitted verdict's prior is fitted again without them (below)
        train, held_out, reason = _split(constrained, signs, prior.n_objects,
                                         validation_fraction, random_state)
    if not data_prior:
        state, fitted_trace = distance_prior(pairs, sq_distances, **make_prior)
    verdict = None
    if held_out is not None:
        if shared:
            verdict_state, verdict_trace = _fitted_prior(
                fitted.training, fitted.training.trace, trace, options["method"],
                options["projection"])
        else:
            seen = np.setdiff1d(np.arange(len(pairs)), np.setdiff1d(chosen, chosen[train]))
            verdict_state, verdict_trace = distance_prior(pairs[seen], sq_distances[seen],
                                                          **make_prior)
        with deferred_warnings() as verdict_warnings:  # said only if it is returned
            # pruned: a projection that falls below the prior on the held-out
            # pairs and stays there is not run to its end only to be turned away
            verdict = _run(verdict_state, constrained[train], signs[train],
                           trace=verdict_trace, held_out=held_out, prune=True, **run)
    prior_kept = verdict is not None and (verdict["validation_score"] < verdict["prior_score"]
                                          or verdict.get("run_length") == 0)
    if prior_kept:
        log = keep_the_prior(state, constrained, signs, gamma=gamma, trace=fitted_trace,
                             verdict=verdict, gamma_dissimilar=gamma_dissimilar, **options)
    else:
        if verdict is not None and verdict.get("run_length"):
            # the held-out pairs chose the run's length: refitted for as many
            # projections, ending at the last (as the verdict's checkpoint did),
            # its ties in the verdict's order
            run.update(max_iter=ChosenCount(verdict["run_length"], CHOSEN_LENGTH,
                                            getattr(max_iter, "budgeted", False)),
                       options=dict(options, keep="last"))
        log = _run(state, constrained, signs, trace=fitted_trace, **run)
    if verdict is not None and not prior_kept:
        replay(verdict_warnings)
        log.update({key: verdict[key] for key in ("prior_score", "validation_score",
                                                  "gamma_scores")},
                   n_iter_total=log["n_iter_total"] + verdict["n_iter_total"])
    for key in ("kept", "dropped", "constraint"):  # indices into the fitted pairs
        log[key] = chosen[log[key]]
    log = in_given_order(log, order)
    return DefiniteBoostFit(dense_state(state), fitted_trace, log, constrained, signs,
                            len(chosen) if train is None else len(train), held_out, reason)


__all__ += ["distance_prior", "prior_trace"]
