"""The documentation: its Python blocks run and print what it says, its API
reference lists every public name, and (slow) the site builds warning-free."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import megkernel

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted((DOCS / "user_guide").glob("*.rst"))

#: ``.. code-block:: python`` and its options, then the indented body.
BLOCK = re.compile(r"^\.\. code-block:: python\n((?:   :[\w-]+:.*\n)*)\n((?:(?:   .*)?\n)+)",
                   flags=re.MULTILINE)


def _blocks():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(BLOCK.finditer(text)):
            if "not-run" in match.group(1):
                continue
            body = "\n".join(line[3:] for line in match.group(2).splitlines())
            # a sentence "prints ``...``" after the block, up to the next block
            after = text[match.end():].split(".. code-block::", 1)[0]
            claims = re.findall(r"prints ``([^`]+)``", after)
            slow = "GridSearchCV(" in body or "100_000" in body
            yield pytest.param(body, claims, id=f"{page.stem}-{number}",
                               marks=[pytest.mark.slow] if slow else [])


BLOCKS = list(_blocks())


def test_user_guide_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("body, claims", BLOCKS)
def test_user_guide_example_runs(body, claims, capsys):
    exec(compile(body, "docs block", "exec"), {})
    printed = capsys.readouterr().out
    for claim in claims:
        assert claim in printed


def test_api_reference_lists_every_public_name():
    text = (DOCS / "api.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (\w+)$", text, flags=re.MULTILINE))
    missing = set(megkernel.__all__) - listed
    assert not missing, f"docs/api.rst does not list {sorted(missing)}"
    for module in ("datasets", "experiments", "plotting"):
        names = importlib.import_module(f"megkernel.{module}").__all__
        assert set(names) <= listed, (module, sorted(set(names) - listed))


def test_readme_links_stay_inside_the_repository():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "../" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert not re.match(r"\w+://", target), target
        assert (ROOT / target).exists(), target


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None
                    or importlib.util.find_spec("sphinx_gallery") is None
                    or importlib.util.find_spec("numpydoc") is None,
                    reason='needs the docs extra: pip install ".[docs]"')
def test_docs_build_without_warnings(tmp_path):
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns(
        "_build", "generated", "auto_examples"))
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(source), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-5000:]
