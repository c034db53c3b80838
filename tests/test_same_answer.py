"""Same data, same answer: row order never changes a batch fit, a seed reproduces it bit for bit.

The batch fits work in a canonical order of the pair table
(:func:`megkernel._solvers.holdout.canonical_order`): the held-out split, the
spectral prior's own set-aside and every sum run over the same rows whatever
order (or orientation) the user's table has. ARPACK starts from a fixed
vector instead of its own random one.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal
from sklearn.base import clone

import megkernel._solvers.spectral_prior as spectral_prior_module
from megkernel import MEGKernelRegressor

_PROFILE = os.environ.get("MEGKERNEL_HYPOTHESIS_PROFILE", "default")
SAME = settings(max_examples=50 if _PROFILE == "ci" else 6, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


#: max_iter=60 keeps the batch fits short: a fit may stop there, which it says;
#: the tests compare the kernels where they stop
SHORT_FITS = pytest.mark.filterwarnings(
    "ignore:MEGKernelRegressor. the batch fit stopped at max_iter=60 iterations"
    ":sklearn.exceptions.ConvergenceWarning")


def _table(d=30, fraction=0.4, seed=0):
    """Family-structured squared distances of some pairs, string ids, odd units."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.normal(size=(4, 3))
    points = centres[rng.integers(0, 4, d)] + rng.normal(size=(d, 3))
    ids = np.array([f"obj-{i:03d}" for i in range(d)], dtype=object)
    a, b = np.triu_indices(d, 1)
    keep = rng.random(len(a)) < fraction
    a, b = a[keep], b[keep]
    return np.column_stack([ids[a], ids[b]]), 37.5 * np.sum((points[a] - points[b]) ** 2, 1)


def _shuffled(pairs, y, seed):
    """The same table in another row order, some pairs written the other way round."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    shuffled = pairs[order].copy()
    flip = rng.random(len(y)) < 0.5
    shuffled[flip] = shuffled[flip][:, ::-1]
    return shuffled, y[order]


@SAME
@given(seed=st.integers(0, 2**16), early_stopping=st.booleans())
@SHORT_FITS
def test_meg_batch_fit_does_not_depend_on_the_row_order(seed, early_stopping):
    pairs, y = _table()
    model = MEGKernelRegressor(random_state=0, early_stopping=early_stopping, max_iter=60)
    reference = model.fit(pairs, y).kernel_
    shuffled = MEGKernelRegressor(random_state=0, early_stopping=early_stopping,
                                  max_iter=60).fit(*_shuffled(pairs, y, seed))
    assert_array_equal(shuffled.kernel_, reference)


@pytest.mark.parametrize("early_stopping", [True, False])
@SHORT_FITS
def test_meg_batch_fit_with_arpack_reproduces_bit_for_bit(monkeypatch, early_stopping):
    """ARPACK (the spectral prior of many objects) starts from a fixed vector: two
    fits with one seed are identical, and a row permutation changes nothing."""
    monkeypatch.setattr(spectral_prior_module, "_DENSE_EIGH_BELOW", 10)
    pairs, y = _table(d=60, fraction=0.3, seed=3)
    kernels = [MEGKernelRegressor(random_state=0, early_stopping=early_stopping,
                                  max_iter=60).fit(p, t).kernel_
               for p, t in [(pairs, y), (pairs, y), _shuffled(pairs, y, 1)]]
    assert_array_equal(kernels[0], kernels[1])
    assert_array_equal(kernels[0], kernels[2])


def _signs(pairs, y):
    """Similar (+1) the closest fifth, dissimilar (-1) the farthest fifth, of a table."""
    low, high = np.quantile(y, [0.2, 0.8])
    keep = (y <= low) | (y >= high)
    return pairs[keep], np.where(y[keep] <= low, 1, -1)


@SAME
@given(seed=st.integers(0, 2**16))
def test_definiteboost_from_labels_does_not_depend_on_the_row_order(seed):
    from megkernel import DefiniteBoostKernel

    pairs, signs = _signs(*_table(d=30, fraction=0.6, seed=5))
    reference = DefiniteBoostKernel(random_state=0, max_iter=400).fit(pairs, signs)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(signs))
    shuffled = DefiniteBoostKernel(random_state=0, max_iter=400).fit(pairs[order],
                                                                     signs[order])
    assert_array_equal(shuffled.kernel_, reference.kernel_)
    assert shuffled.gamma_ == reference.gamma_
    # the constraints' indices name the user's rows
    assert_array_equal(np.sort(order[shuffled.dropped_constraints_]),
                       reference.dropped_constraints_)
    assert_array_equal(order[shuffled.chosen_constraints_], reference.chosen_constraints_)


@SAME
@given(seed=st.integers(0, 2**16))
def test_definiteboost_from_distances_does_not_depend_on_the_row_order(seed):
    from megkernel import DefiniteBoostKernel

    pairs, y = _table(d=30, fraction=0.5, seed=6)
    # the closest and farthest tenth of 204 pairs are too few to hold any out
    model = DefiniteBoostKernel(random_state=0, max_iter=400, y_kind="sq_distances",
                                validation_fraction=None)
    reference = model.fit(pairs, y).kernel_
    shuffled = clone(model).fit(*_shuffled(pairs, y, seed))
    assert_array_equal(shuffled.kernel_, reference)


def test_definiteboost_refit_does_not_carry_the_split():
    """The chosen gamma is refit on every pair from the prior: with gamma given,
    the held-out split (random_state) leaves the kernel unchanged."""
    from megkernel import DefiniteBoostKernel

    pairs, signs = _signs(*_table(d=40, fraction=0.6, seed=7))
    probe = DefiniteBoostKernel(random_state=0, max_iter=2000).fit(pairs, signs)
    kernels = [DefiniteBoostKernel(random_state=seed, gamma=probe.gamma_, max_iter=2000)
               .fit(pairs, signs).kernel_ for seed in range(3)]
    assert_array_equal(kernels[0], kernels[1])
    assert_array_equal(kernels[0], kernels[2])


@pytest.mark.parametrize("learner", ["MEGMetric", "DefiniteBoostMetric"])
@pytest.mark.parametrize("seed", [0, 1])
def test_metric_learners_do_not_depend_on_the_row_order_of_the_points(learner, seed):
    """The same labelled points, or the same points and pairs, in another row
    order (the pairs renumbered with them): the same metric, bit for bit, and
    the same pairs in the user's own numbering."""
    import warnings

    import megkernel
    from megkernel.metric import draw_pairs

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, 90)
    X = rng.normal(size=(90, 5)) + labels[:, None] * np.array([1.5, 0.0, 0.0, 0.0, 0.5])
    X[7] = X[3]  # a copy of a point
    labels[7] = labels[3]
    perm = rng.permutation(len(X))
    rank = np.argsort(perm)  # row i of X is row rank[i] of X[perm]
    make = getattr(megkernel, learner)
    pairs, signs = draw_pairs(labels, 60, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verdicts on this small set are beside the point
        fits = [(make(random_state=0).fit(X, labels),
                 make(random_state=0).fit(X[perm], labels[perm])),
                (make(random_state=0).fit_pairs(X, pairs, signs),
                 make(random_state=0).fit_pairs(X[perm], rank[pairs], signs))]
    for plain, shuffled in fits:
        assert_array_equal(plain.components_, shuffled.components_)
        assert_array_equal(plain.mean_, shuffled.mean_)
        # the pairs it learned from, each in its own table's numbering
        assert_array_equal(np.sort(plain.pairs_, axis=1),
                           np.sort(perm[shuffled.pairs_], axis=1))
