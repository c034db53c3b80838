"""KernelDistances over a stream of (pairs, targets) chunks: partial_fit in a
Pipeline / GridSearchCV, with the scale fixed over the whole stream."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import GridSearchCV, ShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from megkernel import DefiniteBoostKernel, KernelDistances, MEGKernelRegressor
from megkernel.objects import cache_info, clear_cache

D = 12


def _triples(n=900, seed=0, d=D):
    """Pairs of points in 3 clusters and their squared distances; the first
    chunk's pairs are the closest, so its mean is far from the stream's."""
    rng = np.random.default_rng(seed)
    labels = np.arange(d) % 3
    points = rng.normal(size=(d, 3)) * 0.3 + 2.0 * np.eye(3)[labels]
    a, b = rng.integers(0, d, (2, n))
    y = ((points[a] - points[b]) ** 2).sum(1)
    order = np.argsort(y < np.median(y))[::-1]  # the small distances first
    return np.column_stack([a, b])[order], y[order], labels


class Stream:
    """A picklable, re-iterable stream of chunks (optionally hostile)."""

    def __init__(self, pairs, y, size=100, *, bad_chunk=None, bad=None):
        self.pairs, self.y, self.size = pairs, y, size
        self.bad_chunk, self.bad = bad_chunk, bad
        self.calls = 0

    def __call__(self):
        self.calls += 1
        for i, start in enumerate(range(0, len(self.y), self.size)):
            chunk = (self.pairs[start:start + self.size], self.y[start:start + self.size])
            if i == self.bad_chunk:
                if self.bad == "interrupt" and self.calls > 1:
                    raise KeyboardInterrupt
                if self.bad == "other" and self.calls > 1:
                    chunk = (chunk[0], chunk[1] * 1.5)
                elif self.bad not in ("interrupt", "other"):
                    chunk = self.bad(chunk)
            yield chunk


def _reference(pairs, y, **params):
    """The paper's on-line MEG over the concatenation, in one call."""
    return MEGKernelRegressor(solver="online", **params).partial_fit(pairs, y)


def test_streaming_equals_one_online_pass_over_the_concatenation():
    clear_cache()
    pairs, y, _ = _triples()
    step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online", n_objects=D),
                           pairs=Stream(pairs, y)).fit(np.arange(D))
    moving = pairs[:, 0] != pairs[:, 1]
    trace = D * y[moving].mean() / 2            # trace="auto" over the whole stream
    assert np.trace(step.kernel_) == pytest.approx(trace, rel=1e-12)
    reference = _reference(pairs, y, n_objects=D, trace=trace)
    assert_allclose(step.kernel_, reference.kernel_, rtol=1e-10, atol=1e-12 * trace)
    if "solver" in MEGKernelRegressor().get_params():
        online = MEGKernelRegressor(n_objects=D, trace=trace, solver="online",
                                    n_epochs=1).fit(pairs, y)
        assert_allclose(step.kernel_, online.kernel_, rtol=1e-10, atol=1e-12 * trace)
    # the learner's own chunk-by-chunk partial_fit takes its trace from the first
    # chunk: a different kernel (what KernelDistances fixes)
    chained = MEGKernelRegressor(solver="online", n_objects=D)
    for start in range(0, len(y), 100):
        chained.partial_fit(pairs[start:start + 100], y[start:start + 100])
    assert abs(chained.trace_ - trace) > 0.1 * trace


def test_a_stream_replays_once_per_epoch():
    pairs, y, _ = _triples(seed=4)
    stream = Stream(pairs, y)
    step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online", n_objects=D, n_epochs=3),
                           pairs=stream).fit(np.arange(D))
    assert stream.calls == 1 + 3                  # the scan, then three passes
    moving = pairs[:, 0] != pairs[:, 1]
    reference = MEGKernelRegressor(solver="online", n_objects=D, trace=D * y[moving].mean() / 2)
    for _ in range(3):
        reference.partial_fit(pairs, y)
    assert_allclose(step.kernel_, reference.kernel_, rtol=1e-10,
                    atol=1e-12 * reference.trace_)
    one_pass = _reference(pairs, y, n_objects=D, trace=reference.trace_)
    assert not np.allclose(step.kernel_, one_pass.kernel_, rtol=1e-3)


def test_a_stream_of_ids_takes_all_its_ids_as_the_objects():
    pairs, y, _ = _triples(seed=1)
    names = np.array([f"p{i:02d}" for i in range(D)], dtype=object)
    late = np.isin(pairs, [10, 11]).any(axis=1)  # ids 10, 11 only after the first chunk
    pairs = np.concatenate([pairs[~late], pairs[late]])
    y = np.concatenate([y[~late], y[late]])
    ids = names[pairs]
    step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online"),
                           pairs=Stream(ids, y, 150)).fit(names)
    assert_array_equal(step.objects_, names)     # sorted distinct ids
    moving = pairs[:, 0] != pairs[:, 1]
    reference = _reference(ids, y, trace=D * y[moving].mean() / 2)
    assert_allclose(step.kernel_, reference.kernel_, rtol=1e-10,
                    atol=1e-12 * reference.trace_)


def test_a_stream_with_a_prior_matrix_or_a_low_rank_prior():
    pairs, y, _ = _triples(seed=2)
    rng = np.random.default_rng(0)
    factor = rng.normal(size=(D, 4))
    prior = factor @ factor.T + 0.1 * np.eye(D)
    for params in (dict(init=prior), dict(init_factor=factor)):
        step = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online", **params),
                               pairs=Stream(pairs, y, 128)).fit(np.arange(D))
        # trace="auto" over all pairs by its definition: mean(y) / mean(v^T W_1 v)
        W1 = prior / np.trace(prior) if "init" in params else (
            factor @ factor.T / np.sum(factor ** 2))
        moving = pairs[:, 0] != pairs[:, 1]
        a, b = pairs[moving].T
        prior_sq = W1[a, a] + W1[b, b] - 2 * W1[a, b]
        trace = y[moving].mean() / prior_sq.mean()
        reference = _reference(pairs, y, trace=trace, **params)
        assert np.trace(step.kernel_) == pytest.approx(trace, rel=1e-9)
        assert_allclose(step.kernel_, reference.kernel_, rtol=1e-8, atol=1e-10 * trace)


def test_a_stream_in_a_grid_search_is_learned_once_per_setting():
    clear_cache()
    pairs, y, labels = _triples(n=600, seed=3)
    stream = Stream(pairs, y)
    pipe = Pipeline([("distances", KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online",
                                                                              n_objects=D),
                                                   pairs=stream)),
                     ("knn", KNeighborsClassifier(1, metric="precomputed"))])
    search = GridSearchCV(pipe, {"distances__learner__learning_rate": [0.1, 0.5]},
                          cv=ShuffleSplit(3, test_size=0.5, random_state=0))
    search.fit(np.arange(D), labels)
    assert cache_info()["fits"] == 2
    best = search.best_estimator_.named_steps["distances"]
    rate = search.best_params_["distances__learner__learning_rate"]
    moving = pairs[:, 0] != pairs[:, 1]
    reference = _reference(pairs, y, n_objects=D, learning_rate=rate,
                           trace=D * y[moving].mean() / 2)
    assert_allclose(best.kernel_, reference.kernel_, rtol=1e-10,
                    atol=1e-12 * reference.trace_)


# -- hostile streams --------------------------------------------------------------

def _assert_unchanged(estimator, before):
    """The very same attributes (a fit commits all of them in one step)."""
    assert estimator.__dict__.keys() == before.keys()
    for name, value in before.items():
        assert estimator.__dict__[name] is value, name


def _nan(chunk):
    return chunk[0], np.where(np.arange(len(chunk[1])) == 3, np.nan, chunk[1])


@pytest.mark.parametrize("bad, message", [
    (lambda chunk: chunk[0], r"Chunk 2 of the stream is not a \(pairs, targets\) pair"),
    (lambda chunk: (chunk[0][:, :1], chunk[1]), r"Chunk 2 .* shape \(n_pairs, 2\)"),
    (lambda chunk: (chunk[0][:0], chunk[1][:0]), r"Chunk 2 .* n_pairs >= 1"),
    (lambda chunk: (chunk[0], chunk[1][:-1]), r"Chunk 2 .* targets must have shape \(100,\)"),
    (lambda chunk: (chunk[0], np.full(len(chunk[1]), "x")), "Chunk 2 .* must be numbers"),
    (_nan, "Chunk 2 of the stream has NaN"),
    (lambda chunk: (chunk[0] - 50, chunk[1]), "Chunk 2 of the stream: pairs .*negative"),
    (lambda chunk: (chunk[0], -chunk[1]), "Chunk 2 of the stream: .*negative"),
    ("other", "other chunks on a later pass"),
])
def test_a_bad_chunk_fails_clearly_and_changes_nothing(bad, message):
    clear_cache()
    pairs, y, _ = _triples()
    fitted = KernelDistances(given_squared=True,
                           learner=MEGKernelRegressor(solver="online", n_objects=D),
                             pairs=Stream(pairs, y)).fit(np.arange(D))
    before = dict(fitted.__dict__)
    hostile = Stream(pairs, y, bad_chunk=2, bad=bad)
    clear_cache()  # else a stream whose first pass is the good one's hits the cache
    with pytest.raises(ValueError, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted.set_params(pairs=hostile).fit(np.arange(D))
    assert fitted.pairs is hostile
    fitted.set_params(pairs=before["pairs"])
    _assert_unchanged(fitted, before)
    assert cache_info()["size"] == 0             # nothing cached for the bad stream


def test_an_interrupt_mid_stream_changes_nothing():
    clear_cache()
    pairs, y, _ = _triples()
    fitted = KernelDistances(kernel=np.eye(D)).fit(np.arange(D))
    before = dict(fitted.__dict__)
    stream = Stream(pairs, y, bad_chunk=5, bad="interrupt")
    with pytest.raises(KeyboardInterrupt):
        fitted.set_params(kernel=None, learner=MEGKernelRegressor(solver="online", n_objects=D),
                          pairs=stream, given_squared=True).fit(np.arange(D))
    assert stream.calls == 2                      # the scan, then the learning pass
    fitted.set_params(kernel=before["kernel"], learner=None, pairs=None, given_squared=None)
    _assert_unchanged(fitted, before)


def _empty():
    return iter(())


@pytest.mark.parametrize("params, message", [
    (dict(pairs=_empty), "yielded no chunks"),
    (dict(pairs=lambda: 5), "returned int"),
    (dict(pairs=lambda: np.zeros((3, 2))), "returned ndarray"),
    (dict(pairs=lambda: iter([([[0, 1]], [1.0])]), targets=[1.0]), "leave targets=None"),
    (dict(pairs=lambda: iter([([[0, 1]], [1.0])]), learner=None), "needs a learner"),
    (dict(pairs=lambda: iter([([[0, 1]], [1.0])]), learner=DefiniteBoostKernel()),
     "partial_fit, which DefiniteBoostKernel does not have"),
    (dict(pairs=iter([([[0, 1]], [1.0])])), "pairs"),   # a one-shot iterator
    (dict(pairs=lambda: iter([([[0, 1]], [1.0])]),
          learner=MEGKernelRegressor(solver="online", shuffle=True)), "cannot shuffle a stream"),
    (dict(pairs=lambda: iter([([[0, 1]], [1.0])]), learner=MEGKernelRegressor(solver="online",
        learning_rate=-1.0)), "^The 'learning_rate' parameter"),  # the learner's, not a chunk's
])
def test_streams_of_the_wrong_kind_are_refused(params, message):
    step = KernelDistances(given_squared=True, **{"learner": MEGKernelRegressor(solver="online",
                                                            n_objects=D), **params})
    with pytest.raises(ValueError, match=message):
        step.fit(np.arange(D))
    assert not hasattr(step, "objects_")
