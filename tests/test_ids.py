"""Object ids are kept exactly as given (issue 22; rule: the docstring of
``megkernel._pair_estimator``).

The same pairs as a list of lists, an ndarray and a DataFrame give the same
model, or the same refusal; a mix of kinds of ids (which numpy would turn
into strings) and a missing id are refused, naming where; ``objects_`` is
the model's own read-only copy.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

from megkernel import (
    DefiniteBoostKernel,
    DefiniteBoostMetric,
    KernelKNeighborsClassifier,
    MEGKernelRegressor,
    MEGMetric,
    draw_pairs,
    nearest_neighbor_error,
)

ESTIMATORS = [
    pytest.param(lambda **p: MEGKernelRegressor(solver="online", **p), [0.1, 0.2, 0.3], id="MEG"),
    pytest.param(lambda **p: DefiniteBoostKernel(gamma=0.1, **p), [1, 1, -1],
                 id="DefiniteBoost"),
]

CONTAINERS = {
    "list": lambda rows: [list(row) for row in rows],
    "object ndarray": lambda rows: np.array(rows, dtype=object),
    "DataFrame": lambda rows: pd.DataFrame(rows, columns=["u", "v"]),
    "DataFrame of objects": lambda rows: pd.DataFrame(rows, columns=["u", "v"],
                                                      dtype=object),
}


def _fit(make, y, X, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # convergence notes
        return make(**params).fit(X, y)


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
@pytest.mark.parametrize("container", list(CONTAINERS))
@pytest.mark.parametrize("rows", [
    [[1, "a"], ["a", "b"], ["b", 1]],        # int and str: numpy would make '1'
    [["a", 1.5], ["a", "b"], ["b", "a"]],    # float and str
    [[True, "a"], ["a", "b"], ["b", "a"]],   # bool and str
    [[("t", 1), "a"], ["a", "b"], ["b", "a"]],  # tuple and str
])
def test_a_mix_of_kinds_is_refused_in_every_container(make, y, container, rows):
    X = CONTAINERS[container](rows)
    with pytest.raises(ValueError, match="mixes kinds of object ids") as error:
        _fit(make, y, X)
    assert "row 0" in str(error.value)


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
def test_same_ids_in_every_container_give_the_same_model(make, y):
    rows = [["x", "a"], ["a", "b"], ["b", "x"]]
    models = {name: _fit(make, y, to(rows)) for name, to in CONTAINERS.items()}
    models["unicode ndarray"] = _fit(make, y, np.array(rows))
    models["categorical DataFrame"] = _fit(
        make, y, pd.DataFrame(rows, columns=["u", "v"]).astype("category"))
    reference = models.pop("list")
    assert reference.objects_.dtype == object
    assert reference.objects_.tolist() == ["a", "b", "x"]
    assert all(type(i) is str for i in reference.objects_)
    for name, model in models.items():
        assert model.objects_.dtype == object, name
        assert model.objects_.tolist() == reference.objects_.tolist(), name
        np.testing.assert_array_equal(model.kernel_, reference.kernel_, err_msg=name)


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
def test_whole_numbers_in_an_object_array_are_indices_as_in_a_numeric_one(make, y):
    rows = [[0, 1], [1, 2], [2, 0]]
    reference = _fit(make, y, np.array(rows))
    for X in (np.array(rows, dtype=object), np.array(rows, dtype=object).astype(float),
              pd.DataFrame(rows, dtype=object), [[0, 1.0], [1, 2], [2, 0]]):
        model = _fit(make, y, X)
        assert model.objects_.tolist() == [0, 1, 2]
        np.testing.assert_array_equal(model.kernel_, reference.kernel_)


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
@pytest.mark.parametrize("missing", [None, pd.NA, np.nan, float("nan")])
@pytest.mark.parametrize("container", ["list", "object ndarray", "DataFrame"])
def test_a_missing_id_is_refused_naming_row_and_column(make, y, missing, container):
    rows = [["a", "b"], ["b", "c"], ["c", missing]]
    X = CONTAINERS[container](rows)
    column = "'v'" if container == "DataFrame" else "1"
    with pytest.raises(ValueError, match=f"missing id .* at row 2, column {column}"):
        _fit(make, y, X)


def test_a_missing_id_in_a_nullable_string_column():
    X = pd.DataFrame({"u": pd.array(["a", "b", pd.NA], dtype="string"),
                      "v": ["b", "c", "a"]}, index=[10, 11, 12])
    with pytest.raises(ValueError, match="missing id .* at row 12, column 'u'"):
        MEGKernelRegressor(solver="online").fit(X, [0.1, 0.2, 0.3])


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
def test_a_refused_pair_table_leaves_a_fitted_model_unchanged(make, y,
                                                              assert_unchanged_on_error):
    model = _fit(make, y, [["a", "b"], ["b", "c"], ["c", "a"]])
    for X in ([[1, "a"], ["a", "b"], ["b", 1]], [["a", None], ["a", "b"], ["b", "c"]]):
        with assert_unchanged_on_error(model, ValueError):
            model.fit(X, y)
    if hasattr(model, "partial_fit"):
        with assert_unchanged_on_error(model, ValueError, match="mixes kinds"):
            model.partial_fit([[1, "a"]], y[:1])


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
@pytest.mark.parametrize("kind", ["object", "str", "int"])
def test_objects_are_the_models_own_copy(make, y, kind):
    ids = {"object": np.array(["c", "a", "b"], dtype=object),
           "str": np.array(["c", "a", "b"]),
           "int": np.array([30, 10, 20])}[kind]
    names = ids.tolist()
    pairs = [[names[0], names[1]], [names[1], names[2]], [names[2], names[0]]]
    model = _fit(make, y, pairs, objects=ids)
    kernel = model.kernel_.copy()
    assert not np.shares_memory(model.objects_, ids)
    assert model.objects_.dtype == ids.dtype  # the kind given, kept
    ids.sort()  # the caller's array changes: the model does not
    assert model.objects_.tolist() == names
    np.testing.assert_array_equal(model.kernel_, kernel)
    with pytest.raises(ValueError, match="read-only"):
        model.objects_.sort()  # nor can the model's own ids be reordered in place


@pytest.mark.parametrize("objects", [[1, "a", "b"], np.array([1, "a", "b"], dtype=object),
                                     ["a", None, "b"]])
def test_declared_objects_follow_the_same_rule(objects):
    with pytest.raises(ValueError, match="objects (mixes kinds|has a missing id)"):
        MEGKernelRegressor(solver="online", objects=objects).fit([["a", "b"]], [0.1])


# -- class labels follow the ids' rule (issue 22: None among string labels) ---------

LABEL_CONTAINERS = {
    "list": list,
    "object ndarray": lambda labels: np.array(labels, dtype=object),
    "Series": lambda labels: pd.Series(labels, dtype=object),
}


def _label_fits():
    K = np.eye(6) + 0.1
    X = np.random.default_rng(0).normal(size=(6, 2))
    yield pytest.param(lambda y: KernelKNeighborsClassifier().fit(K, y), id="k-NN")
    yield pytest.param(lambda y: MEGMetric(random_state=0).fit(X, y), id="MEGMetric")
    yield pytest.param(lambda y: DefiniteBoostMetric(random_state=0, max_iter=5).fit(X, y),
                       id="DefiniteBoostMetric")
    yield pytest.param(lambda y: draw_pairs(y, 4, random_state=0), id="draw_pairs")
    yield pytest.param(
        lambda y: nearest_neighbor_error(K, y, n_splits=2, random_state=0),
        id="nearest_neighbor_error")


@pytest.mark.parametrize("fit", list(_label_fits()))
@pytest.mark.parametrize("container", LABEL_CONTAINERS)
@pytest.mark.parametrize("missing", [None, pd.NA, np.nan])
def test_a_missing_class_label_is_refused_naming_its_row(fit, container, missing):
    """It failed inside numpy's sort of the labels ('<' not supported between
    'NoneType' and 'str')."""
    labels = LABEL_CONTAINERS[container](["a", "a", missing, "b", "b", "b"])
    with pytest.raises(ValueError, match=r"(y|labels) has a missing class label .* at "
                                         "row 2"):
        fit(labels)


@pytest.mark.parametrize("fit", list(_label_fits()))
@pytest.mark.parametrize("container", LABEL_CONTAINERS)
def test_class_labels_of_two_kinds_are_refused_in_every_container(fit, container):
    """A list of str and int would become strings in numpy (a different model
    than the same labels in a Series): refused in every container instead."""
    labels = LABEL_CONTAINERS[container](["a", "a", "a", 1, 1, 1])
    with pytest.raises(ValueError, match="mixes kinds of class labels: str 'a' .*number 1 "
                                         r"\(row 3\)"):
        fit(labels)


def test_labels_of_one_kind_still_work_in_every_container():
    K = np.eye(6) + 0.1
    for make in LABEL_CONTAINERS.values():
        model = KernelKNeighborsClassifier().fit(K, make(["a", "a", "a", "b", "b", "b"]))
        assert model.classes_.tolist() == ["a", "b"]
    model = KernelKNeighborsClassifier().fit(K, [0, 0, 0, 1, 1, True])  # numbers: one kind
    assert model.classes_.tolist() == [0, 1]


# -- found by tests/test_hostile_objects.py ---------------------------------------------

@pytest.mark.parametrize("where", ["objects", "DataFrame index", "pairs", "pair table"])
def test_nan_among_numeric_ids_is_a_missing_id(where):
    """NaN in a float array of ids was taken as an id (numpy arrays of numbers
    skipped the missing-id check; only object arrays were looked at)."""
    from megkernel import KernelDistances

    with pytest.raises(ValueError, match=r"has a missing id \(NaN\) at row 1"):
        if where == "objects":
            KernelDistances(kernel=np.eye(2), objects=np.array([0.5, np.nan])).fit([0.5])
        elif where == "DataFrame index":
            frame = pd.DataFrame(np.zeros((2, 2)), index=[0.5, None], columns=[0.5, None])
            KernelDistances(distances=frame).fit([0.5])
        elif where == "pairs":
            MEGKernelRegressor(solver="online").fit(np.array([[0, 1], [1, np.nan]]), [1.0, 1.0])
        else:
            MEGKernelRegressor(solver="online").fit(
                pd.DataFrame({"a": [0.0, 1.0], "b": [1.0, np.nan]}), [1.0, 1.0])


def test_a_list_of_tuple_ids_is_not_split_into_columns():
    """``KernelDistances.fit([("f", 0), ("f", 1)])`` read two columns (numpy);
    the same ids in an object array worked."""
    from megkernel import KernelDistances

    ids = [("f", 0), ("f", 1), ("g", 2)]
    objects = np.empty(3, dtype=object)
    objects[:] = ids
    step = KernelDistances(kernel=np.eye(3), objects=objects)
    from_list = step.fit(ids[:2]).transform([ids[2]])
    from_array = step.fit(objects[:2]).transform(objects[2:])
    np.testing.assert_array_equal(from_list, from_array)
    assert step.fit(ids[:2]).fit_objects_.tolist() == ids[:2]


@pytest.mark.parametrize(("make", "y"), ESTIMATORS)
@pytest.mark.parametrize("ids", [[("plate1", 3), ("plate1", 4), ("plate2", 3)],
                                 [(1, 2), (1, 3), (2, 2)]], ids=["(str, int)", "(int, int)"])
def test_tuple_ids_stay_whole_in_every_container(make, y, ids):
    """Found by the new-user audit: tuple ids (plate, well) were split by numpy
    into two columns and refused as "mixed kinds"."""
    rows = [[ids[0], ids[1]], [ids[1], ids[2]], [ids[2], ids[0]]]
    frame = pd.DataFrame({"u": [r[0] for r in rows], "v": [r[1] for r in rows]})
    as_list = _fit(make, y, rows)
    assert as_list.objects_.shape == (3,) and as_list.objects_.tolist() == sorted(ids)
    from_frame = _fit(make, y, frame)
    assert from_frame.objects_.tolist() == sorted(ids)
    np.testing.assert_array_equal(from_frame.kernel_, as_list.kernel_)
    declared = _fit(make, y, rows, objects=ids)
    assert declared.objects_.tolist() == ids  # the declared order
    prediction = declared.predict([[ids[0], ids[2]]])
    with warnings.catch_warnings():  # fitted on a list: sklearn notes the frame's names
        warnings.filterwarnings("ignore", "X has feature names", UserWarning)
        np.testing.assert_array_equal(prediction, declared.predict(frame.iloc[2:3, ::-1]))


@pytest.mark.parametrize("objects", [{"a", "b", "c"}, {"a": 1, "b": 2},
                                     pd.DataFrame({"x": [1, 2], "y": [3, 4], "z": [5, 6]})],
                         ids=["set", "dict", "DataFrame"])
def test_objects_without_an_order_or_of_two_dimensions_are_refused(objects):
    """The review: reading tuple ids whole must not make a set (no order: the
    kernel's rows would follow the hash seed), a dict or a table 1-D ids."""
    with pytest.raises(ValueError, match="1-D sequence"):
        MEGKernelRegressor(objects=objects).fit([["a", "b"]], [1.0])


def test_kernel_distances_takes_objects_as_a_list_of_tuple_ids():
    """``KernelDistances(objects=[("p1", 0), ...])``: numpy read the list as two columns
    and the ids as mixing kinds (str and number); an object array of the same ids
    worked, and so did MEGKernelRegressor(objects=<the list>)."""
    from megkernel import KernelDistances

    ids = [("p1", 0), ("p1", 1), ("p2", 0)]
    objects = np.empty(3, dtype=object)
    objects[:] = ids
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    kernel = points @ points.T + 1.0
    for source in ({"kernel": kernel},
                   {"distances": np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))}):
        from_list = KernelDistances(objects=ids, **source).fit(ids).transform(ids[:1])
        from_array = KernelDistances(objects=objects, **source).fit(objects).transform(ids[:1])
        np.testing.assert_array_equal(from_list, from_array)
