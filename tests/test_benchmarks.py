"""The benchmark scripts' own pipelines run (tiny sizes, no ITML environment)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_itml():
    return _load("bench_itml")


#: A metric learner's verdict on one tiny split of a benchmark set (no gain
#: over the Euclidean metric beyond noise) is the benchmark's result, not the
#: subject of a test that the benchmark's pipeline runs
BENCHMARK_VERDICTS = pytest.mark.filterwarnings(
    "ignore:(MEGMetric|DefiniteBoostMetric). (no validated gain over the Euclidean metric"
    "|the learned metric's held-out):megkernel.NoImprovementWarning")


@pytest.mark.slow
@BENCHMARK_VERDICTS
def test_kernelised_pipeline_runs_our_learners(bench_itml, tmp_path):
    """Nystroem -> MEGMetric / DefiniteBoostMetric -> k-NN, as the benchmark runs it."""
    paths = bench_itml.save_splits("iris", bench_itml.DATASETS["iris"], 1, 60, tmp_path,
                                   kernelise=True)
    data = np.load(paths[0])
    assert data["X_train"].shape == (75, 37)  # half as many components as points
    np.testing.assert_allclose(data["X_train"].mean(axis=0), 0, atol=1e-12)
    results = bench_itml.run_ours(paths[0])
    assert set(results) == {"Euclidean", "MEGMetric", "DefiniteBoostMetric"}
    for result in results.values():
        assert 0.5 < result["accuracy"]["1"] <= 1.0


@pytest.mark.slow
@BENCHMARK_VERDICTS
def test_labels_protocol_runs_nca_and_both_fits(bench_itml, tmp_path):
    """--labels: NCA and each learner from labels and from the saved pairs;
    the target check names every set a learner falls short on."""
    paths = bench_itml.save_splits("wine", bench_itml.DATASETS["wine"], 1, 40, tmp_path)
    results = bench_itml.run_ours(paths[0], labels=True)
    assert set(results) == {"Euclidean", "NCA", "MEGMetric pairs", "MEGMetric labels",
                            "DefiniteBoostMetric pairs", "DefiniteBoostMetric labels",
                            bench_itml.AT_CHOICE}
    for result in results.values():
        assert 0.5 < result["accuracy"]["1"] <= 1.0
    summary = bench_itml.summarise([results])
    summary["NCA"]["1"] = 2.0  # a peer no learner can reach
    summary["NCA"]["seconds"] = 1e-12  # and a time no fit can reach
    text = bench_itml.check_label_targets({"wine": summary}, with_itml=False)
    assert "labels >= best peer - 0.005 on 0/1 (short: wine" in text
    assert "refitted at its validated choice (no validation), within 3x of NCA's time on 0/1" \
        in text
    share = 1 - summary[bench_itml.AT_CHOICE]["seconds"] / summary["MEGMetric labels"]["seconds"]
    assert f"median {share:.0%}" in text
    assert len(text.splitlines()) == 2  # one line per learner


def test_check_sets_are_labelled_and_finite(bench_itml):
    for name in ("classification_5c2", "stretched_blobs", "quantiles_noise"):
        X, y = bench_itml.CHECK[name]()
        assert np.all(np.isfinite(X)) and len(np.unique(y)) >= 3, name


def test_later_check_sets_are_labelled_finite_and_deterministic(bench_itml):
    """The third to fifth checks: every class at least 40 points (a text set: 3), the same
    on every call."""
    for group in (bench_itml.CHECK_TEMPERATURE, bench_itml.CHECK_FOURTH,
                  bench_itml.CHECK_FIFTH):
        for name, loader in group.items():
            X, y = loader()
            counts = np.unique(y, return_counts=True)[1]
            if name.endswith("_docs"):  # a real corpus: small classes, each split in two
                assert np.all(np.isfinite(X)) and len(counts) >= 10 and counts.min() >= 3
            else:
                assert np.all(np.isfinite(X)) and len(X) == len(y) >= 400, name
                assert counts.min() >= 40, name
            X_again, y_again = loader()
            np.testing.assert_array_equal(X, X_again)
            np.testing.assert_array_equal(y, y_again)


def test_nystroem_map_is_fitted_on_the_training_half_only(bench_itml):
    X, y = load_iris(return_X_y=True)
    X_train, X_test = train_test_split(StandardScaler().fit_transform(X), random_state=0)
    a_train, a_test = bench_itml.nystroem_features(X_train, X_test)
    b_train, _ = bench_itml.nystroem_features(X_train, X_test[:5])
    np.testing.assert_array_equal(a_train, b_train)  # test points do not leak in
    assert a_test.shape == (len(X_test), a_train.shape[1])


@pytest.mark.slow
def test_scipy_docstrings_are_real_labelled_text(bench_itml):
    X, y = bench_itml.scipy_docstrings(max_per_class=20, n_components=10)
    assert X.shape == (len(y), 10) and np.all(np.isfinite(X))
    assert len(np.unique(y)) == len(bench_itml.SCIPY_SUBPACKAGES)


@pytest.mark.slow
def test_spectra_benchmark_rows(capsys):
    """bench_spectra's targets are trace-one kernels; a tiny run times every
    engine and "auto" from the same state and prints one row per target."""
    bench = _load("bench_spectra")
    for name, (target, _) in bench.TARGETS.items():
        K = target(30)
        assert K.shape == (30, 30), name
        np.testing.assert_allclose(K, K.T, atol=0, err_msg=name)
        assert np.trace(K) == pytest.approx(1.0), name
        assert np.linalg.eigvalsh(K).min() > -1e-12, name
    rows = bench.run([30], {30: (60, 40, 3)}, {}, repeats=1)
    assert [row[0] for row in rows] == list(bench.TARGETS)
    for _, d, times, picked in rows:
        assert d == 30
        assert set(times) == {"lean", "eigh", "rank-one", "lanczos", "auto"}
        assert set(picked.replace(",", " ").split()) <= {"rank-one", "lanczos", "eigh"} | {
            str(n) for n in range(41)}
    table = capsys.readouterr().out
    assert table.count("| 30 |") == len(bench.TARGETS) and "differs" not in table


@pytest.fixture(scope="module")
def bench_own_data():
    return _load("bench_own_data")


@pytest.mark.slow
def test_own_data_quick_table(bench_own_data, capsys):
    """``bench_own_data.py --quick``: one row of five accuracies, the learners
    fitted through KernelDistances on the pairs only (never the labels)."""
    bench_own_data.FITTED.clear()
    bench_own_data.main(["--quick"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| family")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    accuracies = [float(cell) for cell in cells[2:7]]  # raw, MEG, MEG tuned, DB, DB tuned
    assert all(0.0 < a <= 1.0 for a in accuracies)
    assert {method for _, method in bench_own_data.FITTED} == {
        "MEG", "MEG tuned", "DB", "DB tuned"}
    for fitted in bench_own_data.FITTED.values():
        assert fitted.kernel_.shape == (36, 36)
    # the searches chose from their grids
    tuned = bench_own_data.FITTED[("family (quick)", "DB tuned")]
    assert set(tuned.best_params_) == {"gamma"}
    meg_tuned = bench_own_data.FITTED[("family (quick)", "MEG tuned")]
    assert meg_tuned.best_params_["solver"] in {"batch", "online"}


@pytest.mark.slow
def test_own_data_scale_quick(bench_own_data, capsys):
    bench_own_data.main(["--scale", "--quick"])
    out = capsys.readouterr().out
    assert "40 objects" in out and "Target fit <= 60 s: met on" in out


@pytest.mark.slow
# the quick grid's tables are too small for the learners' verdicts
@pytest.mark.filterwarnings(
    "ignore:(MEGKernelRegressor|DefiniteBoostKernel). .* pairs are too few to hold out:UserWarning")
def test_own_data_grid_quick(bench_own_data, capsys):
    bench_own_data.main(["--grid", "--quick"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 1
    raw, meg, db = (float(cell) for cell in rows[0].strip("|").split("|")[3:6])
    assert all(0.0 < a <= 1.0 for a in (raw, meg, db))
    assert "MEG: >= raw on" in out and "DB: >= raw on" in out


def test_own_data_sparse_quick(bench_own_data, capsys):
    """``--sparse --quick``: a family and a graph table, both learners, every
    accuracy a fraction, the summary counting both tables."""
    bench_own_data.main(["--sparse", "--quick", "--learners", "MEG", "DB"])
    out = capsys.readouterr().out
    rows = [line.strip("|").split("|") for line in out.splitlines()
            if line.startswith(("| family |", "| graph |"))]
    assert [row[0].strip() for row in rows] == ["family", "graph"]
    for row in rows:
        accuracies = [float(row[k]) for k in (4, 5, 6, 7, 8, 9, 12, 13, 14, 15)]
        assert all(0.0 <= a <= 1.0 for a in accuracies)
        # fit times, in tenths of a second: a quick table's fit can print 0.0
        assert float(row[10]) >= 0 and float(row[16]) >= 0
    assert "MEG: default >= observed on" in out and "of 2 tables" in out
    assert "DB: default >= observed on" in out


def test_planted_partition_hops_are_shortest_paths():
    """The graph task's distances: hop counts of its own edges (a BFS by hand)."""
    sys.path.insert(0, str(BENCHMARKS))
    from _family_data import planted_partition_hops

    ids, labels, hops = planted_partition_hops(40, n_blocks=2, seed=3)
    assert hops.shape == (40, 40) and len(set(ids)) == 40
    assert_array_equal(hops, hops.T)
    assert (np.diag(hops) == 0).all() and set(np.unique(labels)) == {0, 1}
    edges = hops == 1
    start = 5  # breadth-first from one node
    seen, frontier, depth = {start: 0}, [start], 0
    while frontier:
        depth += 1
        frontier = [j for i in frontier for j in np.flatnonzero(edges[i]) if j not in seen]
        frontier = list(dict.fromkeys(frontier))
        seen.update({j: depth for j in frontier})
    reachable = np.array(sorted(seen))
    assert_array_equal(hops[start, reachable], [seen[j] for j in reachable])
    unreachable = np.setdiff1d(np.arange(40), reachable)
    assert (hops[start, unreachable] == hops[np.isfinite(hops)].max()).all()


def test_own_data_verdict_quick(bench_own_data, capsys, monkeypatch):
    """``--verdict --quick``: one table, both learners, the split counts add up
    (on 4 families of 35, not 51: the same run at half the time)."""
    family = bench_own_data.family
    monkeypatch.setattr(bench_own_data, "family",
                        lambda *args, **kwargs: family(*args, per_family=35, **kwargs))
    bench_own_data.main(["--verdict", "--quick"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 0 |")]
    assert [row.split("|")[4].strip() for row in rows] == ["MEG", "DB"]
    for row in rows:
        assert 0 <= int(row.split("|")[5]) <= 2
    assert "MEG: warned on" in out and "of 2 splits" in out


@pytest.fixture(scope="module")
def bench_metric_verdict():
    return _load("bench_metric_verdict")


@pytest.mark.slow
def test_metric_verdict_quick_table(bench_metric_verdict, capsys):
    """``bench_metric_verdict.py --quick``: a verdict for every fit, read from
    the fitted ``validation_``; a "keep" verdict refits at forced lengths."""
    results = bench_metric_verdict.main(["--quick"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines()
            if line.startswith(("| iris |", "| isotropic blobs (cube) |"))]
    assert len(rows) == 4
    assert set(results) == {(data, name) for data in ("iris", "isotropic blobs (cube)")
                            for name in ("MEGMetric", "DefiniteBoostMetric")}
    for (_, name), per_split in results.items():
        assert len(per_split) == 2
        for row in per_split:
            assert row["verdict"] in {"learn", "keep"}
            assert 0.0 < row["euclid"] <= 1.0 and 0.0 < row["learned"] <= 1.0
            if row["verdict"] == "keep":  # the default fit is the Euclidean metric
                assert row["learned"] == row["euclid"]
                assert 0.0 < row["forced_longest"] <= 1.0 and row["longest"] > 0
            else:  # a learned length, or 0: DefiniteBoostMetric's prior carries the gain
                assert row["chosen"] > 0 or name == "DefiniteBoostMetric"
        c = bench_metric_verdict.counts(per_split)
        assert c["agree"] + c["neutral"] + c["disagree"] == len(per_split)
    assert "All: agree" in out


def test_metric_verdict_counts_and_margin(bench_metric_verdict):
    rows = [{"verdict": "learn", "euclid": 0.9, "learned": 0.95},
            {"verdict": "learn", "euclid": 0.9, "learned": 0.9},
            {"verdict": "learn", "euclid": 0.9, "learned": 0.8},
            {"verdict": "keep", "euclid": 0.9, "learned": 0.9, "forced_longest": 0.95,
             "forced_one": 0.85},
            {"verdict": "keep", "euclid": 0.9, "learned": 0.9, "forced_longest": 0.9,
             "forced_one": 0.95},
            {"verdict": "none", "euclid": 0.9, "learned": 0.9}]
    for row in rows:
        row["prior"] = row["euclid"]
    # a learner started from another prior (DefiniteBoostMetric's soft neighbours):
    # its verdict is judged against that prior, not the Euclidean metric
    rows.append({"verdict": "learn", "euclid": 0.8, "prior": 0.9, "learned": 0.85})
    c = bench_metric_verdict.counts(rows)
    assert c["learn"] == {"+": 1, "=": 1, "-": 2}
    assert c["keep"] == {"+": 1, "=": 1, "-": 0}
    assert c["keep1"] == {"+": 1, "=": 0, "-": 1}
    assert (c["agree"], c["neutral"], c["disagree"], c["none"]) == (2, 1, 3, 1)
    # the margin: (d_other - d_same) / (d_other + d_same), positive where 1-NN is right
    train, labels = np.array([[0.0], [4.0]]), np.array([0, 1])
    margin = bench_metric_verdict.held_out_margin(train, labels, np.array([[1.0], [1.0]]),
                                                  np.array([0, 1]))
    assert margin == pytest.approx(((3 - 1) / 4 + (1 - 3) / 4) / 2)
    margin = bench_metric_verdict.held_out_margin(train, labels, np.array([[1.0], [3.5]]),
                                                  np.array([0, 1]))
    assert margin == pytest.approx(((3 - 1) / 4 + (3.5 - 0.5) / 4) / 2)


def test_definiteboost_scale_benchmark_runs_both_methods(monkeypatch):
    """bench_definiteboost_scale's runs (tiny: the eigen-updates and auto, which
    is the lazy run once the greedy scan is not made at every step)."""
    from megkernel._solvers import definiteboost_lazy as lazy
    from megkernel._solvers import definiteboost_projections as solver

    bench = _load("bench_definiteboost_scale")
    monkeypatch.setattr(solver, "_SCAN_ALWAYS_UP_TO", 1000)
    monkeypatch.setattr(lazy, "LAZY_FROM", 10)
    lazy_runs = []
    original = solver.run_lazy
    monkeypatch.setattr(solver, "run_lazy",
                        lambda *args, **kw: lazy_runs.append(1) or original(*args, **kw))
    a, b, signs, labels = bench.problem(60)
    assert len(a) > 250 and set(np.unique(signs)) == {-1.0, 1.0}
    for method in ("rank-one", "auto"):
        per_window, log, seconds, state, gamma = bench.rates(60, a, b, signs, 100, 50, method)
        assert per_window.shape == (2,) and np.all(per_window > 0)
        assert log["n_iter"] == 100 and gamma > 0
        assert 0.0 <= bench.loo_accuracy(state, labels) <= 1.0
        assert len(lazy_runs) == (method == "auto")


@pytest.fixture(scope="module")
def bench_speed():
    return _load("bench_speed")


def test_speed_tables_run(bench_speed, capsys):
    """The paper-sized run (tiny here) and the DefiniteBoost iteration table,
    which patches the solver's constraint values by name: the name exists and
    both ways choose the same constraints."""
    bench_speed.paper_and_exactness(600, 200, 100)
    bench_speed.definiteboost_step_table(60, 60, 5, 0)
    bench_speed.paper_clustered(300, 50)
    out = capsys.readouterr().out
    assert "| ratio lean numpy loop / Lanczos |" in out
    assert "clustered target" in out and "| lean numpy loop, eigh per trial |" in out
    assert "| wine kernel, full rank | auto |" in out
    assert "Same constraints chosen at every iteration: True" in out


def test_definiteboost_defaults_benchmark_rows(capsys):
    """bench_definiteboost_scale --defaults: the user-like tables and the k-NN
    table are deterministic, and a row prints (tiny)."""
    bench = _load("bench_definiteboost_scale")
    _load("_user_tables")
    tables = sys.modules["_user_tables"]
    ids, labels, table, signs = bench.knn_table(40, n_neighbors=5)
    again = bench.knn_table(40, n_neighbors=5)
    assert len(table) == 200 and table.equals(again[2]) and set(signs) == {-1, 1}
    assert tables.edit_distance("kitten", "sitting") == 3
    words = tables.word_table(n_words=30, n_roots=3, fraction=0.5)
    assert words[2].equals(tables.word_table(n_words=30, n_roots=3, fraction=0.5)[2])
    survey = tables.survey_table(n_respondents=30, n_groups=2, fraction=0.5)
    assert survey[2]["distance"].between(0, 1).all()
    bench.defaults_table([60], user_tables=False)
    out = capsys.readouterr().out
    assert out.count("| DefiniteBoost |") == 2


def test_spectra_streams_rows(capsys):
    """bench_spectra --streams: one row per chunk size, every method, the SGD line."""
    bench = _load("bench_spectra")
    bench.streams([12], chunks=(1, 5), n_warm=50, rounds=1)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 12 |")]
    assert len(rows) == 2 and all(line.count("|") == 10 for line in rows)
    assert "SGDRegressor.partial_fit" in out
