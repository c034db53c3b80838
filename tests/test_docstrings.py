"""Every public docstring of megkernel passes numpydoc's validation.

Modelled on scikit-learn's ``sklearn/tests/test_docstrings.py``: each public
function, each public class and each public method and property of a public
class defined in megkernel goes through :func:`numpydoc.validate.validate`,
one parametrised test per object so that a failure names it.

What is checked: the names in ``megkernel.__all__`` and
``megkernel.metric.__all__`` and in the ``__all__`` of the public modules
``megkernel.datasets``, ``megkernel.experiments``, ``megkernel.plotting`` and
``megkernel.evaluation``; for each class among them, the public methods and
properties defined in megkernel. Methods inherited from scikit-learn (or
from Python, e.g. ``Exception.with_traceback``), and the
``set_*_request`` methods scikit-learn generates for metadata routing, are
skipped: their docstrings are not megkernel's.

The filter is scikit-learn's, unchanged:

* ``GL01``, ``GL02`` (where the summary and a blank line sit relative to the
  quotes) and ``RT02`` (the first line of Returns holds only the type: a
  name is allowed, to refer to the returned object) are ignored everywhere;
* ``PR02`` (unknown parameters) and ``GL08`` (no docstring) are ignored for
  properties only: a property's signature cannot be parsed, and a property
  may be documented in its class's Attributes section instead;
* ``EX01`` (no Examples), ``SA01`` (no See Also) and ``ES01`` (no extended
  summary) are ignored for functions, methods and properties, and checked on
  the top-level docstring of classes.

Nothing is ignored per object: there is no list of exceptions.
"""

import importlib
import inspect

import pytest

numpydoc_validation = pytest.importorskip("numpydoc.validate")

#: The modules whose ``__all__`` is the public API.
PUBLIC_MODULES = (
    "megkernel",
    "megkernel.metric",
    "megkernel.datasets",
    "megkernel.experiments",
    "megkernel.plotting",
    "megkernel.evaluation",
)


def _public_objects():
    """Yield ``(public dotted name, object)`` once per object, in module order."""
    seen = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # e.g. __version__
            if id(obj) in seen:
                continue  # re-exported under a second public name
            seen.add(id(obj))
            yield f"{module_name}.{name}", obj


def _defined_in_megkernel(klass, name):
    """Whether ``klass.name`` is written in megkernel (not inherited, not generated)."""
    for owner in klass.__mro__:
        if name in owner.__dict__:
            attr = owner.__dict__[name]
            break
    else:  # pragma: no cover - dir() lists only attributes found on the MRO
        return False
    if isinstance(attr, property):
        attr = attr.fget
    elif isinstance(attr, (classmethod, staticmethod)):
        attr = attr.__func__
    module = getattr(attr, "__module__", None) if inspect.isfunction(attr) else None
    # sklearn's set_*_request descriptors and Python's builtins have no
    # megkernel function behind them
    return module is not None and module.split(".")[0] == "megkernel"


def _public_members(klass):
    """Public methods and properties of ``klass`` written in megkernel."""
    for name in sorted(dir(klass)):
        if name.startswith("_") or not _defined_in_megkernel(klass, name):
            continue
        attr = inspect.getattr_static(klass, name)
        if isinstance(attr, property) or callable(getattr(klass, name)):
            yield name


FUNCTIONS = sorted(name for name, obj in _public_objects() if inspect.isfunction(obj))
CLASSES = [(name, obj) for name, obj in _public_objects() if inspect.isclass(obj)]
CLASS_ITEMS = sorted(
    [(name, klass, None) for name, klass in CLASSES]
    + [
        (f"{name}.{member}", klass, member)
        for name, klass in CLASSES
        for member in _public_members(klass)
    ]
)


def filter_errors(errors, method, klass=None):
    """Drop the findings scikit-learn's docstring test ignores.

    Parameters
    ----------
    errors : list of tuple of (str, str)
        The ``(code, message)`` pairs of :func:`numpydoc.validate.validate`.
    method : str or None
        The method's or property's name, ``"function"`` for a function, None
        for a class's own docstring.
    klass : type, default=None
        The class the method belongs to.

    Yields
    ------
    code : str
        The numpydoc error code of a finding that counts.
    message : str
        Its message.
    """
    for code, message in errors:
        if code in ("RT02", "GL01", "GL02"):
            continue
        if code in ("PR02", "GL08") and klass is not None and method is not None:
            if isinstance(inspect.getattr_static(klass, method), property):
                continue
        if method is not None and code in ("EX01", "SA01", "ES01"):
            continue
        yield code, message


def _report(name, result):
    """Format one object's findings for the failure message."""
    lines = [f"{name} ({result['file']}:{result['file_line']})"]
    lines += [f" - {code}: {message}" for code, message in result["errors"]]
    return "\n".join(lines)


def test_the_public_api_is_collected():
    """The lists are not empty: a broken collector must not pass silently."""
    assert "megkernel.meg" in FUNCTIONS
    assert "megkernel.datasets.load_gyrb" in FUNCTIONS
    assert any(name == "megkernel.MEGMetric.fit" for name, _, _ in CLASS_ITEMS)
    assert not any(name.endswith(".get_params") for name, _, _ in CLASS_ITEMS)


@pytest.mark.parametrize("function_name", FUNCTIONS)
def test_function_docstring(function_name):
    """A public function's docstring passes numpydoc's validation."""
    result = numpydoc_validation.validate(function_name)
    result["errors"] = list(filter_errors(result["errors"], method="function"))
    if result["errors"]:
        raise ValueError(_report(function_name, result))


@pytest.mark.parametrize(
    "name, klass, method", CLASS_ITEMS, ids=[name for name, _, _ in CLASS_ITEMS]
)
def test_class_docstring(name, klass, method):
    """A public class's docstring, and its methods' and properties', pass numpydoc."""
    result = numpydoc_validation.validate(name)
    result["errors"] = list(filter_errors(result["errors"], method, klass=klass))
    if result["errors"]:
        raise ValueError(_report(name, result))
