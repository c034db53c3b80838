"""A transaction restores the estimator in one step: a second interrupt cannot tear it."""

import pickle
import sys

import pytest
from conftest import low_rank_kernel, random_pairs, sq_dist

from megkernel import MEGKernelRegressor
from megkernel._pair_estimator import unchanged_on_error


def _restore_lines():
    """The code object of ``unchanged_on_error`` (whose line events are traced)."""
    return unchanged_on_error.__wrapped__.__code__


@pytest.mark.parametrize("second_at", range(1, 8))
def test_a_second_interrupt_during_the_restore_leaves_the_model_whole(second_at):
    """A KeyboardInterrupt inside the block, then another at the n-th line event of
    the restore itself: the model is either restored or as the block left it (the
    restore never started), never torn between the two (no attributes at all)."""
    pairs = random_pairs(6, 40, 0)  # a kernel's distances: a fit without notes on its data
    model = MEGKernelRegressor(solver="online", n_objects=6).fit(
        pairs, sq_dist(low_rank_kernel(6, 2, 0), pairs))
    before = pickle.dumps(model)
    inside = dict(model.__dict__, state_=None)
    code = _restore_lines()
    state = {"in_except": False, "events": 0}

    def local(frame, event, arg):
        if event == "exception" and not state["in_except"]:
            state["in_except"] = True  # the first interrupt reached the restore
        elif event == "line" and state["in_except"]:
            state["events"] += 1
            if state["events"] == second_at:
                raise KeyboardInterrupt("second")
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code else None

    with pytest.raises(KeyboardInterrupt):
        sys.settrace(tracer)
        try:
            with unchanged_on_error(model):
                model.__dict__["state_"] = None  # a change the restore must undo
                raise KeyboardInterrupt("first")
        finally:
            sys.settrace(None)
    whole = pickle.dumps(model) == before or model.__dict__.keys() == inside.keys()
    assert whole, sorted(model.__dict__)
