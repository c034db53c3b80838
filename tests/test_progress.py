"""Progress output: bars on stderr when asked, nothing otherwise."""

import numpy as np
import pytest

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
    model = DefiniteBoostKernel(n_objects=12, gamma=0.1, verbose=1).fit(pairs)
    DefiniteBoostKernel(n_objects=12, gamma=0.1).fit(pairs)  # silent
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("DefiniteBoostKernel") >= 1
    assert f"{model.n_iter_}/{model.n_iter_}" in captured.err  # ends full when converged
    assert "iter/s" in captured.err
    del wine


def test_compile_note_once_and_only_when_cold(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "_NOTED", set())
    monkeypatch.setattr(_progress, "numba_cache_cold", lambda engine: engine == "rank-one")
    assert _progress.note_compiling(["eigh"]) is False
    assert _progress.note_compiling(["rank-one", "rank-one"]) is True
    assert _progress.note_compiling(["rank-one"]) is False  # once per process
    err = capsys.readouterr().err
    assert err.count("compiling the numba kernels (first run only, about 5 s)") == 1


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
    assert _progress.numba_cache_cold("toy") is True  # nothing compiled or cached yet
    assert _progress.note_compiling(["eigh", "toy"]) is True
    assert "about 7 s" in capsys.readouterr().err
    assert toy.step(1.0) == 2.0  # compiles, and writes the cache
    assert _progress.numba_cache_cold("toy") is False
    assert _progress.numba_cache_cold("not an engine") is False
