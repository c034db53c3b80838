"""method="auto" in a stream of small calls: the choice is kept between calls."""

import numpy as np
import pytest

import megkernel._engines as engines
from megkernel import MEGKernelRegressor
from megkernel._engines import run_pair_trials
from megkernel._numerics.state import ExponentState
from megkernel.datasets import distance_triples, load_wine_kernel


@pytest.fixture
def stream():
    wine = load_wine_kernel(30, random_state=0)
    pairs, y = distance_triples(wine.kernel / np.trace(wine.kernel), 3000, random_state=0)
    return pairs, y


def _counting(monkeypatch):
    calls = []
    plan = engines.auto_plan

    def counted(*args, **kwargs):
        calls.append(1)
        return plan(*args, **kwargs)

    monkeypatch.setattr(engines, "auto_plan", counted)
    return calls


def test_small_calls_keep_the_choice_until_the_calls_change_kind(monkeypatch, stream):
    pairs, y = stream
    calls = _counting(monkeypatch)
    state = ExponentState.identity(30)
    a, b = pairs[:, 0], pairs[:, 1]
    for t in range(200):  # one-pair calls: one choice
        run_pair_trials(state, a[t:t + 1], b[t:t + 1], y[t:t + 1], learning_rate=0.5)
    assert len(calls) == 1
    assert state.engine_memo[1:] == ((30, True, 0), 200)
    run_pair_trials(state, a[200:210], b[200:210], y[200:210], learning_rate=0.5)
    assert len(calls) == 2  # calls of another length class: chosen again
    for t in range(210, 210 + 10 * engines.AUTO_MEMO_TRIALS // 10 + 10, 10):
        run_pair_trials(state, a[t % 2900:t % 2900 + 10], b[t % 2900:t % 2900 + 10],
                        y[t % 2900:t % 2900 + 10], learning_rate=0.5)
    assert len(calls) == 3  # after AUTO_MEMO_TRIALS trials under it: looked at again
    copy = state.copy()
    assert copy.engine_memo == state.engine_memo  # a copy carries it


def test_the_kept_choice_gives_the_engines_result(stream):
    pairs, y = stream
    results = {}
    for method in ("auto", "rank-one", "eigh"):
        model = MEGKernelRegressor(solver="online", n_objects=30, trace=1.0,
                                   learning_rate=0.5, method=method)
        for t in range(300):
            model.partial_fit(pairs[t:t + 1], y[t:t + 1])
        results[method] = model.kernel_
    np.testing.assert_allclose(results["auto"], results["rank-one"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(results["auto"], results["eigh"], rtol=0, atol=1e-10)


def test_long_calls_still_plan_in_segments(monkeypatch, stream):
    pairs, y = stream
    calls = _counting(monkeypatch)
    state = ExponentState.identity(30)
    stats = {}
    run_pair_trials(state, pairs[:2000, 0], pairs[:2000, 1], y[:2000], learning_rate=0.5,
                    stats=stats)
    assert len(calls) == len(stats["auto_segments"]) >= 1
    assert state.engine_memo is None


def _clustered(d, seed=0):
    rng = np.random.default_rng(seed)
    centers = 3.0 * rng.standard_normal((3, 5))
    X = centers[rng.integers(0, 3, d)] + rng.standard_normal((d, 5))
    X -= X.mean(axis=0)
    K = X @ X.T
    return K / np.trace(K)


def test_rank_one_on_a_clustered_spectrum_names_its_cost_once():
    import warnings

    d = 500
    pairs, y = distance_triples(_clustered(d), 3000, random_state=0)
    a, b = pairs[:, 0], pairs[:, 1]
    fresh = ExponentState.identity(d)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_pair_trials(fresh, a[:5], b[:5], y[:5], learning_rate=0.5, method="rank-one")
    assert not caught  # from I / d almost every eigenpair deflates: cheap
    state = ExponentState.identity(d)
    run_pair_trials(state, a[:2500], b[:2500], y[:2500], learning_rate=0.5)
    with pytest.warns(UserWarning, match=r"method='rank-one' on this state costs about .* "
                                         r"times the lanczos engine's"):
        run_pair_trials(state, a[2500:2530], b[2500:2530], y[2500:2530],
                        learning_rate=0.5, method="rank-one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_pair_trials(state, a[2530:2535], b[2530:2535], y[2530:2535],
                        learning_rate=0.5, method="rank-one")
    assert not caught  # once per state


def _warned_about(run):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught]


def test_eigh_named_on_a_large_state_says_its_cost_and_auto_does_not():
    d = 300
    pairs, y = distance_triples(_clustered(d), 2000, random_state=1)
    a, b = pairs[:, 0], pairs[:, 1]
    state = ExponentState.identity(d)
    run_pair_trials(state, a[:1200], b[:1200], y[:1200], learning_rate=0.5)
    auto = state.copy()
    assert not _warned_about(lambda: run_pair_trials(auto, a[1200:1210], b[1200:1210],
                                                     y[1200:1210], learning_rate=0.5))
    with pytest.warns(UserWarning, match=r"method='eigh' on this state costs about .* one "
                                         r"eigendecomposition of the d = 300 exponent per "
                                         r"trial.* times the (rank-one|lanczos) engine's"):
        run_pair_trials(state, a[1200:1210], b[1200:1210], y[1200:1210], learning_rate=0.5,
                        method="eigh")
    # the same trials as "auto" up to round-off
    assert np.allclose(state.matrix(), auto.matrix(), rtol=1e-9, atol=1e-15)


def test_a_named_engine_is_quiet_where_its_excess_is_not_worth_a_word(stream):
    # wine at d = 30: eigh is ~10x the best engine per trial, but a few hundred
    # trials (or 1024 of a stream) lose well under a second
    pairs, y = stream
    state = ExponentState.identity(30)
    assert not _warned_about(lambda: run_pair_trials(
        state, pairs[:300, 0], pairs[:300, 1], y[:300], learning_rate=0.5, method="eigh"))


def test_rank_one_at_150_objects_on_a_clustered_spectrum_says_its_cost_before_it_runs(
        monkeypatch):
    # 11-17x the best engine here: a long call's excess is worth a word
    # before its trials run
    d = 150
    pairs, y = distance_triples(_clustered(d), 3000, random_state=0)
    a, b = pairs[:, 0], pairs[:, 1]
    state = ExponentState.identity(d)
    run_pair_trials(state, a[:2000], b[:2000], y[:2000], learning_rate=0.5)

    class Ran(Exception):
        pass

    def ran(*args):
        raise Ran

    monkeypatch.setitem(engines.ENGINES, "rank-one",
                        engines.ENGINES["rank-one"]._replace(pair_trials=ran))
    fresh = state.copy()
    many = np.resize(np.arange(2000, 3000), 30000)
    with pytest.warns(UserWarning, match=r"method='rank-one' on this state costs about .*"
                                         r"30000 trials.* times the lanczos engine's"):
        with pytest.raises(Ran):
            run_pair_trials(state, a[many], b[many], y[many], learning_rate=0.5,
                            method="rank-one")

    def short():  # loses well under a second: no word
        with pytest.raises(Ran):
            run_pair_trials(fresh, a[2000:2300], b[2000:2300], y[2000:2300],
                            learning_rate=0.5, method="rank-one")

    assert not _warned_about(short)


def test_a_stream_of_named_engine_calls_checks_its_cost_once_per_kind(monkeypatch, stream):
    pairs, y = stream
    calls = _counting(monkeypatch)
    state = ExponentState.identity(30)
    a, b = pairs[:, 0], pairs[:, 1]
    for t in range(200):
        run_pair_trials(state, a[t:t + 1], b[t:t + 1], y[t:t + 1], learning_rate=0.5,
                        method="rank-one")
    assert len(calls) == 1
    run_pair_trials(state, a[200:300], b[200:300], y[200:300], learning_rate=0.5,
                    method="rank-one")  # a longer call: another kind, checked again
    assert len(calls) == 2


def test_a_long_rank_one_call_from_the_identity_says_its_cost(monkeypatch):
    # from I / d the first trials deflate almost every eigenpair, but a long
    # call on a clustered spectrum grows to all of them (37x Lanczos at d = 300)
    d = 300
    pairs, y = distance_triples(_clustered(d), 6000, random_state=0)
    monkeypatch.setitem(engines.ENGINES, "rank-one",
                        engines.ENGINES["rank-one"]._replace(pair_trials=_ran))
    with pytest.warns(UserWarning, match=r"method='rank-one' on this state costs about"):
        with pytest.raises(_Ran):
            run_pair_trials(ExponentState.identity(d), pairs[:, 0], pairs[:, 1], y,
                            learning_rate=0.5, method="rank-one")


def test_alternating_call_lengths_check_the_cost_once_per_kind(monkeypatch, stream):
    pairs, y = stream
    calls = _counting(monkeypatch)
    state = ExponentState.identity(30)
    a, b = pairs[:, 0], pairs[:, 1]
    for t in range(0, 300, 3):  # one pair, then two: two kinds of call
        run_pair_trials(state, a[t:t + 1], b[t:t + 1], y[t:t + 1], learning_rate=0.5,
                        method="rank-one")
        run_pair_trials(state, a[t + 1:t + 3], b[t + 1:t + 3], y[t + 1:t + 3],
                        learning_rate=0.5, method="rank-one")
    assert len(calls) == 2


def test_lanczos_in_one_pair_calls_names_the_eigendecomposition_that_ends_each_call():
    d = 300
    pairs, y = distance_triples(_clustered(d), 1300, random_state=2)
    a, b = pairs[:, 0], pairs[:, 1]
    state = ExponentState.identity(d)
    run_pair_trials(state, a[:1200], b[:1200], y[:1200], learning_rate=0.5)
    with pytest.warns(UserWarning, match=r"method='lanczos' .* ends each call with one "
                                         r"eigendecomposition .*\(pass more pairs per call\)"):
        run_pair_trials(state, a[1200:1201], b[1200:1201], y[1200:1201], learning_rate=0.5,
                        method="lanczos")


class _Ran(Exception):
    """A trial ran: the engine's cost was (or was not) said before."""


def _ran(*args):
    raise _Ran
