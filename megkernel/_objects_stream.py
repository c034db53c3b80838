"""Streams of ``(pairs, targets)`` chunks for :class:`~megkernel.KernelDistances`.

A stream (``pairs=`` a callable) is read twice: a first pass checks its
chunks, digests them (the cache key) and sums what the scale needs, then the
learner's ``partial_fit`` runs chunk by chunk, once per epoch, with the
scale (objects, ``trace="auto"``, low-rank ``learning_rate="auto"``) fixed
over the whole stream, as the one-shot on-line fit of the chunks'
concatenation fixes it.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import joblib
import numpy as np
import pandas as pd
from sklearn.base import clone

from ._numerics.validation import check_pair_indices
from ._pair_estimator import (
    MAX_INFERRED_OBJECTS,
    ObjectIndex,
    _as_index_array,
    declared_n_objects,
    initial_state,
)
from ._solvers.meg import auto_learning_rate
from .meg_regressor import MEGKernelRegressor


class _StreamScan(NamedTuple):
    """What the first pass over a stream learns.

    Its digest and the sums the scale needs.
    """

    digest: str
    n_chunks: int
    ids: object            # distinct ids (ndarray), or None for integer indices
    max_index: int
    sum_targets: float     # over pairs of distinct objects
    n_moving: int
    n_pairs: int = 0       # every pair of a pass (the trials of one epoch)


def _chunks(stream):
    """``(i, pairs, targets, values, y)`` for each chunk of the stream, checked."""
    iterator = stream()
    if isinstance(iterator, (str, bytes, np.ndarray, pd.DataFrame)) or not hasattr(
            iterator, "__iter__"):
        raise ValueError("pairs, a stream, must be a callable returning an iterable of "
                         f"(pairs, targets) chunks; it returned {type(iterator).__name__}.")
    for i, chunk in enumerate(iterator):
        try:
            pairs, targets = chunk
        except (TypeError, ValueError):
            raise ValueError(f"Chunk {i} of the stream is not a (pairs, targets) pair "
                             f"(got {type(chunk).__name__}).") from None
        values = np.asarray(pairs)
        if values.ndim != 2 or values.shape[1] != 2 or len(values) == 0:
            raise ValueError(f"Chunk {i} of the stream: pairs must have shape (n_pairs, 2) "
                             f"with n_pairs >= 1, got shape {values.shape}.")
        try:
            y = np.asarray(targets, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"Chunk {i} of the stream: targets must be numbers.") from None
        if y.shape != (len(values),):
            raise ValueError(f"Chunk {i} of the stream: targets must have shape "
                             f"({len(values)},) like its pairs, got {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError(f"Chunk {i} of the stream has NaN or infinite targets.")
        yield i, pairs, targets, values, y


def _chunk_digest(values, y):
    return joblib.hash((values, y)).encode()


def _scan_stream(stream):
    """First pass: digest, ids and the targets' sums over distinct pairs."""
    digest = hashlib.sha256()
    ids = {}
    indices, max_index, sum_targets, n_moving, n_chunks, n_pairs = True, -1, 0.0, 0, 0, 0
    for i, _, _, values, y in _chunks(stream):
        digest.update(_chunk_digest(values, y))
        numbers = _as_index_array(values)
        if numbers is not None:
            numbers = check_pair_indices(numbers, name=f"Chunk {i} of the stream: pairs")
            max_index = max(max_index, int(numbers.max()))
        else:
            indices = False
        ids.update(dict.fromkeys(pd.unique(values.ravel()).tolist()))
        moving = values[:, 0] != values[:, 1]
        sum_targets += float(y[moving].sum())
        n_moving += int(np.count_nonzero(moving))
        n_pairs += len(values)
        n_chunks += 1
    if n_chunks == 0:
        raise ValueError("The stream yielded no chunks: a stream must give at least one "
                         "(pairs, targets) chunk, and the same ones at every call.")
    distinct = None
    if not indices:
        distinct = np.asarray(list(ids), dtype=object)
        try:
            distinct = np.sort(distinct)
        except TypeError:  # ids of mixed types: order of first appearance
            pass
    return _StreamScan(digest.hexdigest(), n_chunks, distinct, max_index, sum_targets,
                       n_moving, n_pairs)


def _stream_params(learner, stream, scan):
    """Fix the parameters the learner's ``partial_fit`` needs over the whole stream.

    With them, ``partial_fit`` over the chunks learns what the learner's
    one-shot on-line fit of their concatenation learns: the objects (all
    chunks' ids), and ``trace="auto"`` (and low-rank
    ``learning_rate="auto"``) computed over all chunks, not the first.
    """
    params = learner.get_params(deep=False)
    if not isinstance(learner, MEGKernelRegressor):
        if params.get("trace") == "auto" or params.get("learning_rate") == "auto":
            raise ValueError(
                f"A stream fixes the scale up front, which KernelDistances knows how to "
                f"do for MEGKernelRegressor only: give {type(learner).__name__} a numeric "
                "trace and learning_rate.")
        return {}
    fixed = {}
    index = None
    if params["objects"] is not None:
        index = ObjectIndex(params["objects"])
    elif scan.ids is not None:
        fixed["objects"] = scan.ids
        index = ObjectIndex(scan.ids)
    elif declared_n_objects(learner) is None:
        n_objects = max(scan.max_index + 1, 2)
        if n_objects > MAX_INFERRED_OBJECTS:
            raise ValueError(
                f"The stream names object index {n_objects - 1}: with n_objects unset "
                f"the model would hold {n_objects} objects. Give the learner n_objects "
                "(or objects=[...]) to mean it.")
        fixed["n_objects"] = n_objects
    model = clone(learner).set_params(**fixed)
    n_objects = declared_n_objects(model) if index is None else len(index)
    state = initial_state(model, np.zeros((1, 2), dtype=np.intp), index)
    identity = isinstance(params["init"], str) and params["init_factor"] is None
    low_rank_rate = params["learning_rate"] == "auto" and state.basis is not None
    prior_sum, best_pair, best_norm = 2.0 / state.n_objects * scan.n_moving, None, -1.0
    if not identity or low_rank_rate:  # the prior's distances: a pass over the rows
        prior_sum = 0.0
        for i, _, _, values, _ in _chunks(stream):
            rows = (index.rows(values, name=f"Chunk {i} of the stream: pairs")
                    if index is not None else check_pair_indices(
                        _as_index_array(values), n_objects,
                        name=f"Chunk {i} of the stream: pairs"))
            moving = rows[:, 0] != rows[:, 1]
            a, b = rows[moving, 0], rows[moving, 1]
            prior_sum += float(state.pair_sq_distances(a, b).sum())
            if low_rank_rate and len(a):
                norms = state.pair_sq_norms(a, b)
                if norms.max() > best_norm:
                    best_norm, best_pair = norms.max(), int(np.argmax(norms))
                    best_pair = (a[best_pair:best_pair + 1], b[best_pair:best_pair + 1])
    if params["trace"] == "auto":  # auto_trace of meg_regressor, from the sums
        if scan.n_moving and not scan.sum_targets > 0:  # as MEGKernelRegressor.fit
            raise ValueError("Every target of a pair of distinct objects in the stream is "
                             "0: trace='auto' has no scale to learn from. Check the units "
                             "of the targets (squares that underflowed?), or give the trace.")
        trace = 1.0
        if scan.n_moving and prior_sum > 0 and scan.sum_targets > 0:
            with np.errstate(over="ignore"):
                trace = (scan.sum_targets / scan.n_moving) / (prior_sum / scan.n_moving)
            if not np.isfinite(trace):
                raise ValueError("The stream's mean squared distance is too large for "
                                 "double precision at this number of objects.")
        fixed["trace"] = float(trace)
    if low_rank_rate:
        empty = np.zeros(0, dtype=np.intp)
        a, b = best_pair if best_pair is not None else (empty, empty)
        fixed["learning_rate"] = float(auto_learning_rate(state, a, b))
    return fixed


def _stream_epochs(learner):
    """Return the passes over the stream: the learner's ``n_epochs`` (MEG), else 1.

    A stream is replayed in its order, so ``shuffle=True`` is refused.
    """
    params = learner.get_params(deep=False)
    if params.get("shuffle"):
        raise ValueError(f"{type(learner).__name__}(shuffle=True) cannot shuffle a "
                         "stream: it is replayed in its order (shuffle the chunks in the "
                         "stream, and leave shuffle=False).")
    epochs = params.get("n_epochs", 1)
    return epochs if isinstance(epochs, int) and epochs >= 1 else 1


def _streamed_entry(learner, stream, scan):
    """Make the ``fit`` of a stream.

    The scale is fixed over the whole stream, then the learner's
    ``partial_fit`` runs chunk by chunk, for each of its epochs.
    """
    def fit():
        model = clone(learner).set_params(**_stream_params(learner, stream, scan))
        for _ in range(_stream_epochs(learner)):
            digest = hashlib.sha256()
            for i, pairs, targets, values, y in _chunks(stream):
                digest.update(_chunk_digest(values, y))
                try:
                    model.partial_fit(pairs, targets)
                except ValueError as error:
                    raise ValueError(f"Chunk {i} of the stream: {error}") from error
            if digest.hexdigest() != scan.digest:
                raise ValueError("The stream gave other chunks on a later pass than on "
                                 "its first: it must replay the same chunks at every call.")
        return model.kernel_, np.asarray(model.objects_)
    return fit

