"""The README's Python examples run and print what it says (docs that run)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.DOTALL)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


#: Each block fits on real data, end to end (a cross-validated grid search
#: among them): they run in the full suite only, but for the first two (the
#: quick start's MEG and DefiniteBoost fits, under a second each: the quick suite).
@pytest.mark.parametrize("index", [
    pytest.param(index, marks=[] if index < 2 else [pytest.mark.slow])
    for index in range(len(BLOCKS))])
def test_readme_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {})
    printed = capsys.readouterr().out
    # a sentence "prints `...`" right after a block states its output
    after = TEXT.split(BLOCKS[index], 1)[1].split("```python", 1)[0]
    for claim in re.findall(r"prints `([^`]+)`", after):
        assert claim in printed
