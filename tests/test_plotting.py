"""plot_learning_curve on a user's own models, and what the reproduction's
figures must show (the target's line at 0, DefiniteBoost's note)."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.linear_model import LinearRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from megkernel import (  # noqa: E402
    DefiniteBoostKernel,
    MEGKernelRegressor,
    meg_loss_bound,
    von_neumann_divergence,
)
from megkernel.datasets import (  # noqa: E402
    distance_triples,
    load_wine_kernel,
    similar_pairs,
    similarity_threshold,
)
from megkernel.experiments import run_batch_experiment, run_online_experiment  # noqa: E402
from megkernel.plotting import (  # noqa: E402
    _DEFINITEBOOST_ERROR_NOTE,
    plot_batch_experiment,
    plot_learning_curve,
    plot_online_experiment,
)

D = 16


@pytest.fixture(scope="module")
def wine():
    return load_wine_kernel(D, random_state=0)


@pytest.fixture(scope="module")
def stream(wine):
    return distance_triples(wine.kernel, 1500, random_state=0)


def _axes():
    return Figure().subplots()


def _line(ax, prefix):
    lines = [line for line in ax.get_lines() if line.get_label().startswith(prefix)]
    assert len(lines) == 1, [line.get_label() for line in ax.get_lines()]
    return lines[0]


def _twin(ax):
    twins = [other for other in ax.figure.axes if other is not ax]
    assert len(twins) == 1
    return twins[0]


@pytest.mark.parametrize("trace", [1.0, 10.0])
def test_online_curve_with_lemma_3_2_bound(wine, stream, trace):
    pairs, y = stream
    target = trace * wine.kernel
    model = MEGKernelRegressor(n_objects=D, trace=trace, learning_rate=0.5)  # the bound's
    for start in range(0, len(y), 500):
        model.partial_fit(pairs[start:start + 500], trace * y[start:start + 500])
    ax = _axes()
    assert plot_learning_curve(model, ax, target=target) is ax
    loss = _line(ax, "total loss")
    np.testing.assert_allclose(loss.get_ydata(), np.cumsum(model.losses_))
    np.testing.assert_array_equal(loss.get_xdata(), np.arange(1, 1501))
    bound = _line(ax, "Lemma 3.2 bound").get_ydata()[0]
    expected = meg_loss_bound(2.0, von_neumann_divergence(wine.kernel, np.eye(D) / D))
    assert bound == pytest.approx(trace**2 * expected, rel=1e-9)  # units of y squared
    assert model.cumulative_loss_ <= bound


def test_online_bound_at_a_lower_rate_has_its_finite_c(wine, stream):
    pairs, y = stream
    model = MEGKernelRegressor(solver="online", n_objects=D, trace=1.0,
                               learning_rate=0.25).fit(pairs, y)
    ax = plot_learning_curve(model, _axes(), target=wine.kernel)
    divergence = von_neumann_divergence(wine.kernel, np.eye(D) / D)
    # eta = 2c / (r^2 (2 + c)) = 1/4 with r = 2: c = 2, bound (1/2 + 1/2) r^2 Delta
    assert _line(ax, "Lemma 3.2").get_ydata()[0] == pytest.approx(4 * divergence)
    assert model.cumulative_loss_ <= 4 * divergence


def test_online_bound_from_a_given_prior(wine, stream):
    pairs, y = stream
    prior = np.diag(np.linspace(1.0, 2.0, D))
    model = MEGKernelRegressor(solver="online", n_objects=D, trace=1.0, learning_rate=0.5,
                               init=prior).fit(pairs, y)
    ax = plot_learning_curve(model, _axes(), target=wine.kernel)
    expected = meg_loss_bound(2.0, von_neumann_divergence(wine.kernel, prior / np.trace(prior)))
    assert _line(ax, "Lemma 3.2").get_ydata()[0] == pytest.approx(expected, rel=1e-9)


def test_online_curve_without_target_draws_no_bound(stream):
    pairs, y = stream
    model = MEGKernelRegressor(n_objects=D).partial_fit(pairs[:300], y[:300])
    ax = plot_learning_curve(model, _axes())
    assert [line.get_label() for line in ax.get_lines()][1:] == []


@pytest.mark.parametrize(
    ("make", "target_scale", "match"),
    [
        (lambda: MEGKernelRegressor(n_objects=D, trace=1.0, learning_rate=0.8),
         1.0, "learning rates up to 0.5"),
        (lambda: MEGKernelRegressor(n_objects=D, trace=2.0), 1.0, "model's trace"),
        (lambda: MEGKernelRegressor(init_factor=np.eye(D)[:, :4] + 0.1, trace=1.0),
         1.0, "low-rank"),
    ],
)
def test_online_bound_refused_when_it_does_not_apply(wine, stream, make, target_scale,
                                                     match):
    pairs, y = stream
    model = make().partial_fit(pairs[:200], y[:200])
    ax = _axes()
    with pytest.raises(ValueError, match=match):
        plot_learning_curve(model, ax, target=target_scale * wine.kernel)
    assert ax.get_lines() == []  # refused before drawing anything


def test_online_bound_refused_after_a_batch_fit(wine, stream):
    pairs, y = stream
    model = MEGKernelRegressor(n_objects=D, trace=1.0, random_state=0).fit(pairs, y)
    with pytest.raises(ValueError, match="fitted in batch"):
        plot_learning_curve(model, _axes(), target=wine.kernel)
    model.partial_fit(pairs[:100], y[:100])  # on-line from the batch kernel
    with pytest.raises(ValueError, match="continued a batch fit"):
        plot_learning_curve(model, _axes(), target=wine.kernel)
    ax = plot_learning_curve(model, _axes())  # the total loss alone is fine
    np.testing.assert_allclose(_line(ax, "total loss").get_ydata(), np.cumsum(model.losses_))
    with pytest.raises(ValueError, match="target.*shape"):
        plot_learning_curve(
            MEGKernelRegressor(n_objects=D, trace=1.0).partial_fit(pairs[:50], y[:50]),
            _axes(), target=np.eye(3))


def test_batch_curve_loss_and_held_out_scores(stream):
    pairs, y = stream
    model = MEGKernelRegressor(n_objects=D, random_state=0).fit(pairs, 5.0 * y)
    ax = plot_learning_curve(model, _axes())
    np.testing.assert_allclose(_line(ax, "training error").get_ydata(), model.loss_curve_)
    scores_ax = _twin(ax)
    np.testing.assert_allclose(_line(scores_ax, "held-out").get_ydata(),
                               model.validation_scores_)
    assert _line(scores_ax, "prior").get_ydata()[0] == model.prior_score_
    star = _line(scores_ax, "returned")
    assert star.get_ydata()[0] == model.validation_score_
    assert model.validation_scores_[int(star.get_xdata()[0])] == model.validation_score_
    # the converged iterate, as the fit returns unless it overfits
    assert int(star.get_xdata()[0]) == len(model.validation_scores_) - 1
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert len(labels) == 4  # one legend for both axes


def test_definiteboost_curve(wine):
    pairs = similar_pairs(wine.kernel, similarity_threshold(wine.kernel, 0.2))
    model = DefiniteBoostKernel(n_objects=D, gamma=similarity_threshold(wine.kernel, 0.2),
                                trace=1.0, validation_fraction=None).fit(pairs)
    ax = plot_learning_curve(model, _axes())
    dual = _line(ax, "dual objective").get_ydata()
    np.testing.assert_allclose(dual, model.dual_objective_)
    bound = _line(ax, "Theorem 4.1").get_ydata()
    np.testing.assert_allclose(bound, model.dual_objective_[0] * model.dual_bound_)
    assert np.all(dual <= bound * (1 + 1e-12))
    violation_ax = _twin(ax)
    assert violation_ax.get_yscale() == "log"
    shown = _line(violation_ax, "largest violation")
    np.testing.assert_allclose(shown.get_ydata(), model.violations_[model.violations_ > 0])
    with pytest.raises(ValueError, match="DefiniteBoostKernel has none"):
        plot_learning_curve(model, _axes(), target=wine.kernel)


def test_unfitted_and_unsupported_models_are_refused(stream):
    pairs, y = stream
    for model in (MEGKernelRegressor(), DefiniteBoostKernel()):
        with pytest.raises(NotFittedError, match="needs a fitted"):
            plot_learning_curve(model, _axes())
        assert issubclass(NotFittedError, ValueError)
    with pytest.raises(ValueError, match="MEGKernelRegressor or a DefiniteBoostKernel; "
                                         "got LinearRegression"):
        plot_learning_curve(LinearRegression().fit(pairs, y), _axes())


def test_pipeline_and_new_pyplot_figure(stream):
    pairs, y = stream
    # a fixed seed: about one held-out draw in 40 makes the kernel lose to its prior
    learner = MEGKernelRegressor(n_objects=D, random_state=0)
    pipeline = make_pipeline(learner).fit(pairs[:300], y[:300])
    before = plt.get_fignums()
    try:
        ax = plot_learning_curve(pipeline)
        assert ax.figure.number not in before  # ax=None: a new pyplot figure
        np.testing.assert_allclose(_line(ax, "training error").get_ydata(),
                                   pipeline[-1].loss_curve_)
    finally:
        plt.close("all")


# -- the reproduction's figures --------------------------------------------------------


@pytest.fixture(scope="module")
def separated():
    """Three well separated classes: the target kernel's 1-NN error is 0."""
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 6)
    features = 4.0 * np.eye(3)[labels] + 0.3 * rng.normal(size=(18, 3))
    kernel = features @ features.T
    return kernel / np.trace(kernel), labels


@pytest.mark.slow
def test_target_line_at_zero_is_visible(separated):
    kernel, labels = separated
    online = run_online_experiment(kernel, labels, n_trials=400, n_checkpoints=3)
    batch = run_batch_experiment(kernel, labels, gamma=similarity_threshold(kernel, 0.3),
                                 n_checkpoints=3)
    assert online.target_error == batch.target_error == 0.0
    for figure in (plot_online_experiment(online), plot_batch_experiment(batch)):
        error_ax = figure.axes[1]
        target = _line(error_ax, "target kernel")
        assert target.get_ydata()[0] == 0.0
        bottom, top = error_ax.get_ylim()
        assert bottom < 0 < top  # the line is inside the panel, not on its frame
        assert target.get_zorder() > max(s.get_zorder() for s in error_ax.spines.values())


@pytest.mark.slow
def test_definiteboost_figure_comments_its_error(wine):
    online = run_online_experiment(wine.kernel, wine.labels, n_trials=300, n_checkpoints=2)
    batch = run_batch_experiment(wine.kernel, wine.labels,
                                 gamma=similarity_threshold(wine.kernel, 0.2), n_checkpoints=3)
    notes = [text.get_text() for text in plot_batch_experiment(batch).axes[1].texts]
    assert _DEFINITEBOOST_ERROR_NOTE in notes
    assert "need not fall monotonically" in _DEFINITEBOOST_ERROR_NOTE
    online_notes = [text.get_text() for text in plot_online_experiment(online).axes[1].texts]
    assert online_notes == ["(b)"]


def test_a_pipeline_through_kernel_distances_says_how_to_draw_its_learner():
    # KernelDistances keeps the learned kernel, not a fitted learner: the refusal says so
    # and what to draw instead, for the step, the Pipeline and a search over it
    from sklearn.model_selection import GridSearchCV
    from sklearn.neighbors import KNeighborsClassifier

    from megkernel import KernelDistances
    ids = np.array([f"o{i}" for i in range(12)], dtype=object)
    a, b = np.triu_indices(12, 1)
    step = KernelDistances(learner=MEGKernelRegressor(random_state=0, early_stopping=False),
                           pairs=np.column_stack([ids[a], ids[b]]),
                           targets=((a - b) ** 2).astype(float), given_squared=True)
    pipe = make_pipeline(step, KNeighborsClassifier(1, metric="precomputed"))
    labels = np.arange(12) % 2
    search = GridSearchCV(pipe, {"kerneldistances__keep_given": ["never"]}, cv=2)
    for model in (step.fit(ids), pipe.fit(ids, labels), search.fit(ids, labels)):
        with pytest.raises(ValueError, match=r"KernelDistances keeps the kernel its "
                                             r"MEGKernelRegressor learned.*fit the learner "
                                             r"alone on the step's pairs and targets"):
            plot_learning_curve(model, _axes())
    # taught a distance matrix, the step has no pairs: the hint names what it was taught
    D = np.abs(np.subtract.outer(np.arange(12.0), np.arange(12.0)))
    matrix = KernelDistances(learner=MEGKernelRegressor(random_state=0, early_stopping=False),
                             distances=D, objects=ids, given_squared=True).fit(ids)
    with pytest.raises(ValueError, match=r"alone on the observed entries of the step's "
                                         r"distances as a pair table"):
        plot_learning_curve(matrix, _axes())
