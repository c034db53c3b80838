"""MEGMetric from given pairs: the refit's length, and the pair loss race's warnings.

A validation fold learns from the pairs among its points, about 64 % of them
with five folds; the refit on every pair runs the chosen length times the
pairs over a fold's where the folds' held-out curve held the choice that far.
The pair loss's race against the pairs' own objective records its warnings
and passes on those of the validation that counts.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from test_metric_pair_loss_candidate import _pair_loss_problem, _race, _split

from megkernel import MEGMetric
from megkernel._solvers import metric_validation
from megkernel._solvers.holdout import (
    _held_to,
    pair_components,
    validate_length,
    validation_folds,
)
from megkernel._solvers.metric_validation import _validate_pair_loss, refit_epochs
from megkernel._warnings import warn_user


def _classes_with_pairs(seed=0, n=100):
    """Two classes of points, similar pairs inside each and dissimilar ones across."""
    rng = np.random.default_rng(seed)
    labels = np.repeat([0, 1], n // 2)
    a, b = rng.integers(0, n, size=(2, 600))
    keep = a != b
    pairs = np.column_stack([a[keep], b[keep]])
    signs = np.where(labels[pairs[:, 0]] == labels[pairs[:, 1]], 1, -1)
    return labels, pairs, signs


class _CurvePath:
    """A fold path whose held-out margins follow a given curve over the checkpoints."""

    def __init__(self, scorer, curve, seed):
        self.n, self.curve = len(scorer.queries), curve
        self.rng = np.random.default_rng(seed)

    def score_at(self, length):
        return self.curve(length) + 0.01 * self.rng.standard_normal(self.n)


def _curve_validation(curve, checkpoints):
    labels, pairs, signs = _classes_with_pairs()
    seeds = iter(range(1000))
    return validate_length(
        len(labels),
        pairs,
        signs,
        lambda scorer: _CurvePath(scorer, curve, next(seeds)),
        checkpoints=checkpoints,
        n_folds=5,
        rng=np.random.default_rng(0),
        patience=None,  # every checkpoint scored
    )


def test_the_pair_ratio_is_the_pairs_over_a_folds_pairs():
    labels, pairs, signs = _classes_with_pairs()
    _, log = _curve_validation(lambda length: 0.1 + 0.0 * length, [0.0, 1.0, 2.0])
    # the same folds, drawn again from the same generator: their pairs counted by hand
    codes = pair_components(len(labels), pairs, signs)
    masks, _ = validation_folds(len(labels), pairs, codes, n_folds=5, rng=np.random.default_rng(0))
    kept = [np.sum(~mask[pairs[:, 0]] & ~mask[pairs[:, 1]]) for mask in masks]
    assert log["pair_ratio"] == pytest.approx(len(pairs) / np.mean(kept), rel=1e-12)
    assert 1.4 < log["pair_ratio"] < 1.8  # about 1 / 0.64 with five folds


def test_held_to_is_where_the_curve_first_falls_significantly_below_the_choice():
    def curve(length):  # rises to 4, holds to 16, falls at 32
        return min(length, 4.0) / 10.0 - (0.2 if length >= 32 else 0.0)

    checkpoints = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    _, log = _curve_validation(curve, checkpoints)
    assert log["chosen"] == 4.0
    assert log["held_to"] == 16.0


def test_held_to_stops_at_a_fall_of_the_accuracy_alone():
    """Margins that hold on average while fewer points are right stop the reach."""
    rng = np.random.default_rng(3)
    right = np.full(200, 0.3)
    fewer = np.where(rng.random(200) < 0.3, -0.05, 0.45)  # mean 0.30, 30 % wrong
    table = [[np.zeros(200)] * 2, [right] * 2, [fewer] * 2]
    assert _held_to(table, 1, z=2.0, n_repeats=1, checkpoints=[0.0, 1.0, 2.0]) == 1.0
    assert (
        _held_to(
            [table[0], table[1], [right + 0.001] * 2],
            1,
            z=2.0,
            n_repeats=1,
            checkpoints=[0.0, 1.0, 2.0],
        )
        == 2.0
    )


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # held past chosen x ratio: the ratio
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 16.0,
                "pair_ratio": 1.5,
            },
            6.0,
        ),
        # held only to the next checkpoint, shorter than the ratio asks: as far as it held
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 6.0,
                "pair_ratio": 1.9,
            },
            6.0,
        ),
        # folds of a quarter of the pairs (two folds): unchanged
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 16.0,
                "pair_ratio": 4.0,
            },
            4.0,
        ),
        # the curve fell right after the choice: unchanged
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 4.0,
                "pair_ratio": 1.5,
            },
            4.0,
        ),
        # no learned length: the prior stays
        (
            {
                "score": "knn",
                "gain_is_real": False,
                "chosen": 0.0,
                "held_to": 0.0,
                "pair_ratio": 1.5,
            },
            0.0,
        ),
        # the folds drew their pairs again: their own scaling stands
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 16.0,
                "pair_ratio": 1.5,
                "length_scale": 1.25,
            },
            5.0,
        ),
        # the folds scored pair AUC, whose rise is no evidence for the neighbours: unchanged
        (
            {
                "score": "auc",
                "gain_is_real": True,
                "chosen": 4.0,
                "held_to": 16.0,
                "pair_ratio": 4.0,
            },
            4.0,
        ),
        # the safety net caps it
        (
            {
                "score": "knn",
                "gain_is_real": True,
                "chosen": 8.0,
                "held_to": 16.0,
                "pair_ratio": 1.5,
            },
            10.0,
        ),
    ],
)
def test_refit_epochs(log, expected):
    validated = log["chosen"] * log.get("length_scale", 1.0)
    assert refit_epochs(validated, dict(log), 10.0) == pytest.approx(expected)


def test_the_refit_on_every_pair_runs_longer_than_a_folds_choice():
    X_train, _, _, _, pairs, signs = _split(0)
    model = MEGMetric(random_state=0).fit_pairs(X_train, pairs, signs)
    log = model.validation_
    assert log["kept"] == "pairs" and log["gain_is_real"]
    assert log["held_to"] >= log["chosen"] * log["pair_ratio"]
    # the chosen checkpoint times the pairs over a fold's (five folds: about 1 / 0.64)
    assert model.n_epochs_ == pytest.approx(log["chosen"] * log["pair_ratio"])
    assert log["length_scale"] == pytest.approx(log["pair_ratio"])


@pytest.fixture
def marked_pair_loss(monkeypatch):
    """The pair loss's validation warns, naming the last checkpoint it was asked for."""
    real = metric_validation.validate_epochs

    def noisy(*args, checkpoints=None, **kwargs):
        result = real(*args, checkpoints=checkpoints, **kwargs)
        warn_user(f"pair loss validated to {max(checkpoints):g} epochs", UserWarning)
        return result

    monkeypatch.setattr(metric_validation, "validate_epochs", noisy)


def _fit_recording(X, pairs, signs, **params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = MEGMetric(random_state=0, **params).fit_pairs(X, pairs, signs)
    return model, [str(record.message) for record in caught]


@pytest.mark.usefixtures("marked_pair_loss")
def test_a_warning_of_a_race_that_is_the_validation_reaches_the_user():
    """A race stopped before its end (patience) is the pair loss's validation: its warnings are."""
    coordinates, these, targets, sides, prior, rate = _pair_loss_problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, log, _ = _validate_pair_loss(
            coordinates,
            these,
            targets,
            sides,
            prior,
            learning_rate=rate,
            batch_size=80,
            rng=np.random.default_rng(5),
            n_folds="auto",
            max_iter=1000,
            classes=None,
            looks_before=0,
            unless_above=(-np.inf, -np.inf),
            race=64.0,
        )
    assert "pruned" not in log and log["stopped"] == "patience"
    assert max(log["checkpoints"]) <= 64.0  # not run again in full
    assert [str(r.message) for r in caught] == ["pair loss validated to 64 epochs"]


@pytest.mark.usefixtures("marked_pair_loss")
def test_a_kept_pair_loss_warns_for_its_race_and_for_the_rest_of_its_validation():
    """The full validation continues the race's folds and does not make their
    first epochs again: what the race warned is the validation's."""
    X_train, _, _, _, pairs, signs = _split(5)
    model, messages = _fit_recording(X_train, pairs, signs, max_iter=64)
    log = model.validation_
    assert log["kept"] == "pairs" and "pruned" not in log
    assert max(log["checkpoints"]) > metric_validation.RACE_EPOCHS  # the race went on
    assert [m for m in messages if m.startswith("pair loss")] == [
        f"pair loss validated to {metric_validation.RACE_EPOCHS:g} epochs",
        "pair loss validated to 64 epochs",
    ]


@pytest.mark.usefixtures("marked_pair_loss")
def test_a_warning_of_a_pruned_pair_loss_does_not_reach_the_user():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(y), size=(2, 400))
    pairs = np.column_stack([a, b])[a != b]
    signs = np.where(y[pairs[:, 0]] == y[pairs[:, 1]], 1, -1)
    model, messages = _fit_recording(X, pairs, signs)
    assert model.validation_["kept"] != "pairs"
    assert "pairs" in model.validation_["from_labels"]  # it ran, and was dropped
    assert not [m for m in messages if m.startswith("pair loss")]


def test_the_race_end_is_no_safety_net_of_the_users():
    """A race that reached its end with its score still rising: no ConvergenceWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, log, _ = _race((1.0, 1.0))  # pruned at the race's end
    assert log["pruned"] is True
    assert not [r for r in caught if issubclass(r.category, ConvergenceWarning)]
