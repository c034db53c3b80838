"""Streams of ``(pairs, targets)`` chunks for :class:`~megkernel.KernelDistances`.

A stream (``pairs=`` a callable) is read by KernelDistances first: a pass
checks its chunks, digests them (the cache key) and sums what a learner may
need to fix its scale over the whole stream (its ids, its pairs of distinct
objects and their targets). The learner's ``learn_kernel_stream`` then gets
a :class:`~megkernel._kernel_learner.PairStream`: those sums, and a replay
of the checked chunks that refuses a pass giving other chunks than the
first.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import joblib
import numpy as np
import pandas as pd

from ._kernel_learner import PairStream
from ._numerics.validation import check_pair_indices, squares_of_distances
from ._pair_estimator import _as_index_array


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
    sum_sq_targets: float = 0.0  # of their squares (a stream of plain distances)


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
            raw = np.asarray(targets, dtype=object).ravel().tolist()
            row = next((r for r, value in enumerate(raw) if not _is_number(value)), None)
            at = "" if row is None else f" row {row} holds {raw[row]!r}"
            raise ValueError(f"Chunk {i} of the stream: targets must be numbers;{at}."
                             if at else f"Chunk {i} of the stream: targets must be numbers."
                             ) from None
        if y.shape != (len(values),):
            raise ValueError(f"Chunk {i} of the stream: targets must have shape "
                             f"({len(values)},) like its pairs, got {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError(f"Chunk {i} of the stream has NaN or infinite targets.")
        yield i, pairs, targets, values, y


def _is_number(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (str, bytes))


def _chunk_digest(values, y):
    return joblib.hash((values, y)).encode()


def _scan_stream(stream):
    """First pass: digest, ids and the targets' sums over distinct pairs."""
    digest = hashlib.sha256()
    ids = {}
    indices, max_index, sum_targets, n_moving, n_chunks, n_pairs = True, -1, 0.0, 0, 0, 0
    sum_sq_targets = 0.0
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
        with np.errstate(over="ignore"):
            sum_sq_targets += float(np.square(y[moving]).sum())
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
                       n_moving, n_pairs, sum_sq_targets)


def _pair_stream(stream, scan, *, plain=False, told=False):
    """Return the :class:`PairStream` a learner's ``learn_kernel_stream`` reads.

    Each call of its ``chunks()`` replays the user's stream, checking every
    chunk, and, at the end of a pass, that it gave the chunks of the first
    (its digest). ``plain``: the chunks hold plain distances, handed over
    squared (a negative one refused, named); ``told``: the stream says its
    targets are squared distances (``PairStream.squared``).
    """
    def chunks():
        digest = hashlib.sha256()
        for i, pairs, targets, values, y in _chunks(stream):
            digest.update(_chunk_digest(values, y))
            if plain:
                negative = np.flatnonzero(y < 0)
                if negative.size:
                    raise ValueError(f"Chunk {i} of the stream: targets holds a negative "
                                     f"distance at row {negative[0]} ({y[negative[0]]:.6g}).")
                targets = squares_of_distances(y, f"Chunk {i} of the stream: targets")
            yield pairs, targets
        if digest.hexdigest() != scan.digest:
            raise ValueError("The stream gave other chunks on a later pass than on "
                             "its first: it must replay the same chunks at every call.")
    return PairStream(chunks, scan.n_pairs, scan.ids, scan.max_index, scan.n_moving,
                      scan.sum_sq_targets if plain else scan.sum_targets,
                      True if told else None)
