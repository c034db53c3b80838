"""The two experiments of Section 5 of Tsuda, Raetsch & Warmuth (2004).

Both start from a labeled, trace-one target kernel (see
:mod:`megkernel.datasets`) and judge the learned kernel by the paper's 1-NN
protocol (:func:`megkernel.nearest_neighbor_error`) with the same splits
throughout, so that every error is comparable with the target's:

- :func:`run_online_experiment` (Figure 2): on-line MEG from random entries
  of the target, ``W_1 = I/d``, at Lemma 3.2's bound-optimal learning rate;
  total loss against the bound, 1-NN error against trials.
- :func:`run_batch_experiment` (Figure 3): DefiniteBoost from all pairs
  closer than ``gamma`` in the target; dual objective against Theorem 4.1's
  bound, 1-NN error against iterations.

They compose public functions only; :func:`summary_table` collects the
figures that matter, :mod:`megkernel.plotting` draws them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.utils._param_validation import Interval, validate_params

from ._numerics.spectral import check_symmetric, normalized_expm, von_neumann_divergence
from ._progress import bar as progress_bar
from ._progress import detail as progress_detail
from ._solvers.bounds import meg_learning_rate, meg_loss_bound
from .datasets import distance_triples, similar_pairs
from .definiteboost_kernel import DefiniteBoostKernel
from .evaluation import nearest_neighbor_error
from .meg_regressor import MEGKernelRegressor

__all__ = [
    "OnlineExperiment",
    "BatchExperiment",
    "run_online_experiment",
    "run_batch_experiment",
    "summary_table",
]

#: Eigenvalue range of a distance instance ``X_t = u u^T``, ``u = e_a - e_b``.
PAIR_EIGENVALUE_RANGE = 2.0


@dataclass
class OnlineExperiment:
    """Outcome of :func:`run_online_experiment` (Figure 2).

    A plain record: :func:`run_online_experiment` fills it, and
    :func:`~megkernel.plotting.plot_online_experiment` and
    :func:`summary_table` read it. Each parameter is kept as the attribute
    of the same name.

    Parameters
    ----------
    trials : ndarray of int
        Checkpoints (trials done), starting at 0 (the prior ``I/d``).
    knn_errors : ndarray
        Mean 1-NN test error of the kernel at each checkpoint.
    knn_split_errors : ndarray of shape (n_checkpoints + 1, n_splits)
        The 1-NN test error of every split at each checkpoint (the spread
        behind ``knn_errors``).
    cumulative_loss : ndarray of shape (n_trials,)
        Total loss ``L_MEG`` after each trial.
    loss_bound : float
        Lemma 3.2's bound on the total loss (the target is a zero-loss
        comparator): ``(r^2 / 2) Delta(target, I/d)`` with ``r = 2``.
    learning_rate : float
        The bound-optimal rate used, ``2 / r^2 = 1/2``.
    target_error, identity_error : float
        Mean 1-NN error of the target kernel and of the prior.
    target_split_errors : ndarray of shape (n_splits,)
        The target kernel's 1-NN error on every split.
    seconds : float
        Wall time of the MEG trials (evaluation excluded).
    wall_seconds : float
        Wall time of the whole experiment (examples, trials, evaluations).
    model : MEGKernelRegressor
        The fitted model.

    See Also
    --------
    run_online_experiment : The experiment that returns it.
    BatchExperiment : The outcome of the batch experiment.

    Examples
    --------
    >>> from megkernel.datasets import load_gyrb
    >>> from megkernel.experiments import run_online_experiment
    >>> gyrb = load_gyrb(n_objects=30)
    >>> result = run_online_experiment(gyrb.kernel, gyrb.labels, n_trials=300,
    ...                                n_checkpoints=2)
    >>> result.trials.tolist(), result.learning_rate
    ([0, 100, 300], 0.5)
    """

    trials: np.ndarray
    knn_errors: np.ndarray
    knn_split_errors: np.ndarray
    cumulative_loss: np.ndarray
    loss_bound: float
    learning_rate: float
    target_error: float
    identity_error: float
    target_split_errors: np.ndarray
    seconds: float
    wall_seconds: float
    model: MEGKernelRegressor


@dataclass
class BatchExperiment:
    """Outcome of :func:`run_batch_experiment` (Figure 3).

    A plain record: :func:`run_batch_experiment` fills it, and
    :func:`~megkernel.plotting.plot_batch_experiment` and
    :func:`summary_table` read it. Each parameter is kept as the attribute
    of the same name.

    Parameters
    ----------
    gamma : float
        Threshold on the squared distance of similar pairs.
    n_constraints : int
        Number of similar pairs (constraints).
    iterations : ndarray of int
        Checkpoints (projections done), from 0 (the prior) to ``n_iter_``.
    knn_errors : ndarray
        Mean 1-NN test error of the iterate at each checkpoint.
    knn_split_errors : ndarray of shape (n_checkpoints + 1, n_splits)
        The 1-NN test error of every split at each checkpoint.
    target_error, identity_error : float
        Mean 1-NN error of the target kernel and of the prior.
    target_split_errors : ndarray of shape (n_splits,)
        The target kernel's 1-NN error on every split.
    seconds : float
        Wall time of the fit (evaluation excluded).
    wall_seconds : float
        Wall time of the whole experiment (pairs, fit, evaluations).
    model : DefiniteBoostKernel
        The fitted model (``dual_objective_``, ``dual_bound_``, ``n_iter_``).
        Its dual objective is on the trace-one scale (``W_1 = I/d``, starting
        at 1); times ``d`` it is the paper's (``W_1 = I``, starting at ``d``).

    See Also
    --------
    run_batch_experiment : The experiment that returns it.
    OnlineExperiment : The outcome of the on-line experiment.

    Examples
    --------
    >>> from megkernel.datasets import load_gyrb, similarity_threshold
    >>> from megkernel.experiments import run_batch_experiment
    >>> gyrb = load_gyrb(n_objects=30)
    >>> gamma = similarity_threshold(gyrb.kernel, 0.1)
    >>> result = run_batch_experiment(gyrb.kernel, gyrb.labels, gamma=gamma,
    ...                               n_checkpoints=2)
    >>> result.n_constraints, result.iterations.tolist()[0], result.model.converged_
    (44, 0, True)
    """

    gamma: float
    n_constraints: int
    iterations: np.ndarray
    knn_errors: np.ndarray
    knn_split_errors: np.ndarray
    target_error: float
    identity_error: float
    target_split_errors: np.ndarray
    seconds: float
    wall_seconds: float
    model: DefiniteBoostKernel


def _check_target(K, labels):
    K = check_symmetric(K, name="target kernel K")
    if not np.isclose(np.trace(K), 1.0, rtol=1e-9):
        raise ValueError(
            f"The target kernel must have trace one (got {np.trace(K):.6g}); "
            "divide it by its trace."
        )
    if len(labels) != len(K):
        raise ValueError(
            f"{len(labels)} labels for a kernel over {len(K)} objects."
        )
    return K


def _checkpoints(total, n_checkpoints):
    return np.unique(np.linspace(0, total, n_checkpoints + 1).round().astype(int))


def _log_checkpoints(total, n_checkpoints, first=100):
    """Return 0, then ``n_checkpoints`` points log-spaced up to ``total``.

    They start at ``min(first, total)``; rounded, duplicates dropped.
    """
    first = min(first, total)
    points = np.geomspace(first, total, n_checkpoints).round().astype(int)
    return np.unique(np.concatenate([[0], points, [total]]))


def _definiteboost_iterate(model, pairs, t):
    """Return the kernel after the first ``t`` projections of a fitted DefiniteBoostKernel.

    The :class:`~megkernel.DefiniteBoostKernel` has the prior ``I/d`` and
    was fitted on similar ``pairs``.

    ``W_t = exp(log W_1 - sum_{s<t} alpha_s C_s) / Z`` (eq. 12) with
    ``C_s = u_s u_s^T - (gamma / tau) I``, ``u_s = e_a - e_b``; ``log W_1``
    and the ``gamma I`` parts are multiples of the identity, which the
    normalization removes. (Re-running the solver with ``max_iter=t`` is no
    substitute: a run stopped before convergence keeps its best iterate,
    not its ``t``-th.)
    """
    a, b = pairs[model.chosen_constraints_[:t]].T
    steps = model.alphas_[:t]
    exponent = np.zeros((model.n_objects_, model.n_objects_))
    np.add.at(exponent, (a, a), -steps)
    np.add.at(exponent, (b, b), -steps)
    np.add.at(exponent, (a, b), steps)
    np.add.at(exponent, (b, a), steps)
    return model.trace_ * normalized_expm(exponent)


def _report(progress, verbose, message):
    if verbose >= 2:
        progress_detail(message)
    if progress is not None:
        progress(message)


@validate_params(
    {
        "K": ["array-like"], "labels": ["array-like"],
        "n_trials": [Interval(Integral, 1, None, closed="left")],
        "n_checkpoints": [Interval(Integral, 1, None, closed="left")],
        "random_state": [Interval(Integral, 0, None, closed="left")],
        "method": [str], "progress": [callable, None],
        "verbose": [Interval(Integral, 0, None, closed="left")],
    },
    prefer_skip_nested_validation=True,
)
def run_online_experiment(K, labels, *, n_trials, n_checkpoints=40, random_state=0,
                          method="auto", progress=None, verbose=0):
    """On-line MEG from random entries of a target kernel (Figure 2).

    Parameters
    ----------
    K : array-like of shape (d, d)
        Trace-one target kernel.
    labels : array-like of shape (d,)
        Object classes, for the 1-NN protocol.
    n_trials : int
        Number of distance examples (the paper: about 3 x 10^5).
    n_checkpoints : int, default=40
        Evaluations of the 1-NN error over the trials, spaced evenly on a
        log scale from 100 trials on (so that a log-scaled axis shows the
        early learning), plus the last trial.
    random_state : int, default=0
        Seed of the examples and of the 1-NN splits.
    method : str, default="auto"
        Engine of :class:`~megkernel.MEGKernelRegressor`.
    progress : callable, optional
        Called with a one-line message at each checkpoint.
    verbose : int, default=0
        ``1``: a progress bar over the trials on stderr (rate, ETA);
        ``2``: plus a detail line at each checkpoint.

    Returns
    -------
    result : OnlineExperiment
        The learning curves, the bound, the reference errors and the model.
    """
    wall = time.perf_counter()
    K = _check_target(K, labels)
    d = len(K)
    prior = np.eye(d) / d

    def knn_errors(kernel):
        return nearest_neighbor_error(kernel, labels, random_state=random_state).errors

    pairs, y = distance_triples(K, n_trials, random_state=random_state)
    learning_rate = meg_learning_rate(PAIR_EIGENVALUE_RANGE)
    bound = meg_loss_bound(PAIR_EIGENVALUE_RANGE, von_neumann_divergence(K, prior))
    model = MEGKernelRegressor(solver="online",
                               trace=1.0, n_objects=d, learning_rate=learning_rate, method=method)
    trials = _log_checkpoints(n_trials, n_checkpoints)
    errors = [knn_errors(prior)]
    seconds = 0.0
    with progress_bar(total=n_trials, desc="MEG (Figure 2)", unit="trial",
                      enabled=verbose >= 1) as bar:
        for start, stop in zip(trials[:-1], trials[1:]):
            clock = time.perf_counter()
            model.partial_fit(pairs[start:stop], y[start:stop])
            seconds += time.perf_counter() - clock
            errors.append(knn_errors(model.kernel_))
            bar.update(stop - start)
            bar.set_postfix_str(f"loss {model.cumulative_loss_:.3f}/{bound:.3f}, "
                                f"1-NN {errors[-1].mean():.3f}", refresh=False)
            _report(progress, verbose,
                    f"MEG: {stop}/{n_trials} trials, total loss "
                    f"{model.cumulative_loss_:.4f} (bound {bound:.4f}), 1-NN "
                    f"error {errors[-1].mean():.3f}, {seconds:.1f} s")
    errors = np.array(errors)
    target = knn_errors(K)
    return OnlineExperiment(
        trials=trials, knn_errors=errors.mean(axis=1), knn_split_errors=errors,
        cumulative_loss=np.cumsum(model.losses_), loss_bound=bound,
        learning_rate=learning_rate, target_error=float(target.mean()),
        identity_error=float(errors[0].mean()), target_split_errors=target,
        seconds=seconds, wall_seconds=time.perf_counter() - wall, model=model,
    )


@validate_params(
    {
        "K": ["array-like"], "labels": ["array-like"],
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "n_checkpoints": [Interval(Integral, 1, None, closed="left")],
        "random_state": [Interval(Integral, 0, None, closed="left")],
        "progress": [callable, None],
        "verbose": [Interval(Integral, 0, None, closed="left")],
    },
    prefer_skip_nested_validation=True,
)
def run_batch_experiment(K, labels, *, gamma, max_iter=2000, n_checkpoints=20,
                         random_state=0, progress=None, verbose=0):
    """DefiniteBoost from the similar pairs of a target kernel (Figure 3).

    All pairs closer than ``gamma`` in the target become constraints
    ``||x_a - x_b||^2 <= gamma``; :class:`~megkernel.DefiniteBoostKernel`
    (approximate projections, prior ``I/d``) fits them. The ``t``-th
    iterate, whose 1-NN error is recorded, is rebuilt from the fit's record
    of chosen constraints and steps (see :func:`_definiteboost_iterate`).

    Parameters
    ----------
    K : array-like of shape (d, d)
        Trace-one target kernel.
    labels : array-like of shape (d,)
        Object classes, for the 1-NN protocol.
    gamma : float
        Threshold on the squared distance (trace-one units); see
        :func:`megkernel.datasets.similarity_threshold`.
    max_iter : int, default=2000
        Largest number of projections.
    n_checkpoints : int, default=20
        Evaluations of the 1-NN error, evenly spaced over the iterations.
    random_state : int, default=0
        Seed of the 1-NN splits.
    progress : callable, optional
        Called with a one-line message after the fit.
    verbose : int, default=0
        ``1``: a progress bar over the iterations on stderr (the fit's, see
        :class:`~megkernel.DefiniteBoostKernel`); ``2``: plus detail lines.

    Returns
    -------
    result : BatchExperiment
        The learning curve, the reference errors and the model (whose dual
        objective and bound trace Theorem 4.1).
    """
    wall = time.perf_counter()
    K = _check_target(K, labels)

    def knn_errors(kernel):
        return nearest_neighbor_error(kernel, labels, random_state=random_state).errors

    pairs = similar_pairs(K, gamma, shuffle=False)  # the paper: lexicographic order
    if len(pairs) == 0:
        raise ValueError(
            f"No pair is closer than gamma={gamma:.4g} in the target kernel; "
            "raise gamma (see similarity_threshold)."
        )
    clock = time.perf_counter()
    model = DefiniteBoostKernel(n_objects=len(K), gamma=gamma, max_iter=max_iter, trace=1.0,
                                validation_fraction=None, verbose=verbose).fit(pairs)
    seconds = time.perf_counter() - clock
    _report(progress, verbose,
            f"DefiniteBoost: {len(pairs)} constraints, {model.n_iter_} "
            f"iterations, dual objective {model.dual_objective_[-1]:.4f} "
            f"(bound {model.dual_bound_[-1]:.4f}), {seconds:.1f} s")
    iterations = _checkpoints(model.n_iter_, n_checkpoints)
    errors = np.array([knn_errors(_definiteboost_iterate(model, pairs, t))
                       for t in iterations])
    _report(progress, verbose, f"DefiniteBoost: 1-NN error {errors[-1].mean():.3f}")
    target = knn_errors(K)
    return BatchExperiment(
        gamma=gamma, n_constraints=len(pairs), iterations=iterations,
        knn_errors=errors.mean(axis=1), knn_split_errors=errors,
        target_error=float(target.mean()), identity_error=float(errors[0].mean()),
        target_split_errors=target, seconds=seconds,
        wall_seconds=time.perf_counter() - wall, model=model,
    )


def summary_table(online, batch):
    """Tabulate the figures that matter, one row each.

    Parameters
    ----------
    online : OnlineExperiment
        Result of :func:`run_online_experiment`.
    batch : BatchExperiment
        Result of :func:`run_batch_experiment`.

    Returns
    -------
    table : pandas.DataFrame
        Columns ``quantity`` and ``value``.
    """
    d = online.model.n_objects_
    rows = [
        ("objects d", d),
        ("1-NN error, identity kernel I/d", online.identity_error),
        ("1-NN error, target kernel", online.target_error),
        ("1-NN error, target kernel, std over splits", online.target_split_errors.std()),
        ("MEG trials", online.model.n_updates_),
        ("MEG learning rate (bound-optimal)", online.learning_rate),
        ("MEG total loss", online.cumulative_loss[-1]),
        ("Lemma 3.2 bound on the total loss", online.loss_bound),
        ("bound / total loss", online.loss_bound / online.cumulative_loss[-1]),
        ("1-NN error, MEG kernel", online.knn_errors[-1]),
        ("1-NN error, MEG kernel, std over splits", online.knn_split_errors[-1].std()),
        ("MEG seconds per 1000 trials", 1000 * online.seconds / online.model.n_updates_),
        ("DefiniteBoost gamma x d", batch.gamma * d),
        ("DefiniteBoost constraints", batch.n_constraints),
        ("DefiniteBoost iterations", batch.model.n_iter_),
        ("DefiniteBoost converged", batch.model.converged_),
        ("DefiniteBoost final dual objective", batch.model.dual_objective_[-1]),
        ("Theorem 4.1 bound on it", batch.model.dual_bound_[-1]),
        ("DefiniteBoost final dual objective x d (the paper's scale)",
         d * batch.model.dual_objective_[-1]),
        ("Theorem 4.1 bound x d", d * batch.model.dual_bound_[-1]),
        ("1-NN error, DefiniteBoost kernel", batch.knn_errors[-1]),
        ("1-NN error, DefiniteBoost kernel, std over splits",
         batch.knn_split_errors[-1].std()),
        ("DefiniteBoost seconds", batch.seconds),
        ("on-line experiment wall seconds", online.wall_seconds),
        ("batch experiment wall seconds", batch.wall_seconds),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value"])
