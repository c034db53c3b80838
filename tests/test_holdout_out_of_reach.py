"""The validation walk stops before a checkpoint that cannot replace its choice.

Past a learned choice, where the held-out scores have stopped accelerating
and the next checkpoint, extrapolated along the last increment, stays below
the elasticity bar, the folds stop -- unless the 1-NN accuracy shows a sign
of rising above the choice's. That sign is counted in held-out points right
over the folds: one point turned right in a small fold and another turned
wrong in a larger one raise the mean of the folds' shares but are no rise.
The scores accelerate where the last doubling added more than the one before
beyond the noise of that difference (paired over the same held-out items): a
curve linear in the log of the length whose rises differ by noise is
extrapolated.
"""

import numpy as np
import pytest

from megkernel._solvers.holdout import _accelerates, _out_of_reach

# the choice at 1 pass, the last row at 4: gains over the prior 0.10, 0.12, 0.13
# (decelerating); at 8 passes the extrapolation gives 0.14 against the bar
# sqrt(8) * 0.10 = 0.28
SCORES = [0.0, 0.10, 0.12, 0.13]
REACHED = [0.0, 1.0, 2.0, 4.0]
CHECKPOINTS = [0.0, 1.0, 2.0, 4.0, 8.0]


def _fold(n_right, n_items):
    """Margins of ``n_items`` held-out points, ``n_right`` of them right (positive)."""
    return np.r_[np.full(n_right, 0.5), np.full(n_items - n_right, -0.5)]


def _table(chosen_right, last_right, sizes=(10, 20)):
    chosen = [_fold(right, size) for right, size in zip(chosen_right, sizes)]
    last = [_fold(right, size) for right, size in zip(last_right, sizes)]
    prior = [np.full(size, -0.5) for size in sizes]
    return [prior, chosen, chosen, last]


def _stops(table):
    return _out_of_reach(table, 1, REACHED, CHECKPOINTS, z=2.0, n_repeats=1,
                         elasticity=0.5, scores=SCORES)  # fmt: skip


def test_a_swap_of_points_between_folds_is_no_sign_of_a_rising_accuracy():
    # 7/10 and 14/20 right at the choice; 8/10 and 13/20 at the last row: the
    # mean of the folds' shares rises 0.700 -> 0.725, the points right stay 21
    table = _table((7, 14), (8, 13))
    shares = [np.mean([np.mean(item > 0) for item in row]) for row in (table[1], table[3])]
    assert shares[1] > shares[0]
    assert _stops(table)


def test_more_points_right_is_a_sign_and_the_walk_goes_on():
    assert not _stops(_table((7, 14), (8, 14)))  # 21 -> 22 right


@pytest.mark.parametrize("last_right", [(7, 14), (6, 14), (7, 12)])
def test_no_more_points_right_stops(last_right):
    assert _stops(_table((7, 14), last_right))


def _noisy_table(rise, sd, seed=0, n_folds=2, n_items=40):
    """Margins at 0, 1, 2 and 4 passes: gains 0, 0.10, 0.13, 0.13 + ``rise``.

    Each row's per-item noise (standard deviation ``sd``, independent
    between rows) has mean zero in every fold: the rows' means are the
    gains exactly, every item is right.
    """
    rng = np.random.default_rng(seed)
    offsets = [rng.uniform(0.4, 0.6, n_items) for _ in range(n_folds)]
    table = []
    for gain in (0.0, 0.10, 0.13, 0.13 + rise):
        row = []
        for offset in offsets:
            noise = rng.normal(0.0, sd, n_items)
            row.append(offset + gain + noise - noise.mean())
        table.append(row)
    scores = [float(np.mean([item.mean() for item in row])) for row in table]
    return table, [score - scores[0] for score in scores]


def _stops_noisy(table, scores):
    return _out_of_reach(table, 1, REACHED, CHECKPOINTS, z=2.0, n_repeats=1,
                         elasticity=0.5, scores=scores)  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_a_pace_that_grew_within_its_noise_is_extrapolated(seed):
    # rises 0.030 then 0.031 per doubling (a curve linear in the log of the
    # length, up to noise of 0.05 per point): 8 passes along the last rise
    # reach 0.19, below the bar sqrt(8) * 0.10 = 0.28
    table, scores = _noisy_table(0.031, 0.05, seed)
    assert _accelerates(table[1:], REACHED[1:], z=2.0, n_repeats=1) is False
    assert _stops_noisy(table, scores)


@pytest.mark.parametrize("seed", range(3))
def test_a_pace_that_grew_beyond_its_noise_runs_its_patience(seed):
    # rises 0.03 then 0.04 with noise of 0.002 per point: the curve is convex in
    # the log of the length, and may still turn up
    table, scores = _noisy_table(0.04, 0.002, seed)
    assert _accelerates(table[1:], REACHED[1:], z=2.0, n_repeats=1) is True
    assert not _stops_noisy(table, scores)


def test_folds_too_small_to_show_noise_count_any_growth():
    rows = [[np.array([0.1])], [np.array([0.2])], [np.array([0.3001])]]
    assert _accelerates(rows, REACHED[1:], z=2.0, n_repeats=1) is True
