"""Figures 2 and 3 of Tsuda, Raetsch & Warmuth (2004), redrawn from results.

Needs matplotlib (``pip install "megkernel[plot]"``). Figures are built on
``matplotlib.figure.Figure`` directly, without pyplot, so no interactive
backend is involved; ``savefig`` renders with Agg.
"""

from __future__ import annotations

from matplotlib.figure import Figure

__all__ = ["plot_online_experiment", "plot_batch_experiment"]


def _error_panel(ax, steps, errors, result, xlabel):
    ax.plot(steps, errors, marker=".", label="learned kernel")
    ax.axhline(result.target_error, linestyle="--", color="black",
               label=f"target kernel ({result.target_error:.3f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("1-NN test error (10 random 50/50 splits)")
    ax.set_ylim(bottom=0)
    ax.legend()


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
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    loss_ax, error_ax = figure.subplots(1, 2)
    trials = range(1, len(result.cumulative_loss) + 1)
    loss_ax.plot(trials, result.cumulative_loss, label="MEG total loss")
    loss_ax.axhline(result.loss_bound, linestyle="--", color="black",
                    label=f"Lemma 3.2 bound ({result.loss_bound:.3f})")
    loss_ax.set_xlabel("trials")
    loss_ax.set_ylabel("total loss (squared distances, trace one)")
    loss_ax.set_ylim(bottom=0)
    loss_ax.legend(loc="lower right")
    _error_panel(error_ax, result.trials, result.knn_errors, result, "trials")
    figure.suptitle(title or f"On-line MEG, learning rate {result.learning_rate:g}")
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
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    dual_ax, error_ax = figure.subplots(1, 2)
    iterations = range(len(model.dual_objective_))
    dual_ax.plot(iterations, model.dual_objective_, label="dual objective")
    dual_ax.plot(iterations, model.dual_bound_, linestyle="--", color="black",
                 label="Theorem 4.1 bound")
    dual_ax.set_xlabel("iterations")
    dual_ax.set_ylabel("tr exp(log W1 - sum alpha C)")
    dual_ax.legend()
    _error_panel(error_ax, result.iterations, result.knn_errors, result, "iterations")
    figure.suptitle(title or f"DefiniteBoost, {result.n_constraints} similar pairs")
    return figure
