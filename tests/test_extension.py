"""The out-of-sample extension of a kernel (megkernel._numerics.extension).

Checked against a naive dense computation (the regularised least squares
solved by numpy's lstsq on the stacked system, the eigenbasis from numpy's
eigh of the centred kernel), exact recovery of in-sample objects, the
positive semidefinite extension, the conditioning bound and invariances.
"""

import numpy as np
import pytest

from megkernel._numerics.extension import (
    extension_basis,
    place_objects,
    placed_sq_distances,
)


def _points(n=120, dims=(3.0, 2.0, 1.0, 0.5), seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, len(dims))) * np.asarray(dims)


def _sq(points_a, points_b):
    return np.sum((points_a[:, None, :] - points_b[None, :, :]) ** 2, axis=2)


def _naive_sq_distances(kernel, rows, sq, cols, *, max_rank, noise):
    """The same estimate, formed densely: eigh, stacked lstsq, then the formula."""
    n = len(kernel)
    J = np.eye(n) - 1.0 / n
    centred = J @ kernel @ J
    lam, V = np.linalg.eigh(centred)
    order = np.argsort(lam)[::-1][:max_rank]
    lam, V = lam[order], V[:, order]
    keep = lam > 1e-10 * lam[0]
    lam, V = lam[keep], V[:, keep]
    e = np.diag(centred)
    alpha = n * (noise * 2 * np.trace(centred) / (n - 1)) ** 2
    B = 2 * V[rows] * lam
    b = e[rows] - sq
    C = np.eye(len(rows)) - 1.0 / len(rows)
    stacked = np.vstack([C @ B, np.sqrt(alpha) * np.eye(len(lam))])
    rhs = np.concatenate([C @ b, np.zeros(len(lam))])
    u = np.linalg.lstsq(stacked, rhs, rcond=None)[0]
    t = max(np.mean(B @ u - b), u @ (lam * u))
    return t + e[cols] - 2 * (V[cols] * lam) @ u


@pytest.mark.parametrize("m", [3, 10, 60, 119])  # dual, dual, primal, primal from the rest
def test_matches_a_naive_dense_computation(m):
    points = _points()
    known, new = points[:100], points[100:]
    kernel = known @ known.T + 2.0
    rng = np.random.default_rng(m)
    rows = [np.sort(rng.choice(100, min(m, 100), replace=False)) for _ in new]
    noisy = _sq(new, known) * rng.uniform(0.8, 1.2, size=(len(new), 100))
    basis = extension_basis(kernel, max_rank=8, noise=0.1)
    placement = place_objects(basis, rows, [noisy[i, at] for i, at in enumerate(rows)])
    got = placed_sq_distances(basis, placement, np.arange(100))
    for i, at in enumerate(rows):
        want = _naive_sq_distances(kernel, at, noisy[i, at], np.arange(100), max_rank=8,
                                   noise=0.1)
        np.testing.assert_allclose(got[i], np.maximum(want, 0), rtol=1e-7, atol=1e-7)


def test_matches_the_naive_computation_past_the_subset_eigensolver():
    # n > 4 max_rank: the top eigenvectors come from a subset eigensolver
    rng = np.random.default_rng(1)
    points = rng.normal(size=(60, 12)) * np.linspace(3, 0.2, 12)
    kernel = points[:50] @ points[:50].T
    basis = extension_basis(kernel, max_rank=5, noise=0.05)
    assert basis.rank == 5
    rows = np.arange(0, 50, 3)
    sq = _sq(points[55:56], points[rows])[0]
    placement = place_objects(basis, [rows], [sq])
    got = placed_sq_distances(basis, placement, np.arange(50))[0]
    want = _naive_sq_distances(kernel, rows, sq, np.arange(50), max_rank=5, noise=0.05)
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-7, atol=1e-7)


def test_recovers_an_in_sample_object_from_its_distances_to_all():
    points = _points()
    kernel = points @ points.T + 5.0  # rank 4 plus a constant (centring removes it)
    sq = _sq(points, points)
    basis = extension_basis(kernel, noise=1e-9)
    assert basis.rank == 4
    placement = place_objects(basis, [np.arange(len(points))] * 3, [sq[7], sq[50], sq[99]])
    got = placed_sq_distances(basis, placement, np.arange(len(points)))
    np.testing.assert_allclose(got, sq[[7, 50, 99]], atol=1e-8 * sq.max())
    # at the default noise: close, the ridge's shrinkage only
    basis = extension_basis(kernel)
    placement = place_objects(basis, [np.arange(len(points))], [sq[7]])
    got = placed_sq_distances(basis, placement, np.arange(len(points)))[0]
    assert np.abs(got - sq[7]).max() < 0.02 * sq.max()


def test_places_a_new_object_from_a_few_distances_exactly_when_they_determine_it():
    points = _points(dims=(3.0, 2.0))
    kernel = points[:100] @ points[:100].T
    basis = extension_basis(kernel, noise=1e-9)
    rows = np.array([3, 40, 77, 90])  # four points in general position fix a point of the plane
    truth = _sq(points[100:], points[:100])
    placement = place_objects(basis, [rows] * 20, [truth[i, rows] for i in range(20)])
    got = placed_sq_distances(basis, placement, np.arange(100))
    np.testing.assert_allclose(got, truth, atol=1e-6 * truth.max())


def test_the_extended_kernel_is_positive_semidefinite():
    # distances too small for any point: t is raised to ||y||^2, never below
    points = _points()
    kernel = points @ points.T
    basis = extension_basis(kernel)
    rng = np.random.default_rng(3)
    rows = [rng.choice(120, 15, replace=False) for _ in range(30)]
    sq = [0.01 * rng.random(15) for _ in rows]
    placement = place_objects(basis, rows, sq)
    y_norms = np.einsum("ij,ij->i", placement.coefficients * basis.eigenvalues,
                        placement.coefficients)
    assert np.all(placement.sq_norms >= y_norms - 1e-12)
    # the extended centred Gram matrix [[Z Z^T, Z y], [y^T Z^T, t]] of one of them
    V = basis.weights / (2 * basis.eigenvalues)
    Z = V * np.sqrt(basis.eigenvalues)
    y = np.sqrt(basis.eigenvalues) * placement.coefficients[0]
    gram = np.block([[Z @ Z.T, (Z @ y)[:, None]],
                     [(Z @ y)[None, :], np.array([[placement.sq_norms[0]]])]])
    assert np.linalg.eigvalsh(gram).min() > -1e-9 * np.abs(gram).max()


def test_the_conditioning_bound_holds():
    points = _points()
    kernel = points @ points.T
    basis = extension_basis(kernel)
    rng = np.random.default_rng(4)
    for m in (5, 30, 120):
        rows = rng.choice(120, m, replace=False)
        B = basis.weights[rows]
        Bc = B - B.mean(axis=0)
        normal = Bc.T @ Bc + basis.ridge * np.eye(basis.rank)
        assert np.linalg.cond(normal) <= basis.condition_bound * (1 + 1e-9)


def test_order_of_the_given_objects_and_scale_of_the_kernel_change_nothing():
    points = _points()
    kernel = points[:100] @ points[:100].T
    sq = _sq(points[100:101], points[:100])[0]
    rows = np.arange(0, 100, 7)
    basis = extension_basis(kernel)
    one = placed_sq_distances(basis, place_objects(basis, [rows], [sq[rows]]), np.arange(100))
    flipped = rows[::-1]
    two = placed_sq_distances(basis, place_objects(basis, [flipped], [sq[flipped]]),
                              np.arange(100))
    np.testing.assert_allclose(one, two, rtol=1e-10)
    big = extension_basis(kernel * 4.0**300)  # the same, in units 4^300 larger
    three = placed_sq_distances(big, place_objects(big, [rows], [sq[rows] * 4.0**300]),
                                np.arange(100))
    np.testing.assert_allclose(three / 4.0**300, one, rtol=1e-9)
