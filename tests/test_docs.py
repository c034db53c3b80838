"""The documentation: its Python blocks run and print what it says (slow), its
API reference lists every public name, and (slow) the site builds warning-free."""

import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning

import megkernel
from megkernel import (
    DefiniteBoostKernel,
    DefiniteBoostMetric,
    DefiniteBoostPairMetric,
    KernelDistances,
    KernelKNeighborsClassifier,
    MEGKernelRegressor,
    MEGMetric,
    MEGPairMetric,
    NoImprovementWarning,
)
from megkernel.datasets import (
    distance_triples,
    labelled_pairs,
    load_wine_kernel,
    similarity_threshold,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted((DOCS / "user_guide").glob("*.rst"))

#: ``.. code-block:: python`` and its options, then the indented body.
BLOCK = re.compile(r"^\.\. code-block:: python\n((?:   :[\w-]+:.*\n)*)\n((?:(?:   .*)?\n)+)",
                   flags=re.MULTILINE)


#: User-guide blocks quick enough for the quick suite (page stem-number).
_QUICK_BLOCKS = {"kernel_learners-0", "meg-0", "metrics-0", "metrics-1"}

#: Warnings a block rightly shows its reader, ignored in its test by category and
#: the start of the message (any other warning of a block fails it).
_BLOCK_NOTES = {
    # the paper's grid of on-line rates: at 0.05 the trials predict little better
    # than the prior on every fold (in the search's workers), which each fit says
    "reproduction-0": ["ignore:MEGKernelRegressor. the on-line trials predicted little better"
                       ":megkernel.NoImprovementWarning"],
}


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
            # each block fits on real data, end to end: the full suite only,
            # but for a few that take under half a second (the quick suite)
            name = f"{page.stem}-{number}"
            marks = [pytest.mark.filterwarnings(note) for note in _BLOCK_NOTES.get(name, [])]
            if name not in _QUICK_BLOCKS:
                marks.append(pytest.mark.slow)
            yield pytest.param(body, claims, id=name, marks=marks)


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


#: Fitted attributes not yet in their class's ``Attributes`` section: in files
#: being rewritten (issue 18); remove each entry once it is documented.
_PENDING_ATTRIBUTES = {
    "MEGKernelRegressor": {"distances_"},
    "DefiniteBoostKernel": {"distances_", "n_features_in_", "y_kind_"},
}


def _documented_attributes(cls):
    doc = inspect.getdoc(cls) or ""
    section = re.search(r"^Attributes\n-+\n(.*?)(?:^\S[^\n]*\n-+\n|\Z)", doc,
                        flags=re.S | re.M)
    names = set()
    for line in (section.group(1) if section else "").splitlines():
        if line and not line[0].isspace():
            names |= {name.strip() for name in line.split(" : ")[0].split(",")}
    return names


def _fitted_models():
    wine = load_wine_kernel(20, random_state=0)
    pairs, y = distance_triples(wine.kernel, 300, random_state=0)
    gamma = similarity_threshold(wine.kernel, 0.5)
    signed, signs = labelled_pairs(wine.kernel, gamma, 1.5 * gamma, random_state=0)
    rng = np.random.RandomState(0)
    X, labels = rng.normal(size=(40, 4)), np.repeat([0, 1, 2, 3], 10)
    point_pairs = np.array([[i, (i + 1 + j) % 40] for i in range(40) for j in range(3)])
    point_signs = np.where(labels[point_pairs[:, 0]] == labels[point_pairs[:, 1]], 1, -1)
    factor = rng.normal(size=(20, 3))
    makers = {
        MEGKernelRegressor: [
            lambda: MEGKernelRegressor(n_objects=20).fit(pairs, y),
            lambda: MEGKernelRegressor(n_objects=20, solver="online").fit(pairs, y),
            lambda: MEGKernelRegressor(n_objects=20).partial_fit(pairs, y),
            lambda: MEGKernelRegressor(n_objects=20, init_factor=factor).fit(pairs, y)],
        DefiniteBoostKernel: [
            lambda: DefiniteBoostKernel(n_objects=20).fit(signed, signs),
            lambda: DefiniteBoostKernel(n_objects=20, init_factor=factor).fit(signed, signs)],
        KernelDistances: [
            lambda: KernelDistances(kernel=wine.kernel).fit(np.arange(10)),
            lambda: KernelDistances(learner=MEGKernelRegressor(n_objects=20), pairs=pairs,
                                    targets=y, given_squared=True).fit(np.arange(10))],
        KernelKNeighborsClassifier: [
            lambda: KernelKNeighborsClassifier().fit(wine.kernel, wine.labels)],
        MEGMetric: [
            lambda: MEGMetric(random_state=0).fit(X, labels),
            lambda: MEGMetric(random_state=0).fit(X, labels).partial_fit(X[point_pairs],
                                                                         point_signs)],
        DefiniteBoostMetric: [
            lambda: DefiniteBoostMetric(random_state=0).fit(X, labels),
            lambda: DefiniteBoostMetric(random_state=0).fit_pairs(X, point_pairs,
                                                                  point_signs)],
        MEGPairMetric: [lambda: MEGPairMetric(random_state=0).fit(X[point_pairs],
                                                                  point_signs)],
        DefiniteBoostPairMetric: [
            lambda: DefiniteBoostPairMetric(random_state=0).fit(X[point_pairs],
                                                                point_signs)],
    }
    # what these default fits on small random data rightly say (anything else fails)
    notes = [
        (ConvergenceWarning, r"The constraints are infeasible"),
        (NoImprovementWarning, r"\w+: no validated gain over the Euclidean metric"),
        (NoImprovementWarning, r"MEGKernelRegressor: the learned kernel (is no better than|"
                               r"beats) its prior"),
        (UserWarning, r"DefiniteBoostKernel: \d+ pairs are too few to hold out"),
        (UserWarning, r"Dropped \d+ of \d+ constraints"),
        (UserWarning, r"Only \d+ distinct similar pairs exist"),
    ]
    with warnings.catch_warnings():
        for category, message in notes:
            warnings.filterwarnings("ignore", message, category)
        return {cls: [make() for make in fits] for cls, fits in makers.items()}


def test_every_public_fitted_attribute_is_documented():
    """Issue 18, item 6: each public estimator's ``Attributes`` section names
    every public fitted attribute (set by any of its fits) and fitted property."""
    models = _fitted_models()
    estimators = {getattr(megkernel, name) for name in megkernel.__all__
                  if inspect.isclass(getattr(megkernel, name))
                  and issubclass(getattr(megkernel, name), BaseEstimator)}
    assert estimators == set(models), "give each public estimator a fit above"
    for cls, fitted in models.items():
        attributes = {name for model in fitted for name in vars(model)
                      if name.endswith("_") and not name.startswith("_")}
        attributes |= {name for name in dir(cls) if name.endswith("_")
                       and not name.startswith("_")
                       and isinstance(inspect.getattr_static(cls, name), property)}
        missing = (attributes - _documented_attributes(cls)
                   - _PENDING_ATTRIBUTES.get(cls.__name__, set()))
        assert not missing, f"{cls.__name__}'s Attributes section lacks {sorted(missing)}"
