"""MEGMetric from given pairs: the pair loss's race stops at its first rung where it is beaten.

The pair loss is raced against the pairs' soft-neighbour objective that would
be kept. Where its choice after :data:`RUNG_EPOCHS` epochs is significantly
below that objective's held-out scores (paired over the same points) and not
above it in 1-NN accuracy, the race ends there instead of at
:data:`RACE_EPOCHS`: the same choice, for a quarter of the race's epochs.
"""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from megkernel import MEGMetric, draw_pairs
from megkernel._solvers import metric_validation as mv


def _blobs():
    X, y = make_blobs(250, n_features=30, centers=2, cluster_std=4.0, random_state=0)
    pairs, signs = draw_pairs(y, 600, random_state=0)
    return X, pairs, signs


def _fit_counting(monkeypatch, X, pairs, signs):
    """Fit from pairs; return the model, the MEG trials of the folds, the pair loss's log."""
    trials, logs = [], []
    run_batches, validate = mv.run_batches, mv._validate_pair_loss

    def counted(*args, **kwargs):
        trials.append(kwargs["n_more"])
        return run_batches(*args, **kwargs)

    def logged(*args, **kwargs):
        out = validate(*args, **kwargs)
        logs.append(out[1])
        return out

    monkeypatch.setattr(mv, "run_batches", counted)
    monkeypatch.setattr(mv, "_validate_pair_loss", logged)
    model = MEGMetric(random_state=0).fit_pairs(X, pairs, signs)
    return model, sum(trials), logs[-1]


def test_a_pair_loss_beaten_at_the_rung_stops_there_with_the_same_choice(monkeypatch):
    X, pairs, signs = _blobs()
    model, trials, log = _fit_counting(monkeypatch, X, pairs, signs)
    assert log["pruned"] is True and log["pruned_at"] == mv.RUNG_EPOCHS
    assert max(log["checkpoints"]) == mv.RUNG_EPOCHS
    assert model.validation_["kept"] == "soft-pairs"
    # without the rung: the race runs to its end, is pruned there, the same metric
    monkeypatch.setattr(mv, "RUNG_EPOCHS", mv.RACE_EPOCHS)
    plain, plain_trials, plain_log = _fit_counting(monkeypatch, X, pairs, signs)
    assert plain_log["pruned"] is True and max(plain_log["checkpoints"]) == mv.RACE_EPOCHS
    np.testing.assert_array_equal(model.get_mahalanobis_matrix(), plain.get_mahalanobis_matrix())
    assert model.validation_ == plain.validation_
    # the folds' MEG trials before the rung only: the race's epochs up to 4 of its 16
    assert trials < 0.4 * plain_trials


def _items(rng, n_folds=5, n=40, shift=0.0):
    return [rng.normal(0.3 + shift, 0.2, n) for _ in range(n_folds)]


def _log(items, chosen=4.0):
    accuracy = float(np.mean([np.mean(item > 0) for item in items]))
    return {
        "chosen": chosen,
        "checkpoints": [0.0, chosen],
        "scores": [0.0, 0.0],
        "accuracies": [0.0, accuracy],
        "n_repeats": 1,
    }


@pytest.mark.parametrize("seed", range(3))
def test_dominated_needs_a_significant_gap_and_no_higher_accuracy(seed):
    rng = np.random.default_rng(seed)
    own = _items(rng)
    above = [item + 0.3 for item in own]  # margins higher by 0.3 at every point
    level = [item + rng.normal(0.0, 0.2, len(item)) for item in own]  # noise, no gap
    accuracy = _log(own)["accuracies"][1]
    assert mv._dominated(_log(own), own, (accuracy, 0.6), above)
    assert mv._dominated(_log(own), own, (accuracy + 0.1, 0.6), above)
    # level with the incumbent: goes on
    assert not mv._dominated(_log(own), own, (accuracy, 0.3), level)
    # margins lower but 1-NN accuracy above the incumbent's: goes on
    assert not mv._dominated(_log(own), own, (accuracy - 0.01, 0.6), above)
    # no learned choice, or no incumbent items to pair with: goes on
    assert not mv._dominated(_log(own, chosen=None), own, (accuracy, 0.6), above)
    assert not mv._dominated(_log(own), own, (accuracy, 0.6), [])


def test_dominated_pairs_auc_placements():
    """Without classes the folds score pair AUC placements (DeLong): the same rule."""
    rng = np.random.default_rng(0)
    own = [(rng.uniform(0.3, 0.7, 30), rng.uniform(0.3, 0.7, 30)) for _ in range(5)]
    above = [(a + 0.25, b + 0.25) for a, b in own]
    log = {"chosen": 4.0, "checkpoints": [0.0, 4.0], "scores": [0.5, 0.5], "n_repeats": 1}
    assert mv._dominated(log, own, (0.75, 0.75), above)
    assert not mv._dominated(log, own, (0.45, 0.45), above)  # the race's AUC is above
