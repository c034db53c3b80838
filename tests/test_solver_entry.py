"""The solvers' entry points: one path from every estimator to the engines.

:func:`megkernel._solvers.meg.run_meg_trials` runs the trials of both the
public :func:`megkernel.meg` and :class:`megkernel.MEGKernelRegressor`
(issue 18 item 1); chunks and the progress callback change nothing.
"""

import numpy as np
import pytest

from megkernel import MEGKernelRegressor, meg
from megkernel._numerics.state import prior_state
from megkernel._solvers.meg import run_meg_trials, trial_engine


def _trials(n_objects=12, n=300, seed=0):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n_objects, 3))
    pairs = rng.integers(0, n_objects, size=(n, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    y = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
    return pairs, y / y.mean() * 2.0 / n_objects


@pytest.mark.parametrize("method", ["eigh", "rank-one", "lanczos"])
@pytest.mark.parametrize("chunk", [None, 1, 7, 10_000])
def test_chunks_and_callback_change_nothing(method, chunk):
    pairs, y = _trials()
    whole = prior_state(12, None)
    expected = run_meg_trials(whole, pairs, y, learning_rate=0.5, trace=1.0, method=method)
    state = prior_state(12, None)
    seen = []
    predictions = run_meg_trials(
        state, pairs, y, learning_rate=0.5, trace=1.0, method=method, chunk=chunk,
        callback=lambda stop, chunk_predictions: seen.append((stop, chunk_predictions.copy())))
    np.testing.assert_allclose(predictions, expected, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(state.matrix(), whole.matrix(), rtol=1e-10, atol=1e-13)
    # the callback saw every trial once, in order, with its prediction
    stops = [stop for stop, _ in seen]
    assert stops == sorted(stops) and stops[-1] == len(y)
    np.testing.assert_array_equal(np.concatenate([p for _, p in seen]), predictions)


def test_public_meg_and_the_estimator_share_the_trials():
    pairs, y = _trials(seed=1)
    K, log = meg(pairs, y, n_objects=12, learning_rate=0.5, trace=1.0)
    model = MEGKernelRegressor(n_objects=12, solver="online", learning_rate=0.5, trace=1.0,
                               n_epochs=1, shuffle=False).fit(pairs, y)
    np.testing.assert_allclose(model.kernel_, K, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(model.losses_, log["losses"], rtol=1e-10, atol=1e-15)


def test_progress_bar_chunks_give_the_fit_without_a_bar(capsys):
    pairs, y = _trials(n=3000, seed=2)
    quiet = MEGKernelRegressor(n_objects=12, solver="online", learning_rate=0.5,
                               trace=1.0, shuffle=False).fit(pairs, y)
    loud = MEGKernelRegressor(n_objects=12, solver="online", learning_rate=0.5,
                              trace=1.0, shuffle=False, verbose=2).fit(pairs, y)
    np.testing.assert_allclose(loud.kernel_, quiet.kernel_, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(loud.losses_, quiet.losses_, rtol=1e-10, atol=1e-15)
    assert "trial" in capsys.readouterr().err


def test_trial_engine_names_a_registered_engine():
    from megkernel._engines import ENGINES

    assert trial_engine("auto", prior_state(12, None), 100) in ENGINES
    assert trial_engine("lanczos", prior_state(12, None), 100) == "lanczos"
