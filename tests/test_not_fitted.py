"""Every public method and fitted property of every estimator raises
scikit-learn's ``NotFittedError`` before ``fit`` (issue 22), not an
``AttributeError`` from deep inside: found by calling each one on an
unfitted instance, so a new method is covered without editing this file."""

import inspect

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

import megkernel

#: Methods that fit (or configure) rather than use a fit.
_FITTING = {"fit", "partial_fit", "fit_transform", "fit_predict", "fit_pairs",
            "fit_pair_constraints", "get_params", "get_metadata_routing",
            "set_output"}

def _estimators():
    for name in sorted(megkernel.__all__):
        cls = getattr(megkernel, name)
        if inspect.isclass(cls) and issubclass(cls, BaseEstimator):
            yield name, cls


def _members():
    for name, cls in _estimators():
        for attr in sorted(dir(cls)):
            if attr.startswith("_") or attr in _FITTING or attr.startswith("set_"):
                continue
            member = inspect.getattr_static(cls, attr)
            if isinstance(member, property) or callable(member):
                yield pytest.param(cls, attr, id=f"{name}.{attr}")


_INPUTS = [np.array([[0, 1], [1, 2], [2, 0]]),
           np.random.RandomState(0).normal(size=(3, 3))]


@pytest.mark.parametrize(("cls", "attr"), list(_members()))
def test_use_before_fit_raises_not_fitted_error(cls, attr):
    estimator = cls()
    if isinstance(inspect.getattr_static(cls, attr), property):
        with pytest.raises(NotFittedError):
            getattr(estimator, attr)
        assert not hasattr(estimator, attr)
        return
    method = getattr(estimator, attr)
    required = [p for p in inspect.signature(method).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    errors = []
    for X in _INPUTS:  # pairs, then features: whichever the method reads
        arguments = [X, np.ones(len(X))][:len(required)]
        try:
            method(*arguments)
        except NotFittedError:
            return
        except (ValueError, TypeError) as error:  # the other kind of input
            errors.append(error)
    pytest.fail(f"{cls.__name__}.{attr} before fit: no NotFittedError ({errors})")
