"""The notebook runs from top to bottom, and its saved outputs are current.

The notebook is committed with its outputs (so that it reads as run on
GitHub); ``notebooks/run.py`` re-executes it and saves them. This test
executes it (nbclient) and compares the text outputs of every code cell with
the saved ones: after changing the code or the notebook, run
``python notebooks/run.py`` and commit the notebook.
"""

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = NOTEBOOKS / "reproduce_and_grid_search.ipynb"


def _runner():
    spec = importlib.util.spec_from_file_location("notebook_runner", NOTEBOOKS / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_saved_notebook_has_outputs_and_sections():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs for cell in code[1:])  # every cell but the imports shows something
    figures = [output for cell in code for output in cell.outputs
               if "image/png" in output.get("data", {})]
    assert len(figures) == 2
    source = "\n".join(cell.source for cell in notebook.cells)
    for needed in ["load_gyrb(", "MEGMetric(", "DefiniteBoostMetric(", "KNeighborsClassifier",
                   ".partial_fit(", "KernelDistances(", "shuffle=True"]:
        assert needed in source
    assert "shared/data" not in source and "../shared" not in source  # package data only
    assert "simplefilter" not in source and "filterwarnings" not in source  # no hidden warnings
    assert not [output for cell in code for output in cell.outputs
                if output.output_type == "error" or output.get("name") == "stderr"]


@pytest.mark.slow
def test_notebook_runs_and_saved_outputs_are_current():
    runner = _runner()
    saved = nbformat.read(NOTEBOOK, as_version=4)
    fresh = runner.execute(nbformat.read(NOTEBOOK, as_version=4))
    fresh_texts, saved_texts = runner.text_outputs(fresh), runner.text_outputs(saved)
    assert not [text for cell in fresh_texts for kind, text in cell
                if kind in ("error", "stderr")]
    for index, (now, then) in enumerate(zip(fresh_texts, saved_texts)):
        assert now == then, (f"code cell {index}: the saved outputs are not current; run "
                             "python notebooks/run.py and commit the notebook")
    assert len(fresh_texts) == len(saved_texts)
