"""``corrective=True`` converges to the exact Bregman projection.

The projection ``W* = argmin Delta(W, W_1)`` s.t. ``tr W = 1``,
``tr(W C_j) <= 0`` is characterised by its KKT conditions:
``W* = exp(log W_1 - sum_j alpha_j C_j) / Z`` with ``alpha_j >= 0``, primal
feasibility and complementary slackness ``alpha_j tr(W* C_j) = 0``; then
``Delta(W*, W_1) = -log Z`` (the dual objective, eq. 9, at its minimum).
Here the library's results are checked against these conditions and
against an independent solve of the dual with scipy (``expm``/``logm`` and
L-BFGS-B over ``alpha >= 0``, polished on the active set), on small
problems with active and inactive constraints of both kinds. The paper's
algorithm (``corrective=False``) stops at a feasible kernel farther from
the prior on the same problems.
"""

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import random_spd
from numpy.testing import assert_allclose
from scipy import linalg, optimize

from megkernel import DefiniteBoostKernel, definiteboost, definiteboost_pairs

# -- an independent reference ---------------------------------------------------

D = 6
# a similar triangle (2, 3, 4) and two dissimilar pairs: at the projection
# under I/d the similar pairs and (1, 4) are active, (0, 1) is slack, and the
# paper's greedy steps overshoot (a correction is needed)
PAIRS = np.array([[2, 3], [0, 1], [3, 4], [2, 4], [1, 4]])
SIGNS = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
GAMMA, GAMMA_DISSIMILAR = 0.2 / D, 0.4            # trace-one units


def _thresholds(gamma=GAMMA, gamma_dissimilar=GAMMA_DISSIMILAR):
    return np.where(SIGNS > 0, gamma, gamma_dissimilar)


def _pair_matrices(pairs, signs, thresholds, d=D, basis=None):
    """``C_j = s_j (v v^T - gamma_j I)``, ``v = e_a - e_b`` or ``basis^T (e_a - e_b)``."""
    matrices = []
    for (a, b), s, g in zip(pairs, signs, thresholds):
        u = np.zeros(d)
        u[a], u[b] = 1.0, -1.0
        v = u if basis is None else basis.T @ u
        matrices.append(s * (np.outer(v, v) - g * np.eye(len(v))))
    return np.array(matrices)


def _dense_prior(d, seed):
    return random_spd(d, seed, ridge=0.3, trace=1.0)


def _values(Cs, W):
    return np.tensordot(Cs, W, axes=([1, 2], [0, 1]))


def _tilted(L1, Cs, alpha):
    """``(W(alpha), log Z(alpha))`` with ``W = exp(L1 - sum alpha C) / Z``."""
    A = L1 - np.tensordot(alpha, Cs, axes=1)
    shift = np.linalg.eigvalsh(A)[-1]
    E = linalg.expm(A - shift * np.eye(len(A)))
    E = 0.5 * (E + E.T)
    Z = np.trace(E)
    return E / Z, shift + np.log(Z)


def _log_prior(W1):
    return np.real(linalg.logm(W1))


def _divergence(W, W1):
    """von Neumann divergence for trace-one arguments, with scipy's logm."""
    return float(np.trace(W @ (np.real(linalg.logm(W)) - _log_prior(W1))))


def _reference_projection(W1, Cs):
    """The exact projection from the dual (eq. 9): ``(W*, alpha*, log Z*)``."""
    L1 = _log_prior(W1)

    def dual(alpha):
        W, log_Z = _tilted(L1, Cs, alpha)
        return log_Z, -_values(Cs, W)

    result = optimize.minimize(dual, np.zeros(len(Cs)), jac=True, method="L-BFGS-B",
                               bounds=[(0.0, None)] * len(Cs),
                               options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    alpha = result.x
    active = alpha > 1e-6 * max(1.0, alpha.max())
    if np.any(active):  # polish: tr(W C_j) = 0 on the active set
        def residual(alpha_active):
            full = np.zeros(len(Cs))
            full[active] = alpha_active
            return _values(Cs[active], _tilted(L1, Cs, full)[0])

        polished = optimize.root(residual, alpha[active], method="hybr",
                                 options={"xtol": 1e-13})
        assert np.max(np.abs(residual(polished.x))) <= 1e-13
        alpha = np.zeros(len(Cs))
        alpha[active] = polished.x
    W, log_Z = _tilted(L1, Cs, alpha)
    # the reference itself satisfies KKT
    values = _values(Cs, W)
    assert np.all(alpha >= 0)
    assert np.all(np.abs(values[active]) <= 1e-12)
    assert np.all(values[~active] < -1e-6)
    return W, alpha, log_Z


def _assert_kkt(W, multipliers, W1, Cs, atol=1e-8):
    """``W`` is the exact projection certified by ``multipliers``."""
    assert np.all(multipliers >= 0)
    W_from_multipliers, _ = _tilted(_log_prior(W1), Cs, multipliers)
    assert_allclose(W, W_from_multipliers, atol=atol)
    assert np.trace(W) == pytest.approx(1.0, abs=1e-12)
    values = _values(Cs, W)
    assert values.max() <= atol                                   # primal feasibility
    assert np.max(np.abs(multipliers * values)) <= atol           # complementary slackness


def _assert_is_reference(W, multipliers, dual_objective, W1, Cs, atol=1e-8):
    W_star, alpha_star, log_Z_star = _reference_projection(W1, Cs)
    assert_allclose(W, W_star, atol=atol)
    assert_allclose(multipliers, alpha_star, atol=1e-6)
    # -log of the dual objective is the divergence of the projection
    assert -np.log(dual_objective) == pytest.approx(-log_Z_star, abs=1e-10)
    assert _divergence(W, W1) == pytest.approx(-log_Z_star, abs=atol)


def _matrix_problem(seed=3, n=6, d=D):
    """General symmetric constraints; some slack at the projection."""
    rng = np.random.default_rng(seed)
    target = _dense_prior(d, seed + 100)
    Cs = []
    for j in range(n):
        B = rng.normal(size=(d, d))
        B = 0.5 * (B + B.T)
        Cs.append(B - (np.sum(target * B) + 0.02 + 0.1 * (j % 2)) * np.eye(d))
    return np.array(Cs)


# With keep="best" (the solvers' default, and the estimator's with hard
# constraints) a corrective run passes through feasible points (an exact step
# puts the chosen constraint at 0 up to round-off) that are not the projection;
# ranking iterates by the largest violation once returned such an earlier one.
# Fixed: with corrections, "best" ranks iterates by the projection's KKT score,
# so these cases guard against the earlier, non-closest feasible iterate.
KEEP_BEST = KEEP_BEST_MAYBE = ()


# -- the solver functions -------------------------------------------------------

def _solver_cases(identity_exact_best):
    return [
        ("identity", "approximate", "best"),
        ("identity", "approximate", "last"),
        pytest.param("identity", "exact", "best", marks=identity_exact_best),
        ("identity", "exact", "last"),
        ("dense", "approximate", "best"),
        ("dense", "approximate", "last"),
        pytest.param("dense", "exact", "best", marks=KEEP_BEST_MAYBE),
        ("dense", "exact", "last"),
    ]


@pytest.mark.parametrize(("prior", "projection", "keep"), _solver_cases(KEEP_BEST))
def test_definiteboost_corrective_is_the_exact_projection_of_pair_matrices(
        prior, projection, keep):
    W1 = np.eye(D) / D if prior == "identity" else _dense_prior(D, 7)
    Cs = _pair_matrices(PAIRS, SIGNS, _thresholds())
    W, log = definiteboost(Cs, W1, projection=projection, corrective=True,
                           tol=1e-12, max_iter=100_000, keep=keep)
    assert log["converged"]
    _assert_kkt(W, log["multipliers"], W1, Cs)
    _assert_is_reference(W, log["multipliers"], log["dual_objective"][-1], W1, Cs)


@pytest.mark.parametrize("keep", ["best", "last"])
@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_definiteboost_corrective_is_the_exact_projection_of_general_matrices(projection, keep):
    W1 = _dense_prior(D, 11)
    Cs = _matrix_problem()
    W, log = definiteboost(Cs, W1, projection=projection, corrective=True,
                           tol=1e-12, max_iter=100_000, keep=keep)
    assert log["converged"]
    _assert_kkt(W, log["multipliers"], W1, Cs)
    _assert_is_reference(W, log["multipliers"], log["dual_objective"][-1], W1, Cs)
    # the instance is non-trivial: active and inactive constraints
    assert 0 < np.count_nonzero(log["multipliers"] > 1e-6) < len(Cs)


@pytest.mark.parametrize(("prior", "projection", "keep"), _solver_cases(KEEP_BEST_MAYBE))
def test_definiteboost_pairs_corrective_is_the_exact_projection(prior, projection, keep):
    W1 = np.eye(D) / D if prior == "identity" else _dense_prior(D, 7)
    kwargs = {"n_objects": D} if prior == "identity" else {"prior": W1}
    W, log = definiteboost_pairs(PAIRS, SIGNS, _thresholds(), projection=projection,
                                 corrective=True, tol=1e-12, max_iter=100_000, keep=keep,
                                 **kwargs)
    assert log["converged"]
    Cs = _pair_matrices(PAIRS, SIGNS, _thresholds())
    _assert_kkt(W, log["multipliers"], W1, Cs)
    _assert_is_reference(W, log["multipliers"], log["dual_objective"][-1], W1, Cs)


# -- the estimator --------------------------------------------------------------

@pytest.mark.parametrize("method", ["eigh", "rank-one"])
@pytest.mark.parametrize(("prior", "projection"), [
    ("identity", "approximate"),
    pytest.param("identity", "exact", marks=KEEP_BEST_MAYBE),
    ("dense", "approximate"),
    pytest.param("dense", "exact", marks=KEEP_BEST_MAYBE),
])
def test_estimator_corrective_is_the_exact_projection(prior, projection, method):
    trace, tol = 3.0, 1e-9
    W1 = np.eye(D) / D if prior == "identity" else _dense_prior(D, 7)
    init = "identity" if prior == "identity" else W1
    gamma, gamma_dissimilar = trace * GAMMA, trace * GAMMA_DISSIMILAR   # kernel units
    model = DefiniteBoostKernel(n_objects=D, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
                                projection=projection, corrective=True, tol=tol,
                                max_iter=100_000, init=init, trace=trace, method=method,
                                validation_fraction=None)  # gamma given: no verdict to draw
    model.fit(PAIRS, SIGNS)
    assert model.converged_
    # the fit projects onto the constraints tightened by tol * gamma / 2
    margin = 0.5 * tol * gamma
    thresholds = _thresholds(gamma - margin, gamma_dissimilar + margin) / trace
    Cs = _pair_matrices(PAIRS, SIGNS, thresholds)
    W = model.kernel_ / trace
    _assert_kkt(W, model.multipliers_, W1, Cs)
    _assert_is_reference(W, model.multipliers_, model.dual_objective_[-1], W1, Cs)
    # every user-unit constraint holds
    distances = model.pair_sq_distances(PAIRS)
    assert np.all(SIGNS * (distances - np.where(SIGNS > 0, gamma, gamma_dissimilar)) <= 0)


def test_estimator_corrective_low_rank_is_the_projection_inside_the_range():
    d, rank, tol = 7, 4, 1e-9
    factor = np.random.default_rng(1).normal(size=(d, rank))
    pairs = np.array([[0, 1], [1, 2], [3, 4], [2, 5], [1, 6]])
    signs = np.array([1.0, 1.0, 1.0, -1.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # nothing dropped, converged
        # trace=1.0 (the former default; "auto" is now ||F||_F^2): M is compared
        # with the trace-one prior M1; validation_fraction=None: every pair trained
        model = DefiniteBoostKernel(corrective=True, tol=tol, max_iter=100_000,
                                    init_factor=factor, trace=1.0,
                                    validation_fraction=None).fit(pairs, signs)
    assert model.converged_ and model.dropped_constraints_.size == 0
    basis = np.linalg.qr(factor)[0]                      # orthonormal range of the prior
    M1 = basis.T @ (factor @ factor.T) @ basis / np.sum(factor * factor)
    margin = 0.5 * tol * model.gamma_
    thresholds = np.where(signs > 0, model.gamma_ - margin, model.gamma_dissimilar_ + margin)
    Cs = _pair_matrices(pairs, signs, thresholds, d=d, basis=basis)
    M = basis.T @ model.kernel_ @ basis
    assert_allclose(basis @ M @ basis.T, model.kernel_, atol=1e-12)   # inside the range
    _assert_kkt(M, model.multipliers_, M1, Cs)
    _assert_is_reference(M, model.multipliers_, model.dual_objective_[-1], M1, Cs)
    assert 0 < np.count_nonzero(model.multipliers_ > 1e-6) < len(pairs)
    assert np.any(model.alphas_ < 0)                     # corrections were needed


# -- the paper's algorithm stops short ------------------------------------------

@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_paper_algorithm_stops_at_a_feasible_kernel_farther_than_the_projection(projection):
    W1 = np.eye(D) / D
    Cs = _pair_matrices(PAIRS, SIGNS, _thresholds())
    W_star, alpha_star, log_Z_star = _reference_projection(W1, Cs)
    results = {
        "definiteboost": definiteboost(Cs, W1, projection=projection, tol=1e-12,
                                       max_iter=100_000),
        "definiteboost_pairs": definiteboost_pairs(PAIRS, SIGNS, _thresholds(), n_objects=D,
                                                   projection=projection, tol=1e-12,
                                                   max_iter=100_000),
    }
    model = DefiniteBoostKernel(n_objects=D, gamma=GAMMA, gamma_dissimilar=GAMMA_DISSIMILAR,
                                projection=projection, tol=1e-9, max_iter=100_000,
                                validation_fraction=None).fit(PAIRS, SIGNS)
    results["DefiniteBoostKernel"] = (model.kernel_, {
        "converged": model.converged_, "multipliers": model.multipliers_,
        "dual_objective": model.dual_objective_, "alpha": model.alphas_})
    for name, (W, log) in results.items():
        assert log["converged"], name
        assert _values(Cs, W).max() <= 1e-8, name                  # feasible ...
        assert np.all(log["alpha"] > 0), name                      # (no step undone)
        divergence = _divergence(W, W1)
        assert divergence > -log_Z_star + 1e-3, name               # ... but not the closest
        assert np.abs(W - W_star).max() > 1e-3, name
        # weak duality only: the dual objective certifies a gap
        assert -np.log(log["dual_objective"][-1]) < divergence - 1e-3, name
        # complementary slackness fails: a slack constraint kept its multiplier
        slack = _values(Cs, W) < -1e-3
        assert np.any(log["multipliers"][slack] > 1e-3), name
    # while the corrective run reaches it, undoing part of some steps
    W, log = definiteboost_pairs(PAIRS, SIGNS, _thresholds(), n_objects=D,
                                 projection=projection, corrective=True, tol=1e-12,
                                 max_iter=100_000, keep="last")
    assert np.any(log["alpha"] < 0)
    assert_allclose(W, W_star, atol=1e-8)


# -- the README's figures -------------------------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_corrective_figures():
    text = README.read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)[1]
    assert "DefiniteBoostKernel(n_objects=52, gamma=gamma)" in block
    claim = re.search(
        r"paper's algorithm stops after (\d+) iterations at `Δ\(K, I/d\) = ([\d.]+)`;\s+"
        r"corrective steps reach the projection, `Δ = ([\d.]+) ≈ −log ([\d.]+)`, after\s+"
        r"(\d+) \(with `max_iter=(\d+)`\)", text)
    assert claim is not None
    n_paper, delta_paper, delta, dual, n_corrective, max_iter = claim.groups()
    namespace = {}
    exec(compile(block, "README.md[python block 1]", "exec"), namespace)
    prior = np.eye(52) / 52
    # the README's figures are the paper's run on every pair; since issue 19 the
    # defaults hold 10 % of the pairs out for a verdict, so the run is repeated
    # with validation_fraction=None (the README block's own model is a default fit)
    paper = DefiniteBoostKernel(n_objects=52, gamma=namespace["gamma"],
                                validation_fraction=None).fit(namespace["pairs"])
    assert paper.n_iter_ == int(n_paper)
    assert f"{_divergence(paper.kernel_, prior):.3f}" == delta_paper
    model = DefiniteBoostKernel(n_objects=52, gamma=namespace["gamma"], corrective=True,
                                max_iter=int(max_iter),
                                validation_fraction=None).fit(namespace["pairs"])
    assert model.converged_
    assert model.n_iter_ == int(n_corrective)
    assert f"{_divergence(model.kernel_, prior):.3f}" == delta
    assert f"{model.dual_objective_[-1]:.5f}" == dual
    # Delta = -log(dual) up to the tolerance (tol=1e-2 by default)
    assert -np.log(model.dual_objective_[-1]) == pytest.approx(
        _divergence(model.kernel_, prior), abs=1e-3)
    assert _divergence(model.kernel_, prior) < _divergence(paper.kernel_, prior)
