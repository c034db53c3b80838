"""The validation walk stops before a checkpoint that cannot replace its choice.

Past a learned choice, where the held-out scores have stopped accelerating
and the next checkpoint, extrapolated along the last increment, stays below
the elasticity bar, the folds stop -- unless the 1-NN accuracy shows a sign
of rising above the choice's. That sign is counted in held-out points right
over the folds: one point turned right in a small fold and another turned
wrong in a larger one raise the mean of the folds' shares but are no rise.
"""

import numpy as np
import pytest

from megkernel._solvers.holdout import _out_of_reach

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
