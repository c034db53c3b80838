"""The engines are reached through their registry records only.

Outside ``megkernel/_engines/`` no module imports an engine's private module
(``_engines._*``) or a private name of the registry; the solvers that run an
engine's kernels in loops of their own (DefiniteBoost's compiled greedy loop
and its lazy run) take them from the engine's record in ``ENGINES``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from test_definiteboost_fused import _problem as _fused_problem  # the compiled loop's case
from test_definiteboost_lazy import _problem as _lazy_problem  # the lazy run's case

import megkernel
from megkernel._engines import ENGINES, lanczos, rank_one
from megkernel._numerics.state import ExponentState
from megkernel._solvers import definiteboost_fused as fused
from megkernel._solvers import definiteboost_lazy as lazy
from megkernel._solvers import definiteboost_projections as solver

PACKAGE = Path(megkernel.__file__).parent
ENGINES_DIR = PACKAGE / "_engines"


def _dotted(path):
    """``megkernel.a.b`` of the module at ``path`` (a package: its ``__init__``)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts)


def _absolute(module, is_package, node):
    """The absolute module an ``ImportFrom`` node imports from."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def side_doors(source, module, is_package=False):
    """``(line, what)`` of each way ``source`` (module ``module``) reaches past
    the registry: an import of ``megkernel._engines._<private>`` (a module or
    a name in it), of a private name of ``megkernel._engines``, or an
    attribute ``_<private>`` of the ``megkernel._engines`` package."""
    tree = ast.parse(source)
    found = []
    bound = set()  # local names of the megkernel._engines package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if alias.name.startswith("megkernel._engines.") and _private(parts[2]):
                    found.append((node.lineno, alias.name))
                elif alias.name == "megkernel._engines" and alias.asname:
                    bound.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node)
            parts = base.split(".")
            if base.startswith("megkernel._engines.") and _private(parts[2]):
                found.append((node.lineno, base))
            for alias in node.names:
                if base == "megkernel._engines" and _private(alias.name):
                    found.append((node.lineno, f"{base}.{alias.name}"))
                if base == "megkernel" and alias.name == "_engines":
                    bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in bound:
                found.append((node.lineno, f"megkernel._engines.{node.attr}"))
            elif ast.unparse(owner) == "megkernel._engines":
                found.append((node.lineno, f"megkernel._engines.{node.attr}"))
    return found


OUTSIDE = [path for path in sorted(PACKAGE.rglob("*.py"))
           if ENGINES_DIR not in path.parents]


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda path: _dotted(path))
def test_no_module_outside_the_engines_imports_their_private_parts(path):
    doors = side_doors(path.read_text(), _dotted(path), path.name == "__init__.py")
    assert not doors, (f"{_dotted(path)} reaches past the engine registry: {doors}; "
                       "take what it needs from the engine's record in ENGINES")


def test_the_check_sees_every_kind_of_side_door():
    module = "megkernel._solvers.definiteboost_fused"
    sources = [
        "from .._engines._rank_one_kernels import make_workspace, pair_trials",
        "from .._engines import _rank_one_kernels",
        "from .._engines import ENGINES, _lanczos_runs, lanczos",
        "from megkernel._engines._lanczos_kernels import pair_trials",
        "import megkernel._engines._cost",
        "from .. import _engines\n_engines._cost.lanczos_steps",
        "import megkernel._engines\nmegkernel._engines._lanczos_runs",
    ]
    for source in sources:
        assert side_doors(source, module), source
    for source in ["from .._engines import ENGINES, select",
                   "from .._engines import lanczos\nlanczos._settings",  # a public engine's own
                   "from ._rank_one_kernels import pair_trials",  # megkernel._solvers._...
                   "from .. import _engines\n_engines.ENGINES"]:
        assert not side_doors(source, module), source
    # relative to a package's __init__
    assert side_doors("from ._engines import _cost", "megkernel", is_package=True)
    assert not side_doors("from ._engines import ENGINES", "megkernel", is_package=True)


def test_each_engine_offers_whole_groups_of_kernels():
    """The fields the solvers' own loops read come in groups: the compiled
    update with its workspace and re-anchoring interval; the matrix-free
    steps with their exception."""
    for name, engine in ENGINES.items():
        update = (engine.compiled_update, engine.make_workspace, engine.refresh_every)
        assert all(f is None for f in update) or all(f is not None for f in update), name
        steps = (engine.pair_steps, engine.declined)
        assert all(f is None for f in steps) or all(f is not None for f in steps), name
    rank_one_engine, lanczos_engine = ENGINES["rank-one"], ENGINES["lanczos"]
    # the kernel pair_update runs, and its interval
    assert rank_one_engine.compiled_update is rank_one_engine.compiled.pair_trials
    assert rank_one_engine.make_workspace is rank_one_engine.compiled.make_workspace
    assert rank_one_engine.refresh_every == rank_one.REFRESH_EVERY
    assert lanczos_engine.pair_steps is lanczos.PairSteps
    assert issubclass(lanczos_engine.declined, Exception)
    assert lanczos_engine.declined is lanczos.Declined
    assert lanczos_engine.runs_on is not None
    assert ENGINES["eigh"].runs_on is ENGINES["eigh"].pair_steps is None


def test_the_fused_loop_takes_the_rank_one_record():
    engine = ENGINES["rank-one"]
    assert fused._compiled_update is engine.compiled_update
    assert fused._make_workspace is engine.make_workspace
    assert fused.REFRESH_EVERY == engine.refresh_every


def test_the_lazy_run_takes_the_lanczos_record(monkeypatch):
    """The lazy run's steps, declines and where it applies are the record's:
    a record with other (here: counting) steps is the one used."""
    made = []

    class CountedSteps(lanczos.PairSteps):
        def __init__(self, state):
            made.append(1)
            super().__init__(state)

    state, constraints, gamma = _lazy_problem(seed=1)
    settings = solver._Settings(max_iter=60, tol=1e-3 * gamma, keep="last")
    expected = lazy.run_lazy(constraints, state.copy(), settings)
    record = ENGINES["lanczos"]
    monkeypatch.setitem(ENGINES, "lanczos", record._replace(pair_steps=CountedSteps))
    run_state = state.copy()
    log = lazy.run_lazy(constraints, run_state, settings)
    assert made
    assert_array_equal(log["constraint"], expected["constraint"])
    assert_array_equal(log["dual_objective"], expected["dual_objective"])

    big = ExponentState.identity(lazy.LAZY_FROM)
    assert lazy.lazy_state(big, 5)
    monkeypatch.setitem(ENGINES, "lanczos", record._replace(runs_on=lambda state: False))
    assert not lazy.lazy_state(big, 5)


def _fingerprint(log):
    constraint = np.asarray(log["constraint"])
    return (int(log["n_iter"]), int(np.sum((np.arange(constraint.size) + 1) * constraint)),
            constraint[:8].tolist())


def test_the_fused_run_is_as_before_the_registry_change(monkeypatch):
    """Recorded from the code that imported the rank-one kernels directly
    (bit-identical there; compared here to round-off across machines)."""
    state, a, b, signs, thresholds = _fused_problem(60, 6, 40, 0.45, seed=66)
    calls = []
    monkeypatch.setattr(solver, "run_fused",
                        lambda *args: calls.append(1) or fused.run_fused(*args))
    log = solver.run_definiteboost(solver.PairConstraints(a, b, signs, thresholds, state),
                                   state, solver._Settings(max_iter=5000, tol=1e-8),
                                   method="auto")
    assert calls, "the compiled loop did not run"
    assert _fingerprint(log) == (1021, 9014418, [4, 6, 19, 24, 16, 7, 18, 20])
    assert log["converged"]
    assert_allclose(log["dual_objective"][-1], 0.505667941094438, rtol=1e-9)
    assert_allclose(np.sum(log["multipliers"]), 99.89836948291418, rtol=1e-9)
    assert_allclose(state.matrix()[0, 1], -0.06213838329377303, rtol=1e-9)


def test_the_lazy_run_is_as_before_the_registry_change():
    """Recorded from the code that imported ``_lanczos_runs`` and the
    Lanczos engine module directly (bit-identical there)."""
    state, constraints, gamma = _lazy_problem(seed=1)
    log = lazy.run_lazy(constraints, state,
                        solver._Settings(max_iter=300, tol=1e-3 * gamma, keep="last"))
    assert _fingerprint(log) == (300, 8359686, [3, 4, 6, 7, 14, 23, 24, 26])
    assert_allclose(log["dual_objective"][-1], 0.18123320383962108, rtol=1e-9)
    assert_allclose(log["max_violation"], 0.0035857792403396964, rtol=1e-9)
    assert_allclose(np.sum(log["multipliers"]), 169.76730271002822, rtol=1e-9)
    assert_allclose(state.matrix()[0, 1], 0.00995844474440834, rtol=1e-9)
