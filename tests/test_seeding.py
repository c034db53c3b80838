"""megkernel._numerics.seeding: the learners' one way from random_state to a seed."""

import numpy as np
import pytest

from megkernel._numerics.seeding import SEED_BOUND, derived_generator, derived_seed


def test_an_int_fixes_the_seed_and_the_draws():
    assert derived_seed(3) == derived_seed(3)
    assert derived_seed(3) != derived_seed(4)
    np.testing.assert_array_equal(derived_generator(3).random(5), derived_generator(3).random(5))


def test_the_seed_is_the_first_draw_of_sklearns_random_state():
    # the idiom it replaces, written out: RandomState(3).randint(2**31 - 1)
    assert derived_seed(3) == np.random.RandomState(3).randint(2**31 - 1)
    assert SEED_BOUND == 2**31 - 1
    np.testing.assert_array_equal(
        derived_generator(3).random(4),
        np.random.default_rng(np.random.RandomState(3).randint(2**31 - 1)).random(4))


def test_an_instance_is_drawn_from_and_advanced():
    state = np.random.RandomState(0)
    first, second = derived_seed(state), derived_seed(state)
    assert first != second
    assert first == np.random.RandomState(0).randint(SEED_BOUND)
    assert 0 <= first < SEED_BOUND and isinstance(first, int)


def test_none_draws_fresh_seeds():
    seeds = [derived_seed(None) for _ in range(3)]
    assert all(isinstance(seed, int) and 0 <= seed < SEED_BOUND for seed in seeds)
    assert len(set(seeds)) == 3  # equal draws: probability about 1e-9


def test_bad_random_state_is_refused():
    with pytest.raises(ValueError, match="seed"):
        derived_seed("zero")
