"""The Section-5 experiments, their summary table and figures, end to end."""

import numpy as np
import pytest
from scipy.linalg import expm

from megkernel import (
    MEGKernelRegressor,
    meg_loss_bound,
    nearest_neighbor_error,
    von_neumann_divergence,
)
from megkernel.datasets import (
    distance_triples,
    load_wine_kernel,
    similar_pairs,
    similarity_threshold,
)
from megkernel.experiments import (
    _definiteboost_iterate,
    run_batch_experiment,
    run_online_experiment,
    summary_table,
)


@pytest.fixture(scope="module")
def wine():
    return load_wine_kernel(24, random_state=1)


@pytest.fixture(scope="module")
def online(wine):
    return run_online_experiment(wine.kernel, wine.labels, n_trials=3000,
                                 n_checkpoints=6, random_state=3)


@pytest.fixture(scope="module")
def batch(wine):
    return run_batch_experiment(wine.kernel, wine.labels,
                                gamma=similarity_threshold(wine.kernel, 0.2),
                                n_checkpoints=5, random_state=3)


def test_online_experiment_is_one_uninterrupted_meg_run(wine, online):
    pairs, y = distance_triples(wine.kernel, 3000, random_state=3)
    single = MEGKernelRegressor(solver="online",
                                n_objects=24, learning_rate=0.5, trace=1.0).fit(pairs, y)
    np.testing.assert_allclose(online.model.kernel_, single.kernel_, atol=1e-12)
    np.testing.assert_allclose(online.cumulative_loss, np.cumsum(single.losses_),
                               rtol=1e-9, atol=1e-15)
    # log-spaced checkpoints from 100 trials on, and the prior at 0
    np.testing.assert_array_equal(online.trials, [0, 100, 197, 390, 770, 1519, 3000])


def test_online_experiment_loss_stays_under_lemma_3_2(wine, online):
    divergence = von_neumann_divergence(wine.kernel, np.eye(24) / 24)
    assert online.learning_rate == 0.5
    assert online.loss_bound == meg_loss_bound(2.0, divergence)
    assert np.all(online.cumulative_loss <= online.loss_bound)
    assert online.cumulative_loss[-1] > online.loss_bound / 4  # a bound, not a vacuum


def test_online_experiment_errors_use_the_protocol(wine, online):
    def error(kernel):
        return nearest_neighbor_error(kernel, wine.labels, random_state=3).mean

    assert online.knn_errors.shape == online.trials.shape
    assert online.identity_error == online.knn_errors[0] == error(np.eye(24) / 24)
    assert online.target_error == error(wine.kernel)
    assert online.knn_errors[-1] == error(online.model.kernel_)
    assert online.knn_errors[-1] < online.identity_error
    # the spread over the splits behind every mean
    assert online.knn_split_errors.shape == (len(online.trials), 10)
    np.testing.assert_allclose(online.knn_split_errors.mean(axis=1), online.knn_errors)
    np.testing.assert_array_equal(
        online.knn_split_errors[-1],
        nearest_neighbor_error(online.model.kernel_, wine.labels, random_state=3).errors)
    assert online.target_split_errors.shape == (10,)
    assert online.wall_seconds >= online.seconds > 0


def test_batch_experiment_records_the_iterates(wine, batch):
    model = batch.model
    assert batch.n_constraints == model.n_constraints_ == int(np.ceil(0.2 * 24 * 23 / 2))
    assert batch.iterations[0] == 0 and batch.iterations[-1] == model.n_iter_
    assert batch.knn_errors.shape == batch.iterations.shape
    assert np.all(np.diff(model.dual_objective_) <= 1e-12)
    assert np.all(model.dual_objective_ <= model.dual_bound_ + 1e-12)
    error = nearest_neighbor_error(model.kernel_, wine.labels, random_state=3).mean
    assert batch.knn_errors[-1] == error
    assert batch.knn_split_errors.shape == (len(batch.iterations), 10)
    assert batch.wall_seconds >= batch.seconds > 0
    np.testing.assert_allclose(_definiteboost_iterate(model, similar_pairs(
        wine.kernel, batch.gamma, shuffle=False), model.n_iter_), model.kernel_, atol=1e-14)


def test_definiteboost_iterates_match_the_fit_record(wine, batch):
    # W_t = exp(-sum_{s<t} alpha_s u_s u_s^T) / Z, independently by scipy's expm;
    # under W_t, the constraint chosen next is the farthest similar pair, and
    # its distance exceeds the recorded violation by the (fixed) threshold.
    model = batch.model
    pairs = similar_pairs(wine.kernel, batch.gamma, shuffle=False)
    thresholds = []
    for t in [0, 1, 7, model.n_iter_ // 2, model.n_iter_ - 1]:
        a, b = pairs[model.chosen_constraints_[:t]].T
        u = np.zeros((t, 24))
        u[np.arange(t), a], u[np.arange(t), b] = 1.0, -1.0
        unnormalised = expm(-(u.T * model.alphas_[:t]) @ u)
        W = unnormalised / np.trace(unnormalised)
        np.testing.assert_allclose(_definiteboost_iterate(model, pairs, t), W, atol=1e-14)
        distances = W[pairs[:, 0], pairs[:, 0]] + W[pairs[:, 1], pairs[:, 1]] \
            - 2 * W[pairs[:, 0], pairs[:, 1]]
        chosen = model.chosen_constraints_[t]
        assert distances[chosen] == pytest.approx(distances.max(), abs=1e-14)
        thresholds.append(distances[chosen] - model.violations_[t])
    np.testing.assert_allclose(thresholds, thresholds[0], atol=1e-14)
    assert thresholds[0] == pytest.approx(batch.gamma, rel=model.tol)


def test_summary_table(online, batch):
    table = summary_table(online, batch).set_index("quantity")["value"]
    assert table["objects d"] == 24
    assert table["MEG total loss"] == online.cumulative_loss[-1]
    assert table["bound / total loss"] > 1
    assert table["DefiniteBoost iterations"] == batch.model.n_iter_
    assert table["1-NN error, target kernel"] == online.target_error
    assert table["DefiniteBoost final dual objective x d (the paper's scale)"] == \
        24 * batch.model.dual_objective_[-1]
    assert table["1-NN error, MEG kernel, std over splits"] == online.knn_split_errors[-1].std()


@pytest.mark.slow  # matplotlib's first figures (about 1.5 s)
def test_figures_render(online, batch, tmp_path):
    pytest.importorskip("matplotlib")
    from megkernel.plotting import plot_batch_experiment, plot_online_experiment

    online_figure, batch_figure = plot_online_experiment(online), plot_batch_experiment(batch)
    for figure, name in [(online_figure, "online"), (batch_figure, "batch")]:
        loss_ax, error_ax = figure.axes[:2]
        texts = [text.get_text() for ax in (loss_ax, error_ax) for text in ax.texts]
        assert texts[:2] == ["(a)", "(b)"]  # panel letters (then Figure 3's note)
        assert len(error_ax.collections) == 1  # the band over the splits
        figure.savefig(tmp_path / f"{name}.png")
        figure.savefig(tmp_path / f"{name}.pdf")
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    assert [ax.get_xscale() for ax in online_figure.axes] == ["log", "log"]
    dual_ax = batch_figure.axes[0]
    assert "\\mathrm{tr}" in dual_ax.get_ylabel()  # mathtext
    # the dual objective on the paper's scale: from d down
    assert dual_ax.lines[0].get_ydata()[0] == pytest.approx(24)


@pytest.mark.parametrize(
    ("kernel", "labels", "match"),
    [(np.eye(4), [0, 0, 1, 1], "trace one"), (np.eye(4) / 4, [0, 1, 1], "3 labels")],
)
def test_experiments_reject_bad_targets(kernel, labels, match):
    with pytest.raises(ValueError, match=match):
        run_online_experiment(kernel, labels, n_trials=10)
    with pytest.raises(ValueError, match=match):
        run_batch_experiment(kernel, labels, gamma=0.1)


def test_batch_experiment_needs_some_similar_pair(wine):
    with pytest.raises(ValueError, match="No pair is closer"):
        run_batch_experiment(wine.kernel, wine.labels, gamma=1e-9)
