"""The kernel-learner protocol: KernelDistances asks its learner for kernels
through it only, so a learner written elsewhere plugs in (a Pipeline, a grid
search, the verdict, distances=), MEG's stream learns what its one-shot
on-line fit learns, and a learner without the protocol is refused by name."""

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import clustered_pair_table
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.model_selection import GridSearchCV, ShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

import megkernel
from megkernel import DefiniteBoostKernel, KernelDistances, MEGKernelRegressor
from megkernel._kernel_learner import PROTOCOL_METHODS
from megkernel.objects import (
    KernelLearnerMixin,
    LearnedKernel,
    PairStream,
    cache_info,
    clear_cache,
)


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


class ClassicalScaling(KernelLearnerMixin, BaseEstimator):
    """A learner written outside megkernel: the kernel of classical scaling.

    The observed squared distances (repeated pairs averaged, missing ones
    at their mean) double-centred, negative eigenvalues dropped, the
    ``rank`` largest kept. It has none of MEG's parameters.
    """

    def __init__(self, rank=None):
        self.rank = rank

    def fit(self, pairs, targets, objects=None):
        values = np.asarray(pairs, dtype=object)
        ids = (sorted(set(values.ravel().tolist())) if objects is None
               else list(objects))
        at = {key: i for i, key in enumerate(ids)}
        a = np.array([at[key] for key in values[:, 0]])
        b = np.array([at[key] for key in values[:, 1]])
        d = len(ids)
        y = np.asarray(targets, dtype=float)
        sums, counts = np.zeros((d, d)), np.zeros((d, d))
        np.add.at(sums, (a, b), y)
        np.add.at(sums, (b, a), y)
        np.add.at(counts, (a, b), 1)
        np.add.at(counts, (b, a), 1)
        observed = counts > 0
        sq = np.where(observed, sums / np.maximum(counts, 1), sums[observed].sum()
                      / counts[observed].sum())
        np.fill_diagonal(sq, 0.0)
        centring = np.eye(d) - 1.0 / d
        values, vectors = np.linalg.eigh(-0.5 * centring @ sq @ centring)
        values = np.maximum(values, 0.0)
        if self.rank is not None:
            values[:-self.rank] = 0.0
        self.kernel_ = (vectors * values) @ vectors.T
        self.objects_ = np.asarray(ids, dtype=object)
        return self

    def learn_kernel(self, pairs, targets=None, *, objects=None):
        """Learn over every object of a matrix (``objects``), not only those paired."""
        model = clone(self).fit(pairs, targets, objects=objects)
        return LearnedKernel(model.kernel_, model.objects_)

    def targets_are_distances(self, targets):
        return True

    def learns_from_distances(self):
        return True


def _clusters(n=30, seed=0, fraction=0.5):
    return clustered_pair_table(n, seed, fraction, spread=0.5, separation=3.0, clusters=3, dim=2)


def test_a_learner_of_ones_own_plugs_into_a_pipeline_and_a_grid_search():
    ids, labels, _, table = _clusters()
    learner = ClassicalScaling()
    pipe = Pipeline([("distances", KernelDistances(learner=learner, pairs=table[["a", "b"]],
                                                   targets=table["sq"], given_squared=True)),
                     ("knn", KNeighborsClassifier(metric="precomputed"))])
    grid = [{"distances__learner": [None], "knn__n_neighbors": [1, 3]},
            {"distances__learner__rank": [1, 2, None], "knn__n_neighbors": [1, 3]}]
    search = GridSearchCV(pipe, grid, cv=ShuffleSplit(3, test_size=0.5, random_state=0))
    search.fit(ids, labels)
    assert cache_info()["fits"] == 3                 # a kernel per rank, whatever the split
    assert search.best_score_ > 0.9
    assert not hasattr(learner, "kernel_")           # the learner itself is never fitted
    best = search.best_estimator_.named_steps["distances"]
    if best.learner is not None:
        direct = best.learner.learn_kernel(table[["a", "b"]], table["sq"])
        assert_allclose(best.kernel_, direct.kernel, atol=1e-10)
        assert_array_equal(best.objects_, direct.objects)
    # the verdict asks the learner whether its targets are distances: they are
    step = KernelDistances(given_squared=True,
                           learner=ClassicalScaling(rank=2), pairs=table[["a", "b"]],
                           targets=table["sq"]).fit(ids, labels)
    assert not np.isnan(step.verdict_["observed"])


def test_a_learner_of_ones_own_learns_from_a_distance_matrix_over_all_its_objects():
    ids, labels, points, _ = _clusters()
    D = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    D[0, 1:] = D[1:, 0] = np.nan                      # s00 has no observed distance
    step = KernelDistances(learner=ClassicalScaling(rank=2), distances=D,
                           objects=ids).fit(ids, labels)
    assert_array_equal(step.objects_, ids)            # objects= of learn_kernel: the matrix's
    assert step.transform([ids[0]]).shape == (1, len(ids))
    assert step.verdict_["learned"] > 0.8


class Sealed:
    """The protocol, get_params and set_params, and nothing a meta-estimator may
    read: every public attribute read from outside is logged, and its fit
    fails (KernelDistances must fit a clone through learn_kernel)."""

    reads = set()
    learned_by = []

    def __init__(self, scale=1.0):
        self.scale = scale

    def __getattribute__(self, name):
        if not name.startswith("_"):
            type(self).reads.add(name)
        return object.__getattribute__(self, name)

    def get_params(self, deep=True):
        return {"scale": vars(self)["scale"]}

    def set_params(self, **params):
        vars(self).update(params)
        return self

    def fit(self, pairs, targets=None):
        raise AssertionError("KernelDistances fitted the learner itself")

    def learn_kernel(self, pairs, targets=None, *, objects=None):
        type(self).learned_by.append(id(self))
        ids = np.unique(np.asarray(pairs, dtype=object).ravel())
        return LearnedKernel(vars(self)["scale"] * np.eye(len(ids)), ids)

    def check_stream(self):
        pass

    def learn_kernel_stream(self, stream):
        ids = stream.ids if stream.ids is not None else np.arange(stream.max_index + 1)
        return LearnedKernel(np.eye(len(ids)), ids)

    def targets_are_distances(self, targets):
        return False

    def learns_from_distances(self):
        return False


def test_kernel_distances_calls_the_protocol_only():
    Sealed.reads.clear()
    Sealed.learned_by.clear()
    learner = Sealed(2.0)
    step = KernelDistances(given_squared=True,
                           learner=learner, pairs=[["a", "b"], ["b", "c"]], targets=[1.0, 2.0])
    step.fit(["a", "b", "c"], [0, 1, 1])
    assert_allclose(step.kernel_, 2.0 * np.eye(3))
    assert Sealed.learned_by == [id(learner)]         # asked, never fitted (fit raises)
    stream = KernelDistances(given_squared=True,
                             learner=Sealed(), pairs=lambda: iter([([[0, 2]], [1.0])]))
    assert_array_equal(stream.fit([0, 1, 2]).objects_, [0, 1, 2])
    allowed = {"fit", "get_params", "set_params", *PROTOCOL_METHODS, "declared_objects"}
    assert Sealed.reads <= allowed, Sealed.reads - allowed
    with pytest.raises(ValueError, match="Sealed is not one: give it pairs= and targets="):
        KernelDistances(learner=Sealed(), distances=np.ones((3, 3)) - np.eye(3)).fit([0])


class Plain(RegressorMixin, BaseEstimator):
    """A scikit-learn estimator with kernel_ and objects_, but no protocol."""

    def fit(self, pairs, targets):
        self.objects_ = np.unique(np.asarray(pairs).ravel())
        self.kernel_ = np.eye(len(self.objects_))
        return self


class OnlyLearnKernel(Plain):
    def learn_kernel(self, pairs, targets=None, *, objects=None):
        model = clone(self).fit(pairs, targets)
        return LearnedKernel(model.kernel_, model.objects_)


class WrongShape(KernelLearnerMixin, Plain):
    def learn_kernel(self, pairs, targets=None, *, objects=None):
        return LearnedKernel(np.eye(2), np.arange(3))


@pytest.mark.parametrize("learner, message", [
    (Plain(), r"kernel-learner protocol, which Plain lacks \(learn_kernel, check_stream, "
              r"learn_kernel_stream, targets_are_distances, learns_from_distances\): make "
              r"Plain a subclass of megkernel.objects.KernelLearnerMixin"),
    (OnlyLearnKernel(), r"OnlyLearnKernel lacks \(check_stream, learn_kernel_stream, "
                        r"targets_are_distances, learns_from_distances\)"),
    (WrongShape(), r"WrongShape.learn_kernel returned a kernel of shape \(2, 2\) for 3 "
                   r"objects"),
])
def test_a_learner_without_the_protocol_is_refused_naming_what_to_implement(learner, message):
    step = KernelDistances(given_squared=True,
                           learner=learner, pairs=[[0, 1], [1, 2]], targets=[1.0, 1.0])
    with pytest.raises(ValueError, match=message):
        step.fit([0, 1])
    assert not hasattr(step, "objects_")
    assert cache_info()["size"] == 0


def test_the_mixin_makes_a_plain_learner_plug_in():
    class Mixed(KernelLearnerMixin, Plain):
        pass

    step = KernelDistances(given_squared=True,
                           learner=Mixed(), pairs=[[0, 1], [1, 2]], targets=[1.0, 1.0])
    assert_allclose(step.fit([0, 1]).kernel_, np.eye(3))
    assert Mixed().learns_from_distances() and Mixed().targets_are_distances([1.0])


def test_the_defaults_answer_for_meg_and_definiteboost_as_before():
    assert MEGKernelRegressor().learns_from_distances()
    assert MEGKernelRegressor().targets_are_distances([1.0, 2.0])
    boost = DefiniteBoostKernel()
    assert not boost.learns_from_distances()
    assert not boost.targets_are_distances([1, -1, 1])            # pair labels
    assert boost.targets_are_distances([0.5, 2.0, 1.5])           # read as squared distances
    assert not DefiniteBoostKernel(y_kind="labels").targets_are_distances([0.5, 2.0])
    assert DefiniteBoostKernel(y_kind="distances").targets_are_distances([1, 2])
    assert not boost.targets_are_distances(["x", "y"])
    with pytest.raises(ValueError, match="partial_fit, which DefiniteBoostKernel does not"):
        boost.check_stream()
    with pytest.raises(ValueError, match="cannot shuffle a stream"):
        MEGKernelRegressor(shuffle=True).check_stream()


def test_learn_kernel_is_fit_on_a_clone():
    ids, _, _, table = _clusters()
    learner = MEGKernelRegressor(solver="online")
    learned = learner.learn_kernel(table[["a", "b"]], table["sq"])
    assert not hasattr(learner, "kernel_")
    reference = MEGKernelRegressor(solver="online").fit(table[["a", "b"]], table["sq"])
    assert_array_equal(learned.kernel, reference.kernel_)
    assert_array_equal(learned.objects, reference.objects_)
    extra = np.r_[ids, ["extra"]].astype(object)           # objects: used when undeclared
    assert_array_equal(learner.learn_kernel(table[["a", "b"]], table["sq"],
                                            objects=extra).objects, extra)
    declared = MEGKernelRegressor(solver="online", objects=ids)
    assert_array_equal(declared.learn_kernel(table[["a", "b"]], table["sq"],
                                             objects=extra).objects, ids)


def _triples(n=600, d=12, seed=0):
    """Squared distances of random pairs, the smallest first (the first chunk's
    mean is far from the stream's)."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(d, 3))
    a, b = rng.integers(0, d, (2, n))
    y = ((points[a] - points[b]) ** 2).sum(1)
    order = np.argsort(y)
    return np.column_stack([a, b])[order], y[order]


def _pair_stream(pairs, y, size=100):
    """A PairStream built by hand, as KernelDistances builds it."""
    def chunks():
        for start in range(0, len(y), size):
            yield pairs[start:start + size], y[start:start + size]
    moving = pairs[:, 0] != pairs[:, 1]
    return PairStream(chunks, len(y), None, int(pairs.max()), int(moving.sum()),
                      float(y[moving].sum()))


@pytest.mark.parametrize("params", [dict(n_objects=12), dict(init_factor="low rank"),
                                    dict(init="matrix")])
def test_megs_stream_learns_its_one_shot_online_fit(params):
    pairs, y = _triples()
    rng = np.random.default_rng(1)
    factor = rng.normal(size=(12, 4))
    if params.get("init_factor") == "low rank":
        params = dict(init_factor=factor)                 # low-rank learning_rate="auto" too
    elif params.get("init") == "matrix":
        params = dict(init=factor @ factor.T + 0.1 * np.eye(12))
    learner = MEGKernelRegressor(solver="online", **params)
    learned = learner.learn_kernel_stream(_pair_stream(pairs, y))
    assert not hasattr(learner, "kernel_")
    one_shot = MEGKernelRegressor(solver="online", **params).partial_fit(pairs, y)
    assert_allclose(learned.kernel, one_shot.kernel_, rtol=1e-9,
                    atol=1e-11 * np.trace(one_shot.kernel_))
    # and through KernelDistances, as before the protocol
    step = KernelDistances(learner=learner, pairs=_pair_stream(pairs, y).chunks,
                           given_squared=True)
    assert_allclose(step.fit(np.arange(12)).kernel_, one_shot.kernel_, rtol=1e-9,
                    atol=1e-11 * np.trace(one_shot.kernel_))


def test_a_chunk_the_learner_refuses_is_named():
    pairs, y = _triples()
    y = y.copy()
    y[250] = -1.0                                         # in chunk 2
    with pytest.raises(ValueError, match="^Chunk 2 of the stream: .*negative"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MEGKernelRegressor(solver="online", n_objects=12, trace=1.0).learn_kernel_stream(
            _pair_stream(pairs, y))


def test_the_default_stream_refuses_a_scale_it_cannot_fix():
    class Streaming(KernelLearnerMixin, BaseEstimator):
        def __init__(self, trace="auto"):
            self.trace = trace

        def partial_fit(self, pairs, targets):
            return self

    with pytest.raises(ValueError, match="override learn_kernel_stream"):
        Streaming().learn_kernel_stream(_pair_stream(*_triples()))


def _code(module):
    path = Path(megkernel.__file__).parent / f"{module}.py"
    return ast.parse(path.read_text())


@pytest.mark.parametrize("module", ["objects", "_objects_cache", "_objects_given",
                                    "_objects_stream", "_objects_verdict"])
def test_kernel_distances_knows_no_learner(module):
    """No import of an estimator, no isinstance of one, no private call on the
    learner: KernelDistances' modules know the protocol only."""
    tree = _code(module)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module not in ("meg_regressor", "definiteboost_kernel"), node.module
            assert not {alias.name for alias in node.names} & {
                "MEGKernelRegressor", "DefiniteBoostKernel"}
        if isinstance(node, ast.Name):
            assert node.id not in ("MEGKernelRegressor", "DefiniteBoostKernel", "is_regressor")
        if isinstance(node, ast.Attribute) and (
                isinstance(node.value, ast.Name) and node.value.id == "learner"
                or isinstance(node.value, ast.Attribute) and node.value.attr == "learner"):
            # the cache key hashes get_params(deep=True); __name__ names a class given
            assert node.attr in {"get_params", "__name__", *PROTOCOL_METHODS}, node.attr


def test_squared_distances_of_reads_targets_in_the_kernels_units():
    from megkernel._kernel_learner import OPTIONAL_PROTOCOL_METHODS

    assert OPTIONAL_PROTOCOL_METHODS == ("declared_objects", "squared_distances_of")
    targets = np.array([1.0, 2.0, 3.0])
    assert_array_equal(MEGKernelRegressor().squared_distances_of(targets), targets)
    assert_array_equal(MEGKernelRegressor(squared=False).squared_distances_of(targets),
                       targets**2)
    assert DefiniteBoostKernel().squared_distances_of([1, -1, 1]) is None
    assert_array_equal(DefiniteBoostKernel(y_kind="sq_distances").squared_distances_of(
        targets), targets)


def test_kernel_distances_places_new_objects_through_the_protocol_only():
    Sealed.reads.clear()
    learner = Sealed(2.0)
    step = KernelDistances(given_squared=True, learner=learner, pairs=[["a", "b"], ["b", "c"]],
                           targets=[1.0, 2.0], new_pairs=[["d", "a"], ["d", "b"]],
                           new_distances=[1.0, 1.0])
    step.fit(["a", "b", "c"])
    assert step.transform(["d"]).shape == (1, 3)
    allowed = {"fit", "get_params", "set_params", *PROTOCOL_METHODS, "declared_objects",
               "squared_distances_of"}
    assert Sealed.reads <= allowed, Sealed.reads - allowed


class Declaring(Sealed):
    """A protocol learner of one's own whose objects are fixed by a method, not a parameter."""

    def declared_objects(self):
        return ["a", "b", "c"]

    def learn_kernel(self, pairs, targets=None, *, objects=None):
        ids = np.asarray(pairs, dtype=object).ravel().tolist()
        unknown = [key for key in ids if key not in ("a", "b", "c")]
        if unknown:
            raise ValueError(f"X names {unknown[0]!r}")
        return LearnedKernel(np.eye(3), np.array(["a", "b", "c"], dtype=object))


def test_a_learners_declared_objects_are_asked_not_read_from_its_parameters():
    # its get_params has no objects: the step names a stray id of its table by
    # asking declared_objects(), in its own terms (row and column of pairs)
    Sealed.reads.clear()
    step = KernelDistances(given_squared=True, learner=Declaring(),
                           pairs=[["a", "b"], ["b", "z"]], targets=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"pairs names the object 'z' \(row 1, column 1\), "
                                         r"which is not one of the 3 objects Declaring "
                                         r"declares"):
        step.fit(["a", "b", "c"])
    assert "declared_objects" in Sealed.reads
    fitted = KernelDistances(given_squared=True, learner=Declaring(),
                             pairs=[["a", "b"], ["b", "c"]], targets=[1.0, 2.0]).fit(["a"])
    assert_array_equal(fitted.objects_, ["a", "b", "c"])
    assert MEGKernelRegressor(objects=["x", "y"]).declared_objects() == ["x", "y"]
    assert DefiniteBoostKernel().declared_objects() is None
