"""The contracts every public estimator shares, over ``conftest.ESTIMATORS``.

One small fit per estimator (metric-learn's ``pairs_learners`` pattern):

- before ``fit``, every method and fitted property that uses a fit raises
  scikit-learn's ``NotFittedError`` (not an ``AttributeError`` from deep
  inside), and changes nothing;
- a call refused for bad input (``ValueError``) leaves the model, unfitted or
  fitted, byte for byte as it was (pickled), and a successful call that only
  uses the fit changes nothing either;
- every parameter is validated at fit: a value outside each of its
  ``_parameter_constraints`` is refused with a ``ValueError`` naming it,
  before any change to a fitted model;
- a pickled and restored model answers every call exactly as the original;
- ``get_params`` / ``set_params`` / ``clone`` follow scikit-learn's rules,
  and a clone fitted on the same data answers exactly as the original.

The estimator-specific refusals (which input, which message) are tested in
each estimator's own file.
"""

import inspect
import pickle
import re
import warnings
from numbers import Integral

import joblib
import numpy as np
import pytest
from conftest import ESTIMATORS, call, unchanged_on_error
from numpy.testing import assert_array_equal
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions, make_constraint
from sklearn.utils.validation import check_is_fitted

import megkernel
from megkernel._kernel_learner import OPTIONAL_PROTOCOL_METHODS, PROTOCOL_METHODS

#: Methods that fit or configure rather than use a fit.
FITTING = {"fit", "partial_fit", "fit_pairs", "fit_transform", "fit_predict",
           "get_params", "get_metadata_routing"}

#: The kernel-learner protocol fits clones and never uses the model's own fit
#: (its contracts are in test_kernel_learner.py).
FITTING |= set(PROTOCOL_METHODS) | set(OPTIONAL_PROTOCOL_METHODS)

CASES = pytest.mark.parametrize("case", ESTIMATORS, ids=[case.name for case in ESTIMATORS])


#: The deprecated properties' warning (every public property is read here).
DEPRECATED_PROPERTIES = r"(prior_)?constraint_loss_ is deprecated"

def _public(cls):
    """``(methods using a fit, properties)`` of the class, by name."""
    methods, properties = set(), set()
    for name in dir(cls):
        if name.startswith("_") or name.startswith("set_") or name in FITTING:
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            properties.add(name)
        elif callable(member):
            methods.add(name)
    return methods, properties


_FITTED = {}


def _fitted(case):
    """A fitted model: a new copy of the case's model, fitted once per session."""
    if case.name not in _FITTED:
        _FITTED[case.name] = pickle.dumps(case.fitted())
    return pickle.loads(_FITTED[case.name])


def _answer(get):
    """What ``get()`` returns, or the type of what it raises."""
    try:
        return get()
    except Exception as error:  # noqa: BLE001 - compared, not hidden
        return type(error)


def _answers(case, model):
    """Everything the fitted model answers: each call but updates, each property."""
    _, properties = _public(type(model))
    out = {name: _answer(lambda name=name: call(model, name, args))
           for name, args in case.calls.items() if name not in case.updates}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", DEPRECATED_PROPERTIES, FutureWarning)
        out.update({name: _answer(lambda name=name: getattr(model, name))
                    for name in properties})
    return out


def _assert_same_answers(a, b):
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, dict):
            assert x.keys() == y.keys(), name
            for key in x:
                assert_array_equal(x[key], y[key], err_msg=f"{name}[{key!r}]")
        elif isinstance(x, type) or x is None:
            assert x is y, name
        elif callable(x):  # a metric function (get_metric): the same on the same points
            u, v = np.linspace(-1.0, 1.0, 3), np.linspace(2.0, 0.5, 3)
            assert_array_equal(x(u, v), y(u, v), err_msg=name, strict=True)
        else:
            assert_array_equal(x, y, err_msg=name, strict=True)


def test_every_public_estimator_has_a_case():
    public = {name for name in megkernel.__all__
              if inspect.isclass(getattr(megkernel, name))
              and issubclass(getattr(megkernel, name), BaseEstimator)}
    assert {type(case.make()).__name__ for case in ESTIMATORS} == public


@CASES
def test_the_case_calls_every_public_method(case):
    """So that the contracts below reach each method (a new one must be added)."""
    methods, _ = _public(type(case.make()))
    assert set(case.calls) == methods
    assert set(case.bad) - FITTING <= methods


# -- not fitted ----------------------------------------------------------------------


@CASES
def test_use_before_fit_raises_not_fitted_error_and_changes_nothing(case):
    model = case.make()
    with pytest.raises(NotFittedError):
        check_is_fitted(model)
    for name, args in case.calls.items():
        with unchanged_on_error(model, NotFittedError):
            call(model, name, args)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", DEPRECATED_PROPERTIES, FutureWarning)
        for name in _public(type(model))[1]:
            with unchanged_on_error(model, NotFittedError):
                getattr(model, name)
            assert not hasattr(model, name)
    check_is_fitted(_fitted(case))


# -- a failed call changes nothing, a use changes nothing ------------------------------


@CASES
@pytest.mark.parametrize("state", ["unfitted", "fitted"])
def test_a_call_refused_for_bad_input_changes_nothing(case, state):
    model = _fitted(case) if state == "fitted" else case.make()
    calls = case.bad if state == "fitted" else {
        name: args for name, args in case.bad.items() if name in FITTING}
    assert "fit" in calls
    for name, args in calls.items():
        with unchanged_on_error(model, ValueError) as error:
            call(model, name, args)
        assert not isinstance(error.value, NotFittedError), name
    if state == "unfitted":
        assert not [name for name in vars(model) if name.endswith("_")]


@CASES
def test_using_a_fit_changes_nothing(case):
    model = _fitted(case)
    before = pickle.dumps(model)
    for name, args in case.calls.items():
        if name not in case.updates:
            call(model, name, args)
            assert pickle.dumps(model) == before, name
    _answers(case, model)
    assert pickle.dumps(model) == before


# -- parameters ------------------------------------------------------------------------


class _BadType:
    """An instance that no parameter constraint accepts."""

    def __repr__(self):
        return "_BadType()"


def _invalid_values(constraints):
    """Values just outside each constraint of a parameter, that no other accepts."""
    constraints = [make_constraint(constraint) for constraint in constraints]
    values = [_BadType()]
    for constraint in constraints:
        if isinstance(constraint, Interval):
            left, right = constraint.left, constraint.right
            if left is not None:
                values.append(left if constraint.closed in ("right", "neither") else left - 1)
            if right is not None:
                values.append(right if constraint.closed in ("left", "neither") else right + 1)
            if constraint.type is Integral:
                values.append((left if left is not None else 0) + 1.5)
        elif isinstance(constraint, StrOptions):
            values.append("no such option")
    return [value for value in values
            if not any(constraint.is_satisfied_by(value) for constraint in constraints)]


def _parameters():
    for case in ESTIMATORS:
        cls = type(case.make())
        for name in sorted(cls._parameter_constraints):
            yield pytest.param(case, name, id=f"{case.name}-{name}")


@CASES
def test_every_parameter_has_constraints(case):
    model = case.make()
    assert set(model._parameter_constraints) == set(model.get_params(deep=False))


@pytest.mark.parametrize(("case", "parameter"), list(_parameters()))
def test_a_bad_parameter_is_refused_at_fit_before_any_change(case, parameter):
    values = _invalid_values(type(case.make())._parameter_constraints[parameter])
    assert values
    for value in values:
        for method, args in case.fit:
            fresh = case.make().set_params(**{parameter: value})
            with unchanged_on_error(fresh, ValueError, match=re.escape(parameter)):
                call(fresh, method, args)
            if method == "partial_fit":
                continue  # scikit-learn's rule: not validated again once fitted
            model = _fitted(case).set_params(**{parameter: value})
            with unchanged_on_error(model, ValueError, match=re.escape(parameter)):
                call(model, method, args)


@CASES
def test_get_params_and_set_params(case):
    model = case.make()
    params = model.get_params(deep=False)
    signature = inspect.signature(type(model).__init__).parameters
    assert set(params) == set(signature) - {"self"}
    for name, value in params.items():
        assert getattr(model, name) is value, name
    again = type(model)(**params)          # the constructor stores its arguments as given
    for name, value in params.items():
        assert getattr(again, name) is value, name
    before = pickle.dumps(model)
    assert model.set_params(**params) is model
    assert pickle.dumps(model) == before
    with unchanged_on_error(model, ValueError, match="no_such_parameter"):
        model.set_params(no_such_parameter=1)


# -- pickling and cloning ----------------------------------------------------------------


@CASES
def test_pickle_round_trip_answers_exactly_as_the_original(case):
    model = case.fitted()
    restored = pickle.loads(pickle.dumps(model))
    _assert_same_answers(_answers(case, restored), _answers(case, model))
    for name in case.updates:
        call(model, name, case.calls[name])
        call(restored, name, case.calls[name])
        _assert_same_answers(_answers(case, restored), _answers(case, model))


@CASES
def test_clone_is_unfitted_with_the_same_parameters_and_fits_the_same(case):
    model = _fitted(case)
    twin = clone(model)
    assert joblib.hash(twin.get_params()) == joblib.hash(model.get_params())
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, BaseEstimator):
            assert getattr(twin, name) is not value, name
    with pytest.raises(NotFittedError):
        check_is_fitted(twin)
    case.fit_again(twin)
    _assert_same_answers(_answers(case, twin), _answers(case, model))
