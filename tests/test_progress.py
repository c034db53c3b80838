"""Progress output: bars on stderr when asked, nothing otherwise."""

import re

import numpy as np
import pytest
from conftest import low_rank_kernel, random_pairs, sq_dist

from megkernel import DefiniteBoostKernel, MEGKernelRegressor, _progress
from megkernel.datasets import distance_triples, load_wine_kernel


@pytest.fixture(scope="module")
def examples():
    wine = load_wine_kernel(12, random_state=0)
    return distance_triples(wine.kernel, 2000, random_state=0)


def test_one_pair_partial_fit_prints_nothing_by_default(examples, capsys):
    pairs, y = examples
    model = MEGKernelRegressor(solver="online", n_objects=12, trace=1.0)
    for t in range(50):
        model.partial_fit(pairs[t:t + 1], y[t:t + 1])
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_verbose_1_skips_short_calls(examples, capsys):
    pairs, y = examples
    model = MEGKernelRegressor(solver="online", n_objects=12, trace=1.0, verbose=1)
    for t in range(20):
        model.partial_fit(pairs[t:t + 1], y[t:t + 1])
    captured = capsys.readouterr()
    assert captured.out == "" and "trial" not in captured.err


def test_verbose_fit_draws_a_bar_on_stderr(examples, capsys):
    pairs, y = examples
    MEGKernelRegressor(solver="online", n_objects=12, trace=1.0, verbose=1).fit(pairs, y)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "MEGKernelRegressor" in captured.err and "2000/2000" in captured.err
    assert "trial/s" in captured.err  # a rate (and an ETA while running)
    assert "loss of the last" not in captured.err  # detail only at verbose=2


def test_verbose_2_adds_detail_lines(examples, capsys):
    pairs, y = examples
    MEGKernelRegressor(solver="online",
                       n_objects=12, trace=1.0, verbose=2, n_epochs=2).fit(pairs, y)
    err = capsys.readouterr().err
    assert "epoch 1/2" in err and "epoch 2/2" in err
    assert "[MEGKernelRegressor] epoch 2/2 trial 4000: loss of the last 2000 trials" in err


def test_definiteboost_verbose_bar(capsys):
    wine = load_wine_kernel(12, random_state=0)
    a, b = np.triu_indices(12, k=1)
    pairs = np.column_stack([a, b])[:20]
    # gamma given, and 20 pairs too few for a verdict: nothing held out
    model = DefiniteBoostKernel(n_objects=12, gamma=0.1, verbose=1,
                                validation_fraction=None).fit(pairs)
    DefiniteBoostKernel(n_objects=12, gamma=0.1, validation_fraction=None).fit(pairs)  # silent
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("DefiniteBoostKernel") >= 1
    # the bar counts towards the tolerance; its postfix has the iterations made
    assert "of the way to tol" in captured.err
    assert f"iter {model.n_iter_}," in captured.err
    del wine


def test_tolerance_share_is_the_log_scale_way_to_the_goal():
    share = _progress.tolerance_share
    assert share(100.0, 100.0, 1.0) == 0.0
    assert share(100.0, 10.0, 1.0) == pytest.approx(0.5)  # one decade of two
    assert share(100.0, 1.0, 1.0) == 1.0 and share(100.0, 0.5, 1.0) == 1.0
    assert share(100.0, 200.0, 1.0) == 0.0  # above the start: no negative share
    assert share(100.0, 10.0, 0.0) == 0.0  # no positive goal: no scale to go by


def test_tolerance_bar_never_runs_back_and_restarts_for_a_new_run():
    clock = iter(np.arange(0.0, 1000.0, 0.5)).__next__
    bar = _progress.ToleranceBar("DB", clock=clock)
    bar.update(1, 100.0, 1.0)
    bar.update(2, 10.0, 1.0)
    assert bar.bar.n == 50
    bar.update(3, 50.0, 1.0)  # a constraint violated again: the bar stays
    assert bar.bar.n == 50
    assert "iter 3, " in str(bar.bar) and "iter/s, violation 49" in str(bar.bar)
    bar.update(1, 30.0, 1.0)  # the next run starts from its own first violation
    assert bar.bar.n == 0
    bar.update(2, 1.0, 1.0)
    assert bar.bar.n == 100
    bar.__exit__(None, None, None)


def test_compile_note_once_and_only_when_cold(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "_NOTED", set())
    monkeypatch.setattr(_progress, "_COMPILING", None)
    monkeypatch.setattr(_progress, "numba_cache_cold", lambda engine: engine == "rank-one")
    assert _progress.note_compiling(["eigh"]) is False
    assert _progress.note_compiling(["rank-one", "rank-one"]) is True
    assert _progress.note_compiling(["rank-one"]) is False  # once per process
    err = capsys.readouterr().err
    assert err.count("compiling the numba kernels (first run only, about 5 s on an idle core)") == 1


def test_cache_check_is_cheap_and_boolean():
    for engine in ["rank-one", "lanczos", "eigh"]:
        assert _progress.numba_cache_cold(engine) in (True, False)
    assert _progress.numba_cache_cold("eigh") is False


TOY_NUMBA_ENGINE = """
from numba import njit


@njit(cache=True)
def step(x):
    return x + 1.0
"""


def test_compile_note_reads_the_engine_registry(tmp_path, monkeypatch, capsys):
    """An engine's numba kernels and compile time are its registry line's:
    a new compiled engine gets the note with no change here."""
    import importlib.util

    from megkernel import _engines

    path = tmp_path / "toy_numba_engine.py"
    path.write_text(TOY_NUMBA_ENGINE)
    spec = importlib.util.spec_from_file_location("toy_numba_engine", path)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    eigh = _engines.ENGINES["eigh"]
    monkeypatch.setitem(_engines.ENGINES, "toy", eigh._replace(
        name="toy", compiled=toy, compile_seconds=7))
    monkeypatch.setattr(_progress, "_NOTED", set())
    monkeypatch.setattr(_progress, "_COMPILING", None)
    assert _progress.numba_cache_cold("toy") is True  # nothing compiled or cached yet
    assert _progress.note_compiling(["eigh", "toy"]) is True
    assert "about 7 s" in capsys.readouterr().err
    assert toy.step(1.0) == 2.0  # compiles, and writes the cache
    assert _progress.numba_cache_cold("toy") is False
    assert _progress.numba_cache_cold("not an engine") is False
    fresh = importlib.util.module_from_spec(spec)  # a new session's kernels
    spec.loader.exec_module(fresh)
    monkeypatch.setitem(_engines.ENGINES, "toy", _engines.ENGINES["toy"]._replace(
        compiled=fresh))
    assert _progress.numba_cache_cold("toy") is False  # read from the cache
    for index in tmp_path.rglob("*.nbi"):
        index.write_bytes(b"")                   # damaged: numba compiles anew
    assert _progress.numba_cache_cold("toy") is True


def test_the_bar_names_the_compile_and_reports_its_time(monkeypatch, capsys):
    """After the compile note, the bar reads "compiling" until every noted
    engine has compiled (a second engine may compile after the first
    updates), then writes the measured time once; later bars say nothing."""
    compiled = set()
    monkeypatch.setattr(_progress, "_NOTED", set())
    monkeypatch.setattr(_progress, "_COMPILING", None)
    monkeypatch.setattr(_progress, "numba_cache_cold", lambda engine: True)
    monkeypatch.setattr(_progress, "_engine_compiled", lambda engine: engine in compiled)
    assert _progress.note_compiling(["rank-one", "lanczos"]) is True
    progress = _progress.bar(total=1000, desc="MEG", unit="trial")
    assert _progress.COMPILING_POSTFIX in str(progress)
    compiled.add("rank-one")
    progress.update(100)  # the first engine ran; the second has not compiled yet
    assert _progress.COMPILING_POSTFIX in str(progress)
    assert "compiled the numba kernels" not in capsys.readouterr().err
    compiled.add("lanczos")
    progress.update(100)
    assert _progress.COMPILING_POSTFIX not in str(progress)
    progress.update(100)
    progress.close()
    again = _progress.bar(total=10, desc="MEG", unit="trial")
    assert _progress.COMPILING_POSTFIX not in str(again)
    again.update(10)
    again.close()
    err = capsys.readouterr().err
    assert re.search(r"compiled the numba kernels, with the first 200 trials, in \d+\.\d s "
                     r"\(cached: later runs skip this\)", err)
    assert err.count("compiled the numba kernels") == 1


def test_a_tolerance_bar_reports_the_compile_at_its_first_iterations(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "_NOTED", set())
    monkeypatch.setattr(_progress, "_COMPILING", None)
    monkeypatch.setattr(_progress, "numba_cache_cold", lambda engine: True)
    monkeypatch.setattr(_progress, "_engine_compiled", lambda engine: True)
    _progress.note_compiling(["lanczos"])
    with _progress.ToleranceBar("DefiniteBoostKernel") as bar:
        bar.update(1, 50.0, 1.0)  # no share of the way yet, but the first iteration ran
        assert "compiled the numba kernels in" in capsys.readouterr().err


class _FakeClock:
    def __init__(self, start=1000.0):
        self.now = start

    def __call__(self):
        return self.now


def test_first_refresh_hides_the_eta_while_numba_compiles(capsys):
    """The first chunk pays for compilation: its time must not give the rate.

    Here 100 trials take 5 s (compiling), then 10,000 trials take 0.5 s. A
    plain tqdm bar shows an ETA of 4:09:54 after the first chunk (20
    trials/s) and 02:23 after the second; measured from the end of the
    first chunk, 289,900 / 20,000 per s = 14 s."""
    clock = _FakeClock()
    progress = _progress.bar(total=300_000, desc="MEG", unit="trial", clock=clock)
    assert "<?, ?trial/s" in str(progress)
    clock.now += 5.0
    progress.update(100)
    assert "100/300000 [00:05<?, ?trial/s]" in str(progress)  # no ETA while compiling
    clock.now += 0.5
    progress.update(10_000)
    assert "10100/300000 [00:05<00:14, 20000.00trial/s]" in str(progress)
    clock.now += 30.0
    progress.update(300_000 - progress.n)
    assert "300000/300000 [00:35<00:00" in str(progress)  # finished: nothing remains
    progress.close()
    assert "?trial/s" in capsys.readouterr().err  # the bar drew its first refresh so


def test_a_bar_of_one_update_finishes_with_its_average_rate():
    clock = _FakeClock()
    progress = _progress.bar(total=20, desc="DefiniteBoost", unit="iter", clock=clock)
    clock.now += 4.0
    progress.update(20)
    assert "20/20 [00:04<00:00,  5.00iter/s]" in str(progress)
    progress.close()


def test_batch_bars_show_no_false_eta(capsys):
    """A batch fit stops by its rule long before max_iter: its bar counts
    towards the tolerance (no ETA towards max_iter)."""
    # pairs of distinct objects with a kernel's squared distances: the fit learns
    pairs = random_pairs(12, 200, 0)
    y = sq_dist(low_rank_kernel(12, 3, 0), pairs)
    MEGKernelRegressor(n_objects=12, verbose=1, random_state=0, max_iter=1000).fit(pairs, y)
    DefiniteBoostKernel(n_objects=12, gamma=0.1, verbose=1, max_iter=5000,
                        validation_fraction=None).fit(pairs[:30])
    err = capsys.readouterr().err
    bars = [line for line in err.replace("\r", "\n").splitlines()
            if "MEGKernelRegressor (batch)" in line or line.startswith("DefiniteBoostKernel")]
    assert bars
    assert not any("/1000" in line or "/5000" in line for line in bars), bars
    meg_bars = [line for line in bars if "MEGKernelRegressor (batch)" in line]
    assert meg_bars, bars
    # both ETAs, if any, are towards the tolerance; MEG's run got there
    assert all("of the way to tol" in line for line in bars), bars
    assert "100% of the way to tol" in meg_bars[-1], meg_bars
    assert "mean gain above tol" in meg_bars[-1], meg_bars
