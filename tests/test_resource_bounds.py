"""Resource bounds as an input rule (issue 22): a parameter that scales
work or memory (n_objects, n_epochs, n_constraints, n_folds, declared ids)
is checked against what it implies before anything is allocated or run,
with the number in the message."""

import tracemalloc

import numpy as np
import pytest

from megkernel import (
    DefiniteBoostKernel,
    DefiniteBoostMetric,
    KernelDistances,
    MEGKernelRegressor,
    MEGMetric,
    definiteboost_pairs,
    draw_pairs,
    meg,
)

HUGE = 10**8  # a dense model would be 10^8 x 10^8 (71 PiB)


def _refused_cheaply(call, *numbers):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="dense mode holds at most 5000") as error:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    for number in numbers:
        assert str(number) in str(error.value)
    assert peak < 50 * 2**20, peak  # refused before any large allocation


@pytest.mark.parametrize("call", [
    lambda: MEGKernelRegressor(solver="online", n_objects=HUGE).fit([[0, 1]], [0.1]),
    lambda: MEGKernelRegressor(solver="online", n_objects=HUGE).partial_fit([[0, 1]], [0.1]),
    lambda: DefiniteBoostKernel(n_objects=HUGE, gamma=0.1).fit([[0, 1]]),
    lambda: meg([[0, 1]], [0.1], n_objects=HUGE),
    lambda: definiteboost_pairs([[0, 1]], n_objects=HUGE, gamma=0.1),
], ids=["MEG fit", "MEG partial_fit", "DefiniteBoost fit", "meg", "definiteboost_pairs"])
def test_an_explicit_huge_n_objects_is_refused_before_allocation(call):
    _refused_cheaply(call, "n_objects=100000000")


def test_more_declared_ids_than_dense_mode_holds_are_refused():
    ids = [f"object {i}" for i in range(5001)]
    _refused_cheaply(lambda: MEGKernelRegressor(solver="online", objects=ids).fit(
        [["object 0", "object 1"]], [0.1]), "len(objects)=5001")


# the set-up fit's two trials show no gain over the prior, which it says: beside the point
@pytest.mark.filterwarnings(
    "ignore:MEGKernelRegressor. the on-line trials predicted:megkernel.NoImprovementWarning")
def test_a_refused_size_leaves_a_fitted_model_unchanged(assert_unchanged_on_error):
    model = MEGKernelRegressor(solver="online", n_objects=3).fit([[0, 1], [1, 2]], [0.1, 0.2])
    model.set_params(n_objects=HUGE)
    with assert_unchanged_on_error(model, ValueError, match="dense mode"):
        model.fit([[0, 1]], [0.1])
    assert np.isfinite(model.kernel_).all()


# -- issue 22, item 3: the work n_epochs implies, and tables of declared ids --------

def test_n_epochs_beyond_the_trials_one_call_runs_are_refused_with_the_numbers():
    from megkernel._numerics.limits import MAX_TRIALS
    from megkernel._numerics.validation import check_n_trials

    assert check_n_trials(1000, 5) == 5000
    assert check_n_trials(MAX_TRIALS, 1) == MAX_TRIALS
    with pytest.raises(ValueError, match=r"n_epochs=1e\+20 passes over 5 pairs are "
                                         r"5e\+20 trials, beyond"):
        check_n_trials(10**20, 5)
    with pytest.raises(ValueError, match=r"2e\+09 trials, each keeping 8 bytes \(its "
                                         r"on-line loss\): 14.9 GiB"):
        check_n_trials(10**9, 2, bytes_per_trial=8)


def test_a_stream_replayed_beyond_the_trial_limit_is_refused_before_learning():
    calls = []

    def stream():
        calls.append(1)
        yield np.array([[0, 1], [1, 2]]), np.array([0.1, 0.2])

    step = KernelDistances(learner=MEGKernelRegressor(solver="online", n_epochs=10**20),
                           pairs=stream, given_squared=True)
    with pytest.raises(ValueError, match=r"n_epochs=1e\+20 passes over 2 pairs"):
        step.fit([0, 1])
    assert len(calls) == 1  # the scan only: no pass of learning began
    assert not hasattr(step, "kernel_")


@pytest.mark.slow
def test_a_pair_table_over_more_declared_ids_than_dense_mode_holds_is_refused():
    ids = ["a", "b"] + [f"object {i}" for i in range(10**6)]
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"names 1000002 objects.*7.45e\+03 GiB.*at "
                                             "most 5000"):
            KernelDistances(pairs=[["a", "b"]], targets=[1.0], objects=ids).fit(["a"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 500 * 2**20, peak  # the ids themselves, no d x d matrix


def test_on_line_fit_refuses_n_epochs_beyond_the_limit_before_any_trial():
    model = MEGKernelRegressor(solver="online", n_epochs=10**20)
    with pytest.raises(ValueError, match=r"n_epochs=1e\+20 passes over 2 pairs"):
        model.fit([[0, 1], [1, 2]], [0.1, 0.2])
    with pytest.raises(ValueError, match="14.9 GiB"):  # losses_ would not fit
        MEGKernelRegressor(solver="online", n_epochs=10**9).fit([[0, 1], [1, 2]], [0.1, 0.2])


def test_meg_metric_refuses_n_epochs_beyond_the_limit():
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(ValueError, match=r"n_epochs=1e\+20 passes over"):
        # (5 constraints of each kind: 6 points have no more distinct similar pairs)
        MEGMetric(n_epochs=10**20, n_constraints=5, random_state=0).fit(X, [0, 0, 0, 1, 1, 1])


# (MEGMetric's verdict on 6 random points: no gain, which is beside the point here)
@pytest.mark.parametrize("learner", [
    pytest.param(MEGMetric, marks=pytest.mark.filterwarnings(
        "ignore:MEGMetric. no validated gain over the Euclidean metric:UserWarning")),
    DefiniteBoostMetric, None])
def test_n_constraints_beyond_the_possible_pairs_takes_them_all(learner):
    """6 points in 2 classes have 6 similar and 9 dissimilar pairs: asking for
    10**6 of each drew 10**6 anchors for 10 rounds (a hang); now all 15 pairs,
    a warning naming the numbers."""
    labels = [0, 0, 0, 1, 1, 1]
    X = np.random.default_rng(0).normal(size=(6, 2))
    with (pytest.warns(UserWarning, match=r"Only 9 distinct dissimilar pairs exist \(asked "
                                          r"for 1000000\)"),
          pytest.warns(UserWarning, match=r"Only 6 distinct similar pairs exist \(asked "
                                          r"for 1000000\)")):
        if learner is None:
            pairs, signs = draw_pairs(labels, 10**6, random_state=0)
        else:
            model = learner(n_constraints=10**6, random_state=0)
            if learner is DefiniteBoostMetric:
                model.set_params(max_iter=20)
            pairs, signs = model.fit(X, labels).pairs_, model.pair_labels_
    distinct = {tuple(sorted(pair)) for pair in pairs.tolist()}
    assert len(distinct) == len(pairs) == 15
    assert np.count_nonzero(signs > 0) == 6


@pytest.mark.parametrize("learner", [MEGMetric, DefiniteBoostMetric])
def test_more_folds_than_training_points_are_refused(learner):
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(ValueError, match="n_folds=1000000000 exceeds the 6 training points"):
        learner(n_folds=10**9, n_constraints=5, random_state=0).fit(X, [0, 0, 0, 1, 1, 1])


def test_pair_distances_of_many_pairs_are_gathered_in_chunks(monkeypatch):
    """Issue 21: predict and trace="auto" gathered an (n_pairs x d) array at once
    (640 MB for 20,000 pairs at d = 2000); now at most _GATHER_ENTRIES values."""
    import tracemalloc

    from megkernel._numerics import state as state_module
    from megkernel._numerics.state import ExponentState

    d, n = 500, 20_000
    rng = np.random.default_rng(0)
    A = rng.normal(size=(d, d))
    state = ExponentState(0.01 * (A + A.T))
    a, b = rng.integers(0, d, (2, n))
    W = state.matrix()
    expected = W[a, a] + W[b, b] - 2 * W[a, b]
    tracemalloc.start()
    got = state.pair_sq_distances(a, b)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-15)
    # a few chunk-sized temporaries, not four (n x d) ones (320 MB)
    assert peak < 5 * 8 * state_module._GATHER_ENTRIES + 8 * n, peak
    monkeypatch.setattr(state_module, "_GATHER_ENTRIES", 7)  # chunks of one pair
    np.testing.assert_allclose(state.pair_sq_distances(a[:50], b[:50]), expected[:50],
                               rtol=1e-10, atol=1e-15)
    assert state.pair_sq_distances(3, [1, 2, 3]).shape == (3,)  # a scalar broadcasts
