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
OUTPUTS = ["figure2_online.png", "figure3_batch.png", "summary.md", "summary.csv"]


def _run(out, *extra):
    assert main(["reproduce", *SMALL_RUN, "--out", str(out), *extra]) == 0
    return pd.read_csv(out / "summary.csv").set_index("quantity")["value"]


def test_reproduce_on_embedded_wine_data(tmp_path, capsys):
    table = _run(tmp_path)
    for name in OUTPUTS:
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "figure2_online.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "MEG: 1500/1500 trials" in printed and "DefiniteBoost:" in printed
    assert "wines sampled 8/8/8" in (tmp_path / "summary.md").read_text()
    assert float(table["objects d"]) == 24
    assert float(table["MEG trials"]) == 1500
    assert float(table["MEG total loss"]) <= float(table["Lemma 3.2 bound on the total loss"])
    assert float(table["DefiniteBoost final dual objective"]) <= float(
        table["Theorem 4.1 bound on it"])


@pytest.mark.slow
def test_reproduce_gamma_options(tmp_path):
    by_fraction = _run(tmp_path / "fraction", "--similar-fraction", "0.2", "--quiet")
    assert float(by_fraction["DefiniteBoost constraints"]) == 56  # ceil(0.2 * 276)
    by_gamma = _run(tmp_path / "gamma", "--gamma", "0.06", "--quiet")
    assert float(by_gamma["DefiniteBoost gamma x d"]) == pytest.approx(0.06 * 24)


@pytest.mark.skipif(not GYRB_SET_A.is_file(), reason=f"gyrB data not found at {GYRB_DIR}")
def test_reproduce_on_gyrb(tmp_path):
    table = _run(tmp_path, "--fasta", str(GYRB_SET_A), "--quiet")
    assert "Acinetobacter, Pseudomonas, Vibrio" in (tmp_path / "summary.md").read_text()
    assert float(table["1-NN error, target kernel"]) < float(
        table["1-NN error, identity kernel I/d"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--fasta", "/nonexistent/file.faa"], "No such file"),
     (["--gamma", "1e-9"], "No pair is closer"),
     (["--n-objects", "400"], "fewer than the")],
)
def test_reproduce_reports_errors(tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", *SMALL_RUN[:4], "--out", str(tmp_path), "--quiet",
              *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


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
