"""MEGKernelRegressor(grow_objects=True): partial_fit pairs naming new ids add them."""

import warnings

import numpy as np
import pytest

from megkernel import MEGKernelRegressor
from megkernel._numerics.extension import grown_kernel
from megkernel._pair_estimator import ObjectIndex


def _plane(n=40, seed=0):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 2)) + 3.0 * (np.arange(n) % 2)[:, None]
    ids = np.array([f"o{i:02d}" for i in range(n)], dtype=object)
    return ids, np.sum((points[:, None] - points[None]) ** 2, axis=2), points


def _fitted(n_known=30, **params):
    ids, sq, _ = _plane()
    a, b = np.triu_indices(n_known, 1)
    model = MEGKernelRegressor(grow_objects=True, random_state=0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(np.column_stack([ids[a], ids[b]]), sq[a, b])
    return model, ids, sq


def _arrivals(ids, sq, new=range(30, 35), m=10, seed=1):
    rng = np.random.default_rng(seed)
    rows = [(ids[x], ids[j], sq[x, j]) for x in new for j in rng.choice(30, m, replace=False)]
    return (np.array([r[:2] for r in rows], dtype=object), np.array([r[2] for r in rows]))


def test_the_grown_kernel_keeps_the_known_block_and_is_positive_definite():
    _, sq, points = _plane()
    kernel = points[:30] @ points[:30].T + 0.05 * np.eye(30)
    rows = [np.arange(0, 30, 2)] * 10
    grown = grown_kernel(kernel, rows, [sq[30 + i, rows[i]] for i in range(10)], own=0.05)
    np.testing.assert_array_equal(grown[:30, :30], kernel)
    assert np.linalg.eigvalsh(grown).min() > 0.04
    diagonal = np.diag(grown)
    induced = diagonal[:, None] + diagonal[None, :] - 2 * grown
    # the true configuration is planar: the new objects' distances to every known
    # object and to each other come out close (the ridge's shrinkage, own parts)
    assert np.abs(induced[30:, :30] - sq[30:, :30]).max() < 0.03 * sq.max()
    new_new = induced[30:, 30:] - sq[30:40, 30:40]
    assert np.abs(new_new[np.triu_indices(10, 1)]).max() < 0.05 * sq.max()


def test_partial_fit_adds_new_ids_and_goes_on_over_the_larger_set():
    model, ids, sq = _fitted()
    X, y = _arrivals(ids, sq)
    model.partial_fit(X, y)
    assert model.objects_.tolist() == ids[:35].tolist()
    assert model.kernel_.shape == (35, 35) and model.n_objects_ == 35
    predicted = model.predict(np.array([[ids[x], ids[j]] for x in range(30, 35)
                                        for j in range(30)], dtype=object))
    assert np.corrcoef(predicted, sq[30:35, :30].ravel())[0, 1] > 0.99
    updates = model.n_updates_
    model.partial_fit(np.array([[ids[30], ids[33]], [ids[31], ids[2]]], dtype=object),
                      [sq[30, 33], sq[31, 2]])  # pairs among the larger set: trials
    assert model.n_updates_ == updates + 2


def test_without_grow_objects_new_ids_are_refused_as_before():
    model, ids, sq = _fitted()
    model.set_params(grow_objects=False)
    X, y = _arrivals(ids, sq)
    with pytest.raises(ValueError, match="'o3[0-4]', which is not one of the model's 30"):
        model.partial_fit(X, y)


def test_a_new_id_paired_only_with_new_ones_is_named_and_nothing_changes():
    model, ids, sq = _fitted()
    before = model.kernel_.copy()
    X, y = _arrivals(ids, sq)
    X = np.vstack([X, [[ids[36], ids[37]]]])
    y = np.append(y, sq[36, 37])
    with pytest.raises(ValueError, match="new object 'o36' .* no known object"):
        model.partial_fit(X, y)
    assert len(model.objects_) == 30
    np.testing.assert_array_equal(model.kernel_, before)


def test_indices_and_low_rank_models_cannot_grow():
    ids, sq, points = _plane()
    a, b = np.triu_indices(30, 1)
    model = MEGKernelRegressor(grow_objects=True, solver="online")
    model.partial_fit(np.column_stack([a, b]), sq[a, b])
    with pytest.raises(ValueError, match="grow_objects=True adds objects named by id"):
        model.partial_fit(np.array([[30, 1]]), [sq[30, 1]])
    assert model.n_objects_ == 30
    factor = MEGKernelRegressor(grow_objects=True, init_factor=points[:30], objects=ids[:30])
    factor.partial_fit(np.column_stack([ids[a], ids[b]]), sq[a, b])
    with pytest.raises(ValueError, match="with no init_factor"):
        factor.partial_fit(np.array([[ids[30], ids[1]]], dtype=object), [sq[30, 1]])


def test_the_index_of_a_grown_model_maps_the_new_ids():
    model, ids, sq = _fitted()
    model.partial_fit(*_arrivals(ids, sq, new=[31, 30]))
    assert isinstance(model._object_index, ObjectIndex)
    assert model.objects_[-2:].tolist() == ["o31", "o30"]  # in the order they came


def test_a_new_object_s_distance_beyond_the_targets_range_is_refused_as_a_known_one_s():
    """The grown kernel was built before the targets' range was checked: a new
    object's squared distance of 1e200 met 'the grown kernel contains NaN or infinite
    entries' instead of the words a known pair's gets."""
    model, ids, sq = _fitted()
    before = model.kernel_.copy()
    X = np.array([[ids[30], ids[1]], [ids[30], ids[2]]], dtype=object)
    with pytest.raises(ValueError, match="targets up to 1e\\+200 exceed 1e\\+100"):
        model.partial_fit(X, [sq[30, 1], 1e200])
    assert len(model.objects_) == 30
    np.testing.assert_array_equal(model.kernel_, before)


@pytest.mark.parametrize("far", [1e90, None])
def test_a_grown_kernel_beyond_double_precision_is_refused_in_the_user_s_terms(far):
    """A new object far beyond the known ones (1e90 against squared distances of about
    10), or a model whose kernel has eigenvalues below double precision's resolution
    (MEG fitted to squared distances read as plain ones: down to 1e-53 of its trace):
    the grown kernel's eigenvalues cannot be resolved. The refusal named 'the grown
    kernel is not positive definite', an internal matrix; it names the new objects."""
    model, ids, sq = _fitted(**({} if far else {"squared": False}))
    before = model.kernel_.copy()
    X = np.array([[ids[30], ids[1]], [ids[30], ids[2]]], dtype=object)
    with pytest.raises(ValueError, match="cannot add the new object 'o30'") as caught:
        model.partial_fit(X, [sq[30, 1], far or sq[30, 2]])
    assert "grown kernel" not in str(caught.value)
    assert len(model.objects_) == 30
    np.testing.assert_array_equal(model.kernel_, before)


@pytest.mark.parametrize("pairs, words", [
    ([["o02", "o01"], [5, "o01"]], "X mixes kinds of object ids: .*number 5 \\(row 1, "
     "column 0\\)"),
    ([["o02", "o01"], [None, "o01"]], "X has a missing id \\(None\\) at row 1, column 0"),
    ([[5, 6], [7, 6]], "X names number ids \\(e.g. 5\\) but the model's objects are str "
     "ids"),
])
def test_new_ids_are_checked_against_the_ids_rule_in_the_user_s_terms(pairs, words):
    """Growing checked the ids' rule on the grown list of objects, so the refusal named
    'objects' (never given) at its row 30; or, for ids all of another kind than the
    model's, said the new id was paired with no known object."""
    model, _, _ = _fitted()
    with pytest.raises(ValueError, match=words):
        model.partial_fit(np.array(pairs, dtype=object), [1.0, 1.0])
    assert len(model.objects_) == 30
