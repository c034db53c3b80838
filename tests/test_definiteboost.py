"""DefiniteBoost (Section 4) against AdaBoost, a naive dense implementation,
Theorem 4.1's bound, and the estimator's contracts."""

import warnings
from functools import partial

import numpy as np
import pandas as pd
import pytest
from conftest import low_rank_kernel, quietly, random_spd, sq_dist
from numpy.testing import assert_allclose, assert_array_equal
from scipy import linalg, optimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score
from sklearn.model_selection import GridSearchCV

from megkernel import (
    DefiniteBoostKernel,
    definiteboost,
    definiteboost_pairs,
    definiteboost_rho,
    definiteboost_step,
)
from megkernel._numerics.state import ExponentState
from megkernel._numerics.validation import check_pair_labels
from megkernel._solvers import definiteboost_projections as solver
from megkernel._solvers.holdout import pair_ranking_auc
from megkernel._warnings import NoImprovementWarning

# -- helpers -------------------------------------------------------------------

def _pair_matrix(d, a, b, sign, gamma):
    """C = s (u u^T - gamma I), u = e_a - e_b (trace-one units)."""
    u = np.zeros(d)
    u[a] += 1.0
    u[b] -= 1.0
    return sign * (np.outer(u, u) - gamma * np.eye(d))


def _density(d, seed, rank=None):
    return random_spd(d, seed, rank=rank, ridge=0.2, trace=1.0)


def _feasible_matrix_constraints(d, n, seed, margin=0.02):
    """Random symmetric C_j with tr(W* C_j) = -margin for a density W*."""
    rng = np.random.default_rng(seed)
    target = _density(d, seed + 500)
    Cs = []
    for _ in range(n):
        B = rng.normal(size=(d, d))
        B = 0.5 * (B + B.T)
        Cs.append(B - (np.sum(target * B) + margin) * np.eye(d))
    return np.array(Cs), target


def _close_pairs(K, gamma):
    d = len(K)
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)
    return pairs[sq_dist(K, pairs) < gamma]


def _naive_definiteboost(Cs, prior, n_iter, projection="approximate", tol=-np.inf):
    """Eqs. 11-13 literally, with scipy expm/logm, one step at a time."""
    W1 = prior / np.trace(prior)
    L1 = np.real(linalg.logm(W1))
    W = W1
    total = np.zeros_like(W1)
    chosen, alphas, violations, duals = [], [], [], [1.0]
    for _ in range(n_iter):
        values = np.array([np.sum(W * C) for C in Cs])
        j = int(np.argmax(values))
        r = values[j]
        if r <= tol:
            break
        lam = np.linalg.eigvalsh(Cs[j])
        lam_max, lam_min = lam[-1], lam[0]
        alpha = np.log((1 - r / lam_min) / (1 - r / lam_max)) / (lam_max - lam_min)
        LW = np.real(linalg.logm(W))
        if projection == "exact":
            def residual(a):
                E = linalg.expm(LW - a * Cs[j])
                return np.sum(E * Cs[j]) / np.trace(E)
            high = alpha
            while residual(high) > 0:
                high *= 2
            alpha = optimize.brentq(residual, 0.0, high, xtol=1e-15, rtol=1e-15)
        E = linalg.expm(LW - alpha * Cs[j])
        E = 0.5 * (E + E.T)
        W = E / np.trace(E)
        total += alpha * Cs[j]
        duals.append(np.trace(linalg.expm(L1 - total)))
        chosen.append(j)
        alphas.append(alpha)
        violations.append(r)
    return W, dict(constraint=np.array(chosen), alpha=np.array(alphas),
                   violation=np.array(violations), dual_objective=np.array(duals))


_quiet = partial(quietly, category=ConvergenceWarning)


# -- the step and rho --------------------------------------------------------

def test_step_and_rho_reduce_to_adaboost():
    r = np.linspace(0.0, 0.9, 10)
    assert_allclose(definiteboost_step(r, 1.0, -1.0), 0.5 * np.log((1 + r) / (1 - r)),
                    rtol=1e-14, atol=1e-16)
    assert_allclose(definiteboost_rho(r, 1.0, -1.0), np.sqrt(1 - r**2), rtol=1e-14)
    # general range: eq. 13 and Theorem 4.1's factor
    lam_max, lam_min = 1.7, -0.3
    r = np.array([0.05, 0.4, 1.2])
    expected_alpha = np.log((1 - r / lam_min) / (1 - r / lam_max)) / (lam_max - lam_min)
    assert_allclose(definiteboost_step(r, lam_max, lam_min), expected_alpha, rtol=1e-13)
    span = lam_max - lam_min
    expected_rho = ((1 - r / lam_max) ** (lam_max / span)
                    * (1 - r / lam_min) ** (-lam_min / span))
    assert_allclose(definiteboost_rho(r, lam_max, lam_min), expected_rho, rtol=1e-13)
    assert definiteboost_rho(0.0, lam_max, lam_min) == 1.0
    assert np.all(definiteboost_rho(r, lam_max, lam_min) < 1.0)


def test_step_minimises_the_convexity_bound_of_the_dual_ratio():
    """eq. 13's alpha minimises the upper bound whose minimum is rho(r)."""
    lam_max, lam_min, r = 1.3, -0.6, 0.35

    def bound(alpha):
        # exp(-alpha c) <= convex combination of the endpoint values, c in [lmin, lmax]
        return ((r - lam_min) * np.exp(-alpha * lam_max)
                + (lam_max - r) * np.exp(-alpha * lam_min)) / (lam_max - lam_min)

    result = optimize.minimize_scalar(bound, bounds=(0, 20), method="bounded",
                                      options=dict(xatol=1e-12))
    assert definiteboost_step(r, lam_max, lam_min) == pytest.approx(result.x, rel=1e-6)
    assert definiteboost_rho(r, lam_max, lam_min) == pytest.approx(result.fun, rel=1e-10)


# -- the diagonal case is AdaBoost --------------------------------------------

def _adaboost(margins, n_rounds):
    """Independent AdaBoost: margins[j, i] = y_i h_j(x_i) in {-1, +1}."""
    n_hyp, m = margins.shape
    w = np.full(m, 1.0 / m)
    chosen, alphas, normalisers, gaps = [], [], [], []
    for _ in range(n_rounds):
        edges = margins @ w
        order = np.argsort(edges)
        gaps.append(edges[order[-1]] - edges[order[-2]])
        j = order[-1]
        r = edges[j]
        alpha = 0.5 * np.log((1 + r) / (1 - r))
        w = w * np.exp(-alpha * margins[j])
        normalisers.append(w.sum())
        w = w / w.sum()
        chosen.append(j)
        alphas.append(alpha)
    return w, np.array(chosen), np.array(alphas), np.cumprod(normalisers), min(gaps)


def test_diagonal_case_is_adaboost():
    m, n_hyp, n_rounds = 60, 25, 25
    rng = np.random.default_rng(3)
    labels = rng.choice([-1, 1], m)
    predictions = rng.choice([-1, 1], (n_hyp, m))
    margins = predictions * labels
    w, chosen, alphas, exp_loss, gap = _adaboost(margins, n_rounds)
    assert gap > 1e-5                # no near-ties: the greedy choice is unambiguous

    C = np.array([np.diag(row) for row in margins])
    with pytest.warns(ConvergenceWarning):
        W, log = definiteboost(C, np.eye(m) / m, tol=-1, max_iter=n_rounds, keep="last")
    assert log["n_iter"] == n_rounds
    assert_array_equal(log["constraint"], chosen)
    assert_allclose(log["alpha"], alphas, rtol=1e-12, atol=1e-12)
    assert_allclose(np.diag(W), w, rtol=1e-12, atol=1e-12)
    assert_allclose(W - np.diag(np.diag(W)), 0.0, atol=1e-15)
    assert_allclose(log["dual_objective"][1:], exp_loss, rtol=1e-12)
    # the exponential loss written out: mean_i exp(-y_i F(x_i))
    F = alphas @ predictions[chosen]
    assert log["dual_objective"][-1] == pytest.approx(np.mean(np.exp(-labels * F)), rel=1e-12)
    # r_t is AdaBoost's edge and the bound is prod sqrt(1 - r^2)
    edges = log["violation"]
    assert_allclose(log["dual_bound"][1:], np.cumprod(np.sqrt(1 - edges**2)), rtol=1e-12)


# -- agreement with a naive dense implementation --------------------------------

@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_matrix_constraints_match_naive_dense(projection):
    d, n, n_iter = 5, 8, 12
    Cs, _ = _feasible_matrix_constraints(d, n, seed=10)
    prior = _density(d, 11)
    expected_W, expected = _naive_definiteboost(Cs, prior, n_iter, projection, tol=1e-10)
    W, log = _quiet(definiteboost, Cs, 5.0 * prior, projection=projection, tol=1e-10,
                    max_iter=n_iter, keep="last")
    assert log["n_iter"] == len(expected["alpha"]) >= 3
    assert_array_equal(log["constraint"], expected["constraint"])
    assert_allclose(log["alpha"], expected["alpha"], rtol=1e-9, atol=1e-12)
    assert_allclose(log["violation"], expected["violation"], rtol=1e-9, atol=1e-12)
    assert_allclose(log["dual_objective"], expected["dual_objective"], rtol=1e-10)
    assert_allclose(W, expected_W, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_pair_constraints_match_naive_dense(projection):
    d, n_iter = 6, 15
    pairs = np.array([[0, 1], [1, 2], [3, 4], [0, 5], [2, 4], [1, 3]])
    signs = np.array([1, 1, 1, -1, -1, 1])
    thresholds = np.where(signs > 0, 0.05, 0.5)
    prior = _density(d, 12)
    Cs = np.array([_pair_matrix(d, a, b, s, g)
                   for (a, b), s, g in zip(pairs, signs, thresholds)])
    expected_W, expected = _naive_definiteboost(Cs, prior, n_iter, projection, tol=1e-10)
    # tol=0: the constraints themselves (a positive tol tightens them by tol * gamma / 2)
    W, log = _quiet(definiteboost_pairs, pairs, signs, thresholds, prior=prior,
                    projection=projection, tol=0.0, max_iter=n_iter, keep="last")
    assert log["n_iter"] == len(expected["alpha"]) > 3
    assert_array_equal(log["constraint"], expected["constraint"])
    assert_allclose(log["alpha"], expected["alpha"], rtol=1e-9, atol=1e-12)
    assert_allclose(log["dual_objective"], expected["dual_objective"], rtol=1e-10)
    assert_allclose(W, expected_W, rtol=1e-9, atol=1e-12)
    # the pair solver and the general solver agree
    W_general, log_general = _quiet(definiteboost, Cs, prior, projection=projection,
                                    tol=1e-10, max_iter=n_iter, keep="last")
    assert_allclose(W_general, W, rtol=1e-10, atol=1e-13)
    assert_allclose(log_general["dual_objective"], log["dual_objective"], rtol=1e-10)


def test_estimator_matches_the_pair_solver():
    d = 8
    pairs = np.array([[0, 1], [1, 2], [3, 4], [5, 6], [6, 7]])
    trace, gamma = 3.0, 0.06
    prior = _density(d, 13)
    model = DefiniteBoostKernel(validation_fraction=None,
                                init=prior, gamma=gamma, trace=trace, tol=1e-6,
                                max_iter=5000).fit(pairs)
    assert model.converged_
    # the solver takes the estimator's parameters: the same kernel
    K, log = definiteboost_pairs(pairs, prior=prior, gamma=gamma, trace=trace,
                                 tol=1e-6, max_iter=5000)
    assert_allclose(model.kernel_, K, rtol=1e-9, atol=1e-12)
    assert_allclose(model.dual_objective_, log["dual_objective"], rtol=1e-10)
    assert np.trace(model.kernel_) == pytest.approx(trace, rel=1e-12)


@pytest.mark.parametrize("params", [
    dict(),
    dict(gamma=0.02, gamma_dissimilar=0.3, projection="exact"),
    dict(slack=0.5, trace=7.0),
    dict(corrective=True, tol=1e-4),
    # trace=1.0: gamma_dissimilar=0.45 is in trace-one units (the default trace was
    # 1.0; trace="auto" is now ||F||_F^2 for a factor)
    dict(init_factor="factor", gamma_dissimilar=0.45, trace=1.0),
])
def test_solver_with_the_estimator_parameters_returns_its_kernel(params):
    """Every rule (auto gamma, margins, slack, dropping) lives in the solver."""
    d = 10
    rng = np.random.default_rng(5)
    pairs = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [1, 8], [0, 9], [3, 6], [2, 5]])
    signs = np.array([1, 1, 1, 1, -1, -1, -1, 1])
    params = dict(params)
    solver_params = {k: v for k, v in params.items() if k != "init_factor"}
    if params.get("init_factor") == "factor":
        factor = rng.standard_normal((d, 3))
        params["init_factor"] = factor
        solver_params["prior_factor"] = factor
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # validation_fraction=None: every pair trained on, as the solver does
        model = DefiniteBoostKernel(n_objects=d, validation_fraction=None,
                                    **params).fit(pairs, signs)
        # trace="auto" (the default since issue 19) is the prior's own trace:
        # the solver takes it as given
        solver_params.setdefault("trace", model.trace_)
        K, log = definiteboost_pairs(pairs, signs, n_objects=d, **solver_params)
    # the same warnings from both (e.g. dropped pairs in low-rank mode)
    messages = [str(w.message) for w in caught]
    assert messages[: len(messages) // 2] == messages[len(messages) // 2:]
    assert_allclose(model.kernel_, K, rtol=1e-10, atol=1e-13)
    assert model.n_iter_ == log["n_iter"]
    assert_array_equal(model.chosen_constraints_, log["constraint"])
    assert_array_equal(model.dropped_constraints_, log["dropped"])
    assert model.gamma_ == log["gamma"] and model.gamma_dissimilar_ == log["gamma_dissimilar"]
    assert model.max_violation_ == max(log["max_violation"], 0.0)


# -- dual objective and Theorem 4.1 ---------------------------------------------

def _check_dual(log):
    dual, bound = log["dual_objective"], log["dual_bound"]
    assert dual[0] == pytest.approx(1.0, abs=1e-12) and bound[0] == 1.0
    assert np.all(np.diff(dual) <= 1e-12 * dual[:-1])       # never increases
    assert np.all(dual <= bound * (1 + 1e-12))              # Theorem 4.1
    assert np.all(np.isfinite(dual)) and np.all(dual > 0)
    assert dual[-1] < 1.0 and bound[-1] < 1.0


@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_dual_monotone_and_under_bound_matrix_constraints(projection):
    Cs, _ = _feasible_matrix_constraints(6, 20, seed=20)
    W, log = _quiet(definiteboost, Cs, _density(6, 21), projection=projection,
                    max_iter=200, tol=1e-9)
    assert log["n_iter"] > 10
    _check_dual(log)


@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_dual_monotone_and_under_bound_pairs(projection):
    K = low_rank_kernel(20, 3, 22)
    gamma = 0.4 / 20
    pairs = _close_pairs(K, gamma)
    assert len(pairs) > 20
    W, log = _quiet(definiteboost_pairs, pairs, np.ones(len(pairs)), gamma,
                    n_objects=20, projection=projection, max_iter=400, tol=1e-9)
    assert log["n_iter"] > 20
    _check_dual(log)


@pytest.mark.parametrize("kind", ["matrix", "pairs"])
def test_exact_projection_satisfies_its_constraint_with_equality(kind):
    d = 6
    if kind == "matrix":
        Cs, _ = _feasible_matrix_constraints(d, 10, seed=30)
        prior = _density(d, 31)
        run = lambda k: definiteboost(Cs, prior, projection="exact", max_iter=k,
                                      tol=-np.inf, keep="last")
    else:
        pairs = np.array([[0, 1], [1, 2], [3, 4], [0, 5], [2, 5]])
        signs = np.array([1, 1, 1, -1, 1])
        thresholds = np.where(signs > 0, 0.03, 0.6)
        Cs = np.array([_pair_matrix(d, a, b, s, g)
                       for (a, b), s, g in zip(pairs, signs, thresholds)])
        prior = _density(d, 32)
        run = lambda k: definiteboost_pairs(pairs, signs, thresholds, prior=prior,
                                            projection="exact", max_iter=k,
                                            tol=-np.inf, keep="last")
    for k in range(1, 9):
        W, log = _quiet(run, k)
        j = log["constraint"][-1]
        assert log["alpha"][-1] > 0
        assert abs(np.sum(W * Cs[j])) < 1e-12
    # the approximate step under-shoots: the constraint stays violated
    W, log = _quiet(definiteboost, Cs, prior, max_iter=1, tol=-np.inf, keep="last")
    assert np.sum(W * Cs[log["constraint"][0]]) > 1e-6


# -- stopping -------------------------------------------------------------------

@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_on_convergence_every_constraint_holds_within_tol(projection):
    Cs, target = _feasible_matrix_constraints(5, 15, seed=40, margin=0.05)
    tol = 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        W, log = definiteboost(Cs, np.eye(5) / 5, projection=projection, tol=tol,
                               max_iter=20000)
    assert log["converged"]
    values = np.einsum("jab,ab->j", Cs, W)
    assert values.max() <= tol
    assert log["max_violation"] == pytest.approx(values.max(), abs=1e-14)
    # the result is a density matrix
    assert np.trace(W) == pytest.approx(1.0, abs=1e-12)
    assert np.linalg.eigvalsh(W).min() > 0


def test_on_convergence_every_pair_constraint_holds():
    d = 20
    K = low_rank_kernel(d, 3, 41)
    gamma = 0.4 / d
    pairs = _close_pairs(K, gamma)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = DefiniteBoostKernel(validation_fraction=None, n_objects=d, gamma=gamma).fit(pairs)
    assert model.converged_
    distances = sq_dist(model.kernel_, pairs)
    assert distances.max() <= gamma * (1 + 1e-12)
    assert model.max_violation_ <= model.tol * gamma
    assert_allclose(model.pair_sq_distances(pairs), distances, rtol=1e-12, atol=1e-15)


def test_non_convergence_warns_and_returns_the_best_iterate():
    d = 6
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 5], [1, 4]])
    signs = np.array([1, 1, 1, 1, 1, 1, -1])
    gamma = np.where(signs > 0, 0.02, 0.5)
    n_iter = 12
    # every iterate, by re-running with keep="last"
    largest = []
    iterates = []
    for k in range(n_iter + 1):
        W, _ = _quiet(definiteboost_pairs, pairs, signs, gamma, n_objects=d,
                      max_iter=k, keep="last")
        iterates.append(W)
        largest.append(np.max(signs * (sq_dist(W, pairs) - gamma)))
    best = int(np.argmin(largest))
    assert best != n_iter          # the greedy steps do not decrease the violation monotonically
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        W, log = definiteboost_pairs(pairs, signs, gamma, n_objects=d, max_iter=n_iter)
    assert not log["converged"]
    assert log["n_iter"] == n_iter
    assert log["max_violation"] == pytest.approx(largest[best], rel=1e-10)
    assert_allclose(W, iterates[best], rtol=1e-10, atol=1e-14)
    # the estimator too
    with pytest.warns(ConvergenceWarning):
        model = DefiniteBoostKernel(validation_fraction=None,
                                    n_objects=d, gamma=0.05, max_iter=3).fit(pairs)
    assert not model.converged_ and model.n_iter_ == 3


@pytest.mark.parametrize("trace", [1.0, 5.0])
def test_warning_and_progress_report_the_violation_in_kernel_units(trace, capsys):
    # the same figure as max_violation_ / violations_, whatever the trace
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 5], [1, 4]])
    signs = np.array([1, 1, 1, 1, 1, 1, -1])
    model = DefiniteBoostKernel(n_objects=6, trace=trace, max_iter=3, verbose=2,
                                validation_fraction=None)
    with pytest.warns(ConvergenceWarning) as record:
        model.fit(pairs, signs)
    assert f"largest violation {model.max_violation_:.3g} against" in str(record[0].message)
    detail = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
              if line.startswith("[DefiniteBoostKernel] iter 1:")]  # verbose=2, stderr
    assert f"largest violation {model.violations_[0]:.4g}," in detail[0]


def test_infeasible_constraints_end_with_a_warning_and_finite_numbers():
    # the same pair similar (small gamma) and dissimilar (large gamma_dissimilar)
    model = DefiniteBoostKernel(validation_fraction=None,
                                n_objects=4, gamma=0.01, gamma_dissimilar=1.0,
                                max_iter=100_000)
    with pytest.warns(ConvergenceWarning):
        model.fit(np.array([[0, 1], [0, 1]]), np.array([1, -1]))
    assert not model.converged_
    assert model.n_iter_ <= 100_000
    for value in (model.kernel_, model.dual_objective_, model.dual_bound_,
                  model.alphas_, model.violations_, model.max_violation_):
        assert np.all(np.isfinite(value))
    assert np.trace(model.kernel_) == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(model.dual_objective_) <= 1e-12)
    assert np.all(np.isfinite(model.decision_function(np.array([[0, 1], [2, 3]]))))


def test_infeasible_matrix_constraints_end_with_a_warning():
    # w_1 <= w_2 and w_2 <= w_1 - 0.5
    Cs = np.array([np.diag([1.0, -1.0]), np.diag([-1.0, 1.0]) + 0.5 * np.eye(2)])
    with pytest.warns(ConvergenceWarning):
        W, log = definiteboost(Cs, np.eye(2) / 2, max_iter=1_000_000)
    assert not log["converged"]
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(log["dual_objective"]))
    assert log["n_iter"] < 1_000_000       # stopped by the weak-duality certificate
    assert log["infeasible"]


# -- the paper's Section-5 setting ------------------------------------------------

@pytest.mark.parametrize("projection", ["approximate", "exact"])
def test_section_5_setting(projection):
    d = 40
    K = low_rank_kernel(d, 4, 50)
    gamma = 0.2 / d
    pairs = _close_pairs(K, gamma)
    assert len(pairs) > 100
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        # the paper's run: every pair trained on (validation_fraction=None), where
        # gamma="auto" is the paper's 0.2 / d (with held-out pairs it is validated)
        model = DefiniteBoostKernel(n_objects=d, projection=projection,
                                    validation_fraction=None).fit(pairs)
    assert model.gamma_ == pytest.approx(gamma, rel=1e-12)     # the "auto" default
    assert model.converged_ and 10 < model.n_iter_ < max(2000, 25 * len(pairs))
    dual, bound = model.dual_objective_, model.dual_bound_
    assert len(dual) == model.n_iter_ + 1
    assert np.all(np.diff(dual) <= 1e-12)
    assert np.all(dual <= bound * (1 + 1e-12))
    assert dual[-1] < 0.5
    assert sq_dist(model.kernel_, pairs).max() <= gamma * (1 + 1e-12)
    assert np.all(model.predict(pairs) == 1)
    # the prior's squared distances (2/d) violate every constraint
    assert np.all(model.violations_ > 0)


# -- the estimator ---------------------------------------------------------------

def _labelled_pairs(d=30, seed=60):
    K = low_rank_kernel(d, 3, seed)
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)
    dist = sq_dist(K, pairs)
    low, high = np.quantile(dist, [0.25, 0.75])
    similar, dissimilar = dist < low, dist > high
    keep = similar | dissimilar
    y = np.where(similar, 1, -1)[keep]
    pairs = pairs[keep]
    order = np.random.default_rng(seed).permutation(len(y))
    return pairs[order], y[order], low, high


def test_predict_decision_function_score():
    d = 30
    pairs, y, low, high = _labelled_pairs(d)
    model = _quiet(DefiniteBoostKernel(n_objects=d, gamma=low, gamma_dissimilar=high,
                                       max_iter=300).fit, pairs, y)
    assert_array_equal(model.classes_, [-1, 1])
    assert model.threshold_ == pytest.approx(0.5 * (low + high))
    distances = sq_dist(model.kernel_, pairs)
    scores = model.decision_function(pairs)
    assert_allclose(scores, model.threshold_ - distances, rtol=1e-10, atol=1e-15)
    predictions = model.predict(pairs)
    assert_array_equal(predictions, np.where(scores >= 0, 1, -1))
    assert model.score(pairs, y) == pytest.approx(accuracy_score(y, predictions))
    assert model.score(pairs, y) > 0.9
    # similar pairs only: the threshold is gamma
    sim_only = DefiniteBoostKernel(n_objects=d, gamma=low).fit(pairs[y == 1])
    assert sim_only.threshold_ == low
    assert np.all(sim_only.predict(pairs[y == 1]) == 1)


@pytest.mark.slow
def test_gridsearch_over_gamma_on_labelled_pairs():
    d = 30
    pairs, y, low, high = _labelled_pairs(d, seed=61)
    grid = {"gamma": [0.25 * low, 0.5 * low, low]}  # below gamma_dissimilar=high
    # a fixed seed: on a few held-out draws a fold's kernel ranks its
    # held-out pairs below the prior, which warns
    search = GridSearchCV(DefiniteBoostKernel(n_objects=d, gamma_dissimilar=high,
                                              max_iter=300, random_state=0), grid, cv=3)
    _quiet(search.fit, pairs, y)
    assert search.best_params_["gamma"] in grid["gamma"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    # held-out pairs are classified far better than by the prior (all at 2/d: 50%)
    assert search.best_score_ > 0.7
    assert search.best_estimator_.gamma_ == search.best_params_["gamma"]


def test_dataframe_and_trace():
    d = 12
    K = low_rank_kernel(d, 2, 62)
    pairs = _close_pairs(K, 0.5 / d)
    frame = pd.DataFrame(pairs, columns=["i", "j"])
    m_df = DefiniteBoostKernel(validation_fraction=None, n_objects=d).fit(frame)
    m_np = DefiniteBoostKernel(validation_fraction=None, n_objects=d).fit(pairs)
    assert_array_equal(m_df.kernel_, m_np.kernel_)
    assert list(m_df.feature_names_in_) == ["i", "j"]
    assert_array_equal(m_df.predict(frame), m_np.predict(pairs))
    # scale: trace tau with gamma scaled by tau gives tau times the kernel
    tau = 52.0
    m_tau = DefiniteBoostKernel(validation_fraction=None, n_objects=d, trace=tau).fit(pairs)
    assert m_tau.gamma_ == pytest.approx(tau * m_np.gamma_)
    assert_allclose(m_tau.kernel_, tau * m_np.kernel_, rtol=1e-10, atol=1e-12)


def test_verbose_prints_prefixed_progress(capsys):
    d = 12
    pairs = _close_pairs(low_rank_kernel(d, 2, 64), 0.5 / d)
    DefiniteBoostKernel(validation_fraction=None, n_objects=d).fit(pairs)
    assert capsys.readouterr() == ("", "")
    DefiniteBoostKernel(validation_fraction=None,
                        n_objects=d, verbose=1).fit(pairs)  # a bar on stderr
    captured = capsys.readouterr()
    assert captured.out == "" and "DefiniteBoostKernel" in captured.err
    DefiniteBoostKernel(validation_fraction=None,
                        n_objects=d, verbose=2).fit(pairs)  # plus detail lines
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
             if line.startswith("[")]
    assert lines and all(line.startswith("[DefiniteBoostKernel] iter") for line in lines)


# -- bad input ---------------------------------------------------------------------

_PAIRS = np.array([[0, 1], [1, 2], [3, 4]])

_BAD_FITS = {
    "labels 1/2": (_PAIRS, np.array([1, 2, 1]), "y must hold \\+1"),
    "continuous labels": (_PAIRS, np.array([0.5, 1.0, -1.0]),
                          "y must hold \\+1|continuous|Unknown label"),
    "string labels": (_PAIRS, np.array(["a", "b", "a"]), "the text .a. at row 0"),
    "nan labels": (_PAIRS, np.array([1.0, np.nan, -1.0]), "NaN"),
    "y too short": (_PAIRS, np.array([1, -1]), "inconsistent|shape"),
    "dissimilar self-pair": (np.array([[0, 1], [2, 2]]), np.array([1, -1]),
                             r"y\[1\] labels a pair of an object with itself dissimilar"),
    "non-integer index": (np.array([[0, 1.5], [1, 2]]), None, "integer"),
    "negative index": (np.array([[0, -1], [1, 2]]), None, "negative object index"),
    "index out of range": (np.array([[0, 5], [1, 2]]), None, "out of range"),
    "nan index": (np.array([[0, np.nan], [1, 2]]), None, "NaN|infinite"),
    "three columns": (np.array([[0, 1, 2], [1, 2, 3]]), None, r"shape \(n_pairs, 2\)"),
    "1-D pairs": (np.array([0, 1, 2]), None, "2D array|2-D|shape"),
    "empty": (np.empty((0, 2), dtype=int), None, "0 sample|empty|minimum"),
}


def _fitted_model(**params):
    params = {"validation_fraction": None, **params}  # two pairs: no verdict to hold out
    return DefiniteBoostKernel(n_objects=5, **params).fit(np.array([[0, 1], [2, 3]]))


@pytest.mark.parametrize("case", sorted(_BAD_FITS))
def test_bad_input_raises_and_leaves_model_unchanged(case, assert_unchanged_on_error):
    X, y, message = _BAD_FITS[case]
    model = _fitted_model()
    with assert_unchanged_on_error(model, ValueError, match=message):
        model.fit(X, y)
    fresh = DefiniteBoostKernel(n_objects=5)
    with pytest.raises(ValueError, match=message):
        fresh.fit(X, y)
    assert not hasattr(fresh, "state_") and not hasattr(fresh, "n_features_in_")


_BAD_PARAMS = {
    "gamma_dissimilar too large": (dict(gamma_dissimilar=2.0), "can never hold"),
    "non-PD init": (dict(init=np.diag([1.0, 1, 1, 1, -1])), "not positive definite"),
    "non-symmetric init": (dict(init=np.eye(5) + np.triu(np.ones((5, 5)), 1)), "not symmetric"),
    "init shape mismatch": (dict(init=np.eye(4)), "does not match"),
}  # values outside the parameter constraints: test_contracts.py


@pytest.mark.parametrize("case", sorted(_BAD_PARAMS))
def test_bad_parameters_raise_and_leave_model_unchanged(case, assert_unchanged_on_error):
    params, message = _BAD_PARAMS[case]
    model = _fitted_model()
    model.set_params(**params)
    with assert_unchanged_on_error(model, ValueError, match=message):
        model.fit(np.array([[0, 1], [2, 3]]), np.array([1, -1]))


def test_predict_refuses_unknown_objects_and_changes_nothing(assert_unchanged_on_error):
    model = _fitted_model()
    for X in (np.array([[0, 5]]), np.array([[0, 1, 2]]), np.array([[0.5, 1]])):
        with assert_unchanged_on_error(model, ValueError):
            model.predict(X)


def test_solver_validation():
    with pytest.raises(ValueError, match="both signs"):
        definiteboost(np.array([np.eye(3)]), np.eye(3) / 3)
    with pytest.raises(ValueError, match="not symmetric"):
        definiteboost(np.array([[[1.0, 2.0], [0.0, -1.0]]]), np.eye(2) / 2)
    with pytest.raises(ValueError, match="shape"):
        definiteboost(np.array([np.diag([1.0, -1.0])]), np.eye(3) / 3)
    with pytest.raises(ValueError, match="not positive definite"):
        definiteboost(np.array([np.diag([1.0, -1.0])]), np.diag([1.0, 0.0]))
    for pairs, match in (([[0, 4]], "out of range"), ([[0, -1]], "negative"),
                         ([0, 1], "shape")):
        with pytest.raises(ValueError, match=match):
            definiteboost_pairs(np.array(pairs), [1.0], 0.01, n_objects=4)


def test_pair_distances_is_a_deprecated_alias_of_pair_sq_distances():
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    model = DefiniteBoostKernel(validation_fraction=None, n_objects=8).fit(pairs)
    with pytest.warns(FutureWarning, match="pair_sq_distances"):
        old = model.pair_distances(pairs)
    assert_array_equal(old, model.pair_sq_distances(pairs))
    assert_allclose(old, sq_dist(model.kernel_, pairs), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("labels", [[1, 0, 1], [True, False, True], [1.0, 0.0, 1.0]])
def test_pair_labels_may_be_one_zero_or_boolean(labels):
    reference = DefiniteBoostKernel(validation_fraction=None, n_objects=6).fit(_PAIRS, [1, -1, 1])
    model = DefiniteBoostKernel(validation_fraction=None, n_objects=6).fit(_PAIRS, np.array(labels))
    assert_array_equal(model.kernel_, reference.kernel_)
    assert_array_equal(model.predict(_PAIRS), reference.predict(_PAIRS))


# -- issue 19: the user's units, a default that learns, a verdict ----------------------

def _families(d=80, n_families=4, seed=0):
    """Objects in planted families; the closest pairs of a noisy embedding
    (mostly within a family) as similar pairs: what a user's table gives."""
    rng = np.random.default_rng(seed)
    labels = np.arange(d) % n_families
    centres = rng.standard_normal((n_families, 5)) * 1.5
    X = centres[labels] + rng.standard_normal((d, 5))
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)
    dist = ((X[iu[0]] - X[iu[1]]) ** 2).sum(axis=1)
    close = pairs[np.argsort(dist)[: 3 * d]]
    return close, labels


def test_check_pair_labels_accepts_the_three_encodings_and_nothing_else():
    pairs = np.array([[0, 1], [1, 2], [2, 3]])
    expected = np.array([1.0, -1.0, 1.0])
    for labels in ([1, -1, 1], [1, 0, 1], [True, False, True], [1.0, 0.0, 1.0],
                   np.array([1, -1, 1], dtype=object), [[1], [0], [1]]):
        assert_array_equal(check_pair_labels(labels, pairs), expected)
    assert_array_equal(check_pair_labels(None, pairs), np.ones(3))
    assert_array_equal(check_pair_labels([0, 0, 0], 3), -np.ones(3))  # all dissimilar
    for labels, match in (([1, 2, 1], r"must hold \+1"), ([-1, 0, 1], r"must hold \+1"),
                          (["a", "b", "a"], r"must hold \+1"), ([1.0, np.nan, 1.0], "nan"),
                          ([0.5, 1.0, 1.0], r"must hold \+1"), ([1, -1], "shape")):
        with pytest.raises(ValueError, match=match):
            check_pair_labels(labels, pairs)
    with pytest.raises(ValueError, match=(r"y\[1\] labels a pair of an object with itself "
                                          r"dissimilar \(1 such pair\(s\), rows 1\)")):
        check_pair_labels([1, -1], np.array([[0, 1], [2, 2]]))


def test_the_estimator_validates_labels_through_check_pair_labels(monkeypatch):
    import megkernel.definiteboost_kernel as module

    seen = []
    monkeypatch.setattr(module, "check_pair_labels",
                        lambda y, pairs, name: seen.append(name) or check_pair_labels(
                            y, pairs, name=name))
    DefiniteBoostKernel(n_objects=4, validation_fraction=None).fit([[0, 1], [2, 3]], [1, 0])
    assert seen == ["y"]


def test_trace_auto_keeps_the_units_of_the_prior_given():
    d = 10
    pairs, _ = _families(d, 2, seed=3)
    prior = _density(d, 21)
    scale = 327.7
    base = DefiniteBoostKernel(init=prior, validation_fraction=None).fit(pairs)
    scaled = DefiniteBoostKernel(init=scale * prior, validation_fraction=None).fit(pairs)
    assert base.trace_ == pytest.approx(np.trace(prior))
    assert scaled.trace_ == pytest.approx(scale * np.trace(prior))
    # everything in the prior's units: gamma, the kernel and its distances scale with it
    assert scaled.gamma_ == pytest.approx(scale * base.gamma_, rel=1e-12)
    assert_allclose(scaled.kernel_, scale * base.kernel_, rtol=1e-9, atol=1e-12)
    assert_array_equal(scaled.predict(pairs), base.predict(pairs))
    # a factor's prior: ||F||_F^2; the identity prior has no units: 1
    factor = np.random.default_rng(4).standard_normal((d, 3))
    with pytest.warns(ConvergenceWarning, match="infeasible"):  # a rank-3 range: said
        low = DefiniteBoostKernel(init_factor=factor, validation_fraction=None).fit(pairs)
    assert low.trace_ == pytest.approx((factor ** 2).sum())
    assert DefiniteBoostKernel(n_objects=d, validation_fraction=None).fit(pairs).trace_ == 1.0


def test_a_gamma_every_constraint_already_meets_warns_with_the_numbers():
    """Issue 19: gamma=327.7 in the user's distance units ran 0 iterations and
    reported converged_=True, returning the prior, silently."""
    pairs, _ = _families(40, seed=1)
    model = DefiniteBoostKernel(validation_fraction=None,
                                objects=np.arange(40), gamma=327.7, random_state=0)
    with pytest.warns(NoImprovementWarning, match=r"already holds under the prior") as record:
        model.fit(pairs)
    message = str([w.message for w in record if "already holds" in str(w.message)][0])
    # the prior's squared distances (all 2/d for I/d) and the trace are named
    assert "median 0.05" in message and "trace 1" in message and "327.7" in message
    assert model.n_iter_ == 0 and not model.converged_  # no claim that it learned
    # the same gamma in the kernel's units learns
    fitted = DefiniteBoostKernel(n_objects=40, gamma=0.1 * 2 / 40,
                                 validation_fraction=None).fit(pairs)
    assert fitted.n_iter_ > 0 and fitted.converged_


@pytest.mark.slow
def test_default_gamma_is_chosen_on_held_out_pairs_and_reported():
    d = 80
    pairs, labels = _families(d)
    model = DefiniteBoostKernel(n_objects=d, random_state=0).fit(pairs)
    mean = 2.0 / d  # the identity prior's mean squared distance
    assert_allclose(model.gamma_path_, np.array([0.3, 0.1, 0.03]) * mean, rtol=1e-12)
    assert model.gamma_ == model.gamma_path_[np.argmax(model.gamma_scores_)]
    assert model.prior_score_ == 0.5  # I/d ties every pair
    assert model.validation_score_ == np.max(model.gamma_scores_) > 0.6
    assert model.n_train_pairs_ == len(pairs) - len(pairs) // 10
    assert model.converged_
    # the refit kernel meets every constraint, the held-out ones included
    assert np.all(model.pair_sq_distances(pairs) <= model.gamma_ * (1 + 1e-9))
    # independent check of the AUC: held-out similar pairs against random pairs
    K = model.kernel_
    D = np.diag(K)[:, None] + np.diag(K)[None, :] - 2 * K
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(d, dtype=bool)
    # the learned distances separate same-family objects from the others
    assert D[same & off].mean() < D[~same].mean()


def test_scores_are_a_pair_ranking_auc():
    # independent: count of (closer, farther) pairs in order, ties one half
    rng = np.random.default_rng(0)
    closer, farther = rng.integers(0, 5, 30).astype(float), rng.integers(0, 5, 40) + 0.5
    expected = np.mean([(c < f) + 0.5 * (c == f) for c in closer for f in farther])
    assert pair_ranking_auc(closer, farther) == pytest.approx(expected, abs=1e-12)
    assert pair_ranking_auc(np.full(3, 2.0), np.full(4, 2.0 * (1 + 1e-15))) == 0.5


def test_too_few_pairs_to_hold_out_says_so_and_validation_fraction_none_is_silent():
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    with pytest.warns(UserWarning, match="too few to hold out"):
        model = DefiniteBoostKernel(n_objects=8).fit(pairs)
    assert np.isnan(model.validation_score_) and np.isnan(model.prior_score_)
    assert model.gamma_ == pytest.approx(0.2 / 8)  # the paper's choice without a verdict
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = DefiniteBoostKernel(n_objects=8, validation_fraction=None).fit(pairs)
    assert_array_equal(quiet.kernel_, model.kernel_)


def test_a_kernel_no_better_than_its_prior_warns():
    """A prior that already ranks every pair right (AUC 1) cannot be beaten; the
    warning says the held-out pairs cannot show a gain (not "check the units")."""
    d, n_families = 40, 4
    labels = np.arange(d) % n_families
    blocks = (labels[:, None] == labels[None, :]).astype(float)
    prior = blocks + 0.05 * np.eye(d)
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)
    y = np.where(labels[iu[0]] == labels[iu[1]], 1, -1)
    model = DefiniteBoostKernel(init=prior, gamma=0.05, random_state=0)
    with pytest.warns(NoImprovementWarning, match="prior already scores the best possible"):
        model.fit(pairs, y)
    assert model.prior_score_ == 1.0 and model.validation_score_ == 1.0
    assert model.n_iter_ > 0


def test_auto_gamma_with_nothing_to_learn_warns_instead_of_claiming_convergence():
    d, n_families = 40, 4
    labels = np.arange(d) % n_families
    prior = (labels[:, None] == labels[None, :]).astype(float) + 1e-3 * np.eye(d)
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)[labels[iu[0]] == labels[iu[1]]]
    with pytest.warns(UserWarning, match="learned nothing") as record:
        model = DefiniteBoostKernel(init=prior, validation_fraction=None).fit(pairs)
    assert model.n_iter_ == 0
    assert "median" in str(record[0].message)


def test_nothing_learned_with_a_verdict_is_said_once():
    # A prior that already meets every constraint: the held-out verdict would
    # only compare the prior with itself, so the fit says one thing.
    d, n_families = 60, 4
    labels = np.arange(d) % n_families
    prior = (labels[:, None] == labels[None, :]).astype(float) + 1e-3 * np.eye(d)
    iu = np.triu_indices(d, 1)
    pairs = np.column_stack(iu)
    y = np.where(labels[iu[0]] == labels[iu[1]], 1, -1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = DefiniteBoostKernel(init=prior, gamma=0.05, gamma_dissimilar=0.05,
                                    random_state=0).fit(pairs, y)
    messages = [str(w.message) for w in record]
    assert model.n_iter_ == 0 and not np.isnan(model.validation_score_)
    assert len(messages) == 1 and "learned nothing" in messages[0], messages


def test_non_convergence_names_the_numbers():
    pairs, _ = _families(40, seed=2)
    with pytest.warns(ConvergenceWarning, match=r"constraints still violated .*gamma="):
        DefiniteBoostKernel(n_objects=40, max_iter=5, validation_fraction=None).fit(pairs)


def test_working_set_keeps_the_answer_of_the_full_scan():
    """The greedy choice through a working set (m > d: a scan every
    ceil(m / d) steps) ends where every constraint holds, as the full scan
    at every step (the paper's choice) does, at a dual objective as low."""
    d = 12
    rng = np.random.default_rng(8)
    pairs = rng.integers(0, d, size=(200, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    # the rule: the paper's scan at every step where a scan is cheap
    assert solver._scan_interval(len(pairs), d) == 1
    assert solver._scan_interval(1000, 52) == 1
    assert solver._scan_interval(10_000, 2000) == 5
    gamma = 0.5 * 2 / d
    results = {}
    for scan_every in (1, 4):
        state = ExponentState.identity(d)
        constraints = solver.PairConstraints(pairs[:, 0], pairs[:, 1], np.ones(len(pairs)),
                                             gamma, state)
        settings = solver._Settings(max_iter=50_000, tol=1e-4 * gamma,
                                    scan_every=scan_every)
        log = solver.run_definiteboost(constraints, state, settings)
        assert log["converged"]
        K = state.matrix()
        assert np.all(sq_dist(K, pairs) <= gamma * (1 + 1e-3))  # independent of the log
        results[scan_every] = log
    assert results[4]["dual_objective"][-1] < 1.0


def _factor_scan_cost(s, n_points, n_pairs, rank):
    """The per-iteration cost the rule minimises (units of r^2), written out."""
    scan = n_points + n_pairs / rank
    return scan if s == 1 else max(64, 8 * s) + scan / s


@pytest.mark.parametrize("n_pairs, n_points, rank", [(4000, 898, 64), (4000, 358, 100),
                                                     (20_000, 3000, 30)])
def test_factor_scan_interval_is_the_least_cost_one(n_pairs, n_points, rank):
    """Low-rank mode with more pairs than points (the metric learners): the
    scan interval minimises the cost model of its docstring."""
    s = solver._factor_scan_interval(n_pairs, n_points, rank)
    costs = {t: _factor_scan_cost(t, n_points, n_pairs, rank) for t in range(1, 2000)}
    assert costs[s] == pytest.approx(min(costs.values()))
    assert s > 1
    # small problems keep the paper's scan at every step
    assert solver._factor_scan_interval(300, 75, 4) == 1


def test_low_rank_working_set_converges_where_every_constraint_holds(monkeypatch):
    """Through the working set (a scan every few steps, forced here on a small
    problem), the low-rank fit still stops only where every constraint holds,
    checked on the kernel itself, as the scan at every step does."""
    rng = np.random.default_rng(3)
    n, families = 40, np.arange(40) % 4
    factor = np.column_stack([np.eye(4)[families], 0.3 * rng.normal(size=(n, 2))])
    same = np.flatnonzero(families[:, None] == families[None, :])
    a, b = np.divmod(rng.choice(same, size=600), n)
    pairs = np.column_stack([a, b])[a != b][:300]
    assert len(pairs) > n
    trace = float(np.sum(factor ** 2))
    gamma = 0.1 * 2 * trace / n  # a tenth of about the mean squared distance
    intervals = []
    original = solver._factor_scan_interval
    monkeypatch.setattr(solver, "_factor_scan_interval",
                        lambda *args: intervals.append(original(*args)) or intervals[-1])
    kernels = {}
    for always_up_to in (0, 1 << 40):  # working set; scan at every step
        monkeypatch.setattr(solver, "_SCAN_ALWAYS_UP_TO", always_up_to)
        K, log = definiteboost_pairs(pairs, prior_factor=factor, gamma=gamma,
                                     trace=trace, max_iter=20_000)
        assert log["converged"]
        assert np.all(sq_dist(K, pairs) <= gamma * (1 + 1e-2))  # tol: 1 % of gamma
        kernels[always_up_to] = K
    assert intervals[0] > 1 and intervals[1] == 1
    assert np.trace(kernels[0]) == pytest.approx(trace)


def test_auto_gamma_path_stops_at_the_first_gamma_it_cannot_meet():
    """Similar pairs a ~ b ~ c with a, c dissimilar: below a quarter of
    gamma_dissimilar (the prior's mean) no kernel meets them (triangle
    inequality: d(a, c)^2 <= 4 gamma). The path fits 0.3 of the mean
    (feasible), then 0.1 (not: the run ends unconverged) and stops there: a
    smaller gamma only tightens the constraints that failed."""
    n_triangles = 40
    d = 3 * n_triangles
    a = 3 * np.arange(n_triangles)
    pairs = np.r_[np.column_stack([a, a + 1]), np.column_stack([a + 1, a + 2]),
                  np.column_stack([a, a + 2])]
    y = np.r_[np.ones(2 * n_triangles), -np.ones(n_triangles)]
    mean = 2.0 / d  # the identity prior's mean squared distance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostKernel(n_objects=d, random_state=0).fit(pairs, y)
    assert_allclose(model.gamma_path_, [0.3 * mean, 0.1 * mean])
    assert model.gamma_ == pytest.approx(0.3 * mean) and model.converged_
    with pytest.warns(ConvergenceWarning):
        tight = DefiniteBoostKernel(n_objects=d, gamma=0.1 * mean,
                                    validation_fraction=None).fit(pairs, y)
    assert not tight.converged_
    K = tight.kernel_
    assert np.any(sq_dist(K, pairs[y < 0]) < mean) or np.any(sq_dist(K, pairs[y > 0])
                                                            > 0.1 * mean)


@pytest.mark.parametrize("reverse", [False, True], ids=["(a, b)", "(b, a)"])
def test_contradicting_labels_are_named_in_the_warning(reverse):
    """Found by the new-user audit: a pair labelled similar and dissimilar ran
    to "the constraints are infeasible" without saying which or what to do."""
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], [7, 7, 6])
    pairs = rng.integers(0, 20, size=(200, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    signs = np.where(labels[pairs[:, 0]] == labels[pairs[:, 1]], 1, -1)
    extra = pairs[:1, ::-1] if reverse else pairs[:1]
    contradicting = (np.r_[pairs, extra], np.r_[signs, -signs[:1]])
    a, b = sorted(pairs[0])
    with pytest.warns(ConvergenceWarning, match=(
            rf"1 pair\(s\) of objects are labelled both similar and dissimilar, e.g. "
            rf"objects_\[{a}\] and objects_\[{b}\]: .*give slack")):
        DefiniteBoostKernel(n_objects=20, random_state=0, validation_fraction=None).fit(
            *contradicting)
    # none named where there is none; soft constraints take them as noise
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        DefiniteBoostKernel(n_objects=20, random_state=0, slack=1.0).fit(*contradicting)


def test_non_convergence_offers_slack_only_to_hard_constraints():
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 20, (300, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    signs = np.where(pairs.sum(axis=1) % 2 == 0, 1, -1)
    for slack, offered in ((None, True), (0.001, False)):
        with pytest.warns(ConvergenceWarning) as record:
            DefiniteBoostKernel(n_objects=20, random_state=0, validation_fraction=None,
                                max_iter=50, slack=slack).fit(pairs, signs)
        messages = " ".join(str(w.message) for w in record
                            if issubclass(w.category, ConvergenceWarning))
        assert ("give slack" in messages) == offered, messages
