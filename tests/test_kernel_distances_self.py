"""An object's distance to itself is 0 under every keep_given mode: a fit
object's own column in transform, and distances_."""

import numpy as np
import pytest
from conftest import FixedKernelLearner as Fixed
from conftest import clustered_pair_table
from numpy.testing import assert_array_equal

from megkernel import KernelDistances
from megkernel._objects_verdict import KEEP_GIVEN_MODES
from megkernel.objects import clear_cache


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("mode", [*KEEP_GIVEN_MODES, "auto"])
def test_an_object_is_at_distance_zero_from_itself(mode, squared):
    ids, labels, points, table = clustered_pair_table(30, 1, 0.3, spread=1.0, separation=3.0)
    # the points' own kernel: distinct objects at positive learned distances
    step = KernelDistances(learner=Fixed(objects=ids, kernel=points @ points.T),
                           pairs=table[["a", "b"]], targets=table["sq"], given_squared=True,
                           keep_given=mode, squared=squared).fit(ids[::2], labels[::2])
    fit = step.fit_objects_
    out = step.transform(fit)
    assert_array_equal(np.diag(out), 0.0)
    off = ~np.eye(len(fit), dtype=bool)
    assert (out[off] > 0).all()  # and only itself
    # a fit object among others: its own column, wherever it stands in X
    rows = np.concatenate([ids[1::2][:3], fit[[4]], ids[1::2][3:5]])
    assert step.transform(rows)[3, 4] == 0.0
    assert_array_equal(np.diag(step.distances_), 0.0)
