"""Shared test configuration."""

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    """The tests' matrices are small: threaded BLAS only adds contention."""
    with threadpool_limits(limits=1):
        yield


def _expected_failure(item, call):
    """An exception in a test marked ``xfail`` (unconditionally, with no
    ``raises`` or a matching one), which pytest reports as xfailed."""
    if call.when != "call" or call.excinfo is None or item.config.getoption("runxfail"):
        return False
    marker = item.get_closest_marker("xfail")
    if marker is None:
        return False
    conditions = list(marker.args) + ([marker.kwargs["condition"]]
                                      if "condition" in marker.kwargs else [])
    if not all(condition is True for condition in conditions):
        return False
    if not marker.kwargs.get("run", True):
        return False
    raises = marker.kwargs.get("raises")
    return raises is None or call.excinfo.errisinstance(raises)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Expected failures get a one-line report instead of a formatted traceback.

    An xfailed test's traceback is never shown, but pytest formats it anyway,
    parsing the source of every frame: for scikit-learn's expected estimator
    check failures (deep in its long ``estimator_checks.py``) that was most of
    the suite's run time. Failures, xpasses and ``--runxfail`` are unchanged.
    """
    if not _expected_failure(item, call):
        return (yield)
    item.repr_failure = lambda excinfo, style=None: excinfo.exconly()
    try:
        return (yield)
    finally:
        del item.repr_failure
