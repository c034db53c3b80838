"""The matrix-free Lanczos engine against eigh (numerics and MEG runs)."""

import pickle

import numpy as np
import pytest
from scipy import linalg

from megkernel import MEGKernelRegressor
from megkernel._engines import ENGINES, run_pair_trials, select
from megkernel._engines import _lanczos_kernels as kernels
from megkernel._engines import lanczos as _lanczos
from megkernel._numerics.state import ExponentState
from megkernel.datasets import distance_triples, load_wine_kernel


def _kernel(d, seed=0):
    if d == 52:
        return load_wine_kernel(52).kernel
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, 4))
    K = X @ X.T + 0.05 * np.eye(d)
    return K / np.trace(K)


def _trials(d, n, seed=0):
    pairs, y = distance_triples(_kernel(d), n, random_state=seed)
    return pairs[:, 0], pairs[:, 1], y


def _dense_prior(d, seed=1):
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return (Q * rng.uniform(0.5, 1.5, d)) @ Q.T


def _state(d, prior):
    return (ExponentState.identity(d) if prior == "identity"
            else ExponentState.from_prior(_dense_prior(d)))


def _run(state, a, b, y, method, learning_rate=0.5, trace=1.0, stats=None):
    return run_pair_trials(state, a, b, y, learning_rate=learning_rate,
                           trace=trace, method=method, stats=stats)


def _assert_agree(d, prior, a, b, y, *, learning_rate=0.5, trace=1.0, tol=1e-9):
    fast, slow = _state(d, prior), _state(d, prior)
    stats = {}
    p_fast = _run(fast, a, b, y, "lanczos", learning_rate, trace, stats)
    p_slow = _run(slow, a, b, y, "eigh", learning_rate, trace)
    assert np.all(np.isfinite(p_fast))
    assert np.max(np.abs(p_fast - p_slow)) <= tol * max(1.0, np.max(np.abs(y)))
    loss_fast, loss_slow = np.sum((p_fast - y) ** 2), np.sum((p_slow - y) ** 2)
    assert abs(loss_fast - loss_slow) <= tol * loss_slow
    K_fast, K_slow = trace * fast.matrix(), trace * slow.matrix()
    assert np.linalg.norm(K_fast - K_slow) <= tol * np.linalg.norm(K_slow)
    # the exponent is the same sum of exact four-entry updates
    np.testing.assert_allclose(fast.exponent, slow.exponent, rtol=0, atol=1e-9)
    # valid eigenpairs at the end
    np.testing.assert_allclose(
        (fast.eigenvectors * fast.eigenvalues) @ fast.eigenvectors.T,
        fast.exponent, atol=1e-11 * max(1.0, np.abs(fast.exponent).max()))
    return stats


def _spread_state(d, spread, seed=2):
    """Dense state whose exponent has eigenvalues spread over ``[-spread, 0]``."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    A = (Q * rng.uniform(-spread, 0.0, d)) @ Q.T
    return ExponentState(0.5 * (A + A.T))


def test_registered_and_auto():
    lanczos, rank_one = ENGINES["lanczos"], ENGINES["rank-one"]
    assert lanczos.pair_trials is _lanczos.pair_trials
    assert select("lanczos", ExponentState.identity(10)) is lanczos
    big = ExponentState.identity(500)
    assert select("auto", big) is lanczos
    # from I/d a few trials deflate almost everything: rank-one
    assert select("auto", big, n_trials=8) is rank_one
    # every eigenpair kept (dense prior): the rank-one GEMM costs more than
    # Lanczos' closing eigh shared by 8 trials, not by 1
    dense = ExponentState.from_prior(_dense_prior(500))
    assert select("auto", dense, n_trials=1) is rank_one
    assert select("auto", dense, n_trials=8) is lanczos
    # small or with a wide spread of eigenvalues (long quadratures): rank-one
    assert select("auto", ExponentState.from_prior(_dense_prior(20))) is rank_one
    assert select("auto", _spread_state(52, 30.0)) is rank_one
    assert select("auto", _spread_state(150, 0.5)) is lanczos
    # the selector, not the engine, decides what Lanczos cannot run
    low_rank = ExponentState(np.diag([-1.0, -2.0, -3.0]), basis=np.eye(300)[:, :3])
    assert select("auto", low_rank) is rank_one
    assert select("lanczos", low_rank) is rank_one
    assert select("lanczos", big, need="update") is rank_one
    assert lanczos.fallback == "eigh"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:method='eigh' on this state costs:UserWarning")  # the reference
def test_auto_changes_engine_within_a_call_and_stays_exact(monkeypatch):
    """From I/d rank-one updates deflate (few trials in, cheap); once every
    eigenpair is kept, Lanczos is cheaper at d = 150: "auto" runs both in
    one call, with the same predictions as eigh. (A call this short runs by
    one engine, test_compile_plan.py; here the segments are asked for.)"""
    import megkernel._engines as engines
    from megkernel._engines import _cost

    monkeypatch.setattr(engines, "AUTO_ONE_ENGINE_BELOW", 0.0)

    d = 150
    a, b, y = _trials(d, 1200)
    state, reference = ExponentState.identity(d), ExponentState.identity(d)
    assert _cost.kept_eigenpairs(state, a, b) == 1.0  # one repeated eigenvalue
    stats = {}
    p_auto = _run(state, a, b, y, "auto", stats=stats)
    p_ref = _run(reference, a, b, y, "eigh")
    segments = stats["auto_segments"]
    assert segments[0][0] == "rank-one" and segments[-1][0] == "lanczos"
    assert sum(length for _, length in segments) == len(y)
    assert np.max(np.abs(p_auto - p_ref)) < 1e-12
    np.testing.assert_allclose(state.matrix(), reference.matrix(), rtol=0, atol=1e-13)
    # after them every eigenpair is kept
    assert _cost.kept_eigenpairs(state, a, b) == d


@pytest.mark.parametrize("spread", [0.3, 3.0, 30.0])
def test_cost_model_counts_lanczos_steps(spread):
    """The model's Lanczos steps (from the spread of the eigenvalues) are the
    engine's own count to within a third."""
    from megkernel._engines import _cost

    state = _spread_state(52, spread)
    a, b, y = _trials(52, 200)
    stats = {}
    _run(state.copy(), a, b, y, "lanczos", stats=stats)
    measured = stats["steps"] / stats["trials"]
    assert abs(_cost.lanczos_steps(state) / measured - 1) < 1 / 3
    assert _cost.lanczos_steps(_spread_state(52, 2 * spread)) > _cost.lanczos_steps(state)


@pytest.mark.parametrize("d, prior, n, trace", [
    pytest.param(20, "identity", 4000, 1.0, marks=pytest.mark.slow),
    pytest.param(52, "identity", 4000, 1.0, marks=pytest.mark.slow),
    pytest.param(20, "dense", 3000, 1.0, marks=pytest.mark.slow),
    (20, "identity", 2000, 3.5),
    pytest.param(52, "dense", 1500, 0.2, marks=pytest.mark.slow),
])
def test_matches_eigh(d, prior, n, trace):
    a, b, y = _trials(d, n)
    stats = _assert_agree(d, prior, a, b, trace * y, trace=trace)
    assert stats["trials"] == n and stats["fallbacks"] == 0
    assert abs(stats["log_z_drift"]) < 1e-12


def test_same_object_pairs_match_eigh():
    a, b, y = _trials(20, 300)
    a[::7] = b[::7]
    fast, slow = ExponentState.identity(20), ExponentState.identity(20)
    p_fast = _run(fast, a, b, y, "lanczos")
    p_slow = _run(slow, a, b, y, "eigh")
    assert np.all(p_fast[::7] == 0.0)
    assert np.max(np.abs(p_fast - p_slow)) < 1e-12


@pytest.mark.parametrize("spread", [0.3, 3.0, 30.0])
def test_stopping_rules_and_changes_of_z_agree(monkeypatch, spread):
    """The three ways a trial may end agree with eigh and with each other:
    the default (Gauss's error bound, consecutive quadratures from
    ``QL_FROM``, ``Z' - Z`` as a difference of traces where its round-off
    is small), the bound alone (``QL_FROM`` beyond ``MAX_STEPS``) and
    consecutive quadratures from step 2 with every ``Z' - Z`` by
    Gauss-Legendre (``TRACE_TOL = 0``, the engine before the bound)."""
    a, b, y = _trials(52, 400)
    reference = _spread_state(52, spread)
    p_eigh = _run(reference.copy(), a, b, y, "eigh")
    runs = {}
    for name, ql_from, trace_tol in [("default", _lanczos.QL_FROM, _lanczos.TRACE_TOL),
                                     ("bound only", _lanczos.MAX_STEPS + 1,
                                      _lanczos.TRACE_TOL),
                                     ("before", 2, 0.0)]:
        monkeypatch.setattr(_lanczos, "QL_FROM", ql_from)
        monkeypatch.setattr(_lanczos, "TRACE_TOL", trace_tol)
        stats = {}
        runs[name] = _run(reference.copy(), a, b, y, "lanczos", stats=stats), stats
    scale = np.max(np.abs(y))
    for name, (predictions, stats) in runs.items():
        assert np.max(np.abs(predictions - p_eigh)) <= 1e-11 * scale, name
        assert abs(stats["log_z_drift"]) < 1e-12, name
    assert runs["before"][1]["trace_steps"] == 0
    default = runs["default"][1]
    assert default["fallbacks"] == 0
    assert default["steps"] <= runs["before"][1]["steps"]
    if spread < 1:  # narrow spectra: traces give Z' - Z
        assert default["trace_steps"] == default["trials"]
    else:  # wider: their round-off would exceed 1e-15 of Z, Gauss-Legendre
        assert default["trace_steps"] == 0 and default["nodes"] > 0


@pytest.mark.parametrize("prior", ["identity", "dense"])
def test_huge_learning_rate(prior):
    """eta = 100: exponent spread in the hundreds, steps of |2s| >> 1."""
    a, b, y = _trials(20, 80)
    stats = _assert_agree(20, prior, a, b, y, learning_rate=100.0)
    assert stats["nodes"] > 0


def test_resume_after_pickle_is_bit_identical(monkeypatch):
    # re-anchors fall inside both halves; the exponent turns from sparse to
    # dense storage during the first call
    monkeypatch.setattr(_lanczos, "ANCHOR_EVERY", 700)
    a, b, y = _trials(20, 3000)
    whole = ExponentState.identity(20)
    p_whole = _run(whole, a, b, y, "lanczos")
    for split in (25, 1234):
        part = ExponentState.identity(20)
        p1 = _run(part, a[:split], b[:split], y[:split], "lanczos")
        part = pickle.loads(pickle.dumps(part))
        p2 = _run(part, a[split:], b[split:], y[split:], "lanczos")
        np.testing.assert_array_equal(np.concatenate([p1, p2]), p_whole)
        np.testing.assert_array_equal(part.exponent, whole.exponent)
        np.testing.assert_array_equal(part.eigenvalues, whole.eigenvalues)


def test_state_changed_elsewhere_re_anchors():
    a, b, y = _trials(20, 400)
    fast, slow = ExponentState.identity(20), ExponentState.identity(20)
    _run(fast, a[:200], b[:200], y[:200], "lanczos")
    _run(slow, a[:200], b[:200], y[:200], "eigh")
    for state in (fast, slow):  # another engine moves the state on
        _run(state, a[200:300], b[200:300], y[200:300], "rank-one")
    p_fast = _run(fast, a[300:], b[300:], y[300:], "lanczos")
    p_slow = _run(slow, a[300:], b[300:], y[300:], "eigh")
    assert np.max(np.abs(p_fast - p_slow)) < 1e-12


def test_partial_fit_chunks_equal_fit():
    a, b, y = _trials(30, 1500)
    X = np.column_stack([a, b])
    # a numeric rate: "auto" is taken from the first call's targets
    whole = MEGKernelRegressor(solver="online", trace=1.0, n_objects=30, method="lanczos",
                               learning_rate=0.5).fit(X, y)
    chunked = MEGKernelRegressor(solver="online", trace=1.0, n_objects=30, method="lanczos",
                                 learning_rate=0.5)
    for start in range(0, 1500, 400):
        chunked.partial_fit(X[start:start + 400], y[start:start + 400])
    np.testing.assert_array_equal(chunked.losses_, whole.losses_)
    np.testing.assert_array_equal(chunked.kernel_, whole.kernel_)
    ref = MEGKernelRegressor(solver="online", trace=1.0, n_objects=30, method="eigh",
                             learning_rate=0.5).fit(X, y)
    assert abs(whole.cumulative_loss_ / ref.cumulative_loss_ - 1) < 1e-9
    assert np.linalg.norm(whole.kernel_ - ref.kernel_) < 1e-9 * np.linalg.norm(ref.kernel_)
    np.testing.assert_allclose(whole.predict(X[:50]), ref.predict(X[:50]), atol=1e-12)


@pytest.mark.slow
def test_adaptive_steps_are_needed(monkeypatch):
    """A run cut short (loose tolerance) disagrees; the adaptive one does not."""
    a, b, y = _trials(52, 1500)
    reference = _run(ExponentState.identity(52), a, b, y, "eigh")
    stats = {}
    good = _run(ExponentState.identity(52), a, b, y, "lanczos", stats=stats)
    steps = stats["steps"] / stats["trials"]
    assert np.max(np.abs(good - reference)) < 1e-13
    monkeypatch.setattr(_lanczos, "TOL", 1e-3)
    monkeypatch.setattr(_lanczos, "MAX_TOL", 1.0)
    stats = {}
    loose = _run(ExponentState.identity(52), a, b, y, "lanczos", stats=stats)
    assert stats["steps"] / stats["trials"] < steps
    assert np.max(np.abs(loose - reference)) > 1e-9


def test_not_converged_trials_run_by_eigh(monkeypatch):
    monkeypatch.setattr(_lanczos, "MAX_STEPS", 3)
    a, b, y = _trials(20, 600)
    stats = _assert_agree(20, "identity", a, b, y, tol=1e-11)
    assert stats["fallbacks"] > 0


def test_low_rank_runs_rank_one():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((30, 5)))[0]
    a, b, y = _trials(30, 300)
    states = [ExponentState(np.diag(rng.uniform(-2, 0, 5)), basis=basis)
              for _ in range(2)]
    states[1].exponent = states[0].exponent.copy()
    states[1].refresh()
    p = _run(states[0], a, b, y, "lanczos")
    q = _run(states[1], a, b, y, "rank-one")
    np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("bump", [0.0, 1e-9, 0.7, -3.0, 40.0, -25.0])
def test_quadrature_kernels(bump):
    """``tridiag_exp`` against ``expm``; the step integral against ``Z' - Z``."""
    comp = kernels
    rng = np.random.default_rng(3)
    k = 12
    alpha = rng.normal(0, 4, k + 2)
    beta = np.abs(rng.normal(1, 1, k + 2))
    T = np.diag(alpha[:k]) + np.diag(beta[:k - 1], 1) + np.diag(beta[:k - 1], -1)
    shift = np.linalg.eigvalsh(T).max() + max(bump, 0.0)
    work = np.zeros((3, k + 2))
    quad, tr, ok = comp.tridiag_exp(alpha, beta, k, shift, bump, *work)
    Tb = T.copy()
    Tb[0, 0] += bump
    E = linalg.expm(Tb - shift * np.eye(k))
    assert ok
    # absolute round-off relative to the largest eigenvalue of exp(.), 1
    assert quad == pytest.approx(E[0, 0], rel=1e-13, abs=1e-16)
    assert tr == pytest.approx(np.trace(E), rel=1e-13)
    # int_0^bump e1^T exp(T + tau e1 e1^T) e1 dtau = tr exp(T_bump) - tr exp(T)
    nodes, weights = _lanczos._GL_NODES, _lanczos._GL_WEIGHTS
    half = 0.5 * abs(bump)
    panels = max(1, int(np.ceil(half / _lanczos.PANEL_HALF)))
    width = bump / panels
    n = comp.gauss_legendre_count(0.5 * abs(width), np.log(1e-18), nodes.shape[0])
    total = 0.0
    for p in range(panels):
        for r in range(n):
            tau = (p + 0.5) * width + 0.5 * width * nodes[n - 1, r]
            total += weights[n - 1, r] * comp.tridiag_exp(alpha, beta, k, shift,
                                                          tau, *work)[0]
    total *= 0.5 * width
    exact = np.trace(E) - np.trace(linalg.expm(T - shift * np.eye(k)))
    assert total == pytest.approx(exact, rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("d", [5, 8, 52, 61])
def test_dense_products_equal_sparse_ones_bit_for_bit(d):
    """The dense product (eight rows of ``A`` per sweep) adds the same terms
    in the same order as the column lists: switching mode changes nothing."""
    rng = np.random.default_rng(d)
    A = rng.standard_normal((d, d))
    A[rng.random((d, d)) < 0.5] = 0.0
    A = np.ascontiguousarray(A + A.T)
    nbr, deg, _, values = kernels.build_structure(A, 1.0)
    for q in (rng.standard_normal(d), np.where(rng.random(d) < 0.7, 0.0, 1.0),
              np.eye(d)[d - 1] - np.eye(d)[0]):
        q = q / np.linalg.norm(q)
        out = []
        for dense in (True, False):
            vectors = np.stack([rng.standard_normal(d) * 0, q, np.zeros(d)])
            out.append((kernels._step(A, values, nbr, deg, dense, vectors, 0.0), vectors[2].copy()))
        assert out[0][0] == out[1][0]
        np.testing.assert_array_equal(out[0][1], out[1][1])
        np.testing.assert_allclose(out[0][1], A @ q - out[0][0][0] * q, atol=1e-12)


@pytest.mark.parametrize("scale", [1.0, 1e-160, 1e-300, 1e150, 1e300])
def test_quadrature_radius_is_hypot_at_any_scale(scale):
    f, g = 3.0 * scale, 4.0 * scale
    assert kernels._radius(f, g) == pytest.approx(5.0 * scale, rel=4e-16)
    assert kernels._radius(-f, 0.0) == pytest.approx(3.0 * scale, rel=4e-16)
    assert kernels._radius(0.0, 0.0) == 0.0


def test_cost_model_steps_see_only_the_pairs_eigenvalues():
    """An eigenvalue whose eigenvector is constant (a diffusion or centred
    kernel's) has no weight on any pair ``e_a - e_b``: the quadrature never
    sees it, and neither does the pairs' estimate of the steps."""
    from megkernel._engines import _cost

    d = 52
    rng = np.random.default_rng(4)
    Q = np.linalg.qr(np.column_stack([np.ones(d), rng.standard_normal((d, d - 1))]))[0]
    lam = np.concatenate([[6.0], rng.uniform(-1.0, 0.0, d - 1)])
    A = (Q * lam) @ Q.T
    state = ExponentState(0.5 * (A + A.T))
    a, b, y = _trials(d, 200)
    stats = {}
    _run(state.copy(), a, b, y, "lanczos", stats=stats)
    measured = stats["steps"] / stats["trials"]
    from_pairs = _cost.lanczos_steps(state, a, b)
    assert from_pairs < _cost.lanczos_steps(state)
    assert abs(from_pairs / measured - 1) < 1 / 3


def test_sparse_lists_keep_their_entries_equal_to_the_exponent():
    """The column lists' entries (read by sparse products) follow every update of A."""
    d = 200
    rng = np.random.default_rng(7)
    A = np.ascontiguousarray(-np.log(d) * np.eye(d))
    nbr, deg, dense, values = kernels.build_structure(A, 0.5)
    assert not dense
    n = 300
    a, b = rng.integers(0, d, size=(2, n))
    b[:5] = a[:5]  # a == b trials too
    y = rng.uniform(0.0, 0.2, size=n)
    vectors, coefficients = kernels.make_workspace(d, _lanczos.MAX_STEPS)
    out = kernels.pair_trials(A, values, nbr, deg, a, b, y, 0.3, 1.0, np.empty(n), 0,
                              float(np.log(np.exp(np.diag(A)).sum())), 0, False,
                              *_lanczos._settings(), vectors, coefficients,
                              kernels.make_counters())
    assert out[1] == n and not out[4]  # every trial run, still sparse
    assert deg.sum() > 2 * d  # the lists grew
    for i in range(d):
        np.testing.assert_array_equal(values[i, :deg[i]], A[i, nbr[i, :deg[i]]])
        listed = np.zeros(d, dtype=bool)
        listed[nbr[i, :deg[i]]] = True
        assert not np.any(A[i, ~listed])  # every nonzero entry listed
