r"""Figures 2 and 3 of Tsuda, Raetsch & Warmuth (2004), redrawn from results.

Figures are built on ``matplotlib.figure.Figure`` directly, without pyplot,
so no interactive backend is involved; ``savefig`` renders with Agg (PNG,
PDF, SVG by the file name).

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
  the right; (b) the 1-NN error against iterations, with its band.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

__all__ = ["plot_online_experiment", "plot_batch_experiment"]

_DUAL = r"$\mathrm{tr}\,\exp(\log W_1 - \sum_t \alpha_t C_t)$"


def _letter(ax, letter):
    ax.text(-0.13, 1.02, f"({letter})", transform=ax.transAxes, fontsize=12,
            fontweight="bold", va="bottom", ha="left")


def _error_panel(ax, steps, result, xlabel):
    """Mean 1-NN error over the splits with a band of +-1 std (clipped to
    [0, 1]), and the target kernel's."""
    splits = np.asarray(result.knn_split_errors)
    mean, std = splits.mean(axis=1), splits.std(axis=1)
    n_splits = splits.shape[1]
    line, = ax.plot(steps, mean, marker=".", label=f"learned kernel (mean of {n_splits} splits)")
    ax.fill_between(steps, np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1),
                    color=line.get_color(), alpha=0.2, linewidth=0,
                    label=r"$\pm 1$ std over the splits")
    target_std = np.std(result.target_split_errors)
    ax.axhline(result.target_error, linestyle="--", color="black",
               label=f"target kernel ({result.target_error:.3f} $\\pm$ {target_std:.3f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("1-NN test error (random 50/50 splits)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def plot_online_experiment(result, *, title=None):
    """Figure 2: total loss with its bound, and 1-NN error, against trials.

    Parameters
    ----------
    result : megkernel.experiments.OnlineExperiment
    title : str, optional

    Returns
    -------
    figure : matplotlib.figure.Figure
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
    title : str, optional

    Returns
    -------
    figure : matplotlib.figure.Figure
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
    figure.suptitle(title or f"DefiniteBoost, {result.n_constraints} similar pairs")
    return figure
