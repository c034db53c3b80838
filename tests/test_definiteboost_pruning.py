"""The verdict of DefiniteBoost from distances is pruned: a losing projection stops early.

``run_definiteboost`` hands ``on_checkpoint`` the state, current, after the
checkpoint iterations in each of its three loops (plain, lazy, fused), and a
raise there ends the run. ``DefiniteBoostKernel`` from distances scores its
verdict's run on the held-out pairs at doubling checkpoints and stops it once
the held-out pairs rank worse than under the prior at two checkpoints in a
row: the prior it returns is the one the full run returned, with far fewer
projections. It also stops once two checkpoints in a row rank them no better
beyond noise: where the projection wins, the held-out pairs choose the run's
length (the checkpoint that ranked them best), and the kernel is refitted on
every pair for as many projections.
"""

import numpy as np
import pytest
from conftest import clustered_pair_table
from scipy.linalg import eigh
from sklearn.exceptions import ConvergenceWarning

import megkernel._solvers.definiteboost_projections as projections
import megkernel._solvers.definiteboost_rules as rules
from megkernel import DefiniteBoostKernel, NoImprovementWarning
from megkernel._numerics.state import prior_state
from megkernel._solvers.definiteboost_rules import fit_pair_constraints


class _Stop(Exception):
    pass


def _pairs(d, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, d, n)
    b = (a + rng.integers(1, d, n)) % d
    return np.column_stack([a, b]), np.ones(n)  # similar pairs: a feasible problem


def _exact_sq_distances(state, a, b):
    """Squared distances of trace-one ``W`` from the state's exponent alone (eigh)."""
    if state.basis is None:
        lam, vecs = eigh(state.exponent)
        rows = vecs * np.sqrt(np.exp(lam - lam.max()) / np.exp(lam - lam.max()).sum())
        diff = rows[a] - rows[b]
    else:  # W = P exp(B) P^T / tr
        lam, vecs = eigh(state.exponent)
        weights = np.exp(lam - lam.max()) / np.exp(lam - lam.max()).sum()
        diff = (state.basis[a] - state.basis[b]) @ (vecs * np.sqrt(weights))
    return (diff * diff).sum(axis=1)


@pytest.mark.parametrize("loop", ["plain", "lazy", "fused"])
def test_checkpoints_see_the_current_state_and_may_end_the_run(loop, monkeypatch):
    d = 420 if loop == "lazy" else 30
    # the lazy loop scans its violations every few projections: only with many pairs
    pairs, signs = _pairs(d, 20000 if loop == "lazy" else 3 * d, seed=1)
    if loop == "fused":
        factor = np.random.default_rng(2).normal(size=(d, 6))
        state, method = prior_state(None, None, factor), "rank-one"
    else:
        state, method = prior_state(d, None, None), ("auto" if loop == "lazy" else "eigh")
    seen = []

    def on_checkpoint(t):
        got = state.pair_sq_distances(pairs[:5, 0], pairs[:5, 1])
        np.testing.assert_allclose(
            got, _exact_sq_distances(state, pairs[:5, 0], pairs[:5, 1]), rtol=1e-8
        )
        seen.append(t)
        if len(seen) == 2:
            raise _Stop

    projected = []
    callback = None if loop == "fused" else (lambda t, record: projected.append(t))
    ran = []  # which loop ran: the loop under test
    for name in ("run_lazy", "run_fused"):
        real = getattr(projections, name)
        monkeypatch.setattr(projections, name,
                            lambda *args, _real=real, _name=name, **kw: (
                                ran.append(_name), _real(*args, **kw))[1])
    with pytest.raises(_Stop):
        fit_pair_constraints(
            state,
            pairs,
            signs,
            max_iter=400,
            tol=-np.inf,
            method=method,
            callback=callback,
            checkpoints=[2, 5, 50],
            on_checkpoint=on_checkpoint,
            warn=False,
        )
    assert seen == [2, 5]
    assert ran == ({"plain": [], "lazy": ["run_lazy"], "fused": ["run_fused"]}[loop])
    if callback is not None:
        assert projected[-1] == 5  # the run ended where the checkpoint raised


def _noisy_table(n, frac, noise, separation):
    ids, _, _, table = clustered_pair_table(n, 0, frac, spread=1.0, separation=separation)
    y = table["sq"].to_numpy() * np.exp(noise * np.random.default_rng(1).normal(size=len(table)))
    return ids, table[["a", "b"]], y


def test_a_losing_projection_is_pruned_and_the_prior_returned():
    # noisy distances: the projection onto their closest and farthest tenth ranks
    # the held-out pairs worse than the prior
    ids, X, y = _noisy_table(120, 0.5, 0.5, 2.0)
    model = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances")
    with pytest.warns(NoImprovementWarning, match="the run stopped there"):
        model.fit(X, y)
    assert model.validation_score_ == model.prior_score_  # the prior returned
    assert model.gamma_scores_[0] < model.prior_score_
    assert model.n_iter_ in rules.prune_checkpoints(10**9)
    assert model.n_iter_ <= 4 * rules.PRUNE_FIRST_CHECKPOINT

    # the prior returned is the one the unpruned verdict returned
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rules, "prune_checkpoints", lambda max_iter: [])
        full = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances")
        with pytest.warns(NoImprovementWarning, match="returned its prior"):
            full.fit(X, y)
    assert full.n_iter_ > 10 * model.n_iter_
    np.testing.assert_array_equal(model.kernel_, full.kernel_)


def test_a_winning_projections_length_is_chosen_by_the_held_out_pairs():
    # the projection ranks the held-out pairs worse than the prior (0.681)
    # after 64 projections, better after 128 (0.685), 256 (0.744), 320 (0.706),
    # 448 (0.756) and 512 (0.748). At the stop (128) its gain is within the
    # noise of their number (0.07), so the prior is returned; with a smaller
    # noise (0.02) the run stops after 448 (128 and 320, 448 within noise of
    # the last rise) and wins: the kernel is refitted on every pair for the
    # best checkpoint's length, 448
    ids, X, y = _noisy_table(100, 0.6, 1.0, 1.0)
    checkpoints = [128, 256, 320, 448]
    refit = "the held-out pairs ranked best|infeasible"  # the refit stops at either
    with pytest.warns(NoImprovementWarning, match="better by less than their noise"):
        kept = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances").fit(X, y)
    assert kept.validation_score_ == kept.prior_score_ < kept.gamma_scores_[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rules, "auc_noise", lambda auc, n_closer, n_farther: 0.02)
        patch.setattr(rules, "prune_checkpoints", lambda max_iter: checkpoints)
        model = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances")
        with pytest.warns(ConvergenceWarning, match=refit) as said:
            model.fit(X, y)
        # the same length chosen whatever the rows' order
        order = np.random.default_rng(3).permutation(len(y))
        shuffled = X.iloc[order].rename(columns={"a": "b", "b": "a"})[["a", "b"]]
        again = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances")
        with pytest.warns(ConvergenceWarning, match=refit):
            again.fit(shuffled, y[order])
        patch.setattr(rules, "prune_checkpoints", lambda max_iter: [])
        full = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances")
        with pytest.warns(ConvergenceWarning, match="infeasible"):
            full.fit(X, y)
    assert not any(issubclass(w.category, NoImprovementWarning) for w in said)
    assert model.validation_score_ > model.prior_score_
    # the verdict's run to its stop, then the refit for the best checkpoint's length
    length = model.n_iter_ - checkpoints[-1]
    assert length == 448
    assert model.dual_objective_.size == length + 1
    assert model.n_iter_ < full.n_iter_
    assert again.n_iter_ == model.n_iter_
    np.testing.assert_array_equal(again.kernel_, model.kernel_)


def _scripted(scores, prior, noise):
    """Run ``_pruner`` on scripted checkpoint scores; return the exception or None."""
    it = iter(scores)
    on_checkpoint = rules._pruner(lambda: next(it), prior, lambda auc: noise)
    try:
        for t in rules.prune_checkpoints(10**9)[: len(scores)]:
            on_checkpoint(t)
    except rules._Pruned as stop:
        return stop
    return None


def test_a_run_stops_when_its_held_out_score_settles_and_keeps_the_best_checkpoint():
    # 64: beyond noise above the prior; 128, 256: within noise -> stop at 256
    stop = _scripted([0.95, 0.951, 0.9505, 0.99], prior=0.9, noise=0.01)
    assert (stop.n_iter, stop.best_iter, stop.best_score) == (256, 128, 0.951)
    # rising beyond noise at every checkpoint: never stopped
    assert _scripted([0.92, 0.94, 0.96, 0.98], prior=0.9, noise=0.01) is None
    # never above the prior: stopped after two checkpoints, no length chosen
    stop = _scripted([0.9, 0.899, 0.95], prior=0.9, noise=0.0)
    assert (stop.n_iter, stop.best_iter) == (128, 0)
    # below the prior twice in a row: pruned, whatever came before
    stop = _scripted([0.95, 0.85, 0.84], prior=0.9, noise=0.0)
    assert (stop.n_iter, stop.best_iter, stop.best_score) == (256, 64, 0.95)


def test_auc_noise_is_hanley_and_mcneils_standard_error():
    rng = np.random.default_rng(0)
    n1, n2 = 40, 60
    aucs = []
    for _ in range(4000):  # closer pairs' distances shifted below the farther ones'
        closer, farther = rng.normal(0.0, 1.0, n1), rng.normal(1.5, 1.0, n2)
        aucs.append(np.mean(closer[:, None] < farther[None, :]))
    aucs = np.asarray(aucs)
    noise = rules.auc_noise(aucs.mean(), n1, n2)
    assert 0.8 * aucs.std() < noise < 1.25 * aucs.std()
    assert rules.auc_noise(1.0, n1, n2) == 0.0
    assert rules.auc_noise(0.9, 4 * n1, 4 * n2) < rules.auc_noise(0.9, n1, n2)


def test_the_pruned_verdict_is_the_same_with_a_progress_bar_and_shuffled_rows(capsys):
    ids, X, y = _noisy_table(120, 0.5, 0.5, 2.0)
    with pytest.warns(NoImprovementWarning, match="the run stopped there"):
        quiet = DefiniteBoostKernel(objects=ids, random_state=0, y_kind="sq_distances").fit(X, y)
    order = np.random.default_rng(3).permutation(len(y))
    shuffled = X.iloc[order].rename(columns={"a": "b", "b": "a"})[["a", "b"]]
    with pytest.warns(NoImprovementWarning, match="the run stopped there"):
        shown = DefiniteBoostKernel(
            objects=ids, random_state=0, y_kind="sq_distances", verbose=1
        ).fit(shuffled, y[order])
    capsys.readouterr()
    assert shown.n_iter_ == quiet.n_iter_
    np.testing.assert_array_equal(shown.kernel_, quiet.kernel_)
