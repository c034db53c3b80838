"""The package's layers: numerics -> engines -> solvers -> estimators -> workflows.

Each module imports only modules of its own layer or below, and only at module
level (no import inside a function, no registration by import side effect).
"""

import ast
from pathlib import Path

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
    if top in ("_warnings", "_numerics"):
        return LAYERS["numerics"]
    if top == "_engines":
        return LAYERS["engines"]
    if top == "_solvers":
        return LAYERS["solvers"]
    if top in ("_pair_estimator", "_progress", "meg_regressor", "definiteboost_kernel",
               "neighbors", "metric", "objects"):
        return LAYERS["estimators"]
    if top in ("evaluation", "datasets", "experiments", "plotting", "cli", "__main__",
               "__init__"):
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
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = [node for node in ast.walk(func)
                     if isinstance(node, (ast.Import, ast.ImportFrom))]
            assert not inner, (f"megkernel.{module}.{func.name} imports inside a "
                               f"function (line {inner[0].lineno})")


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


def _wine(n_objects=12):
    from megkernel.datasets import distance_triples, load_wine_kernel

    wine = load_wine_kernel(n_objects, random_state=0)
    return distance_triples(wine.kernel, 300, random_state=0)


def test_unregistered_method_is_refused():
    from sklearn.utils._param_validation import InvalidParameterError

    from megkernel import DefiniteBoostKernel, MEGKernelRegressor

    pairs, y = _wine()
    with pytest.raises(InvalidParameterError, match="'toy'"):
        MEGKernelRegressor(n_objects=12, trace=1.0, method="toy").fit(pairs, y)
    with pytest.raises(InvalidParameterError, match="'toy'"):
        DefiniteBoostKernel(n_objects=12, gamma=0.1, method="toy").fit(pairs[:20])
