"""Resource bounds as an input rule (issue 22): a parameter that scales
memory is checked against what it implies before anything is allocated,
with the number in the message."""

import pickle
import tracemalloc

import numpy as np
import pytest

from megkernel import DefiniteBoostKernel, MEGKernelRegressor, definiteboost_pairs, meg

HUGE = 10**8  # a dense model would be 10^8 x 10^8 (71 PiB)


def _refused_cheaply(call, *numbers):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="dense mode holds at most 5000") as error:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    for number in numbers:
        assert str(number) in str(error.value)
    assert peak < 50 * 2**20, peak  # refused before any large allocation


@pytest.mark.parametrize("call", [
    lambda: MEGKernelRegressor(solver="online", n_objects=HUGE).fit([[0, 1]], [0.1]),
    lambda: MEGKernelRegressor(solver="online", n_objects=HUGE).partial_fit([[0, 1]], [0.1]),
    lambda: DefiniteBoostKernel(n_objects=HUGE, gamma=0.1).fit([[0, 1]]),
    lambda: meg([[0, 1]], [0.1], n_objects=HUGE),
    lambda: definiteboost_pairs([[0, 1]], n_objects=HUGE, gamma=0.1),
], ids=["MEG fit", "MEG partial_fit", "DefiniteBoost fit", "meg", "definiteboost_pairs"])
def test_an_explicit_huge_n_objects_is_refused_before_allocation(call):
    _refused_cheaply(call, "n_objects=100000000")


def test_more_declared_ids_than_dense_mode_holds_are_refused():
    ids = [f"object {i}" for i in range(5001)]
    _refused_cheaply(lambda: MEGKernelRegressor(solver="online", objects=ids).fit(
        [["object 0", "object 1"]], [0.1]), "len(objects)=5001")


def test_a_refused_size_leaves_a_fitted_model_unchanged():
    model = MEGKernelRegressor(solver="online", n_objects=3).fit([[0, 1], [1, 2]], [0.1, 0.2])
    before = pickle.dumps(model)
    model.set_params(n_objects=HUGE)
    with pytest.raises(ValueError, match="dense mode"):
        model.fit([[0, 1]], [0.1])
    model.set_params(n_objects=3)
    assert pickle.dumps(model) == before
    assert np.isfinite(model.kernel_).all()
