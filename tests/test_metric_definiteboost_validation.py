"""DefiniteBoostMetric's validation of its sweeps: where it stops, what it keeps.

The loop of :mod:`megkernel._solvers.holdout` with DefiniteBoost's early stop
(``early_prior``): before one pass over the pairs it stops where the prior,
still the choice, is out of reach -- by the held-out scores, by the held-out
1-NN accuracy, which no checkpoint may lose against the choice, or on a flat
curve that two more doublings would not lift to a real gain -- and where a
learned length is out of reach by the patience's own extrapolation; curves
still rising fast enough go on.
"""

import numpy as np

from megkernel._solvers.holdout import (
    _prior_out_of_reach,
    doubling_checkpoints,
    validate_length,
)


class _Classes:
    """Class labels whose pairs the folds keep (as neighbourhood pairs)."""

    def __init__(self, codes):
        self.codes = codes

    def draw(self, points, seed):
        return None


class _Path:
    """A fold path with given held-out margins per length (``margins(length, n)``)."""

    def __init__(self, scorer, margins, asked):
        self.n, self.margins, self.asked = len(scorer.queries), margins, asked

    def score_at(self, length):
        self.asked.append(length)
        return self.margins(length, self.n)


def _validate(margins):
    rng = np.random.default_rng(0)
    n = 200
    codes = np.arange(n) % 2
    pairs = np.column_stack([np.arange(n), (np.arange(n) + 2) % n])
    signs = np.ones(n)
    asked = []
    best, log = validate_length(
        n,
        pairs,
        signs,
        lambda scorer: _Path(scorer, margins, asked),
        checkpoints=doubling_checkpoints(1000),
        n_folds=5,
        rng=rng,
        learner="DefiniteBoostMetric",
        classes=_Classes(codes),
        early_prior=True,
    )
    return best, log, max(asked)


def _learned(length, n, *, right_after):
    """All queries right under the prior (margin 0.5); after it, larger margins for most,
    negative ones for the rest (``right_after(length)`` of them right)."""
    if length == 0:
        return np.full(n, 0.5)
    right = np.arange(n) < int(round(right_after(length) * n))
    return np.where(right, 0.95, -0.05)


def test_falling_accuracy_stops_the_sweeps_before_one_pass():
    # the margins rise significantly over the prior's at every checkpoint while a
    # steady 30 % of the held-out points turn wrong: no checkpoint can replace the
    # prior, so the runs stop at half a pass instead of going on to two
    best, log, longest = _validate(lambda length, n: _learned(length, n, right_after=lambda _: 0.7))
    assert log["scores"][1] > log["scores"][0]  # the margins did rise
    assert log["accuracies"][-1] < log["accuracies"][0]
    assert best == 0.0
    assert log["stopped"] == "out_of_reach"
    assert longest == 0.5
    assert log["checkpoints"] == [0.0, 0.125, 0.25, 0.5]


def test_recovering_accuracy_goes_on_past_half_a_pass():
    # the accuracy falls at first but rises fast enough towards the prior's: the
    # patience's checkpoints are still run
    def right_after(length):
        return {0.125: 0.6, 0.25: 0.6, 0.5: 0.85}.get(length, 1.0)

    best, log, longest = _validate(lambda length, n: _learned(length, n, right_after=right_after))
    assert longest >= 1.0
    assert log["stopped"] != "out_of_reach" or log["checkpoints"][-1] >= 1.0


def test_auc_validation_is_unchanged_by_the_accuracy_rule():
    # with AUC placements (pairs without classes) there is no accuracy to read:
    # the rule only looks at the scores
    placements = (np.linspace(0.4, 0.6, 50), np.linspace(0.4, 0.6, 50))
    table = [[placements] * 5 for _ in range(4)]
    assert not _prior_out_of_reach(table, z=2.0, n_repeats=1, scores=[0.5] * 4)


def _shifted(gains, noise=0.0):
    """Held-out margins: fixed per-point margins shifted by ``gains[length]`` (past the
    last length given: as there), plus ``noise`` times a fixed pattern of mean zero
    whose sign alternates from one checkpoint to the next: the mean gains are exactly
    the given ones, their paired standard error ``noise / sqrt(n)`` per fold."""
    base = np.random.default_rng(1).normal(0.3, 0.1, 1000)

    def margins(length, n):
        gain = gains.get(length, gains[max(gains)])
        sign = 0.0 if length == 0 else (-1.0) ** round(np.log2(length * 8))
        pattern = noise * (-1.0) ** np.arange(n) * (1 if n % 2 == 0 else 0)
        return base[:n] + gain + sign * pattern

    return margins


def _full_choice(margins):
    """The choice of the loop that scores every checkpoint up to 4 passes."""
    rng = np.random.default_rng(0)
    n = 200
    codes = np.arange(n) % 2
    pairs = np.column_stack([np.arange(n), (np.arange(n) + 2) % n])
    best, _ = validate_length(
        n, pairs, np.ones(n), lambda scorer: _Path(scorer, margins, []),
        checkpoints=doubling_checkpoints(4), n_folds=5, rng=rng, patience=None,
        learner="DefiniteBoostMetric", classes=_Classes(codes))
    return best


def test_a_learned_choice_out_of_reach_stops_the_sweeps_before_one_pass():
    # 1/8 of a sweep gains, each doubling after it adds less: one pass, extrapolated
    # along the last doubling, stays far below what it would need to replace 1/8
    # (the gain's elasticity), so the folds stop at half a pass instead of one
    margins = _shifted({0.0: 0.0, 0.125: 0.10, 0.25: 0.12, 0.5: 0.13, 1.0: 0.135, 2.0: 0.14})
    best, log, longest = _validate(margins)
    assert best == 0.125 and log["gain_is_real"]
    assert log["stopped"] == "out_of_reach"
    assert longest == 0.5
    assert best == _full_choice(margins)  # the choice of the whole table


def test_a_learned_choice_still_accelerating_goes_on_past_half_a_pass():
    # the gain per doubling grows at half a pass: no extrapolation stops it there, and
    # one pass, which doubles the gain, replaces the choice
    margins = _shifted({0.0: 0.0, 0.125: 0.10, 0.25: 0.11, 0.5: 0.14, 1.0: 0.30, 2.0: 0.31})
    best, log, longest = _validate(margins)
    assert longest >= 1.0
    assert best == 1.0 == _full_choice(margins)


def test_a_flat_curve_keeps_the_prior_at_half_a_pass():
    # the projections neither gain nor lose beyond noise: two more doublings at the
    # last pace stay below a real gain, so the prior is kept at half a pass instead of
    # running the patience's one and two passes
    margins = _shifted({0.0: 0.0, 0.125: 0.0}, noise=0.05)
    best, log, longest = _validate(margins)
    assert best == 0.0 and not log["gain_is_real"]
    assert log["stopped"] == "out_of_reach"
    assert longest == 0.5
    assert _full_choice(margins) == 0.0


def test_a_curve_rising_towards_a_real_gain_goes_on_past_half_a_pass():
    # below a real gain at half a pass, but rising fast enough to pass it within two
    # more doublings: the patience's checkpoints are run, and one pass is kept
    margins = _shifted({0.0: 0.0, 0.125: 0.001, 0.25: 0.002, 0.5: 0.005, 1.0: 0.05},
                       noise=0.05)
    best, log, longest = _validate(margins)
    assert longest >= 1.0
    assert best == 1.0 == _full_choice(margins)


def test_a_learned_choice_whose_curve_climbs_back_goes_on_past_half_a_pass():
    # projections that pull pairs apart first: below the choice (1/8) at 1/4 and 1/2,
    # but climbing back within two doublings at the last pace, and far above it at
    # one pass; a dip alone does not stop the folds before the first pass
    margins = _shifted({0.0: 0.0, 0.125: 0.10, 0.25: 0.02, 0.5: 0.06, 1.0: 0.40, 2.0: 0.41})
    best, log, longest = _validate(margins)
    assert longest >= 1.0
    assert best == 1.0 == _full_choice(margins)


def test_a_prior_curve_whose_pace_grows_within_its_noise_goes_on_past_half_a_pass():
    # still the prior at half a pass, each doubling adding more than the one before
    # (convex in the log of the length, the growth within the noise of the items):
    # not extrapolated as flat, and one or two passes gain for real
    base = np.random.default_rng(1).normal(1.0, 0.1, 1000)  # every point right throughout
    gains = {0.0: 0.0, 0.125: 0.0, 0.25: 0.002, 0.5: 0.01, 1.0: 0.08, 2.0: 0.16}

    def margins(length, n):
        gain = gains.get(length, gains[max(gains)])
        sign = 0.0 if length == 0 else (-1.0) ** round(np.log2(length * 8))
        return base[:n] + gain + sign * 0.2 * (-1.0) ** np.arange(n) * (n % 2 == 0)

    best, log, longest = _validate(margins)
    assert longest >= 1.0
    assert best == _full_choice(margins) == 2.0
