"""Build, execute and save ``reproduce_and_grid_search.ipynb`` with its outputs.

    python notebooks/run.py           # re-execute the committed notebook, save outputs
    python notebooks/run.py --check   # execute a copy; fail if the text outputs differ

The committed notebook keeps its outputs (figures included), so that it reads
on GitHub as run. ``tests/test_notebook.py`` executes it and checks that the
text outputs of every cell equal the committed ones (figures are not compared
byte for byte); after changing the code or the notebook, run this script and
commit the result. Needs ``nbclient``, ``nbformat``, ``ipykernel``.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parent / "reproduce_and_grid_search.ipynb"


def execute(notebook):
    """Execute ``notebook`` in place (from the notebooks directory), return it."""
    client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    return notebook


def text_outputs(notebook):
    """Per code cell: its text outputs (streams, plain-text results, errors)."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        texts = []
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                texts.append((output.name, output.text))
            elif output.output_type in ("execute_result", "display_data"):
                plain = output.get("data", {}).get("text/plain", "")
                # a figure's repr names its memory address: keep only the kind
                if "image/png" in output.get("data", {}):
                    plain = "<figure>"
                texts.append((output.output_type, plain))
            elif output.output_type == "error":
                texts.append(("error", f"{output.ename}: {output.evalue}"))
        merged = []  # how a cell's stream is cut into outputs depends on timing
        for kind, text in texts:
            if merged and kind in ("stdout", "stderr") and merged[-1][0] == kind:
                merged[-1] = (kind, merged[-1][1] + text)
            else:
                merged.append((kind, text))
        cells.append(merged)
    return cells


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="execute a copy and compare its text outputs with the saved ones")
    args = parser.parse_args(argv)
    saved = nbformat.read(NOTEBOOK, as_version=4)
    fresh = execute(copy.deepcopy(saved))
    if args.check:
        if text_outputs(fresh) != text_outputs(saved):
            print(f"{NOTEBOOK.name}: the saved outputs are not current; run "
                  "python notebooks/run.py and commit the notebook", file=sys.stderr)
            return 1
        return 0
    for cell in fresh.cells:  # execution metadata only churns the diff
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(fresh, NOTEBOOK)
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
