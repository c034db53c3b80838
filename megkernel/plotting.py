r"""Learning curves of a fitted model, and Figures 2 and 3 of the paper redrawn from results.

The paper is Tsuda, Raetsch & Warmuth (2004).

:func:`plot_learning_curve` draws what a fitted
:class:`~megkernel.MEGKernelRegressor` or
:class:`~megkernel.DefiniteBoostKernel` recorded while it learned (the loss
with its bound, the dual objective with its bound) on a matplotlib ``Axes``.

The reproduction's figures are built on ``matplotlib.figure.Figure``
directly, without pyplot, so no interactive backend is involved;
``savefig`` renders with Agg (PNG, PDF, SVG by the file name).

Both figures have two panels, lettered (a) and (b):

- Figure 2 (on-line MEG): (a) total loss against trials with Lemma 3.2's
  bound; (b) 1-NN test error against trials, the mean over the splits with a
  band of one standard deviation either side, and the target kernel's.
  Trials on a log axis: most of the learning happens in the first few
  percent of them.
- Figure 3 (DefiniteBoost): (a) the dual objective
  :math:`\mathrm{tr}\,\exp(\log W_1 - \sum_t \alpha_t C_t)` with Theorem
  4.1's bound, on the paper's scale (``W_1 = I``: times ``d``, from ``d``
  down) on the left axis and the trace-one scale (``W_1 = I/d``, from 1) on
  the right; (b) the 1-NN error against iterations, with its band, and a
  note on why it need not fall monotonically.

In both, the target kernel's 1-NN error is a dashed line drawn over the
axes (a target that separates the classes has error 0: the y axis then
starts a little below 0 so that its line stays in sight).
"""

from __future__ import annotations

import importlib
import math

import numpy as np
from matplotlib.figure import Figure
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array

from ._numerics.spectral import von_neumann_divergence
from ._solvers.bounds import meg_learning_rate, meg_loss_bound
from .definiteboost_kernel import DefiniteBoostKernel
from .meg_regressor import MEGKernelRegressor
from .objects import KernelDistances

__all__ = ["plot_learning_curve", "plot_online_experiment", "plot_batch_experiment"]

#: Eigenvalue range ``r`` of a dense model's instances ``X_t = u u^T``, ``u = e_a - e_b``.
_PAIR_RANGE = 2.0

#: Panel (b) of Figure 3: why DefiniteBoost's 1-NN error is not monotone.
_DEFINITEBOOST_ERROR_NOTE = (
    "DefiniteBoost lowers the dual objective, not the 1-NN error:\n"
    "similar pairs across classes pull classes together again,\n"
    "so the error need not fall monotonically.")

_DUAL = r"$\mathrm{tr}\,\exp(\log W_1 - \sum_t \alpha_t C_t)$"


def _letter(ax, letter):
    ax.text(-0.13, 1.02, f"({letter})", transform=ax.transAxes, fontsize=12,
            fontweight="bold", va="bottom", ha="left")


def _error_panel(ax, steps, result, xlabel):
    """Draw the mean 1-NN error over the splits with a band of +-1 std, and the target's.

    The band is clipped to [0, 1].
    """
    splits = np.asarray(result.knn_split_errors)
    mean, std = splits.mean(axis=1), splits.std(axis=1)
    n_splits = splits.shape[1]
    line, = ax.plot(steps, mean, marker=".", label=f"learned kernel (mean of {n_splits} splits)")
    ax.fill_between(steps, np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1),
                    color=line.get_color(), alpha=0.2, linewidth=0,
                    label=r"$\pm 1$ std over the splits")
    target_std = np.std(result.target_split_errors)
    # over the spines and the band (zorder), unclipped: an error of 0 stays visible
    ax.axhline(result.target_error, linestyle="--", color="black", linewidth=1.5,
               zorder=3, clip_on=False,
               label=f"target kernel ({result.target_error:.3f} $\\pm$ {target_std:.3f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("1-NN test error (random 50/50 splits)")
    top = max(float(np.max(np.clip(mean + std, 0, 1))), result.target_error, 0.01)
    # a margin below 0, so that a target line at 0 is not the spine; room above for the legend
    ax.set_ylim(-0.04 * top, 1.3 * top)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")  # the error falls: the corner is free


def plot_online_experiment(result, *, title=None):
    """Figure 2: total loss with its bound, and 1-NN error, against trials.

    Parameters
    ----------
    result : megkernel.experiments.OnlineExperiment
        Result of :func:`~megkernel.experiments.run_online_experiment`.
    title : str, optional
        Title of the figure; by default it names the learning rate.

    Returns
    -------
    figure : matplotlib.figure.Figure
        The figure, with panels (a) loss and (b) 1-NN error.
    """
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    loss_ax, error_ax = figure.subplots(1, 2)
    trials = np.arange(1, len(result.cumulative_loss) + 1)
    loss_ax.plot(trials, result.cumulative_loss, label=r"MEG total loss $L_{\mathrm{MEG}}$")
    loss_ax.axhline(result.loss_bound, linestyle="--", color="black",
                    label=f"Lemma 3.2 bound $\\frac{{r^2}}{{2}}\\Delta(U, W_1)$ "
                          f"({result.loss_bound:.3f})")
    loss_ax.set_xscale("log")
    loss_ax.set_xlabel("trials $t$")
    loss_ax.set_ylabel(r"total loss $\sum_t (\hat y_t - y_t)^2$ (trace one)")
    loss_ax.set_ylim(bottom=0)
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(loc="lower right", fontsize="small")
    _letter(loss_ax, "a")
    # trial 0 (the prior) cannot sit on a log axis: plot it at trial 1
    steps = np.maximum(result.trials, 1)
    _error_panel(error_ax, steps, result, "trials $t$ (the prior at $t = 1$)")
    error_ax.set_xscale("log")
    _letter(error_ax, "b")
    figure.suptitle(title or f"On-line MEG, learning rate $\\eta = {result.learning_rate:g}$")
    return figure


def plot_batch_experiment(result, *, title=None):
    """Figure 3: dual objective with its bound, and 1-NN error, against iterations.

    Parameters
    ----------
    result : megkernel.experiments.BatchExperiment
        Result of :func:`~megkernel.experiments.run_batch_experiment`.
    title : str, optional
        Title of the figure; by default it names the number of pairs.

    Returns
    -------
    figure : matplotlib.figure.Figure
        The figure, with panels (a) dual objective and (b) 1-NN error.
    """
    model = result.model
    d = model.n_objects_
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    dual_ax, error_ax = figure.subplots(1, 2)
    iterations = np.arange(len(model.dual_objective_))
    dual_ax.plot(iterations, d * np.asarray(model.dual_objective_),
                 label=f"dual objective ({d * model.dual_objective_[-1]:.2f})")
    dual_ax.plot(iterations, d * np.asarray(model.dual_bound_), linestyle="--", color="black",
                 label=f"Theorem 4.1 bound ({d * model.dual_bound_[-1]:.2f})")
    dual_ax.set_xlabel("iterations $t$")
    dual_ax.set_ylabel(_DUAL + r", $W_1 = I$")
    dual_ax.set_ylim(bottom=0)
    dual_ax.grid(alpha=0.3)
    dual_ax.legend(fontsize="small")
    trace_one = dual_ax.secondary_yaxis("right", functions=(lambda v: v / d, lambda v: v * d))
    trace_one.set_ylabel(r"the same, $W_1 = I/d$ (trace one)")
    _letter(dual_ax, "a")
    _error_panel(error_ax, result.iterations, result, "iterations $t$")
    _letter(error_ax, "b")
    error_ax.annotate(_DEFINITEBOOST_ERROR_NOTE, xy=(0.5, 0), xycoords="axes fraction",
                      xytext=(0, -36), textcoords="offset points", ha="center", va="top",
                      fontsize="small", fontstyle="italic", annotation_clip=False)
    figure.suptitle(title or f"DefiniteBoost, {result.n_constraints} similar pairs")
    return figure


# -- a user's own model ------------------------------------------------------------------


def _unwrap(model):
    """Return the estimator inside a fitted search (``best_estimator_``) or a pipeline."""
    model = getattr(model, "best_estimator_", model)
    steps = getattr(model, "steps", None)
    if isinstance(steps, list) and steps:
        model = steps[-1][1]
    return model


def _kernel_distances_hint(model):
    """Say how to draw the learner of a ``KernelDistances`` step in ``model``, if one is."""
    model = getattr(model, "best_estimator_", model)
    steps = [step for _, step in getattr(model, "steps", None) or []] or [model]
    step = next((step for step in steps if isinstance(step, KernelDistances)), None)
    learner = getattr(step, "learner", None)
    if learner is None:
        return ""
    name = type(learner).__name__
    taught = ("the observed entries of the step's distances as a pair table"
              if step.pairs is None else "the step's pairs and targets")
    return (f" KernelDistances keeps the kernel its {name} learned, not the fitted "
            f"learner: to see how it learned, fit the learner alone on {taught} "
            f"({name}(...).fit(pairs, targets), in the units the learner reads: see "
            "the step's given_squared) and draw that.")


def _legend(ax, *others):
    """Draw one legend for ``ax`` and its twin axes.

    Inside when alone, else below the axes (a twin's curves would hide under
    it).
    """
    handles, labels = ax.get_legend_handles_labels()
    for other in others:
        more_handles, more_labels = other.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if not others:
        ax.legend(handles, labels, fontsize="small")
        return
    ax.legend(handles, labels, fontsize="small", loc="upper center", ncols=2,
              bbox_to_anchor=(0.5, -0.14))


def _started_from_prior(model):
    """Tell whether the model's on-line trials started from its prior ``init``.

    They did with ``partial_fit`` from the start, or ``fit`` with
    ``solver="online"``, not from the kernel of a batch fit.
    """
    return bool(getattr(model, "trials_from_prior_", True))


def _lemma_3_2_bound(model, target):
    """Return Lemma 3.2's bound on ``model.cumulative_loss_`` (units of ``y`` squared).

    When the targets are the squared distances of ``target``.
    """
    d = model.n_objects_
    if model.init_factor is not None:
        raise ValueError(
            "Lemma 3.2's bound is drawn for dense models only: in low-rank mode "
            "(init_factor) the instance range r of the trials is not recorded.")
    if not _started_from_prior(model):
        raise ValueError(
            "The on-line trials continued a batch fit: their prior is the batch kernel, "
            "not init, and Lemma 3.2's bound needs the prior's divergence from the "
            "target. Start the on-line run with partial_fit (or solver='online').")
    U = check_array(target, dtype=float, input_name="target")
    if U.shape != (d, d):
        raise ValueError(f"target must be the {d} x {d} kernel the squared distances "
                         f"come from (in the order of objects_); got shape {U.shape}.")
    tau = model.trace_
    trace = float(np.trace(U))
    if not math.isclose(trace, tau, rel_tol=1e-6):
        raise ValueError(
            f"Lemma 3.2 compares with kernels of the model's trace ({tau:.6g}); the "
            f"target's trace is {trace:.6g}. Fit with trace=np.trace(target) to draw "
            "the bound.")
    if isinstance(model.init, str):
        prior = np.eye(d) / d
    else:
        prior = np.asarray(model.init, dtype=float)
        prior = 0.5 * (prior + prior.T) / np.trace(prior)
    rate, realizable_rate = model.learning_rate_, meg_learning_rate(_PAIR_RANGE)
    if rate > realizable_rate * (1 + 1e-9):
        raise ValueError(
            f"Lemma 3.2 bounds the loss for learning rates up to {realizable_rate:g} "
            f"(2 / r^2 with r = {_PAIR_RANGE:g}); the model used {rate:g}.")
    # the lemma's trade-off c for this rate: eta = 2c / (r^2 (2 + c))
    product = rate * _PAIR_RANGE**2
    c = math.inf if math.isclose(rate, realizable_rate, rel_tol=1e-9) \
        else 2.0 * product / (2.0 - product)
    divergence = von_neumann_divergence(U / tau, prior)
    return tau**2 * meg_loss_bound(_PAIR_RANGE, divergence, 0.0, c)


def _meg_online_curve(ax, model, bound):
    losses = np.asarray(model.losses_)
    trials = np.arange(1, len(losses) + 1)
    ax.plot(trials, np.cumsum(losses), label=r"total loss $\sum_t (\hat y_t - y_t)^2$")
    if bound is not None:
        ax.axhline(bound, linestyle="--", color="black",
                   label=f"Lemma 3.2 bound ({bound:.4g})")
    ax.set_xlabel("trials $t$")
    ax.set_ylabel("total square loss (units of $y^2$)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"MEGKernelRegressor, on-line: {len(losses)} trials, "
                 f"rate {model.learning_rate_:g}", fontsize="medium")
    _legend(ax)


def _meg_batch_curve(ax, model, bound):
    curve = np.asarray(model.loss_curve_)
    ax.plot(np.arange(len(curve)), curve, marker=".", color="tab:green",
            label="training error (root mean square)")
    if np.all(curve > 0) and curve.max() > 10 * curve.min():
        ax.set_yscale("log")
    ax.set_xlabel("iteration (0: the prior)")
    ax.set_ylabel("training RMS error of squared distances ($y$ units)")
    scores = np.asarray(model.validation_scores_)
    others = []
    if len(scores):
        score_ax = ax.twinx()
        score_ax.plot(np.arange(len(scores)), scores, marker=".", color="tab:blue",
                      label="held-out $R^2$")
        score_ax.axhline(model.prior_score_, linestyle=":", color="black",
                         label=f"prior's held-out $R^2$ ({model.prior_score_:.3f})")
        chosen = np.flatnonzero(scores == model.validation_score_)
        if len(chosen):  # the converged iterate unless overfitting stopped the fit
            score_ax.plot(chosen[-1], scores[chosen[-1]], marker="*", markersize=13,
                          color="tab:red", linestyle="none",
                          label=f"returned ({model.validation_score_:.3f})")
        score_ax.set_ylabel("$R^2$ of the held-out squared distances")
        others.append(score_ax)
    ax.set_title(f"MEGKernelRegressor, batch: {model.n_iter_} iterations"
                 + ("" if model.converged_ else " (not converged)"), fontsize="medium")
    _legend(ax, *others)


def _definiteboost_curve(ax, model, bound):
    dual = np.asarray(model.dual_objective_)
    bound = dual[0] * np.asarray(model.dual_bound_)  # the bound is relative to the start
    ax.plot(np.arange(len(dual)), dual,
            label=r"dual objective $\mathrm{tr}\,\exp(\log W_1 - \sum_t \alpha_t C_t)$")
    ax.plot(np.arange(len(bound)), bound, linestyle="--", color="black",
            label="Theorem 4.1 bound")
    ax.set_xlabel("projections $t$" + (" (the chosen gamma's fit)"
                                       if len(model.gamma_path_) > 1 else ""))
    ax.set_ylabel("dual objective (trace one)")
    violations = np.asarray(model.violations_, dtype=float)
    shown = violations > 0
    others = []
    if shown.any():
        violation_ax = ax.twinx()
        violation_ax.plot(np.flatnonzero(shown), violations[shown], color="tab:orange",
                          linewidth=0.8, alpha=0.8, label="largest violation (right)")
        violation_ax.set_yscale("log")
        violation_ax.set_ylabel("largest constraint violation (kernel units)")
        others.append(violation_ax)
    ax.set_title(f"DefiniteBoostKernel: {model.n_iter_} projections"
                 + ("" if model.converged_ else " (not converged)"), fontsize="medium")
    _legend(ax, *others)


def plot_learning_curve(model, ax=None, *, target=None):
    r"""Draw what a fitted model recorded while it learned.

    - :class:`~megkernel.MEGKernelRegressor` after a batch :meth:`fit
      <megkernel.MEGKernelRegressor.fit>`: ``loss_curve_``, the root mean
      square training error of the squared distances at each iteration (the
      prior at 0; log scale), and on a right-hand axis ``validation_scores_``,
      the held-out :math:`R^2` of each iterate, with ``prior_score_`` as a
      dotted line and the iterate returned as a star (the converged one,
      unless the held-out pairs showed the fit overfitting).
    - :class:`~megkernel.MEGKernelRegressor` after on-line trials
      (:meth:`~megkernel.MEGKernelRegressor.partial_fit`, or ``fit`` with
      ``solver="online"``): the total loss ``losses_.cumsum()`` against the
      trials, and with ``target`` Lemma 3.2's bound on it.
    - :class:`~megkernel.DefiniteBoostKernel`: ``dual_objective_`` with
      Theorem 4.1's bound (``dual_objective_[0] * dual_bound_``), and on a
      log-scaled right-hand axis ``violations_``, the largest constraint
      violation before each projection.

    Parameters
    ----------
    model : MEGKernelRegressor or DefiniteBoostKernel
        A fitted model (or a fitted search or pipeline ending in one: its
        ``best_estimator_``, its last step).
    ax : matplotlib.axes.Axes, optional
        Where to draw; ``None``: a new pyplot figure (``plt.subplots()``).
        A right-hand axis, when drawn, is ``ax.twinx()``.
    target : array-like of shape (d, d), optional
        On-line MEG only: the kernel whose squared distances the targets
        are (realizable case), in the order of ``objects_``, of the model's
        trace. Draws Lemma 3.2's bound
        :math:`\tau^2 (1/2 + 1/c)\, r^2 \Delta(U/\tau, W_1)` on the total
        loss, in the units of ``y`` squared (``r = 2``; :math:`c = \infty`,
        i.e. :math:`r^2 \Delta/2`, at the rate ``1/2`` of
        ``learning_rate="auto"``; a lower rate has its finite ``c``), with
        :math:`W_1` the prior ``init``. The bound holds only if the targets
        are exactly ``target``'s squared distances and the rate did not
        change between calls. Raises ``ValueError`` when it cannot apply:
        a low-rank model, trials continuing a batch fit, a trace other than
        ``target``'s, a rate above ``1/2``.

    Returns
    -------
    ax : matplotlib.axes.Axes
        The axes drawn on (the left-hand one).

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If ``model`` is not fitted (a ``ValueError``).
    ValueError
        If ``model`` is of another kind, or ``target`` does not apply.

    See Also
    --------
    plot_online_experiment, plot_batch_experiment : The paper's figures.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import MEGKernelRegressor
    >>> from megkernel.plotting import plot_learning_curve
    >>> rng = np.random.default_rng(0)
    >>> features = rng.normal(size=(20, 3))
    >>> target = features @ features.T
    >>> target /= np.trace(target)
    >>> pairs = rng.integers(0, 20, size=(500, 2))
    >>> a, b = pairs.T
    >>> sq_dist = target[a, a] + target[b, b] - 2 * target[a, b]
    >>> model = MEGKernelRegressor(n_objects=20, trace=1.0, learning_rate=0.5)  # the bound's rate
    >>> model = model.partial_fit(pairs, sq_dist)
    >>> ax = plot_learning_curve(model, target=target)
    >>> ax.get_lines()[1].get_label()
    'Lemma 3.2 bound (...)'
    """
    given, model = model, _unwrap(model)
    if isinstance(model, MEGKernelRegressor):
        if not hasattr(model, "state_"):
            raise NotFittedError("plot_learning_curve needs a fitted MEGKernelRegressor: "
                                 "call fit or partial_fit first.")
        draw = _meg_online_curve if model.n_updates_ > 0 else _meg_batch_curve
        if target is not None and draw is _meg_batch_curve:
            raise ValueError("target draws Lemma 3.2's bound on the on-line loss; this "
                             "model was fitted in batch (no on-line trials): leave "
                             "target out.")
    elif isinstance(model, DefiniteBoostKernel):
        if not hasattr(model, "dual_objective_"):
            raise NotFittedError("plot_learning_curve needs a fitted DefiniteBoostKernel: "
                                 "call fit first.")
        draw = _definiteboost_curve
        if target is not None:
            raise ValueError("target draws Lemma 3.2's bound of on-line MEG; "
                             "DefiniteBoostKernel has none: leave target out.")
    else:
        raise ValueError("plot_learning_curve draws a MEGKernelRegressor or a "
                         f"DefiniteBoostKernel; got {type(model).__name__}."
                         f"{_kernel_distances_hint(given)}")
    # every check before the first stroke (a refused call draws nothing)
    bound = _lemma_3_2_bound(model, target) if target is not None else None
    if ax is None:
        # pyplot only when the user asks for a new figure (the figures above
        # never touch it, so reproducing stays backend-free)
        plt = importlib.import_module("matplotlib.pyplot")
        _, ax = plt.subplots(layout="constrained")
    draw(ax, model, bound)
    ax.grid(alpha=0.3)
    return ax
