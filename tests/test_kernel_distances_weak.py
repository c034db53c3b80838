"""Without labels, ``keep_given="auto"`` keeps the given distances first when the
learner itself finds that its kernel explains little of its held-out pairs, and
blends them with a kernel that explains them."""

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import clustered_pair_table
from sklearn.base import BaseEstimator, RegressorMixin

from megkernel import KernelDistances, LearnedKernel, MEGKernelRegressor
from megkernel.objects import KernelLearnerMixin, clear_cache


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _noise_table(n=40, seed=0):
    """Targets with no structure at all: no kernel explains held-out pairs."""
    ids, _, _, table = clustered_pair_table(n, seed, spread=0.5, separation=3.0)
    rng = np.random.default_rng(seed + 1)
    return ids, table.assign(sq=rng.uniform(1.0, 2.0, len(table)))


def _fit(ids, table, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the learner's warnings are tested elsewhere
        return KernelDistances(learner=MEGKernelRegressor(objects=ids, random_state=0),
                               pairs=table[["a", "b"]], targets=table["sq"],
                               given_squared=True, **kw).fit(ids)


def test_a_weak_kernel_keeps_the_given_distances_first_without_labels():
    ids, table = _noise_table()
    learner = MEGKernelRegressor(objects=ids, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        learned = learner.learn_kernel(table[["a", "b"]], table["sq"], squared=True)
    assert learned.weak
    step = _fit(ids, table)
    assert step.keeps_given_ == "first"
    # the given distances rank first: each object's nearest other object is its
    # nearest measured partner
    D = step.transform(ids)
    np.fill_diagonal(D, np.inf)
    given = pd.concat([table, table.rename(columns={"a": "b", "b": "a"})])
    for i in (0, 7, 19):
        mine = given[given.a == ids[i]]
        assert ids[np.argmin(D[i])] == mine.sort_values("sq").iloc[0]["b"]


def test_a_kernel_that_explains_its_pairs_is_blended_without_labels():
    ids, _, _, table = clustered_pair_table(40, 0, spread=0.5, separation=3.0)
    learner = MEGKernelRegressor(objects=ids, random_state=0)
    assert not learner.learn_kernel(table[["a", "b"]], table["sq"], squared=True).weak
    assert _fit(ids, table).keeps_given_ == "blend"
    assert _fit(ids, table, keep_given="blend").keeps_given_ == "blend"


def test_an_explicit_mode_is_kept_for_a_weak_kernel():
    ids, table = _noise_table()
    assert _fit(ids, table, keep_given="blend").keeps_given_ == "blend"
    assert _fit(ids, table, keep_given="never").keeps_given_ == "never"


class _TwoFields(KernelLearnerMixin, RegressorMixin, BaseEstimator):
    """A learner of one's own returning (kernel, objects), no weak flag."""

    def __init__(self, objects=None):
        self.objects = objects

    def fit(self, X, y=None):
        self.objects_ = np.asarray(self.objects, dtype=object)
        self.kernel_ = np.eye(len(self.objects_))
        return self

    def learn_kernel(self, pairs, targets=None, *, objects=None, squared=None):
        model = self.fit(pairs, targets)
        return model.kernel_, model.objects_


def test_a_learner_returning_two_fields_is_not_weak():
    ids, table = _noise_table()
    step = KernelDistances(learner=_TwoFields(objects=ids), pairs=table[["a", "b"]],
                           targets=table["sq"], given_squared=True).fit(ids)
    assert step.keeps_given_ == "blend"
    assert LearnedKernel(np.eye(1), np.array(["a"], dtype=object)).weak is False


def test_the_weak_flag_survives_the_memory_folder_and_is_checked_there(tmp_path):
    ids, table = _noise_table()
    assert _fit(ids, table, memory=str(tmp_path)).keeps_given_ == "first"
    clear_cache()  # the next fit reads the folder
    assert _fit(ids, table, memory=str(tmp_path)).keeps_given_ == "first"
    headers = list(Path(tmp_path).rglob("*.json"))
    assert len(headers) == 1 and json.loads(headers[0].read_text())["weak"] is True
    header = json.loads(headers[0].read_text())
    header["weak"] = "yes"
    headers[0].write_text(json.dumps(header))
    clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = KernelDistances(learner=MEGKernelRegressor(objects=ids, random_state=0),
                               pairs=table[["a", "b"]], targets=table["sq"],
                               given_squared=True, memory=str(tmp_path)).fit(ids)
    discarded = [w for w in caught if "Discarded the cached kernel" in str(w.message)]
    assert len(discarded) == 1 and "weak flag" in str(discarded[0].message)
    assert step.keeps_given_ == "first"  # learned again, and stored anew
    assert json.loads(headers[0].read_text())["weak"] is True
