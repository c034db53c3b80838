"""The soft-neighbour objective computed for speed, checked against its plain forms.

The logits leave each row's own constant to the softmax, and given pairs
among many points are computed over the pairs alone: both must give the
objective, the probabilities and the gradient of the plain ``n x n``
formulas, and the pairs' ascent must not build ``n x n`` arrays.
"""

import tracemalloc

import numpy as np
import pytest
from test_metric_pair_loss_candidate import _pair_loss_problem, _race

import megkernel._solvers.metric_soft_neighbors as sn
import megkernel._solvers.metric_validation as mv
from megkernel._solvers.metric_meg import embedding
from megkernel._solvers.metric_soft_neighbors import (
    SoftNeighborAscent,
    pair_masks,
    soft_neighbor_probabilities,
)


def _naive_probabilities(embedded, temperature, allowed, same):
    """exp(-d^2 / T) over each row's allowed columns, normalised (plain loops)."""
    n = len(embedded)
    P = np.zeros((n, n))
    for i in range(n):
        d = np.array([np.sum((embedded[i] - embedded[k]) ** 2) for k in range(n)])
        weights = np.where(allowed[i], np.exp(-(d - d[allowed[i]].min()) / temperature), 0.0)
        P[i] = weights / weights.sum()
    return P, (P * same).sum(axis=1)


def _naive_gradient(coordinates, P, p, same, temperature):
    """sum_ik W_ik u_ik u_ik^T / (T n), W = P (p_i - [same]) (plain loops)."""
    n, r = coordinates.shape
    G = np.zeros((r, r))
    for i in range(n):
        for k in range(n):
            u = coordinates[i] - coordinates[k]
            G += P[i, k] * (p[i] - same[i, k]) * np.outer(u, u)
    return G / (temperature * n)


def test_probabilities_far_from_the_origin_match_the_plain_softmax():
    """Points far from the origin (large squared norms beside small distances):
    the shifted logits lose nothing against exp(-d^2 / T)."""
    rng = np.random.default_rng(0)
    embedded = 50.0 + rng.normal(scale=0.3, size=(15, 3))
    codes = rng.integers(0, 3, 15)
    P, p, same = soft_neighbor_probabilities(embedded, codes, 0.2)
    allowed = ~np.eye(15, dtype=bool)
    P_naive, p_naive = _naive_probabilities(embedded, 0.2, allowed, same)
    np.testing.assert_allclose(P, P_naive, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(p, p_naive, rtol=1e-8, atol=1e-12)


def test_a_dense_table_in_many_coordinates_keeps_the_square_arrays():
    """Edges cost E r^2 per evaluation against n^2 r for the square arrays: a
    table pairing each of 80 points with half of the others in 40 coordinates
    is computed over the n x n arrays, a sparse one in 4 over its edges."""
    rng = np.random.default_rng(6)
    a, b = np.triu_indices(80, 1)
    keep = rng.random(len(a)) < 0.5
    pairs = np.column_stack([a[keep], b[keep]])
    signs = rng.choice([-1.0, 1.0], size=len(pairs))
    coordinates = rng.normal(size=(80, 40))
    dense = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, np.ones(40), 1.0)
    assert dense._edges is None
    coordinates, pairs, signs, prior = _sparse_table(6)
    assert SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 1.0)._edges is not None


def _sparse_table(seed, n_points=60, n_pairs=45, rank=4):
    rng = np.random.default_rng(seed)
    coordinates = rng.normal(size=(n_points, rank)) / np.sqrt(n_points)
    pairs = rng.integers(0, n_points, size=(n_pairs, 2))
    signs = rng.choice([-1.0, 1.0], size=n_pairs)
    return coordinates, pairs, signs, np.full(rank, 1.0 / rank)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairs_over_their_edges_give_the_plain_objective_and_gradient(seed):
    """A sparse pair table is learned over its pairs alone; its objective and
    gradient are those of the n x n formulas over the partners (loops)."""
    coordinates, pairs, signs, prior = _sparse_table(seed)
    ascent = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 0.8)
    assert ascent._edges is not None  # the sparse form is the one under test
    ascent.advance(3)
    other = pairs[:, 0] != pairs[:, 1]
    points, local = np.unique(pairs[other], return_inverse=True)
    blocked, same = pair_masks(len(points), local.reshape(-1, 2), signs[other])
    own = coordinates[points]
    P, p = _naive_probabilities(
        embedding(own, ascent.exponent), ascent.temperature, blocked == 0, same
    )
    assert ascent.objective == pytest.approx(p.mean(), rel=1e-12)
    np.testing.assert_allclose(
        ascent.gradient(),
        _naive_gradient(own, P, p, same, ascent.temperature),
        rtol=1e-9,
        atol=1e-14,
    )


def test_the_sparse_and_dense_pairs_ascents_follow_the_same_path(monkeypatch):
    """Forced to the n x n arrays, the pairs' ascent takes the same steps."""
    coordinates, pairs, signs, prior = _sparse_table(5, n_points=50, n_pairs=60)
    sparse = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 0.6).advance(8)
    monkeypatch.setattr(sn, "_EDGES_BELOW", 0.0)
    dense = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 0.6).advance(8)
    assert sparse._edges is not None and dense._edges is None
    assert sparse.n_iter == dense.n_iter == 8
    np.testing.assert_allclose(sparse.objectives, dense.objectives, rtol=1e-10)
    np.testing.assert_allclose(
        sparse.exponent.density(), dense.exponent.density(), rtol=1e-8, atol=1e-12
    )


def test_the_pairs_ascent_among_many_points_builds_no_square_array():
    """3000 points in 4000 pairs: a step of the ascent allocates far less than
    one 3000 x 3000 array (72 MB)."""
    coordinates, pairs, signs, prior = _sparse_table(7, n_points=3000, n_pairs=4000, rank=5)
    ascent = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 1.0)
    tracemalloc.start()
    try:
        ascent.advance(2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ascent.n_iter == 2
    assert peak < 8e6


def test_far_pairs_and_a_tiny_temperature_over_the_edges_stay_finite():
    """Squared distances over a subnormal temperature: clipped, no NaN row, no warning."""
    coordinates, pairs, signs, prior = _sparse_table(3)
    ascent = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 1.0)
    P, p = ascent._edges.probabilities(ascent.exponent, 1e-310)
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(p))


def test_the_pairs_ascent_among_many_points_starts_without_a_square_array():
    """3000 points in 4000 pairs: choosing the edges and starting the ascent
    (masks, temperature, first evaluation) allocates far less than one
    3000 x 3000 array (72 MB): the square masks are built only for the
    dense path, after the choice."""
    coordinates, pairs, signs, prior = _sparse_table(8, n_points=3000, n_pairs=4000, rank=5)
    tracemalloc.start()
    try:
        ascent = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior, 1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ascent._edges is not None
    assert peak < 8e6


@pytest.mark.parametrize("seed", [0, 4])
def test_the_edges_made_from_the_pairs_are_the_masks_partners(seed):
    """The edges built from the pairs alone are the unblocked entries of the
    square masks, in row-major order, similar where the mask says so (a pair
    given with both labels included), and the temperature among partners is
    that of the square arrays."""
    coordinates, pairs, signs, prior = _sparse_table(seed, n_points=40, n_pairs=70)
    pairs = np.vstack([pairs, pairs[:3, ::-1]])  # the same pairs again, reversed,
    signs = np.r_[signs, -signs[:3]]  # with the other label
    other = pairs[:, 0] != pairs[:, 1]
    points, local = np.unique(pairs[other], return_inverse=True)
    local = local.reshape(-1, 2)
    blocked, same = pair_masks(len(points), local, signs[other])
    edges = sn._PartnerEdges(coordinates[points], local, signs[other])
    rows, cols = np.nonzero(blocked == 0)
    np.testing.assert_array_equal(edges.rows, rows)
    np.testing.assert_array_equal(edges.cols, cols)
    np.testing.assert_array_equal(edges.right, same[rows, cols])
    assert edges.prior_temperature(coordinates[points], prior) == pytest.approx(
        sn.prior_temperature(coordinates[points], prior, blocked), rel=1e-12
    )


def test_the_pair_loss_validated_past_its_race_continues_the_races_folds(monkeypatch):
    """Where the pair loss goes on past its race, the full validation continues
    each fold's trajectory from the race's end: it makes exactly the MEG trials
    of one validation without the race (the folds were run again from the
    prior), with the same result and generator state."""
    trials = []
    real = mv.run_batches

    def counted(*args, **kwargs):
        trials.append(kwargs["n_more"])
        return real(*args, **kwargs)

    monkeypatch.setattr(mv, "run_batches", counted)
    coordinates, these, targets, sides, prior, rate = _pair_loss_problem()
    rng = np.random.default_rng(5)
    expected = mv.validate_epochs(
        coordinates, these[0], targets, sides, these[1], prior,
        learning_rate=rate, batch_size=80, rng=rng, max_epochs=64,
    )  # fmt: skip
    alone = sum(trials)
    trials.clear()
    epochs, log, after = _race((-np.inf, -np.inf))
    assert max(log["checkpoints"]) > mv.RACE_EPOCHS  # the race went on
    assert sum(trials) == alone
    # the race's answer is the plain validation's, lengthened for the refit as it is
    refit = mv.refit_epochs(expected[0], expected[1], 64)
    assert (epochs, log["scores"]) == (refit, expected[1]["scores"])
    assert after.bit_generator.state == rng.bit_generator.state
