"""What the pair estimators share: validation, the prior, transactions, kernel views.

Input validation, the prior from their parameters, transactional calls, and
the views of the learned kernel.

In low-rank mode (a prior given as a factor ``F``, d x r, ``W_1 = F F^T /
||F||_F^2``) every iterate stays in its range, ``W = P M P^T`` with ``P``
(d x r) orthonormal and ``M`` (r x r) evolved instead of ``W``: eq. 7's
update ``exp(log W_t - s v v^T)`` leaves the range of ``P`` unchanged when
``v = e_a - e_b`` is replaced by its coordinates ``P[a] - P[b]``, and
``Delta(W, W_1) = Delta_r(M, S)`` (``docs/user_guide/scale.rst``, "Low-rank
mode: many objects"); nothing of size d x d is formed unless asked for
explicitly.

**Object ids are kept exactly as given.** Pairs and ``objects`` name objects
by integer indices or by ids of any one hashable kind (strings, or any other
single type); the kind is never converted (a list of lists holding ``1`` and
``'a'`` would become strings in numpy: ids of several kinds, ``int`` next to
``str`` say, are refused instead, whatever the container, so that a list of
lists, an ndarray and a DataFrame of the same pairs always give the same
model), and a missing id (``None``, ``pd.NA``, NaN) is refused naming its
row and column. Fitted ids (``objects_``) are the model's own read-only copy,
never the caller's array. Class labels (of the k-NN classifier and the
metric learners) follow the same rule: :func:`check_class_labels`.
"""

from __future__ import annotations

import copy
import functools
from contextlib import contextmanager
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._numerics.limits import MAX_DENSE_OBJECTS
from ._numerics.spectral import induced_sq_distances
from ._numerics.state import ExponentState
from ._numerics.validation import check_n_objects, check_pair_indices, row_label, row_name
from ._warnings import warn_user

__all__ = [
    "KernelViewsMixin",
    "ShortReprMixin",
    "PairKernelEstimator",
    "ObjectIndex",
    "check_class_labels",
    "check_id_kinds",
    "check_kind_of_known",
    "object_ids",
    "declared_n_objects",
    "initial_state",
    "transactional",
    "unchanged_on_error",
    "validate_pairs",
    "without_missing_distances",
]

#: Largest number of objects inferred from the pairs' largest index (a larger
#: model must be asked for with ``n_objects``).
MAX_INFERRED_OBJECTS = 5000


@contextmanager
def unchanged_on_error(estimator):
    """Restore the estimator's attributes if the block raises.

    Fitting validates everything before it changes the model; this keeps
    that promise also for attributes scikit-learn's ``validate_data`` sets.
    """
    saved = dict(estimator.__dict__)
    try:
        yield
    except BaseException:
        # one store: a second interrupt cannot fall between a clear and an update
        estimator.__dict__ = saved
        raise


def _id_kind(value):
    """Return the kind of an object id.

    ``"number"``, ``"str"``, ``"bool"``, another type's name, or None for a
    missing value.
    """
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, Real):
        return None if value != value else "number"  # NaN: missing
    if isinstance(value, str):
        return "str"
    return type(value).__name__


def check_id_kinds(X, *, name="X"):
    """Refuse missing ids and ids of several kinds in pairs or object lists.

    The rule of the module docstring, checked before any container converts
    the ids.

    Parameters
    ----------
    X : array-like or pandas DataFrame
        Pairs (2-D) or ids (1-D), as the caller gave them.
    name : str
        What to call ``X`` in a message.

    Returns
    -------
    X : array-like or pandas DataFrame
        ``X``, or for a list of pairs whose ids numpy would split (tuples)
        the same pairs as an (n, 2) object array.
    """
    where = None
    if isinstance(X, (pd.DataFrame, pd.Series)):
        dtypes = X.dtypes if isinstance(X, pd.DataFrame) else [X.dtype]
        labels = X.index  # read only for a message: a list of a large index is costly
        columns = X.columns if isinstance(X, pd.DataFrame) else None

        def where(i, j):
            column = "" if columns is None else f", column {columns[j]!r}"
            return f"row {row_label(labels, i)!r}{column}"
        if all(isinstance(dtype, np.dtype) and dtype.kind in "iuf" for dtype in dtypes):
            _check_no_nan(X.to_numpy(), name, where)
            return X  # plain numbers
        values = X.to_numpy(dtype=object)
    elif isinstance(X, np.ndarray):
        if X.dtype != object:  # one kind already (numbers, or strings numpy made)
            _check_no_nan(X, name, lambda i, j: f"row {i}" + (
                f", column {j}" if X.ndim == 2 else ""))
            return X
        values = X
    else:
        try:
            array = np.asarray(X)
            if array.ndim <= 2 and array.dtype.kind in "iufb":
                _check_no_nan(array, name, lambda i, j: f"row {i}" + (
                    f", column {j}" if array.ndim == 2 else ""))
                return X  # numbers only
            values = np.asarray(X, dtype=object)
            if values.ndim > 2:  # numpy split tuple ids into a dimension
                raise ValueError
        except (ValueError, TypeError):
            values = _rows_of_ids(X)  # ids numpy takes for a dimension (tuples)
            if values is None:
                return X  # ragged or odd: validate_data explains
            X = values
    if values.ndim not in (1, 2):
        return X
    if values.size and pd.api.types.infer_dtype(values.ravel(), skipna=False) == "string":
        return X  # every id a str (none missing): one kind, without a loop over them
    if where is None:
        def where(i, j):
            return f"row {i}" + (f", column {j}" if values.ndim == 2 else "")
    width = values.shape[1] if values.ndim == 2 else 1
    first = {}
    for position, value in enumerate(values.ravel().tolist()):
        kind = _id_kind(value)
        if kind in first:
            continue
        i, j = divmod(position, width)
        if kind is None:
            raise ValueError(f"{name} has a missing id ({value!r}) at {where(i, j)}; "
                             "every id must name an object.")
        first[kind] = (value, where(i, j))
        if len(first) > 1:
            (one, (a, at_a)), (other, (b, at_b)) = first.items()
            raise ValueError(
                f"{name} mixes kinds of object ids: {one} {a!r} ({at_a}) and {other} "
                f"{b!r} ({at_b}). Ids are kept exactly as given, never converted: give "
                f"them all as one kind (e.g. all str).")
    return X


def check_kind_of_known(values, objects, *, name, known):
    """Refuse ids ``values`` (one kind, checked) of another kind than ``objects``'.

    Ids are kept as given, never converted: ``'3'`` read from a text file is
    no id of a model over ``0..n-1``, so such ids could name no known object.
    ``known``: what to call ``objects`` in the message.
    """
    first = np.asarray(values, dtype=object).ravel()
    if not first.size or not len(objects):
        return
    ours, theirs = _id_kind(first[0]), _id_kind(objects[0])
    if ours != theirs:
        shown = first[0].item() if isinstance(first[0], np.generic) else first[0]
        theirs_shown = objects[0].item() if isinstance(objects[0], np.generic) else objects[0]
        raise ValueError(
            f"{name} names {ours} ids (e.g. {shown!r}) but {known} are {theirs} ids (e.g. "
            f"{theirs_shown!r}): ids are kept exactly as given, never converted, so no id "
            f"of {name} could name a known object. Give them as those ids are.")


def _check_no_nan(values, name, where):
    """Refuse a NaN among numeric ids (a missing id), naming its place."""
    if values.dtype.kind != "f" or values.ndim not in (1, 2):
        return
    missing = np.isnan(values)
    if missing.any():
        position = np.argwhere(missing)[0]
        i, j = (int(position[0]), int(position[1]) if len(position) > 1 else 0)
        raise ValueError(f"{name} has a missing id (NaN) at {where(i, j)}; every id must "
                         "name an object.")


def check_class_labels(y, *, name="y"):
    """Refuse a missing class label or labels of several kinds, naming their rows.

    A missing label is ``None``, ``pd.NA`` or NaN; several kinds are e.g.
    ``str`` next to a number. Checked before numpy's sort of the labels
    fails on them (``'<' not supported between 'NoneType' and 'str'``). The
    labels' rule is the ids' rule (module docstring): kept as given, one
    kind, none missing; numbers and booleans count as one kind (they sort
    together).

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels as the caller gave them.
    name : str, default="y"
        What to call ``y`` in a message.

    Returns
    -------
    y : array-like
        ``y`` unchanged (the caller converts it as before).
    """
    if isinstance(y, (pd.Series, pd.Index)):
        values, labels = y.to_numpy(dtype=object), y.index.tolist() if isinstance(
            y, pd.Series) else list(range(len(y)))
    else:
        try:
            array = np.asarray(y)
            if array.dtype.kind in "iufb" or (isinstance(y, np.ndarray)
                                              and array.dtype != object):
                return y  # one kind (NaN among numbers is reported as such)
            # a list of str and int would become strings in numpy: look at
            # the values as given
            values, labels = np.asarray(y, dtype=object), None
        except (ValueError, TypeError):
            return y  # ragged or odd: the estimator's validation explains
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        return y
    first = {}
    for i, value in enumerate(values.tolist()):
        kind = _id_kind(value)
        kind = "number" if kind == "bool" else kind
        if kind in first:
            continue
        row = labels[i] if labels is not None else i
        if kind is None:
            raise ValueError(f"{name} has a missing class label ({value!r}) at row {row!r}; "
                             "every sample needs a label (drop the unlabeled rows).")
        first[kind] = (value, row)
        if len(first) > 1:
            (one, (a, at_a)), (other, (b, at_b)) = first.items()
            raise ValueError(
                f"{name} mixes kinds of class labels: {one} {a!r} (row {at_a!r}) and "
                f"{other} {b!r} (row {at_b!r}). Labels are kept exactly as given, never "
                "converted: give them all as one kind (e.g. all str).")
    return y


def _rows_of_ids(X):
    """Return a list of 2-element rows as an (n, 2) object array, else None.

    Each id is kept whole (numpy would read a tuple id as a third
    dimension).
    """
    try:
        rows = [tuple(row) for row in X]
    except TypeError:
        return None
    if not rows or any(len(row) != 2 for row in rows):
        return None
    values = np.empty((len(rows), 2), dtype=object)
    for i, (a, b) in enumerate(rows):
        values[i, 0], values[i, 1] = a, b
    return values


def _id_vector(ids):
    """Return ``ids`` as an object array, a sequence of tuple ids as 1-D.

    numpy reads a list (or Series, Index) of tuple ids as a second
    dimension; any other input stays as numpy reads it (a set, a mapping or
    a 2-D table is then refused by the caller as not 1-D).
    """
    vector = np.array(ids, dtype=object)
    if (vector.ndim > 1 and isinstance(ids, (list, tuple, pd.Series, pd.Index))
            and len(ids) and all(isinstance(value, tuple) for value in ids)):
        vector = np.empty(len(ids), dtype=object)
        for i, value in enumerate(ids):
            vector[i] = value
    return vector


class ObjectIndex:
    """Object ids -> rows of the kernel (any hashable ids, in a fixed order).

    Parameters
    ----------
    objects : array-like of shape (n_objects,)
        Distinct ids of one kind; row ``i`` of the kernel is ``objects[i]``.
        Copied (read-only): ``objects`` is the index's own array.
    """

    def __init__(self, objects, *, name="objects"):
        # a copy: the caller's array may change later; a list keeps each id
        # as it is (object dtype, no cast to strings, a tuple id whole)
        objects = (np.array(objects) if isinstance(objects, np.ndarray)
                   else _id_vector(objects))
        check_id_kinds(objects, name=name)
        objects.flags.writeable = False
        if objects.ndim != 1 or len(objects) < 2:
            raise ValueError(f"{name} must be a 1-D sequence of at least 2 object ids, "
                             f"got shape {objects.shape}.")
        keys = objects.tolist()
        self.lookup = {key: row for row, key in enumerate(keys)}
        if len(self.lookup) != len(keys):
            seen = set()
            repeated = next(key for key in keys if key in seen or seen.add(key))
            raise ValueError(f"{name} must hold distinct ids; {repeated!r} repeats.")
        self.objects = objects

    @classmethod
    def from_pairs(cls, values, categories=None):
        """Index the ids met in ``values``, sorted when they can be.

        A categorical pair table gives its categories instead.
        """
        if categories is not None:
            return cls(categories)
        ids = pd.unique(values.ravel())
        try:
            ids = np.sort(ids)
        except TypeError:  # ids of mixed types: order of first appearance
            pass
        if len(ids) < 2:
            raise ValueError(f"The pairs name {len(ids)} distinct object(s); a kernel "
                             "needs at least 2 (declare them with objects=[...]).")
        # Python values in an object array, whatever container held the pairs
        return cls(_id_vector(ids.tolist()))

    def __len__(self):
        return len(self.objects)

    def row_or_missing(self, key):
        """Return the row of the id ``key``, or -1 when it is none (unhashable included)."""
        try:
            return self.lookup.get(key, -1)
        except TypeError:  # unhashable: no id of the index
            return -1

    def rows(self, values, *, name="X", hint=("Declare every object up front with "
                                              "objects=[...] (partial_fit cannot add "
                                              "objects).")):
        """Return the rows of the ids in ``values`` (any shape).

        Raises a ValueError naming the first id that is not an object of the
        model.
        """
        keys = np.asarray(values, dtype=object).ravel().tolist()
        try:
            rows = [self.lookup[key] for key in keys]
        except (KeyError, TypeError):
            unknown = next(key for key in keys if _missing(self.lookup, key))
            raise ValueError(
                f"{name} names the object {unknown!r}, which is not one of the model's "
                f"{len(self)} objects (objects_). {hint}") from None
        return np.asarray(rows, dtype=np.intp).reshape(np.shape(values))


def _missing(lookup, key):
    try:
        return key not in lookup
    except TypeError:  # unhashable
        return True


def _categories(X):
    """Categories shared by both columns of a categorical pair table, else None."""
    if not isinstance(X, pd.DataFrame) or X.shape[1] != 2:
        return None
    dtypes = [X[column].dtype for column in X.columns]
    if not all(isinstance(dtype, pd.CategoricalDtype) for dtype in dtypes):
        return None
    first, second = (dtype.categories for dtype in dtypes)
    return first if first.equals(second) else first.union(second)


def _as_index_array(X):
    """Return ``X`` as numbers if it holds object indices, else None.

    Indices are numbers, or Python ints in an object array; None means ids
    of another kind.
    """
    if X.dtype == bool:
        return None
    if np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating):
        return X
    if X.dtype == object:
        values = X.ravel().tolist()
        if not X.size:
            return X.astype(np.intp)
        if all(isinstance(v, Integral) and not isinstance(v, (bool, np.bool_))
               for v in values):
            huge = next((v for v in values if not -2**63 <= v < 2**63), None)
            if huge is not None:
                raise ValueError(
                    f"The pairs hold the integer {huge}, too large for an object index "
                    "(integers are read as indices 0..n_objects-1). To use integers as "
                    "ids, declare them with objects=[...].")
            return X.astype(np.int64)
        if all(_id_kind(v) == "number" for v in values):
            return X.astype(float)  # as a float array would be: indices if whole
    return None


def transactional(method):
    """Decorate an estimator method: if it raises, the estimator is as before."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with unchanged_on_error(self):
            return method(self, *args, **kwargs)
    return call


def validate_pairs(estimator, X, y=None, *, reset, n_objects=None, index=None,
                   objects=None):
    """scikit-learn's ``validate_data`` plus the pair checks.

    Pairs are integer object indices, or ids of any hashable kind (strings,
    pandas categoricals, ...). Accepts a 2-column pandas DataFrame (its column
    names are remembered as ``feature_names_in_``).

    Parameters
    ----------
    reset : bool
        First call of a fit (``validate_data``'s ``reset``).
    n_objects : int, optional
        Number of objects, if known.
    index : ObjectIndex, optional
        The fitted model's ids.
    objects : array-like, optional
        The estimator's ``objects`` parameter (ids declared up front).

    Returns
    -------
    pairs : ndarray of int, shape (n, 2)
        Rows of the kernel.
    y : ndarray or None
    index : ObjectIndex or None
        ``None`` when the pairs are plain indices.
    """
    categories = _categories(X) if reset and objects is None else None
    kwargs = dict(reset=reset, dtype=None, ensure_min_samples=1)
    X = check_id_kinds(X)
    with unchanged_on_error(estimator):
        if y is None:
            X = validate_data(estimator, X, **kwargs)
        else:
            X, y = validate_data(estimator, X, y, y_numeric=False, **kwargs)
        if X.ndim != 2 or X.shape[1] != 2:
            raise ValueError(
                "X must be an array of object pairs of shape (n_pairs, 2), "
                f"got shape {X.shape}{square_hint(X.shape)}.")
        # declared objects name the ids: the pairs' integers are ids then, not indices
        numbers = (_as_index_array(X) if index is None and not (reset and objects is not None)
                   else None)
        if index is None and reset:
            if objects is not None:
                index = ObjectIndex(objects)
            elif numbers is None:
                index = ObjectIndex.from_pairs(X, categories)
            if index is not None and n_objects is not None and n_objects != len(index):
                raise ValueError(f"n_objects={n_objects} does not match the "
                                 f"{len(index)} objects named by the pairs or objects.")
        if index is not None:
            pairs = index.rows(X)
        else:
            pairs = check_pair_indices(X if numbers is None else numbers, n_objects)
    return pairs, y, index


def square_hint(shape):
    """Return what to say about a square array given where a pair table belongs."""
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] > 2:
        return (" (a square matrix of distances? A pair table holds one pair of objects "
                "per row, its distances in y; KernelDistances(distances=..., learner=...) "
                "takes a matrix)")
    return ""


def _first_missing_row(y, missing):
    """Return the user's name of the first missing row (a Series' label, else its position)."""
    first = int(np.flatnonzero(missing)[0])
    return row_name(y, first)


def without_missing_distances(X, y, *, who, kind="distances", warn=True):
    """Drop the pairs whose distance ``y`` is NaN: a missing pair, one rule everywhere.

    A NaN distance means "nobody measured this pair", as in a distance
    matrix: the pair is left out, and a ``UserWarning`` (``who`` names the
    caller; ``warn=False``: none, for a second reading of the same table)
    counts the rows and names the first. Anything that is not a
    float vector of ``len(X)`` values is returned as is (the caller's
    validation explains it); infinite values stay (refused by it, named).

    Returns
    -------
    (X, y)
        The rows with a distance, in the caller's containers (a DataFrame
        or Series keeps its index).

    Raises
    ------
    ValueError
        When every distance is NaN.
    """
    if y is None or isinstance(y, (str, bytes)):
        return X, y
    values = y.to_numpy() if isinstance(y, (pd.Series, pd.DataFrame)) else np.asarray(y)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.dtype.kind != "f" or values.ndim != 1:
        return X, y
    missing = np.isnan(values)
    if not missing.any():
        return X, y
    try:
        n_rows = len(X)
    except TypeError:
        return X, y
    if n_rows != len(values):
        return X, y  # the caller's validation names the mismatch
    n_missing = int(missing.sum())
    if n_missing == len(values):
        raise ValueError(f"{who}: every one of the {len(values)} {kind} is NaN (missing), "
                         "so there is no pair to learn from.")
    if warn:
        warn_user(f"{who}: {n_missing} of {len(values)} pairs have no distance (NaN, the first "
                  f"at row {_first_missing_row(y, missing)}): left out as missing pairs.",
                  UserWarning)
    keep = np.flatnonzero(~missing)
    if isinstance(X, (pd.DataFrame, pd.Series)):
        X = X.iloc[keep]
    elif isinstance(X, np.ndarray):
        X = X[keep]
    else:
        rows = list(X)
        X = [rows[i] for i in keep]
    if isinstance(y, (pd.Series, pd.DataFrame)):
        return X, y.iloc[keep]
    return X, np.asarray(y)[keep]


def declared_n_objects(estimator):
    """``d`` from ``init`` / ``init_factor`` / ``n_objects`` (None if unknown)."""
    init, factor, n_objects = estimator.init, estimator.init_factor, estimator.n_objects
    if factor is not None and not isinstance(init, str):
        raise ValueError(
            "Give the prior either as init (a d x d matrix) or as init_factor "
            "(a d x r factor), not both."
        )
    if factor is None and isinstance(init, str):
        return n_objects
    name, shape = ("init", np.shape(init)) if factor is None else ("init_factor", np.shape(factor))
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {shape}.")
    if n_objects is not None and n_objects != shape[0]:
        raise ValueError(f"n_objects={n_objects} does not match {name} of shape {shape}.")
    return shape[0]


def initial_state(estimator, pairs, index=None):
    """Return the prior's :class:`ExponentState` (low-rank when ``init_factor`` is set)."""
    if estimator.init_factor is not None:
        state = ExponentState.from_factor(estimator.init_factor, name="init_factor")
    elif not isinstance(estimator.init, str):
        state = ExponentState.from_prior(estimator.init, name="init")
    else:
        if index is not None:
            n_objects = len(index)
        elif estimator.n_objects is not None:
            n_objects = estimator.n_objects
        else:
            n_objects = max(int(pairs.max()) + 1, 2)
            if n_objects > MAX_INFERRED_OBJECTS:
                raise ValueError(
                    f"The pairs name object index {n_objects - 1}: with n_objects unset "
                    f"the model would hold {n_objects} objects (a dense {n_objects} x "
                    f"{n_objects} kernel). Give n_objects (or objects=[...] for ids, "
                    "init_factor for a low-rank model) to mean it.")
        name = "n_objects" if index is None else "len(objects)"
        return ExponentState.identity(check_n_objects(n_objects, name=name))
    if index is not None and len(index) != state.n_objects:
        raise ValueError(f"The prior is over {state.n_objects} objects, but the pairs "
                         f"or objects name {len(index)}.")
    if len(pairs):  # a factor's prior must move some given pair, or nothing is learned
        state.check_separates(pairs[:, 0], pairs[:, 1], name="init_factor")
    return state


def object_ids(state, index):
    """``objects_``: the ids of the kernel's rows (``0..d-1`` for indices)."""
    return np.arange(state.n_objects) if index is None else index.objects


class KernelViewsMixin:
    """The learned kernel ``K = trace * W`` of a fitted pair estimator.

    Needs ``state_``, ``trace_`` (the trace the model was fitted with) and
    ``n_objects_``.
    """

    @property
    def rank_(self):
        """Dimension ``r`` of the range of the kernel (``d`` in dense mode)."""
        check_is_fitted(self, "state_")
        return self.state_.size

    @property
    def kernel_(self):
        """The learned kernel ``trace * W`` (symmetric PSD, d x d).

        In low-rank mode it is formed only for ``d <= 5000``; use
        :attr:`kernel_factor_` or :meth:`kernel_entries` beyond.
        """
        check_is_fitted(self, "state_")
        state = self.state_
        if state.basis is None:
            return self.trace_ * state.matrix()
        d = state.n_objects
        if d > MAX_DENSE_OBJECTS:
            raise ValueError(
                f"kernel_ would form a {d} x {d} matrix ({8 * d * d / 2**30:.1f} GiB) "
                f"from a rank-{state.size} model. Use kernel_factor_ (K = F F^T), "
                "kernel_entries(rows, cols) for blocks, or "
                "kernel_entries(np.arange(n_objects_)) to form it on purpose."
            )
        return self.kernel_entries(np.arange(d))

    @property
    def distances_(self):
        """Distances ``sqrt(K_aa + K_bb - 2 K_ab)`` between all objects under ``kernel_``.

        The input of scikit-learn's ``metric="precomputed"``.
        """
        kernel = self.kernel_
        diagonal = np.diag(kernel)
        squared = np.maximum(induced_sq_distances(kernel, diagonal, diagonal), 0.0)
        np.fill_diagonal(squared, 0.0)
        return np.sqrt(squared)

    @property
    def kernel_factor_(self):
        """``F`` of shape (d, r) with ``kernel_ = F F^T`` (``O(d r)`` memory)."""
        check_is_fitted(self, "state_")
        return np.sqrt(self.trace_) * self.state_.factor()

    def kernel_entries(self, rows, cols=None):
        """Return the block ``K[rows][:, cols]`` of the learned kernel.

        Parameters
        ----------
        rows : array-like of int, shape (n_rows,)
            Object indices.
        cols : array-like of int, shape (n_cols,), default=None
            Object indices; ``None`` means ``rows``.

        Returns
        -------
        block : ndarray of shape (n_rows, n_cols)
            Computed from the factor in ``O((n_rows + n_cols) r^2 +
            n_rows n_cols r)`` time, without forming ``K``.
        """
        check_is_fitted(self, "state_")
        rows = self._object_indices(rows, "rows")
        cols = rows if cols is None else self._object_indices(cols, "cols")
        return self.trace_ * self.state_.entries(rows, cols)

    def _object_indices(self, indices, name):
        index = getattr(self, "_object_index", None)
        indices = np.asarray(indices, dtype=None if index is None else object)
        if indices.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of object ids, "
                             f"got shape {indices.shape}.")
        if index is not None:
            return index.rows(indices, name=name)
        pairs = check_pair_indices(np.column_stack([indices, indices]),
                                   self.n_objects_, name=name)
        return pairs[:, 0]


class _Summary:
    """A short stand-in for a data parameter in an estimator's repr."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _summary(value, noun):
    """Return a short stand-in for ``value`` (ids, a table, a matrix), or None to show it.

    Five values or fewer are shown as they are.
    """
    if isinstance(value, pd.DataFrame):
        return _Summary(f"<DataFrame of {value.shape[0]} rows x {value.shape[1]} columns>")
    if isinstance(value, (str, bytes)) or callable(value) and not hasattr(value, "__array__"):
        return None
    try:
        n = len(value)
    except TypeError:
        return None
    if n <= 5:
        return None
    try:
        array = np.asarray(value, dtype=object)
    except (TypeError, ValueError):
        return _Summary(f"<{type(value).__name__} of {n}>")
    if array.ndim == 1:
        first = ", ".join(repr(_plain(v)) for v in array[:3].tolist())
        return _Summary(f"<{n} {noun}: {first}, ...>")
    return _Summary(f"<{type(value).__name__} of shape {array.shape}>")


def _plain(value):
    """Return an id as the user wrote it (``'a'``, ``3``), not numpy's scalar."""
    return value.item() if isinstance(value, np.generic) else value


def _summarised(estimator):
    """Return a shallow copy of ``estimator`` whose data parameters are short stand-ins.

    Estimators among its parameters (a meta-estimator's learner) are
    summarised the same way, so that a nested repr stays short too.
    """
    shown = copy.copy(estimator)
    for name, noun in getattr(estimator, "_SUMMARISED", {}).items():
        value = estimator.__dict__.get(name)
        summary = None if value is None else _summary(value, noun)
        if summary is not None:
            shown.__dict__[name] = summary
    for name, value in estimator.__dict__.items():
        if isinstance(value, BaseEstimator) and getattr(value, "_SUMMARISED", None):
            shown.__dict__[name] = _summarised(value)
    return shown


class ShortReprMixin:
    """A repr that summarises data parameters (ids, tables, matrices).

    A learner built with ``objects=ids`` would otherwise print every id, and
    a grid's ``cv_results_`` and ``best_params_`` would be walls of ids:
    ``objects=<2000 ids: 'a', 'b', 'c', ...>`` instead. ``_SUMMARISED``
    maps a parameter's name to what its entries are called.
    """

    _SUMMARISED: dict = {}

    def __repr__(self, N_CHAR_MAX=700):
        """Return the estimator's repr, its data parameters summarised."""
        return BaseEstimator.__repr__(_summarised(self), N_CHAR_MAX=N_CHAR_MAX)


class PairKernelEstimator(ShortReprMixin, KernelViewsMixin, BaseEstimator):
    """What the two kernel learners share: the objects, the prior, the views.

    :class:`~megkernel.MEGKernelRegressor` and
    :class:`~megkernel.DefiniteBoostKernel` learn a kernel over the same kind
    of objects (``n_objects``, ``objects``) from the same kind of prior
    (``init``, ``init_factor``, ``trace``): their shared parameters are
    constrained here once, and the prior is made from them by one rule
    (:meth:`_initial_state`).
    """

    _SUMMARISED = {"objects": "ids", "init": "rows", "init_factor": "rows"}

    _parameter_constraints: dict = {
        "n_objects": [Interval(Integral, 2, None, closed="left"), None],
        "objects": ["array-like", None],
        "init": [StrOptions({"auto", "identity"}), "array-like"],
        "init_factor": ["array-like", None],
        "trace": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def _validate_pair_table(self, X, y=None):
        """Validate a first call's pairs: ``(pairs, y, index)`` (see :func:`validate_pairs`)."""
        return validate_pairs(self, X, y, reset=True, n_objects=declared_n_objects(self),
                              objects=self.objects)

    def _validate_more_pairs(self, X, y=None):
        """Validate pairs for a fitted model: ``(pairs, y)`` by its objects."""
        pairs, y, _ = validate_pairs(self, X, y, reset=False, n_objects=self.n_objects_,
                                     index=self._object_index)
        return pairs, y

    def _initial_state(self, pairs, index=None):
        """Return the prior's state from ``init``, ``init_factor`` and ``n_objects``."""
        return initial_state(self, pairs, index)

    def _uses_data_prior(self):
        """Whether the prior is learned from the data (``init="auto"``, no factor)."""
        return (isinstance(self.init, str) and self.init == "auto"
                and self.init_factor is None)

    def _fitted_objects(self, state, index):
        """Return the fitted attributes of the objects (``n_objects_``, ``objects_``)."""
        return {"n_objects_": state.n_objects, "objects_": object_ids(state, index),
                "_object_index": index}
