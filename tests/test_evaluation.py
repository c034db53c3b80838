"""The paper's k-NN protocol and the k-NN kernel scorer."""

import pickle

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.model_selection import GridSearchCV, ShuffleSplit, cross_val_score

from megkernel.datasets import distance_triples, load_wine_kernel
from megkernel.evaluation import make_knn_kernel_scorer, nearest_neighbor_error
from megkernel.neighbors import KernelKNeighborsClassifier


@pytest.fixture(scope="module")
def wine():
    return load_wine_kernel()


@pytest.mark.parametrize("seed", [0, 7])
def test_protocol_equals_cross_val_score(wine, seed):
    result = nearest_neighbor_error(wine.kernel, wine.labels, random_state=seed)
    accuracies = cross_val_score(
        KernelKNeighborsClassifier(), wine.kernel, wine.labels,
        cv=ShuffleSplit(10, test_size=0.5, random_state=seed))
    np.testing.assert_array_equal(result.errors, 1.0 - accuracies)
    assert result.mean == np.mean(1.0 - accuracies)
    assert result.std == np.std(1.0 - accuracies)


def test_protocol_parameters_are_passed_on(wine):
    result = nearest_neighbor_error(wine.kernel, wine.labels, n_splits=4,
                                    test_size=0.3, n_neighbors=3, random_state=1)
    accuracies = cross_val_score(
        KernelKNeighborsClassifier(n_neighbors=3), wine.kernel, wine.labels,
        cv=ShuffleSplit(4, test_size=0.3, random_state=1))
    assert result.errors.shape == (4,)
    np.testing.assert_array_equal(result.errors, 1.0 - accuracies)


def test_protocol_is_reproducible_and_seed_dependent(wine):
    first = nearest_neighbor_error(wine.kernel, wine.labels, random_state=3)
    again = nearest_neighbor_error(wine.kernel, wine.labels, random_state=3)
    other = nearest_neighbor_error(wine.kernel, wine.labels, random_state=4)
    np.testing.assert_array_equal(first.errors, again.errors)
    assert not np.array_equal(first.errors, other.errors)


def test_target_kernel_beats_identity(wine):
    d = len(wine.labels)
    target = nearest_neighbor_error(wine.kernel, wine.labels, random_state=0)
    identity = nearest_neighbor_error(np.eye(d) / d, wine.labels, random_state=0)
    assert target.mean < 0.2
    assert identity.mean > 0.5  # all distances tie: a guess among 3 classes


@pytest.mark.parametrize(
    ("params", "match"),
    [({"n_splits": 0}, "n_splits"), ({"test_size": 1.5}, "test_size"),
     ({"n_neighbors": 0}, "n_neighbors")],
)
def test_protocol_rejects_bad_parameters(wine, params, match):
    with pytest.raises(ValueError, match=match):
        nearest_neighbor_error(wine.kernel, wine.labels, **params)


def test_protocol_rejects_mismatched_labels(wine):
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        nearest_neighbor_error(wine.kernel, wine.labels[:-1])


class ShrunkTargetKernel(BaseEstimator):
    """A stand-in kernel learner: kernel_ = (1 - shrinkage) K + shrinkage I/d."""

    def __init__(self, target=None, shrinkage=0.0):
        self.target = target
        self.shrinkage = shrinkage

    def fit(self, X, y=None):
        d = len(self.target)
        self.kernel_ = (1 - self.shrinkage) * self.target + self.shrinkage * np.eye(d) / d
        return self


def test_scorer_is_knn_accuracy_of_learned_kernel(wine):
    scorer = make_knn_kernel_scorer(wine.labels, n_splits=5, random_state=2)
    learner = ShrunkTargetKernel(wine.kernel, shrinkage=0.5).fit(None)
    expected = 1.0 - nearest_neighbor_error(
        learner.kernel_, wine.labels, n_splits=5, random_state=2).mean
    assert scorer(learner, None, None) == expected
    assert pickle.loads(pickle.dumps(scorer))(learner, None, None) == expected
    assert "n_splits=5" in repr(scorer)


@pytest.mark.slow
def test_scorer_selects_in_grid_search(wine):
    pairs, y = distance_triples(wine.kernel, 200, random_state=0)
    scorer = make_knn_kernel_scorer(wine.labels, random_state=0)
    search = GridSearchCV(
        ShrunkTargetKernel(wine.kernel), {"shrinkage": [1.0, 0.0]},
        scoring=scorer, cv=3, n_jobs=2,
    ).fit(pairs, y)
    assert search.best_params_ == {"shrinkage": 0.0}
    assert search.cv_results_["mean_test_score"][0] < 0.5


def test_scorer_rejects_estimators_without_matching_kernel(wine):
    scorer = make_knn_kernel_scorer(wine.labels)
    with pytest.raises(ValueError, match="kernel_"):
        scorer(ShrunkTargetKernel(wine.kernel), None, None)
    small = ShrunkTargetKernel(np.eye(5) / 5).fit(None)
    with pytest.raises(ValueError, match="52 object labels"):
        scorer(small, None, None)
