"""The package's layers: numerics -> engines -> solvers -> estimators -> workflows.

Each module imports only modules of its own layer or below, and only at module
level (no import inside a function, no registration by import side effect).
"""

import ast
from pathlib import Path

import numpy as np
import pytest

import megkernel

PACKAGE = Path(megkernel.__file__).parent

#: Layer of each module (dotted name below ``megkernel``, without ``.py``).
LAYERS = {
    "numerics": 0,
    "engines": 1,
    "solvers": 2,
    "estimators": 3,
    "workflows": 4,
}


def _layer(module):
    top = module.split(".")[0]
    if top in ("_warnings", "_numerics", "_version"):
        return LAYERS["numerics"]
    if top == "_engines":
        return LAYERS["engines"]
    if top == "_solvers":
        return LAYERS["solvers"]
    if top in ("_pair_estimator", "_progress", "meg_regressor", "definiteboost_kernel",
               "neighbors", "metric", "objects", "_kernel_learner") or top.startswith(
                   "_objects_"):
        return LAYERS["estimators"]
    if top in ("evaluation", "datasets", "experiments", "plotting", "cli", "__main__",
               "__init__") or top.startswith("_datasets_"):
        return LAYERS["workflows"]
    raise AssertionError(f"module megkernel.{module} has no layer: add it to LAYERS")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def _imported(module, node):
    """Dotted names (below megkernel) that an import node brings in."""
    package = module.split(".")
    if not (PACKAGE / Path(*package)).is_dir():
        package = package[:-1]  # a plain module: relative to its package
    if isinstance(node, ast.Import):
        return [alias.name.removeprefix("megkernel.") for alias in node.names
                if alias.name.startswith("megkernel")]
    if node.level == 0:
        if not (node.module or "").startswith("megkernel"):
            return []
        base = node.module.removeprefix("megkernel").lstrip(".").split(".")
    else:
        base = package[: len(package) - (node.level - 1)] + (
            node.module.split(".") if node.module else [])
    base = [part for part in base if part]
    names = []
    for alias in node.names:
        candidate = base + [alias.name]
        is_module = (PACKAGE / Path(*candidate)).with_suffix(".py").exists() or (
            PACKAGE / Path(*candidate)).is_dir()
        names.append(".".join(candidate if is_module else base) or "__init__")
    return names


MODULES = list(_modules())


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_only_downward_and_at_module_level(module, path):
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _layer(module)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in _imported(module, node):
            assert _layer(name) <= own, (
                f"megkernel.{module} (layer {own}) imports megkernel.{name} "
                f"(layer {_layer(name)}) at line {node.lineno}")
    # the command line alone imports its work inside functions, after parsing its
    # arguments: --help and argument errors answer without loading numpy & co.
    # the package's __init__ likewise imports a public name on first use (PEP 562)
    lazy = module in ("cli", "__init__")
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and not lazy:
            inner = [node for node in ast.walk(func)
                     if isinstance(node, (ast.Import, ast.ImportFrom))]
            assert not inner, (f"megkernel.{module}.{func.name} imports inside a "
                               f"function (line {inner[0].lineno})")


def _part_of(module):
    """The public module that a private top-level part ``_<module>_<part>``
    belongs to, or None (the engines' compiled kernels have their own rule)."""
    if "." in module or not module.startswith("_"):
        return None
    owners = [name for name, _ in MODULES
              if "." not in name and not name.startswith("_") and module.startswith(f"_{name}_")]
    return owners[0] if owners else None


def test_private_parts_are_imported_by_their_module_only():
    """``objects.py`` re-exports what its parts ``_objects_*.py`` define
    (likewise ``datasets.py`` and ``_datasets_*.py``): only the owner and
    its other parts import a part, so the public module stays the one door."""
    parts = {module: _part_of(module) for module, _ in MODULES}
    assert {"_objects_cache", "_datasets_pairs"} <= {m for m, o in parts.items() if o}
    for module, path in MODULES:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported(module, node):
                owner = parts.get(name)
                if owner is not None:
                    assert module == owner or parts.get(module) == owner, (
                        f"megkernel.{module} imports megkernel.{name}, a part of "
                        f"megkernel.{owner}: import it from megkernel.{owner}")


def test_every_engine_is_declared_in_one_place():
    """Each public module of ``_engines`` backs one registered engine, and
    each registered engine's entry points live in such a module: the
    registry lists them all, whatever they are."""
    from megkernel._engines import ENGINES, methods

    assert ENGINES, "no engine registered"
    modules = {}
    for name, engine in ENGINES.items():
        assert engine.name == name
        module = engine.pair_trials.__module__
        assert module.startswith("megkernel._engines."), (name, module)
        for entry in (engine.pair_update, engine.pair_sq_distance_after):
            assert entry is None or entry.__module__ == module, name
        assert engine.fallback is None or engine.fallback in ENGINES, name
        modules[module.rsplit(".", 1)[-1]] = name
    engine_modules = {path.stem for path in (PACKAGE / "_engines").glob("*.py")
                      if not path.stem.startswith("_")}
    assert engine_modules == set(modules)
    assert methods() == ("auto", *ENGINES)
    assert set(methods("update")) == {"auto"} | {
        name for name, engine in ENGINES.items() if engine.pair_update is not None}


def test_method_constraints_accept_exactly_the_registry_methods(monkeypatch):
    from megkernel import _engines

    monkeypatch.setitem(_engines.ENGINES, "trials-only",
                        _engines.ENGINES["lanczos"]._replace(name="trials-only"))
    values = ["auto", *_engines.ENGINES, "AUTO", "", 1, None, ["auto"], b"eigh"]
    for need, constraint in [("trials", _engines.METHOD_CONSTRAINT),
                             ("update", _engines.UPDATE_METHOD_CONSTRAINT)]:
        valid = _engines.methods(need)
        assert constraint.options == valid
        for value in values:
            assert constraint.is_satisfied_by(value) == (
                isinstance(value, str) and value in valid), (need, value)
        assert all(repr(name) in str(constraint) for name in valid)
    assert "trials-only" in _engines.methods() and "trials-only" not in _engines.methods("update")


#: Numbers that are limits of the package: written only in ``_numerics/limits.py``.
LIMIT_VALUES = (1e100, 1e-100)
LIMIT_NAMES = ("MAX_DENSE_OBJECTS", "MIN_TRACE", "MAX_TRACE", "MAX_STEP")


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_numeric_limits_are_defined_once(module, path):
    if module == "_numerics.limits":
        return
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            assert node.value not in LIMIT_VALUES, (
                f"megkernel.{module} line {node.lineno} writes {node.value:g}: import it "
                "from megkernel._numerics.limits")
        if isinstance(node, ast.Assign):
            names = [target.id for target in ast.walk(node) if isinstance(target, ast.Name)
                     and isinstance(target.ctx, ast.Store)]
            assert not set(names) & set(LIMIT_NAMES), (
                f"megkernel.{module} line {node.lineno} defines {names}: import it from "
                "megkernel._numerics.limits")


def _estimators_with_method():
    import megkernel

    for name in megkernel.__all__:
        cls = getattr(megkernel, name)
        if isinstance(cls, type) and "method" in getattr(cls, "_parameter_constraints", {}):
            yield cls


def test_estimators_take_their_method_options_from_the_registry():
    from megkernel._engines import MethodOptions

    estimators = list(_estimators_with_method())
    assert {cls.__name__ for cls in estimators} >= {"MEGKernelRegressor",
                                                    "DefiniteBoostKernel"}
    for cls in estimators:
        constraints = cls._parameter_constraints["method"]
        assert len(constraints) == 1 and isinstance(constraints[0], MethodOptions), cls


#: A fourth engine, written the way the README says one is added: this module
#: plus one line in ``ENGINES``. It runs eq. 7 the naive dense way, forming
#: ``W = exp(A) / tr exp(A)`` by numpy's ``eigh`` at every trial and reading
#: the prediction off its entries ``W_aa + W_bb - 2 W_ab``.
TOY_ENGINE = """
import numpy as np

calls = {"trials": 0, "updates": 0}


def pair_trials(state, a, b, y, learning_rate, trace, predictions, start=0,
                stats=None):
    for t in range(start, len(y)):
        lam, vecs = np.linalg.eigh(state.exponent)
        weights = np.exp(lam - lam.max())
        W = (vecs * (weights / weights.sum())) @ vecs.T
        i, j = a[t], b[t]
        predictions[t] = trace * (W[i, i] + W[j, j] - 2.0 * W[i, j])
        pair_update(state, i, j, -2.0 * learning_rate * (predictions[t] - y[t]) / trace)
        calls["trials"] += 1
    return len(y)


def pair_update(state, a, b, scale):
    A = state.exponent
    A[a, a] += scale
    A[b, b] += scale
    A[a, b] -= scale
    A[b, a] -= scale
    state.eigenvalues, state.eigenvectors = np.linalg.eigh(A)
    calls["updates"] += 1
"""


@pytest.fixture
def toy_engine(tmp_path, monkeypatch):
    """The toy module, imported from a file, and its one registry line."""
    import importlib.util

    from megkernel import _engines

    path = tmp_path / "toy_engine.py"
    path.write_text(TOY_ENGINE)
    spec = importlib.util.spec_from_file_location("toy_engine", path)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    monkeypatch.setitem(_engines.ENGINES, "toy",
                        _engines.Engine("toy", toy.pair_trials, toy.pair_update,
                                        low_rank=False))
    return toy


def _wine(n_objects=12):
    from megkernel.datasets import distance_triples, load_wine_kernel

    wine = load_wine_kernel(n_objects, random_state=0)
    return distance_triples(wine.kernel, 300, random_state=0)


def test_unregistered_method_is_refused():
    from sklearn.utils._param_validation import InvalidParameterError

    from megkernel import DefiniteBoostKernel, MEGKernelRegressor

    pairs, y = _wine()
    with pytest.raises(InvalidParameterError, match="'toy'"):
        MEGKernelRegressor(solver="online", n_objects=12, trace=1.0, method="toy").fit(pairs, y)
    with pytest.raises(InvalidParameterError, match="'toy'"):
        DefiniteBoostKernel(n_objects=12, gamma=0.1, method="toy").fit(pairs[:20])


@pytest.mark.filterwarnings("ignore:.*too few to hold out:UserWarning")
def test_a_fourth_engine_is_one_module_and_one_registry_line(toy_engine):
    """Registered, the toy engine is a ``method`` of both estimators (their
    constraints read the registry when they validate) and gives eigh's
    kernel."""
    from megkernel import DefiniteBoostKernel, MEGKernelRegressor
    from megkernel._engines import METHOD_CONSTRAINT, UPDATE_METHOD_CONSTRAINT, methods_doc

    assert "toy" in METHOD_CONSTRAINT.options and "toy" in UPDATE_METHOD_CONSTRAINT.options
    assert '"toy"' in methods_doc() and '"toy"' in methods_doc("update")
    pairs, y = _wine()

    def meg(method):
        return MEGKernelRegressor(solver="online",
                                  n_objects=12, trace=1.0, method=method).fit(pairs, y)

    toy_meg = meg("toy")
    assert toy_engine.calls["trials"] == len(y)
    np.testing.assert_allclose(toy_meg.kernel_, meg("eigh").kernel_, rtol=1e-9, atol=1e-12)

    def boost(method):
        return DefiniteBoostKernel(n_objects=12, gamma=0.1, method=method).fit(pairs[:60])

    toy_boost = boost("toy")
    assert toy_engine.calls["updates"] >= toy_boost.n_iter_ > 0
    eigh_boost = boost("eigh")
    assert toy_boost.n_iter_ == eigh_boost.n_iter_
    np.testing.assert_allclose(toy_boost.kernel_, eigh_boost.kernel_, rtol=1e-9, atol=1e-12)


#: What an estimator may take from the engine registry: the registry itself and
#: the ``method`` options derived from it (sklearn's ``VALID_METRICS`` pattern).
_REGISTRY_NAMES = {"ENGINES", "METHOD_CONSTRAINT", "UPDATE_METHOD_CONSTRAINT"}


@pytest.mark.parametrize("module, path", [(m, p) for m, p in MODULES
                                          if _layer(m) == LAYERS["estimators"]],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_estimators_reach_the_engines_only_through_their_solvers(module, path):
    """Issue 18 item 1: an estimator runs no engine itself (``run_pair_trials``,
    ``select``); it calls its solver, and reads only the registry's options."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _imported(module, node):
                if target.split(".")[0] != "_engines":
                    continue
                names = {alias.name for alias in node.names}
                assert isinstance(node, ast.ImportFrom) and names <= _REGISTRY_NAMES, (
                    f"megkernel.{module} imports {sorted(names)} from the engines; "
                    "estimators reach them through their solver")


#: The estimators: each stands beside the others and imports none of them (a
#: prior or a part that two share is a solver call or a shared base below).
ESTIMATOR_MODULES = {"meg_regressor", "definiteboost_kernel", "neighbors", "objects",
                     "metric.meg", "metric.meg_pairs", "metric.definiteboost"}


@pytest.mark.parametrize("module, path", [(m, p) for m, p in MODULES
                                          if m in ESTIMATOR_MODULES],
                         ids=lambda value: value if isinstance(value, str) else "")
def test_no_estimator_imports_another(module, path):
    tree = ast.parse(path.read_text())
    imported = {name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for name in _imported(module, node)}
    others = (imported & ESTIMATOR_MODULES) - {module}
    # the pair variants of a metric learner are its thin subclasses, in its family
    if module == "metric.meg_pairs":
        others -= {"metric.meg"}
    assert not others, f"megkernel.{module} imports the estimator modules {sorted(others)}"
