"""Reprs stay short: a learner built with thousands of ids does not print them."""

import numpy as np
import pandas as pd
import pytest
from conftest import low_rank_kernel, sq_dist
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, ShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from megkernel import DefiniteBoostKernel, KernelDistances, MEGKernelRegressor

IDS = np.array([f"protein-{i:05d}" for i in range(3000)], dtype=object)


@pytest.mark.parametrize("make", [
    lambda: MEGKernelRegressor(objects=IDS, random_state=0),
    lambda: MEGKernelRegressor(objects=list(IDS)),
    lambda: DefiniteBoostKernel(objects=IDS, init=np.eye(3000)),
    lambda: KernelDistances(learner=MEGKernelRegressor(objects=IDS),
                            pairs=pd.DataFrame({"a": IDS[:-1], "b": IDS[1:]}),
                            targets=np.ones(2999), objects=IDS),
])
def test_data_parameters_are_summarised(make):
    estimator = make()
    text = repr(estimator)
    assert len(text) < 400, text
    assert "protein-00003" not in text  # the fourth id on: summarised
    assert "3000 ids: 'protein-00000', 'protein-00001', 'protein-00002', ...>" in text
    # the parameters themselves are untouched, and clone still copies them
    assert estimator.get_params()["objects" if "objects" in estimator.get_params()
                                  else "learner__objects"] is not None
    assert repr(clone(estimator)) == text


def test_short_parameters_are_shown_as_given():
    assert repr(MEGKernelRegressor(objects=["a", "b"])) == "MEGKernelRegressor(objects=['a', 'b'])"


# max_iter=20 keeps the learner's fits short, which each says: beside the point here
@pytest.mark.filterwarnings("ignore:MEGKernelRegressor. the batch fit stopped at max_iter=20 "
                            ":sklearn.exceptions.ConvergenceWarning")
def test_a_grid_over_learners_reads():
    ids = IDS[:30]
    rng = np.random.default_rng(0)
    a = rng.integers(0, 30, size=200)
    b = (a + rng.integers(1, 30, size=200)) % 30  # pairs of distinct objects
    pipe = Pipeline([("kernel", KernelDistances(pairs=np.column_stack([ids[a], ids[b]]),
                                                targets=sq_dist(low_rank_kernel(30, 3, 0),
                                                                np.column_stack([a, b])),
                                                given_squared=True)),
                     ("knn", KNeighborsClassifier(n_neighbors=1, metric="precomputed"))])
    learner = MEGKernelRegressor(objects=ids, random_state=0, max_iter=20)
    search = GridSearchCV(pipe, {"kernel__learner": [None, learner]},
                          cv=ShuffleSplit(2, test_size=0.5, random_state=0))
    search.fit(ids, np.arange(30) % 3)
    shown = [repr(value) for value in search.cv_results_["param_kernel__learner"]]
    assert max(len(text) for text in shown) < 200, shown
