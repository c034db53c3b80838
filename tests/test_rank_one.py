"""The rank-one eigen-update engine against eigh (numerics and MEG runs)."""

import pickle

import numpy as np
import pytest
from conftest import pair_trials

from megkernel._engines import ENGINES, run_pair_trials, select
from megkernel._engines import _rank_one_kernels as kernels
from megkernel._engines import rank_one as _rank_one
from megkernel._engines.rank_one import (
    pair_sq_distance_after,
    pair_update,
    rank_one_eig,
)
from megkernel._numerics.state import ExponentState


def _problem(name, rng):
    """``(lam, z, s)`` for the named eigenproblem."""
    n = 30
    lam = np.sort(rng.standard_normal(n))
    z = rng.standard_normal(n)
    if name == "identity-prior":
        lam = np.full(n, -np.log(n))
        z = np.zeros(n)
        z[[3, 17]] = 1.0, -1.0
    elif name == "clustered":
        lam = np.sort(np.repeat(rng.standard_normal(6), 5))
        lam[::7] += 1e-15
        z[::4] = 0.0
        z[1] = 1e-18
    elif name == "tiny-gaps":
        lam = np.cumsum(np.full(n, 1e-13))
    elif name == "one":
        lam, z = lam[:1], z[:1]
    elif name == "two":
        lam, z = lam[:2], z[:2]
    elif name == "zero-z":
        z = np.zeros(n)
    return lam, z


@pytest.mark.parametrize("name", ["random", "identity-prior", "clustered",
                                  "tiny-gaps", "one", "two", "zero-z"])
@pytest.mark.parametrize("s", [0.3, -0.3, 1e8, -1e8, 1e-13])
def test_rank_one_eig_matches_eigh(name, s):
    lam, z = _problem(name, np.random.default_rng(0))
    matrix = np.diag(lam) + s * np.outer(z, z)
    new_lam, Q = rank_one_eig(lam, z, s)
    scale = max(np.abs(lam).max(), abs(s) * (z @ z))
    assert np.all(np.diff(new_lam) >= 0)
    np.testing.assert_allclose(new_lam, np.linalg.eigvalsh(matrix),
                               rtol=0, atol=1e-14 * scale)
    # LAPACK's eigh (the numpy path) is orthogonal to O(n eps) only
    atol = 4e-15
    np.testing.assert_allclose(Q.T @ Q, np.eye(lam.size), rtol=0, atol=atol)
    np.testing.assert_allclose(matrix @ Q, Q * new_lam, rtol=0,
                               atol=atol * scale)


def _distance_trials(d, n, seed=0):
    return pair_trials(d, n, rank=4, seed=seed)


def _run(state, trials, method):
    return run_pair_trials(state, *trials, learning_rate=0.5, method=method)


def _relative(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


def test_engine_registered_and_auto():
    assert ENGINES["rank-one"].pair_trials is _rank_one.pair_trials
    assert ENGINES["rank-one"].pair_update is _rank_one.pair_update
    rng = np.random.default_rng(0)
    F = rng.standard_normal((20, 20))
    assert select("auto", ExponentState.from_prior(F @ F.T + np.eye(20))) is ENGINES["rank-one"]
    assert select("auto", ExponentState.identity(52), need="update") is ENGINES["rank-one"]
    assert select("auto", ExponentState.identity(500), need="update") is ENGINES["rank-one"]
    assert select("auto", ExponentState.identity(2), need="update") is ENGINES["eigh"]


@pytest.mark.parametrize("name", ["eigh", "rank-one"])
@pytest.mark.parametrize("basis_rank", [None, 4])
def test_line_search_of_each_engine_matches_the_dense_formula(name, basis_rank):
    """``pair_sq_distance_after`` of the engine record against ``v^T W' v``
    with ``W' = expm(A + s v v^T) / tr`` formed densely by scipy."""
    from scipy.linalg import expm

    rng = np.random.default_rng(7)
    if basis_rank is None:
        F = rng.standard_normal((8, 8))
        state = ExponentState.from_prior(F @ F.T + np.eye(8))
    else:
        state = ExponentState.from_factor(rng.standard_normal((8, basis_rank)))
    line_search = ENGINES[name].pair_sq_distance_after
    for a, b, scale in [(0, 5, 0.7), (2, 3, -3.0), (7, 1, 40.0)]:
        v = state.pair_vectors(np.array([a]), np.array([b]))[0]
        A = state.exponent + scale * np.outer(v, v)
        W = expm(A - np.linalg.eigvalsh(A).max() * np.eye(len(A)))
        expected = v @ (W / np.trace(W)) @ v
        z = state.pair_coordinates(a, b)[0]
        assert line_search(state, z, scale) == pytest.approx(expected, rel=1e-10, abs=1e-15)
    assert ENGINES["lanczos"].pair_sq_distance_after is None


def test_exact_steps_go_to_an_engine_with_a_line_search():
    state = ExponentState.identity(12)
    assert select("eigh", state, need="exact-update") is ENGINES["eigh"]
    assert select("rank-one", state, need="exact-update") is ENGINES["rank-one"]
    assert select("lanczos", state, need="exact-update") is ENGINES["rank-one"]
    assert select("auto", state, need="exact-update") is ENGINES["rank-one"]
    assert select("auto", ExponentState.identity(2), need="exact-update") is ENGINES["eigh"]
    with pytest.raises(ValueError, match="need must be"):
        select("auto", state, need="steps")


@pytest.mark.slow
def test_engine_matches_eigh_after_5000_trials():
    trials = _distance_trials(20, 5000)
    fast, slow = ExponentState.identity(20), ExponentState.identity(20)
    predictions = _run(fast, trials, "rank-one")
    reference = _run(slow, trials, "eigh")
    assert np.abs(predictions - reference).max() <= 1e-10 * trials[2].max()
    assert _relative(fast.matrix(), slow.matrix()) <= 1e-10
    assert _relative(fast.exponent, slow.exponent) <= 1e-10


def test_low_rank_basis_matches_eigh():
    rng = np.random.default_rng(3)
    d, r = 15, 6
    basis = np.linalg.qr(rng.standard_normal((d, r)))[0]
    states = [ExponentState(-np.log(r) * np.eye(r), basis=basis) for _ in "ab"]
    trials = _distance_trials(d, 500, seed=2)
    predictions = _run(states[0], trials, "rank-one")
    reference = _run(states[1], trials, "eigh")
    np.testing.assert_allclose(predictions, reference, rtol=0, atol=1e-13)
    assert _relative(states[0].matrix(), states[1].matrix()) <= 1e-12


def test_refresh_policy_and_resume_bit_identical(monkeypatch):
    monkeypatch.setattr(_rank_one, "REFRESH_EVERY", 97)
    trials = _distance_trials(10, 700, seed=4)
    whole = ExponentState.identity(10)
    predictions = _run(whole, trials, "rank-one")
    assert whole.updates_since_refresh == (700 - 1) % 97 + 1
    part = ExponentState.identity(10)
    first = _run(part, [x[:333] for x in trials], "rank-one")
    part = pickle.loads(pickle.dumps(part))
    second = _run(part, [x[333:] for x in trials], "rank-one")
    np.testing.assert_array_equal(np.concatenate([first, second]), predictions)
    for name in ("exponent", "eigenvalues", "eigenvectors"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))
    assert part.updates_since_refresh == whole.updates_since_refresh


def test_eigenpairs_stay_exact_between_refreshes():
    trials = _distance_trials(16, 900, seed=5)
    state = ExponentState.identity(16)
    _run(state, trials, "rank-one")
    assert state.updates_since_refresh == 900
    V, lam = state.eigenvectors, state.eigenvalues
    atol = 1e-13
    np.testing.assert_allclose(V.T @ V, np.eye(16), rtol=0, atol=atol)
    np.testing.assert_allclose((V * lam) @ V.T, state.exponent, rtol=0,
                               atol=atol * np.abs(lam).max())


def test_rank_one_update_state_and_line_search(monkeypatch):
    monkeypatch.setattr(_rank_one, "REFRESH_EVERY", 5)
    rng = np.random.default_rng(6)
    state = ExponentState.identity(9)
    reference = state.copy()
    for _ in range(7):
        a, b = rng.choice(9, 2, replace=False)
        scale = rng.normal()
        z = state.pair_coordinates(a, b)[0]
        after = pair_sq_distance_after(state, z, scale)
        pair_update(state, a, b, scale)
        reference.add_pair_outer(a, b, scale)
        reference.refresh()
        assert after == pytest.approx(state.pair_sq_distances(a, b)[0], rel=1e-12)
    assert state.updates_since_refresh == 2
    np.testing.assert_array_equal(state.exponent, reference.exponent)
    np.testing.assert_allclose(state.matrix(), reference.matrix(), rtol=0,
                               atol=1e-14)


def _secular_problem(kind, seed):
    """``(d, z, rhos)``: poles in a tight cluster with components over six
    decades ("cluster"), or gaps over twelve decades ("graded": some roots
    need more steps than the solver's own iteration takes, and go to dlaed4)."""
    rng = np.random.default_rng(seed)
    if kind == "cluster":
        k = 40
        d = np.sort(np.concatenate([rng.standard_normal(k // 2),
                                    1e-9 * rng.standard_normal(k - k // 2)]))
        z = rng.standard_normal(k) * 10.0 ** rng.uniform(-6, 0, k)
        rhos = (1e-6, 0.3, 1e6)
    else:
        k = int(rng.integers(5, 60))
        d = np.cumsum(10.0 ** rng.uniform(-12, 0, k))
        z = rng.standard_normal(k) * 10.0 ** rng.uniform(-8, 0, k)
        rhos = (10.0 ** rng.uniform(-8, 8),)
    return d, z / np.linalg.norm(z), rhos


@pytest.mark.parametrize("kind, seed", [("cluster", 0), ("cluster", 1), ("cluster", 2),
                                        ("cluster", 3), ("graded", 5), ("graded", 20)])
def test_secular_solver_matches_lapack(kind, seed):
    """The roots side by side (with the roots that continue alone, and
    dlaed4 for the hard ones) against LAPACK's dlaed4 root by root."""
    d, z, rhos = _secular_problem(kind, seed)
    k = d.size
    ref_roots, ref_delta = np.empty(k), np.empty((k, k))
    for rho in rhos:
        roots = np.empty(k)
        deltaT, inverseT, poles = np.empty((k, k)), np.empty((k, k)), np.empty((k, k))
        lanes = np.empty((12, k))
        info = kernels._secular_roots(d, z, rho, roots, deltaT, inverseT, poles, lanes,
                                      np.empty(k, dtype=np.intp),
                                      np.empty(10, dtype=np.int32), np.empty(8))
        assert info == 0
        # the pole reciprocals, kept for the eigenvectors: poles[i, j] = 1 / (d_j - d_i)
        with np.errstate(divide="ignore"):
            expected = 1.0 / (d[None, :] - d[:, None])
        np.fill_diagonal(expected, 0.0)
        np.testing.assert_array_equal(poles, expected)
        info = kernels._lapack_roots(d, z, rho, ref_roots, ref_delta,
                                     np.zeros(k, dtype=np.intp),
                                     np.empty(3, dtype=np.int32), np.empty(2))
        assert info == 0
        tau, base, stored = lanes[0], lanes[1], lanes[8] != 0
        # d_i - root_j as the solver formed it, and its reciprocal
        delta = np.where(stored[None, :], deltaT, (d[:, None] - base[None, :]) - tau[None, :])
        scale = np.abs(d).max() + rho
        np.testing.assert_allclose(roots, ref_roots, rtol=0, atol=1e-14 * scale)
        np.testing.assert_allclose(delta, ref_delta.T, rtol=0, atol=1e-14 * scale)
        np.testing.assert_array_equal(roots[~stored], (base + tau)[~stored])
        np.testing.assert_allclose(inverseT, 1.0 / delta, rtol=1e-15, atol=0)
        assert stored.any() == (kind == "graded")  # dlaed4's roots: their deltas kept


@pytest.mark.parametrize("kind", ["cluster", "graded"])
def test_eigenvectors_of_the_secular_solution_are_orthonormal(kind):
    """Gu & Eisenstat's eigenvectors from the solver's deltas (recomputed,
    or dlaed4's kept ones) against a dense eigh of ``diag(d) + rho z z^T``:
    the same eigenpairs, orthonormal to round-off."""
    if kind == "graded":
        d, z, rhos = _secular_problem("graded", 5)
    else:
        rng = np.random.default_rng(5)
        d = np.sort(np.concatenate([rng.standard_normal(20), 1e-6 * rng.standard_normal(20)]))
        z = rng.standard_normal(40)
        z /= np.linalg.norm(z)
        rhos = (1e-3, 0.3, 30.0)
    k = d.size
    for rho in rhos:
        roots = np.empty(k)
        deltaT, vectorsT, poles = np.empty((k, k)), np.empty((k, k)), np.empty((k, k))
        lanes = np.empty((12, k))
        assert kernels._secular_roots(d, z, rho, roots, deltaT, vectorsT, poles, lanes,
                                      np.empty(k, dtype=np.intp),
                                      np.empty(10, dtype=np.int32), np.empty(8)) == 0
        assert kernels._eigenvectors(d, z, deltaT, poles, vectorsT, np.empty(k),
                                     np.empty(k), lanes[1], lanes[0], lanes[8])
        matrix = np.diag(d) + rho * np.outer(z, z)
        np.testing.assert_allclose(vectorsT.T @ vectorsT, np.eye(k), rtol=0, atol=1e-13)
        np.testing.assert_allclose(matrix @ vectorsT, vectorsT * roots, rtol=0,
                                   atol=1e-13 * (np.abs(d).max() + rho))
        np.testing.assert_allclose(roots, np.linalg.eigvalsh(matrix), rtol=0,
                                   atol=1e-13 * (np.abs(d).max() + rho))


@pytest.mark.parametrize("dense", [True, False])
def test_single_updates_match_a_dense_eigh_of_the_exponent(dense):
    """pair_update (the kernel with given steps, both signs, tiny to huge, and
    deflating repeats) against an independent eigh of the naive exponent."""
    rng = np.random.default_rng(8)
    d = 12
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    prior = (Q * rng.uniform(0.5, 1.5, d)) @ Q.T
    if dense:
        state = ExponentState.from_prior(prior)
        vector = lambda a, b: np.eye(d)[a] - np.eye(d)[b]
    else:
        basis = np.linalg.qr(rng.standard_normal((30, 7)))[0]
        state = ExponentState(np.diag(rng.normal(size=7)), basis=basis)
        vector = lambda a, b: basis[a] - basis[b]
    exponent = state.exponent.copy()
    for step in range(60):
        a, b = rng.choice(state.n_objects, 2, replace=False)
        if step % 7 == 3:  # the same pair again: equal eigenvalues deflate
            a, b = 0, 1
        scale = rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-12, 3)
        pair_update(state, a, b, scale)
        v = vector(a, b)
        exponent = exponent + scale * np.outer(v, v)
        lam, V = np.linalg.eigh(exponent)
        np.testing.assert_allclose(state.eigenvalues, lam, rtol=0,
                                   atol=1e-12 * np.abs(lam).max())
        W = (V * np.exp(lam - lam.max())) @ V.T
        np.testing.assert_allclose(state.matrix(), W / np.trace(W), rtol=0,
                                   atol=1e-12)


def test_auto_runs_the_paper_run_by_the_rank_one_engine():
    """The paper's run (d = 52, a rank-4 trace-one target, I/d prior): once
    the exponent is dense, every rank-one trial keeps all 52 eigenpairs, which
    costs less than a Lanczos trial on that spread (the benchmarks page
    measures both); the cost model orders them so once the spread of the
    eigenvalues has grown (early in the run Lanczos' quadratures are short,
    and it runs them)."""
    d, warm, n = 52, 25000, 37000
    rng = np.random.default_rng(0)
    X = rng.standard_normal((d, 4))
    K = X @ X.T / np.trace(X @ X.T)
    a = rng.integers(0, d, n)
    b = (a + rng.integers(1, d, n)) % d
    y = K[a, a] + K[b, b] - 2 * K[a, b]
    state, stats = ExponentState.identity(d), {}
    run_pair_trials(state, a[:warm], b[:warm], y[:warm], learning_rate=0.5)
    run_pair_trials(state, a[warm:], b[warm:], y[warm:], learning_rate=0.5, method="auto",
                    stats=stats)
    by_engine = {}
    for name, length in stats["auto_segments"]:
        by_engine[name] = by_engine.get(name, 0) + length
    assert by_engine.get("rank-one", 0) >= (n - warm) // 2
    assert stats["auto_segments"][-1][0] == "rank-one"


def test_a_short_auto_call_is_priced_over_the_eigenvalues_its_pairs_see():
    """A call short enough for one engine is priced as its segments are: over
    the eigenvalues its pairs see. Here the constant vector, which no pair
    ``e_a - e_b`` sees, has an eigenvalue far from all others: priced over the
    whole spectrum, Lanczos looked dear and the call ran by rank-one; over the
    pairs' eigenvalues (a spread of one) Lanczos is the cheaper."""
    d = 52
    rng = np.random.default_rng(3)
    Q = np.linalg.qr(np.column_stack([np.ones(d), rng.standard_normal((d, d - 1))]))[0]
    lam = np.r_[15.0, rng.uniform(-0.5, 0.5, d - 1)]
    W = (Q * np.exp(lam - lam.max())) @ Q.T
    state = ExponentState.from_prior(W / np.trace(W))
    a = rng.integers(0, d, 300)
    b = (a + rng.integers(1, d, 300)) % d
    stats = {}
    run_pair_trials(state, a, b, rng.uniform(0.01, 0.05, 300), learning_rate=0.5,
                    stats=stats)
    assert stats["auto_segments"] == [("lanczos", 300)]
