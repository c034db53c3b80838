"""The protocol through which :class:`~megkernel.KernelDistances` asks a learner for a kernel.

``KernelDistances`` never reads a learner's parameters, never calls its
private methods and never fits it in place: it validates its own side
information, then asks the learner through these methods (all of them
public, all given defaults by :class:`KernelLearnerMixin`):

``learn_kernel(pairs, targets=None, *, objects=None, squared=None)``
    Learn a kernel from a pair table (``pairs`` of shape ``(n_pairs, 2)``
    holding object ids or indices, ``targets`` of shape ``(n_pairs,)`` or
    ``None``) and return a :class:`LearnedKernel` ``(kernel, objects)``:
    the kernel over the objects and the ids of its rows. ``objects`` (or
    ``None``) are the ids of every object the pairs come from (the rows of
    the user's distance matrix): a learner declaring no objects of its own
    learns its kernel over them. Called for arrays of side information and
    for the observed entries of a distance matrix. ``squared=True``: the
    targets are squared distances, whatever the learner's own parameters
    say (``KernelDistances`` read the user's table by its one switch,
    ``given_squared``, and squared plain distances); ``None``: the learner
    reads them by its own parameters. The learner itself is left unchanged
    (a clone is fitted); the learner's own ``ValueError`` reaches the user.

``check_stream()``
    Called before a stream of chunks is read: raise ``ValueError`` when
    the learner cannot learn from a stream (no ``partial_fit``, invalid
    parameters, ``shuffle=True``...), so the user hears it before a pass
    over a large stream.

``learn_kernel_stream(stream)``
    Learn a kernel from a :class:`PairStream`, the stream's chunks read and
    checked by ``KernelDistances`` (each call of ``stream.chunks()`` is one
    pass) with what its first pass saw; return a :class:`LearnedKernel`.
    ``stream.squared`` says what the chunks' targets are, as ``squared``
    of ``learn_kernel``.
    A ``ValueError`` about one chunk names it (``"Chunk 3 of the stream:
    ..."``).

``targets_are_distances(targets)``
    Whether these ``targets`` (not ``None``) are distances, squared or not,
    so that the observed distances can be compared with the learned kernel
    (``KernelDistances.verdict_``).

``learns_from_distances()``
    Whether the learner takes squared distances of pairs as its targets, so
    that ``KernelDistances(distances=...)`` can teach it the observed
    entries of a distance matrix.

Two methods are optional (``KernelDistances`` does without them):

``declared_objects()``
    The ids the learner was told its kernel's rows are (its own list of
    objects, fixed before any fit), or ``None`` when it learns its rows
    from the pairs or from ``learn_kernel``'s ``objects``. ``KernelDistances``
    names a pair of its table whose id is not among them by the table's row
    and column, and checks a cached kernel's rows against them. Without
    it: ``None``.

``squared_distances_of(targets)``
    The squared distances, in the learned kernel's units, that these
    targets state when the learner reads them by its own parameters
    (``None`` when they are no distances). ``KernelDistances`` with
    ``given_squared`` unset reads a learner's targets so (the reading
    before that switch covered them). Without it, the targets reach the
    learner as given, and each placement of a new object takes the units
    from the new distances' median.

The learned kernel is cached by ``KernelDistances``: ``learn_kernel`` and
``learn_kernel_stream`` must depend only on the learner's class and
parameters (``get_params(deep=True)``, the cache key) and on their
arguments.

A learner whose ``fit`` sets ``kernel_`` (an ``(n_objects, n_objects)``
PSD array) and ``objects_`` (the ids of its rows) plugs in by subclassing
:class:`KernelLearnerMixin`; it overrides a method where its defaults do
not fit. :class:`MEGKernelLearnerMixin` is :class:`~megkernel.MEGKernelRegressor`'s:
its stream fixes the scale over the whole stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
from sklearn.base import clone, is_regressor

from ._numerics.extension import grown_kernel
from ._numerics.validation import check_n_trials, check_pair_indices
from ._pair_estimator import (
    MAX_INFERRED_OBJECTS,
    ObjectIndex,
    _as_index_array,
    declared_n_objects,
    initial_state,
)
from ._solvers.meg import data_learning_rate, instance_range

__all__ = ["KernelLearnerMixin", "LearnedKernel", "MEGKernelLearnerMixin", "PairStream",
           "new_ids_and_kernel"]

#: The methods ``KernelDistances`` calls on its learner.
PROTOCOL_METHODS = ("learn_kernel", "check_stream", "learn_kernel_stream",
                    "targets_are_distances", "learns_from_distances")

#: The methods it calls when the learner has them.
OPTIONAL_PROTOCOL_METHODS = ("declared_objects", "squared_distances_of")


def declared_objects_of(learner):
    """Return the ids ``learner`` declares as its kernel's rows (``declared_objects``), or None.

    ``None`` also for a learner without that optional protocol method.
    """
    method = getattr(learner, "declared_objects", None)
    return None if method is None else method()


class LearnedKernel(NamedTuple):
    """A learned kernel and the ids of its rows.

    What a learner's :meth:`KernelLearnerMixin.learn_kernel` and
    :meth:`KernelLearnerMixin.learn_kernel_stream` return to
    :class:`~megkernel.KernelDistances`.

    Parameters
    ----------
    kernel : ndarray of shape (n_objects, n_objects)
        The kernel (symmetric PSD).
    objects : ndarray of shape (n_objects,)
        The ids of its rows.
    weak : bool, default=False
        ``True`` when the learner itself found that the kernel explains
        little of pairs it held out (its neighbours may rank worse than the
        given distances'): ``KernelDistances(keep_given="auto")`` then keeps
        the given distances first where it has no labels to judge by.

    See Also
    --------
    KernelLearnerMixin : The protocol that returns it.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import LearnedKernel
    >>> learned = LearnedKernel(np.eye(2), np.array(["a", "b"], dtype=object))
    >>> learned.objects.tolist()
    ['a', 'b']
    """

    kernel: np.ndarray
    objects: np.ndarray
    weak: bool = False


class PairStream(NamedTuple):
    """A stream of ``(pairs, targets)`` chunks, checked, with what its first pass saw.

    ``KernelDistances`` builds it after a first pass over the user's stream
    (the checks and the cache key), and hands it to the learner's
    ``learn_kernel_stream``.

    Parameters
    ----------
    chunks : callable
        ``chunks()`` is one pass: an iterator of ``(pairs, targets)``
        chunks, each checked (``pairs`` of shape ``(n, 2)`` with ``n >= 1``
        as the user gave them, finite ``targets`` of shape ``(n,)``). A pass
        that gives other chunks than the first raises ``ValueError`` at its
        end.
    n_pairs : int
        Pairs over all chunks (the trials of one pass).
    ids : ndarray or None
        The distinct ids of all chunks (sorted when they can be), or
        ``None`` when the pairs hold integer indices.
    max_index : int
        The largest index over all chunks (``-1`` for ids).
    n_distinct_pairs : int
        Pairs of two distinct objects over all chunks.
    sum_distinct_targets : float
        The sum of their targets (as ``chunks()`` gives them).
    squared : bool or None, default=None
        ``True``: the chunks' targets are squared distances (``KernelDistances``
        read the user's stream by ``given_squared``); ``None``: the learner
        reads them by its own parameters.

    See Also
    --------
    KernelLearnerMixin.learn_kernel_stream : What learns from it.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import PairStream
    >>> chunk = (np.array([[0, 1], [1, 2]]), np.array([1.0, 4.0]))
    >>> stream = PairStream(lambda: iter([chunk]), n_pairs=2, ids=None, max_index=2,
    ...                     n_distinct_pairs=2, sum_distinct_targets=5.0)
    >>> [len(pairs) for pairs, _ in stream.chunks()]
    [2]
    """

    chunks: Callable
    n_pairs: int
    ids: np.ndarray | None
    max_index: int
    n_distinct_pairs: int
    sum_distinct_targets: float
    squared: bool | None = None


def _chunk_error(i, error):
    return ValueError(f"Chunk {i} of the stream: {error}")


class KernelLearnerMixin:
    """Mixin of the kernel learners: the protocol :class:`~megkernel.KernelDistances` calls.

    Its defaults fit a clone with ``fit`` (arrays) or ``partial_fit``
    (streams) and read ``kernel_`` and ``objects_``: a learner whose ``fit``
    sets them plugs in by subclassing it (as
    :class:`~megkernel.DefiniteBoostKernel` does). See
    :mod:`megkernel._kernel_learner` for the protocol.

    See Also
    --------
    KernelDistances : The meta-estimator that calls the protocol.
    LearnedKernel : What the protocol returns.

    Examples
    --------
    A learner of one's own: the kernel of classical scaling of the observed
    squared distances (a missing one: their mean).

    >>> import numpy as np
    >>> from sklearn.base import BaseEstimator, RegressorMixin
    >>> from megkernel import KernelDistances, KernelLearnerMixin
    >>> class ClassicalScaling(KernelLearnerMixin, RegressorMixin, BaseEstimator):
    ...     def __init__(self, objects=None):
    ...         self.objects = objects
    ...     def fit(self, X, y):
    ...         X = np.asarray(X, dtype=object)
    ...         self.objects_ = (np.asarray(self.objects, dtype=object)
    ...                          if self.objects is not None else np.unique(X))
    ...         rows = {key: i for i, key in enumerate(self.objects_.tolist())}
    ...         a = np.array([rows[key] for key in X[:, 0]])
    ...         b = np.array([rows[key] for key in X[:, 1]])
    ...         D = np.full((len(rows), len(rows)), np.mean(y))
    ...         D[a, b] = D[b, a] = y
    ...         np.fill_diagonal(D, 0.0)
    ...         J = np.eye(len(rows)) - 1.0 / len(rows)
    ...         w, V = np.linalg.eigh(-J @ D @ J / 2)
    ...         self.kernel_ = (V * np.maximum(w, 0.0)) @ V.T
    ...         return self
    >>> pairs = [["a", "b"], ["b", "c"], ["a", "c"]]
    >>> distances = KernelDistances(learner=ClassicalScaling(), pairs=pairs,
    ...                             targets=[1.0, 1.0, 4.0], given_squared=True)
    >>> distances.fit(["a", "b", "c"]).transform(["a"]).round(3)
    array([[0., 1., 2.]])
    """

    def learn_kernel(self, pairs, targets=None, *, objects=None, squared=None):
        """Learn a kernel from a pair table, on a clone of this learner.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2)
            Objects ``(a, b)`` of each pair: ids or integer indices.
        targets : array-like of shape (n_pairs,), default=None
            The pairs' targets (``None``: ``fit(pairs)``).
        objects : array-like of shape (n_objects,), default=None
            Ids of every object the pairs come from: a learner with an
            ``objects`` parameter left at ``None`` learns its kernel over
            them (the default); ``None``: the learner's own rule.
        squared : bool or None, default=None
            ``True``: ``targets`` are squared distances, ``False``: plain
            distances (squared here), whatever this learner's parameters
            say (the clone is set to read squared distances); ``None``: read
            by its parameters.

        Returns
        -------
        learned : LearnedKernel
            ``(kernel, objects, weak)``: the fitted clone's ``kernel_`` and
            ``objects_``, and whether it explains little of its held-out
            pairs (:meth:`_kernel_is_weak`).
        """
        model = clone(self)
        if objects is not None and model.get_params(deep=False).get("objects", 0) is None:
            model.set_params(objects=objects)
        if squared is not None and targets is not None:
            if not squared:
                targets = np.square(np.asarray(targets, dtype=float))
            model.set_params(**model._reads_squared_distances())
        model = model.fit(pairs) if targets is None else model.fit(pairs, targets)
        return LearnedKernel(model.kernel_, np.asarray(model.objects_), model._kernel_is_weak())

    def check_stream(self):
        """Refuse, before a stream is read, what keeps this learner from learning it.

        The default needs ``partial_fit``, validates the parameters and
        refuses ``shuffle=True`` (a stream is replayed in its order).

        Raises
        ------
        ValueError
            When this learner cannot learn from a stream.
        """
        if not hasattr(self, "partial_fit"):
            raise ValueError(f"A stream of chunks is learned by partial_fit, which "
                             f"{type(self).__name__} does not have.")
        if hasattr(self, "_validate_params"):  # its errors, not a chunk's
            self._validate_params()
        self._stream_epochs()

    def learn_kernel_stream(self, stream):
        """Learn a kernel from a stream of chunks, on a clone of this learner.

        The default fixes the parameters the whole stream determines (none
        here: ``trace="auto"`` or ``learning_rate="auto"`` are refused), then
        runs ``partial_fit`` chunk by chunk, over the whole stream once per
        ``n_epochs`` (1 without that parameter).

        Parameters
        ----------
        stream : PairStream
            The checked chunks and what the first pass over them saw.

        Returns
        -------
        learned : LearnedKernel
            ``(kernel, objects, weak)``: the clone's ``kernel_`` and
            ``objects_``, and whether it explains little of its held-out
            pairs (:meth:`_kernel_is_weak`).

        Raises
        ------
        ValueError
            A chunk the learner refuses (named), too many trials, or a
            stream that changed between passes.
        """
        epochs = self._stream_epochs()
        # partial_fit keeps each trial's loss (losses_): 8 bytes a trial
        check_n_trials(epochs, stream.n_pairs, name=f"{type(self).__name__}.n_epochs",
                       bytes_per_trial=8, record="its on-line loss in losses_")
        model = clone(self).set_params(**self._stream_params(stream))
        if stream.squared:
            model.set_params(**model._reads_squared_distances())
        for _ in range(epochs):
            for i, (pairs, targets) in enumerate(stream.chunks()):
                try:
                    model.partial_fit(pairs, targets)
                except ValueError as error:
                    raise _chunk_error(i, error) from error
        return LearnedKernel(model.kernel_, np.asarray(model.objects_), model._kernel_is_weak())

    def _kernel_is_weak(self):
        """Whether the fitted kernel explains little of the pairs held out from it.

        The default: ``False`` (a learner without a held-out figure claims
        nothing). A learner that holds pairs out overrides it.
        """
        return False

    def targets_are_distances(self, targets):
        """Whether ``targets`` are distances (squared or not) one can rank neighbors by.

        The default: a regressor's targets are, other learners' are not
        (:class:`~megkernel.DefiniteBoostKernel` overrides it: its ``y_kind``
        says what its targets hold).

        Parameters
        ----------
        targets : array-like of shape (n_pairs,)
            The targets given to :meth:`learn_kernel`.

        Returns
        -------
        bool
            True when the targets are distances, squared or not.
        """
        return is_regressor(self)

    def declared_objects(self):
        """Return the ids this learner fixes its kernel's rows to, or None.

        The default: the learner's own ``objects`` parameter, where it has
        one (``None`` when it has none, or leaves it unset).

        Returns
        -------
        array-like of shape (n_objects,) or None
            The declared ids, as the learner holds them.
        """
        return self.get_params(deep=False).get("objects")

    def squared_distances_of(self, targets):
        """Return the squared distances these targets state, in the learned kernel's units.

        ``KernelDistances`` compares them with the learned kernel's squared
        distances on the same pairs to fix the units in which new objects'
        distances are read (``new_distances``). The default: the targets
        themselves when :meth:`targets_are_distances` says they are
        distances (read as squared distances), else ``None`` (no units).

        Parameters
        ----------
        targets : array-like of shape (n_pairs,)
            The targets given to :meth:`learn_kernel`.

        Returns
        -------
        ndarray of shape (n_pairs,) or None
            Squared distances, or ``None`` when the targets are none.
        """
        if not self.targets_are_distances(targets):
            return None
        return np.asarray(targets, dtype=float)

    def learns_from_distances(self):
        """Whether this learner takes squared distances of pairs as targets.

        ``KernelDistances(distances=...)`` teaches such a learner the
        observed entries of the matrix. The default: regressors do.

        Returns
        -------
        bool
            True when ``learn_kernel`` takes squared distances as targets.
        """
        return is_regressor(self)

    def _reads_squared_distances(self):
        """Return the parameters with which this learner reads its targets as squared distances.

        The default: none (a learner of distances takes squared distances,
        see :meth:`learns_from_distances`).
        """
        return {}

    def _stream_epochs(self):
        """Return the passes over a stream: ``n_epochs`` when a parameter, else 1.

        A stream is replayed in its order, so ``shuffle=True`` is refused.
        """
        params = self.get_params(deep=False)
        if params.get("shuffle"):
            raise ValueError(f"{type(self).__name__}(shuffle=True) cannot shuffle a "
                             "stream: it is replayed in its order (shuffle the chunks in the "
                             "stream, and leave shuffle=False).")
        epochs = params.get("n_epochs", 1)
        return epochs if isinstance(epochs, int) and epochs >= 1 else 1

    def _stream_params(self, stream):
        """Return the parameters fixed over the whole stream before ``partial_fit``."""
        params = self.get_params(deep=False)
        if params.get("trace") == "auto" or params.get("learning_rate") == "auto":
            raise ValueError(
                f"A stream fixes the scale up front, which the default of "
                f"learn_kernel_stream cannot do: give {type(self).__name__} a numeric "
                "trace and learning_rate (or override learn_kernel_stream).")
        return {}


class MEGKernelLearnerMixin(KernelLearnerMixin):
    """The protocol for :class:`~megkernel.MEGKernelRegressor`: a stream fixes its scale.

    Its ``learn_kernel_stream`` learns what the one-shot on-line fit of the
    chunks' concatenation learns: the objects (all chunks' ids), and
    ``trace="auto"`` (and low-rank ``learning_rate="auto"``) computed over
    all chunks, not over the first.
    """

    def squared_distances_of(self, targets):
        """Return the squared distances these targets state (squared when ``squared=False``).

        Parameters
        ----------
        targets : array-like of shape (n_pairs,)
            The targets given to :meth:`learn_kernel`.

        Returns
        -------
        ndarray of shape (n_pairs,)
            Squared distances, in the units of the learned kernel.
        """
        values = np.asarray(targets, dtype=float)
        return values if self.get_params(deep=False).get("squared", True) else values**2

    def _reads_squared_distances(self):
        """``squared=True`` (when a parameter): the targets are squared distances."""
        return {"squared": True} if "squared" in self.get_params(deep=False) else {}

    def _stream_params(self, stream):
        """Fix the objects, ``trace`` and low-rank ``learning_rate`` over the whole stream."""
        params = self.get_params(deep=False)
        fixed = {}
        index = None
        if params["objects"] is not None:
            index = ObjectIndex(params["objects"])
        elif stream.ids is not None:
            fixed["objects"] = stream.ids
            index = ObjectIndex(stream.ids)
        elif declared_n_objects(self) is None:
            n_objects = max(stream.max_index + 1, 2)
            if n_objects > MAX_INFERRED_OBJECTS:
                raise ValueError(
                    f"The stream names object index {n_objects - 1}: with n_objects unset "
                    f"the model would hold {n_objects} objects. Give the learner n_objects "
                    "(or objects=[...]) to mean it.")
            fixed["n_objects"] = n_objects
        model = clone(self).set_params(**fixed)
        n_objects = declared_n_objects(model) if index is None else len(index)
        state = initial_state(model, np.zeros((1, 2), dtype=np.intp), index)
        identity = isinstance(params["init"], str) and params["init_factor"] is None
        low_rank_rate = params["learning_rate"] == "auto" and state.basis is not None
        n_moving, sum_targets = stream.n_distinct_pairs, stream.sum_distinct_targets
        # the scale is that of squared distances (a stream told squared holds them)
        plain = not (stream.squared or params["squared"])
        prior_sum, best_pair, best_norm = 2.0 / state.n_objects * n_moving, None, -1.0
        if plain:
            sum_targets = 0.0
        if not identity or low_rank_rate or plain:  # a pass over the rows
            prior_sum = 0.0 if (not identity or low_rank_rate) else prior_sum
            for i, (pairs, targets) in enumerate(stream.chunks()):
                if plain:
                    values = np.asarray(pairs)
                    distinct = values[:, 0] != values[:, 1]
                    with np.errstate(over="ignore"):
                        sum_targets += float(np.sum(np.square(
                            np.asarray(targets, dtype=float)[distinct])))
                    if identity and not low_rank_rate:
                        continue
                values = np.asarray(pairs)
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
            if n_moving and not sum_targets > 0:  # as MEGKernelRegressor.fit
                raise ValueError("Every target of a pair of distinct objects in the stream "
                                 "is 0: trace='auto' has no scale to learn from. Check the "
                                 "units of the targets (squares that underflowed?), or give "
                                 "the trace.")
            trace = 1.0
            if n_moving and prior_sum > 0 and sum_targets > 0:
                with np.errstate(over="ignore"):
                    trace = (sum_targets / n_moving) / (prior_sum / n_moving)
                if not np.isfinite(trace):
                    raise ValueError("The stream's mean squared distance is too large for "
                                     "double precision at this number of objects.")
            fixed["trace"] = float(trace)
        if params["learning_rate"] == "auto":  # resolve_scale's rule, from the sums
            empty = np.zeros(0, dtype=np.intp)
            a, b = best_pair if best_pair is not None else (empty, empty)
            trace = fixed.get("trace", params["trace"])
            mean_target = (sum_targets / n_moving / float(trace)
                           if n_moving and trace != "auto" else None)
            fixed["learning_rate"] = data_learning_rate(instance_range(state, a, b),
                                                        mean_target)
        return fixed


def new_ids_and_kernel(index, kernel, X, sq_targets, *, own):
    """Grow a kernel by the ids of pairs ``X`` that are not in ``index``.

    The rule of ``MEGKernelRegressor(grow_objects=True)``: each new object
    gets the row and column of the out-of-sample extension
    (:func:`megkernel._numerics.extension.grown_kernel`) from its given
    squared distances ``sq_targets`` (the kernel's units) to known objects in
    the same table; the kernel over the known objects is unchanged; each new
    object has a private part of squared norm at least ``own`` (the kernel
    stays positive definite, its logarithm finite). Pairs of two new ids
    are left to the trials that follow.

    Returns
    -------
    (new_ids, grown) or None
        The new ids (an object array, in the order met) and the grown
        kernel (known objects first); ``None`` when every id is known.

    Raises
    ------
    ValueError
        A new id without a given distance to a known object, named.
    """
    values = X.to_numpy(dtype=object) if isinstance(X, pd.DataFrame) else np.array(
        X, dtype=object)
    if values.ndim != 2 or values.shape[1] != 2:
        return None  # the estimator's own validation explains the shape
    at = np.array([index.row_or_missing(key) for key in values.ravel().tolist()],
                  dtype=np.intp).reshape(values.shape)
    unknown = at < 0
    if not unknown.any():
        return None
    new_ids = list(dict.fromkeys(values[unknown].tolist()))
    position = {key: i for i, key in enumerate(new_ids)}
    rows, sq = [[] for _ in new_ids], [[] for _ in new_ids]
    for t in np.flatnonzero(unknown[:, 0] != unknown[:, 1]):
        new, old = (0, 1) if unknown[t, 0] else (1, 0)
        i = position[values[t, new]]
        rows[i].append(at[t, old])
        sq[i].append(sq_targets[t])
    lonely = next((key for key, given in zip(new_ids, rows) if not given), None)
    if lonely is not None:
        raise ValueError(
            f"The pairs name the new object {lonely!r} (not among objects_) but pair it "
            "with no known object: grow_objects places a new object from its distances "
            "to known ones, in the same partial_fit call.")
    order = [np.lexsort((np.asarray(s), np.asarray(r))) for r, s in zip(rows, sq)]
    grown = grown_kernel(kernel, [np.asarray(r, dtype=np.intp)[o] for r, o in zip(rows, order)],
                         [np.asarray(s, dtype=float)[o] for s, o in zip(sq, order)], own=own)
    ids = np.empty(len(new_ids), dtype=object)
    for i, key in enumerate(new_ids):
        ids[i] = key
    return ids, grown

