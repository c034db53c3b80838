"""``python -m megkernel reproduce``: files written, table contents, errors."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from megkernel.cli import main

pytest.importorskip("matplotlib")

GYRB_DIR = Path(os.environ.get(
    "MEGKERNEL_GYRB_DIR",
    Path(__file__).resolve().parents[2] / "shared" / "data" / "gyrb"))
GYRB_SET_A = GYRB_DIR / "gyrB_setA_Acinetobacter_Pseudomonas_Vibrio.protein.faa"
SMALL_RUN = ["--trials", "1500", "--checkpoints", "3", "--n-objects", "24"]
OUTPUTS = ["figure2_online.png", "figure2_online.pdf", "figure3_batch.png",
           "figure3_batch.pdf", "summary.md", "summary.csv"]


def _run(out, *extra):
    assert main(["reproduce", *SMALL_RUN, "--out", str(out), *extra]) == 0
    return pd.read_csv(out / "summary.csv").set_index("quantity")["value"]


def test_reproduce_on_wine(tmp_path, capsys):
    """The main job end to end, small (the quick suite's one full run)."""
    table = _run(tmp_path, "--data", "wine")
    for name in OUTPUTS:
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "figure2_online.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "figure3_batch.pdf").read_bytes()[:5] == b"%PDF-"
    captured = capsys.readouterr()
    # stdout: a few result lines, no wall of checkpoints, no table
    assert "MEG: 1500 trials" in captured.out and "DefiniteBoost: " in captured.out
    assert "MEG: 100/1500" not in captured.out and "| quantity |" not in captured.out
    assert ("204 of 276 pairs similar (the paper's share, 980 of 1326), so gamma = "
            in captured.out)
    assert len(captured.out.splitlines()) <= 6
    # stderr: one progress bar per experiment, with a rate
    assert "MEG (Figure 2)" in captured.err and "trial/s" in captured.err
    assert "DefiniteBoostKernel" in captured.err and "iter/s" in captured.err
    summary = (tmp_path / "summary.md").read_text()
    assert "wines sampled 8/8/8" in summary
    for row in ["| seed | 0 |", "version: numpy", "version: scikit-learn", "version: numba",
                "version: megkernel", "wall seconds: total", "--data wine"]:
        assert row in summary
    assert float(table["objects d"]) == 24
    assert float(table["MEG trials"]) == 1500
    assert float(table["seed"]) == 0 and "--data wine" in table["command"]
    assert float(table["MEG total loss"]) <= float(table["Lemma 3.2 bound on the total loss"])
    assert float(table["DefiniteBoost final dual objective"]) <= float(
        table["Theorem 4.1 bound on it"])
    assert float(table["DefiniteBoost final dual objective x d (the paper's scale)"]) == \
        pytest.approx(24 * float(table["DefiniteBoost final dual objective"]))
    # the paper's share of pairs: 980 of 1326, here ceil(0.739 * 276) = 204
    assert float(table["DefiniteBoost constraints"]) == 204


@pytest.mark.slow
def test_reproduce_verbose_details_and_table(tmp_path, capsys):
    _run(tmp_path, "--data", "wine", "--verbose")
    captured = capsys.readouterr()
    assert "MEG: 1500/1500 trials" in captured.err  # a detail line per checkpoint
    assert "| quantity | value |" in captured.out


@pytest.mark.slow
def test_reproduce_default_is_bundled_gyrb_and_quiet_prints_nothing(tmp_path, capsys):
    table = _run(tmp_path, "--quiet")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    summary = (tmp_path / "summary.md").read_text()
    assert "Acinetobacter, Pseudomonas, Vibrio" in summary and "PubMLST" in summary
    assert "Wellcome Open Res" in summary
    assert float(table["1-NN error, target kernel"]) < float(
        table["1-NN error, identity kernel I/d"])


@pytest.mark.slow
def test_reproduce_gamma_options(tmp_path):
    by_fraction = _run(tmp_path / "fraction", "--data", "wine", "--similar-fraction", "0.2",
                       "--quiet")
    assert float(by_fraction["DefiniteBoost constraints"]) == 56  # ceil(0.2 * 276)
    by_gamma = _run(tmp_path / "gamma", "--data", "wine", "--gamma", "0.06", "--quiet")
    assert float(by_gamma["DefiniteBoost gamma x d"]) == pytest.approx(0.06 * 24)


@pytest.mark.slow
@pytest.mark.skipif(not GYRB_SET_A.is_file(), reason=f"gyrB data not found at {GYRB_DIR}")
def test_reproduce_on_a_fasta_file(tmp_path):
    table = _run(tmp_path, "--fasta", str(GYRB_SET_A), "--quiet")
    assert "Acinetobacter, Pseudomonas, Vibrio" in (tmp_path / "summary.md").read_text()
    assert float(table["1-NN error, target kernel"]) < float(
        table["1-NN error, identity kernel I/d"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--fasta", "/nonexistent/file.faa"], "No such file"),
     (["--fasta", "/dev/zero"], "binary file"),
     (["--gamma", "1e-9"], "No pair is closer"),
     (["--n-objects", "400"], "fewer than the"),
     (["--data", "wine", "--n-objects", "400"], "fewer than the")],
)
def test_reproduce_reports_errors(tmp_path, capsys, arguments, message):
    out = tmp_path / "results" / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", *SMALL_RUN[:4], "--out", str(out), "--quiet", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # a refused run creates no folder


@pytest.mark.parametrize("error", [RuntimeError("late failure"), KeyboardInterrupt()])
def test_a_run_failing_before_writing_removes_the_folders_it_made(tmp_path, monkeypatch,
                                                                   capsys, error):
    import megkernel.experiments as experiments

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(experiments, "run_online_experiment", fail)
    existing = tmp_path / "kept"
    existing.mkdir()
    for out in (tmp_path / "new" / "run", existing):
        argv = ["reproduce", *SMALL_RUN, "--data", "wine", "--quiet", "--out", str(out)]
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C: one line, status 130
            try:
                status = main(argv)
            except KeyboardInterrupt:
                pytest.fail("Ctrl-C escaped main (a traceback)")
            assert status == 130
            assert capsys.readouterr().err.strip() == (
                "python -m megkernel reproduce: interrupted")
        else:
            with pytest.raises(type(error)):
                main(argv)
    assert not (tmp_path / "new").exists()
    assert existing.is_dir()  # not ours to remove


def test_an_unwritable_output_is_refused_leaving_nothing(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit):
        main(["reproduce", *SMALL_RUN, "--data", "wine", "--quiet",
              "--out", str(blocker / "run")])
    assert "cannot write to the output directory" in capsys.readouterr().err
    assert blocker.is_file()


@pytest.mark.parametrize("arguments", [["--trials", "0"], ["--similar-fraction", "2"]])
def test_reproduce_rejects_bad_arguments(arguments, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", *arguments])
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.slow
def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "megkernel", "reproduce", "--help"],
                            capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert "--fasta" in result.stdout and "--trials" in result.stdout
    assert "--data {gyrb,wine}" in result.stdout
