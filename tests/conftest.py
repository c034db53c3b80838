"""Shared test configuration."""

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    """The tests' matrices are small: threaded BLAS only adds contention."""
    with threadpool_limits(limits=1):
        yield
