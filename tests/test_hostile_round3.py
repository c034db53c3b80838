"""Hostile inputs, round three: a batch fit continued on-line by every engine,
a prior that separates no objects, statistics and messages, long fits.

Hypothesis profiles as in ``test_hostile.py`` (``MEGKERNEL_HYPOTHESIS_PROFILE``:
``default`` quick, ``ci`` many more examples).
"""

from __future__ import annotations

import copy
import os
import re
import warnings

import numpy as np
import pytest
from conftest import quietly
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from megkernel import MEGKernelRegressor
from megkernel._engines import rank_one

_PROFILE = os.environ.get("MEGKERNEL_HYPOTHESIS_PROFILE", "default")
if _PROFILE not in ("default", "ci"):
    raise ValueError(f"MEGKERNEL_HYPOTHESIS_PROFILE must be 'default' or 'ci', got {_PROFILE!r}")
_CI = _PROFILE == "ci"


def _hostile(quick, ci):
    """Settings with ``quick`` examples in the default profile and ``ci`` in CI."""
    return settings(max_examples=ci if _CI else quick, deadline=None, print_blob=True,
                    derandomize=_CI,  # as test_hostile.py's ci profile
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


# -- 1. a batch fit in a subspace, continued on-line by every engine ------------

def _clustered_update(seed):
    """``(lam, z, s)``: a rank-one update of a spectrum of one cluster, a few ulps wide.

    The spectrum of a subspace fit's kernel: the isotropic complement is one
    eigenvalue many times over, equal to round-off.
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    base = -rng.uniform(1, 50)
    spread = int(rng.integers(1, 30))
    lam = np.sort(base + np.spacing(base) * rng.integers(0, spread, n))
    z = rng.normal(size=n) * np.exp(rng.normal(size=n) * rng.uniform(0, 3))
    s = rng.choice([-1, 1]) * 10.0 ** rng.uniform(-6, 0)
    return lam, z, float(s)


def _compiled_update(lam, z, s):
    """One update by the engine's compiled kernel: ``(info, lam', Q)`` (no fallback)."""
    n = lam.size
    basis = np.zeros((2, n))
    basis[0] = z  # the kernel's low-rank mode with rows (z, 0) and V = I: v = z
    lam = np.array(lam, dtype=float)
    _, _, rows, info = rank_one._run(lam, np.eye(n), np.zeros((n, n)), basis,
                                     np.array([0], dtype=np.intp),
                                     np.array([1], dtype=np.intp), np.empty(0),
                                     np.array([s]), 0.0, 1.0, np.empty(0), 0, 1)
    return info, lam, rows.T


@given(seed=st.integers(0, 2**32 - 1))
@example(seed=24587)  # the deflation chain's carried eigenvalue landed on a kept pole
@example(seed=29443)  # two poles a few ulps apart: LAPACK's root finder gave up
@_hostile(quick=60, ci=3000)
def test_rank_one_update_of_a_cluster_is_finite_and_exact(seed):
    """Deflating hundreds of equal eigenvalues into one used the product form of
    the rotated diagonal, ``d_p c^2 + d_j s^2`` with ``c^2 + s^2 = 1`` only to
    round-off: along the chain the carried eigenvalue drifted out of its
    cluster, onto the pole kept before it. Two equal poles, a division by zero
    in Gu & Eisenstat's eigenvectors, NaN eigenvectors with ``info = 0``; the
    next MEG prediction was NaN and its step spoiled the exact exponent
    (partial_fit after a subspace fit: "the exponent log W has non-finite
    entries ... learning rate, target or prior too large")."""
    lam, z, s = _clustered_update(seed)
    info, new_lam, Q = _compiled_update(lam, z, s)
    assert info == 0
    assert np.all(np.isfinite(new_lam)) and np.all(np.isfinite(Q))
    matrix = np.diag(lam) + s * np.outer(z, z)
    scale = max(np.abs(lam).max(), abs(s) * (z @ z))
    np.testing.assert_allclose(new_lam, np.linalg.eigvalsh(matrix), rtol=0,
                               atol=1e-13 * scale)
    np.testing.assert_allclose(Q.T @ Q, np.eye(lam.size), rtol=0, atol=1e-13)
    np.testing.assert_allclose(matrix @ Q, Q * new_lam, rtol=0, atol=1e-13 * scale)


def test_eigenvectors_of_a_root_on_a_pole_are_refused():
    """The last safeguard: eigenvectors that come out non-finite (a root on a
    pole) are reported, so that the engine re-anchors on the exact exponent
    (``info != 0``) instead of predicting NaN from them."""
    from megkernel._engines import _rank_one_kernels as kernels

    def eigenvectors(dk, roots):
        # The kernel's inputs as the secular solver leaves them: the deltas
        # dk_i - root_j (here given: "stored") and their reciprocals, the pole
        # reciprocals 1 / (dk_j - dk_i).
        k = dk.size
        delta = dk[:, None] - roots[None, :]
        with np.errstate(divide="ignore"):
            poles = 1.0 / (dk[None, :] - dk[:, None])
            inverse = 1.0 / delta
        return kernels._eigenvectors(dk, np.full(k, 0.5), delta, poles, inverse,
                                     np.empty(k), np.empty(k), roots, np.zeros(k),
                                     np.ones(k))

    # two equal poles: no secular equation
    assert eigenvectors(np.array([-1.0, 0.5, 0.5, 2.0]),
                        np.array([-0.5, 0.5, 1.0, 2.5])) is False
    assert eigenvectors(np.array([-1.0, 0.0, 0.5, 2.0]),
                        np.array([-0.9, 0.1, 0.6, 2.3])) is True


def _points(d, seed):
    """Points in a few planted families: a kernel of low rank plus noise."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.normal(size=(4, 5))
    return centres[rng.integers(0, 4, d)] + 0.3 * rng.normal(size=(d, 5))


def _pairs(d, n, rng):
    a = rng.integers(0, d, n)
    b = (a + 1 + rng.integers(0, d - 1, n)) % d
    return np.column_stack([a, b])


_FITTED = {}


def _subspace_fit(d, seed):
    """A batch fit in a subspace of 8 directions plus the isotropic complement
    (``SUBSPACE_FROM`` lowered to 50 objects, as the batch fit's tests do), cached."""
    key = (d, seed)
    if key not in _FITTED:
        import megkernel._solvers.meg_batch as meg_batch

        points = _points(d, seed)
        pairs = _pairs(d, 12 * d, np.random.default_rng(seed))
        y = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
        with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            patch.setattr(meg_batch, "SUBSPACE_FROM", 50)
            patch.setattr(meg_batch, "subspace_dimension", lambda n_objects: 8)
            patch.setattr(meg_batch, "SUBSPACE_GROWTH", 0)
            model = MEGKernelRegressor(random_state=0, method="eigh").fit(pairs, y)
        _FITTED[key] = model, points
    return _FITTED[key]


@given(d=st.sampled_from([60, 90]), fit_seed=st.integers(0, 1),
       seed=st.integers(0, 2**32 - 1), chunk=st.integers(1, 25),
       n_trials=st.integers(20, 120))
@_hostile(quick=8, ci=150)
def test_every_engine_continues_a_subspace_fit_to_round_off(d, fit_seed, seed, chunk,
                                                           n_trials):
    """partial_fit after a batch fit whose kernel is a subspace plus its isotropic
    complement (d - 8 equal eigenvalues): every engine continues it, and they
    agree with eigh's continuation to round-off (predictions and kernel)."""
    model, points = _subspace_fit(d, fit_seed)
    # the fit learned in a subspace: its complement is one isotropic eigenvalue
    eigenvalues = np.linalg.eigvalsh(model.kernel_)
    assert np.sum(np.isclose(eigenvalues, np.median(eigenvalues), rtol=1e-8)) >= d // 2
    lam = model.state_.eigenvalues
    assert np.sum(np.isclose(lam, np.median(lam), rtol=1e-12)) >= d - 8
    rng = np.random.default_rng(seed)
    pairs = _pairs(d, n_trials, rng)
    y = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
    y *= rng.lognormal(0.0, 0.3, n_trials)  # noisy targets: steps of both signs
    runs = {}
    for method in ("eigh", "rank-one", "lanczos"):
        continued = copy.deepcopy(model)
        continued.method = method
        predictions = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for start in range(0, n_trials, chunk):
                continued.partial_fit(pairs[start:start + chunk], y[start:start + chunk])
                predictions.append(continued.losses_[-len(y[start:start + chunk]):])
        runs[method] = continued, np.concatenate(predictions)
    reference, losses = runs["eigh"]
    K = reference.kernel_
    for method in ("rank-one", "lanczos"):
        other, other_losses = runs[method]
        np.testing.assert_allclose(other_losses, losses, rtol=1e-6,
                                   atol=1e-9 * float(np.max(losses, initial=0.0)))
        np.testing.assert_allclose(other.kernel_, K, rtol=0,
                                   atol=1e-8 * np.abs(K).max())


# -- 2. a prior that separates no objects ----------------------------------------

def _labelled_pairs(d, seed=0):
    rng = np.random.default_rng(seed)
    pairs = np.array([(i, j) for i in range(d) for j in range(i + 1, d)])
    return pairs, rng.random(len(pairs)), np.where(rng.random(len(pairs)) < 0.5, 1, -1)


@pytest.mark.parametrize("factor", [np.ones((12, 1)), np.full((12, 2), [3.0, -1.0]),
                                    1.0 + np.spacing(1.0) * np.arange(12)[:, None] % 2])
@pytest.mark.parametrize("make", [
    lambda F: MEGKernelRegressor(init_factor=F),
    lambda F: MEGKernelRegressor(init_factor=F, solver="online"),
    "partial_fit",
    "definiteboost",
])
def test_a_factor_of_the_constant_direction_is_refused_by_name(factor, make):
    """Only the constant direction (every object the same row): every pair is at
    squared distance 0 under the prior and no update moves. MEG returned a
    trace of ~1e33 from round-off with most predictions 0; DefiniteBoost
    refused it with an unrelated message about gamma."""
    from megkernel import DefiniteBoostKernel

    pairs, y, signs = _labelled_pairs(12)
    with pytest.raises(ValueError, match=r"init_factor gives every object the same row"):
        if make == "partial_fit":
            MEGKernelRegressor(init_factor=factor).partial_fit(pairs, y)
        elif make == "definiteboost":
            DefiniteBoostKernel(init_factor=factor).fit(pairs, signs)
        else:
            make(factor).fit(pairs, y)


def test_a_factor_that_separates_none_of_the_given_pairs_is_refused():
    """The factor separates object 0 only; no given pair has object 0."""
    from megkernel import DefiniteBoostKernel

    factor = np.ones((12, 2))
    factor[0, 1] = 5.0
    pairs, y, signs = _labelled_pairs(12)
    pairs, y, signs = pairs[11:], y[11:], signs[11:]  # the pairs (0, j) left out
    assert 0 not in pairs
    for fit in (lambda: MEGKernelRegressor(init_factor=factor).fit(pairs, y),
                lambda: MEGKernelRegressor(init_factor=factor).partial_fit(pairs, y),
                lambda: DefiniteBoostKernel(init_factor=factor).fit(pairs, signs)):
        with pytest.raises(ValueError, match=r"none of the 55 given pairs of distinct objects"
                                             r" has a positive squared distance"):
            fit()
    # one separated pair is enough to learn from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGKernelRegressor(init_factor=factor).fit(
            np.vstack([pairs, [[0, 1]]]), np.append(y, 1.0))
    assert np.isfinite(model.trace_) and model.trace_ < 1e6


def test_a_factor_with_distinct_rows_still_fits():
    rng = np.random.default_rng(1)
    pairs, y, signs = _labelled_pairs(12)
    factor = np.column_stack([np.ones(12), rng.normal(size=(12, 2))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGKernelRegressor(init_factor=factor).fit(pairs, y)
    assert np.all(np.isfinite(model.predict(pairs)))


# -- 3. statistics and messages ---------------------------------------------------

@pytest.mark.parametrize("value", [7.3, 0.1, 123.456, 1e-7, 3e5])
def test_constant_held_out_targets_have_no_r2_whatever_their_value(value):
    """Equal targets in units that are not a power of two leave a variance of
    round-off: R^2 came out as a ratio to it (-3.0, -2.7e30) where the docs
    promise NaN."""
    from megkernel._solvers.holdout import r2_score

    pairs = np.array([(i, j) for i in range(16) for j in range(i + 1, 16)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MEGKernelRegressor(random_state=0).fit(pairs, np.full(len(pairs), value))
    assert np.isnan(model.validation_score_) and np.isnan(model.prior_score_)
    z = np.full(30, value) / 3.7  # equal to round-off after a change of units
    assert np.isnan(r2_score(1e-40, z))
    assert np.isnan(r2_score(0.0, np.zeros(0)))
    spread = value * (1.0 + 1e-3 * np.arange(30))  # a real spread still scores
    assert r2_score(0.0, spread) == 1.0
    assert np.isfinite(r2_score(1e300, np.array([1e200, -1e200])))  # no overflow
    # subnormal targets against a loss of ordinary size: -inf, without a RuntimeWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert r2_score(np.float64(0.0625), np.array([0.0] + [5e-324] * 15)) == -np.inf


def test_thresholds_the_library_chose_are_said_to_be_chosen():
    """gamma_dissimilar='auto' (the farthest observed distances) beyond the
    reach of a kernel of the given trace was reported as if the user set it
    ("gamma_dissimilar=5.897 can never hold")."""
    from megkernel import DefiniteBoostKernel

    rng = np.random.default_rng(0)
    points = rng.normal(size=(20, 2))
    pairs = np.array([(i, j) for i in range(20) for j in range(i + 1, 20)])
    sq = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"gamma_dissimilar='auto' chose [0-9.]+, which "
                                             r"can never hold.*Give gamma_dissimilar"):
            DefiniteBoostKernel(trace=1.0).fit(pairs, sq)
        with pytest.raises(ValueError, match=r"^gamma_dissimilar=1\.99 can never hold"):
            DefiniteBoostKernel(trace=0.5, gamma_dissimilar=1.99).fit(pairs[:40],
                                                                    np.tile([1, -1], 20))


def test_said_names_given_and_chosen_thresholds():
    from megkernel._solvers.definiteboost_rules import Chosen, said

    assert said("gamma", 0.25) == "gamma=0.25"
    assert said("gamma", Chosen(0.25)) == "gamma ('auto' chose 0.25)"
    assert said("gamma", Chosen(0.25), clause=True) == "gamma='auto' chose 0.25, which"


def test_an_auto_threshold_that_is_not_positive_is_not_blamed_on_the_user(monkeypatch):
    """An "auto" gamma of 0 was refused as "gamma must be positive and finite,
    got ..." as if the user had given it."""
    import megkernel._solvers.definiteboost_rules as rules
    from megkernel._numerics.state import ExponentState

    monkeypatch.setattr(rules, "prior_mean_sq_distance", lambda state: 0.0)
    with pytest.raises(ValueError, match=r"^gamma='auto' chose 0 from the prior's mean "
                                         r"squared distance 0, which is not a positive"):
        rules.pair_thresholds(ExponentState.identity(4), np.array([1, -1]), trace=1.0)


@pytest.mark.parametrize("make", ["meg", "definiteboost", "factor"])
def test_a_complex_prior_is_refused_by_name(make):
    """A complex Hermitian init lost its imaginary part with only numpy's
    ComplexWarning."""
    from megkernel import DefiniteBoostKernel

    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6)) + 1j * rng.normal(size=(6, 6))
    H = A @ A.conj().T + 6 * np.eye(6)
    pairs, y, signs = _labelled_pairs(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        if make == "meg":
            with pytest.raises(ValueError, match=r"^init is complex"):
                MEGKernelRegressor(init=H).fit(pairs, y)
        elif make == "definiteboost":
            with pytest.raises(ValueError, match=r"^init is complex"):
                DefiniteBoostKernel(init=H).fit(pairs, signs)
        else:
            with pytest.raises(ValueError, match=r"^init_factor is complex"):
                MEGKernelRegressor(init_factor=A).fit(pairs, y)


def test_a_complex_matrix_with_zero_imaginary_part_is_its_real_part():
    from megkernel._numerics.spectral import check_symmetric

    M = np.array([[2.0, 1.0], [1.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(check_symmetric(M + 0j), M)
    with pytest.raises(ValueError, match=r"^K must be a numeric matrix"):
        check_symmetric([["a", "b"], ["c", "d"]], name="K")


@pytest.mark.parametrize("labels", [
    [0, 1] * 5 + [np.nan, 1],
    ["a", "b"] * 5 + [None, "a"],
    "series",
])
def test_missing_class_labels_skip_the_verdict_with_a_warning(labels):
    """KernelDistances.fit(X, y) with a NaN or None label skipped its verdict
    without a word. It still skips it (the verdict is advice; the kernel is
    fitted as usual), and says why, naming the row."""
    import pandas as pd

    from megkernel import KernelDistances

    ids = [f"o{i}" for i in range(12)]
    points = np.random.default_rng(0).normal(size=(12, 2))
    pairs = [(ids[i], ids[j]) for i in range(12) for j in range(i + 1, 12)]
    targets = [float(((points[i] - points[j]) ** 2).sum())
               for i in range(12) for j in range(i + 1, 12)]
    row = "10"
    if labels == "series":
        labels = pd.Series([0, 1] * 6, index=[f"r{i}" for i in range(12)], dtype=float)
        labels["r3"] = np.nan
        row = "'r3'"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = KernelDistances(given_squared=True, pairs=pairs, targets=targets,
                               learner=MEGKernelRegressor(random_state=0)).fit(ids, labels)
    assert step.verdict_ is None
    messages = [str(w.message) for w in caught]
    assert any("missing class label" in m and f"at row {row}:" in m and "no verdict" in m
               for m in messages), messages
    # what keep_given="auto" then does (it decides from the labels), said and done
    assert any("keep_given='auto' chooses as without labels" in m for m in messages), messages
    assert step.keeps_given_ == "blend"
    assert step.transform(ids[:3]).shape == (3, 12)


# -- 4. a long fit says so up front ------------------------------------------------

class _FakeClock:
    """A clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def _slow_warnings(caught):
    return [str(w.message) for w in caught if "projections took" in str(w.message)]


def test_a_run_projected_to_take_long_says_so_once(monkeypatch):
    """The rule on a fake clock (read once per projection): one note, with the
    estimate and the remedies, for a run whose pace takes it beyond
    SLOW_RUN_SECONDS; none for a run within them."""
    from megkernel._solvers import definiteboost_projections as projections
    from megkernel._solvers import slow_runs

    def run(pace, note, n_done):
        monkeypatch.setattr(slow_runs, "clock", _FakeClock(pace))
        note = note()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for done in range(1, n_done):
                note(done)
        return _slow_warnings(caught)

    # 0.002 s a projection: 25,000 take 50 s
    messages = run(0.002, lambda: projections.SlowRunNote(
        max_iter=projections.ChosenCount(25_000), n_constraints=1000), 5000)
    assert len(messages) == 1, messages
    assert re.match(r"DefiniteBoost: 150\d projections took 3\.0 s; at this pace the 25000 "
                    r"projections max_iter='auto' chose for 1000 constraints take about "
                    r"50 s if the run does not converge first", messages[0]), messages
    assert "a smaller max_iter, slack=" in messages[0] and "a larger tol" in messages[0]
    # 0.5 s a projection: 100 take 50 s
    assert len(run(0.5, lambda: projections.SlowRunNote(100, 10), 100)) == 1
    # 0.01 s a projection: 1000 take 10 s, said never, however long the run
    assert not run(0.01, lambda: projections.SlowRunNote(1000, 10), 1000)


def test_a_short_run_says_nothing_before_the_first_seconds(monkeypatch):
    from megkernel._solvers import definiteboost_projections as projections
    from megkernel._solvers import slow_runs

    monkeypatch.setattr(slow_runs, "clock", _FakeClock(0.01))
    note = projections.SlowRunNote(max_iter=10**9, n_constraints=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for done in range(1, 100):  # 2 s in all: before SLOW_RUN_AFTER
            note(done)
    assert not _slow_warnings(caught)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_slow_definiteboost_fit_warns_up_front_without_verbose(monkeypatch, lazy):
    """Both runs that time their projections: the Python loop, and the lazy run
    (method="auto" on a dense state with many constraints, here from 50 objects on)."""
    from megkernel import DefiniteBoostKernel
    from megkernel._solvers import definiteboost_lazy, slow_runs
    from megkernel._solvers import definiteboost_projections as projections

    d = 60 if lazy else 12
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(1.0))  # a second per read
    monkeypatch.setattr(definiteboost_lazy, "LAZY_FROM", 50)
    monkeypatch.setattr(projections, "_SCAN_ALWAYS_UP_TO", 0)  # scans between working sets
    runs = []
    run_lazy = projections.run_lazy
    monkeypatch.setattr(projections, "run_lazy",
                        lambda *args: runs.append(1) or run_lazy(*args))
    rng = np.random.default_rng(0)
    points = rng.normal(size=(d, 2))
    pairs = _pairs(d, 200, rng)
    sq = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
    signs = np.where(sq < np.median(sq), 1, -1)
    signs[rng.random(len(signs)) < 0.1] *= -1  # a tenth flipped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DefiniteBoostKernel(random_state=0, validation_fraction=None,
                            max_iter=200).fit(pairs, signs)
    assert bool(runs) == lazy
    messages = _slow_warnings(caught)
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert "at this pace the 200 projections of max_iter=200 (" in messages[0]


def test_reaching_max_iter_says_what_was_reached():
    """The ConvergenceWarning of a run that reached max_iter='auto' says so, and
    how far it got: the share of constraints met and the largest violation."""
    from megkernel._solvers.definiteboost_projections import ChosenCount, _warn_outcome

    log = {"infeasible": False, "converged": False, "n_violated": 150,
           "multipliers": np.zeros(1000), "max_violation": 0.25}
    with pytest.warns(Warning, match=r"did not converge in the 25000 iterations "
                                     r"max_iter='auto' chose: 850 of 1000 constraints met "
                                     r"\(85\.0 %\); 150 constraints still violated "
                                     r"\(largest violation "
                                     r"0\.25\)"):
        _warn_outcome(log, ChosenCount(25000))
    with pytest.warns(Warning, match=r"did not converge in 40 iterations: 850 of 1000"):
        _warn_outcome(log, 40)
    from megkernel._solvers.definiteboost_rules import auto_max_iter

    assert isinstance(auto_max_iter(1000), ChosenCount)


# -- text where numbers belong ---------------------------------------------------

@pytest.mark.parametrize("matrix, place, shown", [
    (np.array([["0", "1", "4"], ["1", "0", "1"], ["4", "1", "0"]], dtype=object),
     "row 0, column 0", "'0'"),
    ([[0.0, 1.0, "n/a"], [1.0, 0.0, 1.0], ["n/a", 1.0, 0.0]], "row 0, column 2", "'n/a'"),
])
def test_a_distance_matrix_of_text_is_refused_naming_its_place(matrix, place, shown):
    from megkernel import KernelDistances

    with pytest.raises(ValueError, match=f"{place} holds the text {shown}"):
        KernelDistances(distances=matrix, objects=["a", "b", "c"]).fit(["a", "b", "c"])


def test_text_targets_and_a_labelled_table_are_named_by_the_users_labels():
    import pandas as pd

    from megkernel import KernelDistances

    table = pd.DataFrame([[0.0, 1.0, "4"], [1.0, 0.0, 1.0], ["4", 1.0, 0.0]],
                         index=list("abc"), columns=list("abc"))
    with pytest.raises(ValueError, match="row 'a', column 'c' holds the text '4'"):
        KernelDistances(distances=table).fit(["a", "b", "c"])
    with pytest.raises(ValueError, match="targets must hold numbers.*row 1 holds the text"):
        KernelDistances(pairs=[["a", "b"], ["b", "c"]], targets=[1.0, "2.5"]).fit(["a", "b"])
    # numbers, and None / NaN for a missing one, still pass
    fitted = KernelDistances(distances=[[0, 1, None], [1, 0, 1], [None, 1, 0]],
                             objects=["a", "b", "c"]).fit(["a", "b", "c"])
    assert fitted.transform(["a"])[0, 1] == 1.0


def test_one_range_check_for_every_scale():
    """Traces, units and constraint scales share one predicate, in_scale_range."""
    from megkernel._numerics.limits import MAX_SCALE, MIN_SCALE
    from megkernel._numerics.validation import in_scale_range

    assert in_scale_range(1.0) and in_scale_range(MIN_SCALE) and in_scale_range(MAX_SCALE)
    values = [0.0, MIN_SCALE / 2, 2 * MAX_SCALE, np.inf, np.nan, -1.0, 1e-5]
    assert in_scale_range(values).tolist() == [False] * 6 + [True]


# -- plain distances (squared=False) on every path -------------------------------

def _plain_distances(seed=0, d=10):
    rng = np.random.default_rng(seed)
    features = 3.0 * rng.normal(size=(d, 3))
    K = features @ features.T
    pairs = rng.integers(0, d, size=(400, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    a, b = pairs.T
    return K, pairs, np.sqrt(K[a, a] + K[b, b] - 2 * K[a, b])


def test_partial_fit_squares_plain_distances_on_its_fast_path_too():
    """A later call with plain ndarrays (the fast path) learns what a list does."""
    from megkernel import MEGKernelRegressor

    K, pairs, distances = _plain_distances()
    kernels = []
    for convert in (np.asarray, lambda array: array.tolist()):
        model = MEGKernelRegressor(n_objects=10, squared=False, trace=float(np.trace(K)),
                                   learning_rate=0.1)
        model.partial_fit(pairs[5:], distances[5:])
        model.partial_fit(convert(pairs[:5]), convert(distances[:5]))
        kernels.append(model.kernel_)
    np.testing.assert_allclose(kernels[0], kernels[1], rtol=1e-12, atol=1e-12)


def test_a_stream_of_plain_distances_takes_the_one_shot_fits_trace():
    from megkernel import KernelDistances, MEGKernelRegressor

    K, pairs, distances = _plain_distances(seed=1)
    chunks = [(pairs[i:i + 100], distances[i:i + 100]) for i in range(0, len(pairs), 100)]
    one_shot = MEGKernelRegressor(n_objects=10, squared=False, solver="online").fit(
        pairs, distances)
    streamed = KernelDistances(learner=MEGKernelRegressor(n_objects=10, squared=False),
                               pairs=lambda: iter(chunks)).fit(np.arange(10))
    assert np.trace(streamed.kernel_) == pytest.approx(one_shot.trace_, rel=1e-9)


def test_integers_beyond_an_index_are_refused_or_taken_as_declared_ids():
    from megkernel import DefiniteBoostKernel, MEGKernelRegressor

    huge = [[0, 2**70]] * 5
    for make in (MEGKernelRegressor, DefiniteBoostKernel):
        with pytest.raises(ValueError, match="too large for an object index.*objects="):
            make().fit(huge, np.ones(5))
    model = quietly(MEGKernelRegressor(objects=[0, 2**70, 5]).fit,
                    [[0, 2**70], [5, 0], [2**70, 5]] * 5, np.ones(15))
    assert model.objects_.tolist() == [0, 2**70, 5]
    assert model.predict([[0, 2**70]]).shape == (1,)


# -- a NaN distance is a missing pair, by one rule ------------------------------

def test_a_nan_distance_is_missing_with_or_without_a_learner():
    import pandas as pd

    from megkernel import KernelDistances

    rng = np.random.default_rng(0)
    ids = np.array(list("abcdefghij"), dtype=object)
    a, b = rng.integers(0, 10, (2, 80))
    keep = a != b
    a, b = a[keep], b[keep]
    targets = rng.uniform(1, 2, len(a))
    targets[3] = np.nan
    pairs = np.column_stack([ids[a], ids[b]])
    learner = MEGKernelRegressor(random_state=0)
    with_nan = quietly(KernelDistances(given_squared=True,
                                       learner=learner, pairs=pairs, targets=targets).fit, ids)
    rest = np.flatnonzero(~np.isnan(targets))
    without = quietly(KernelDistances(given_squared=True, learner=learner, pairs=pairs[rest],
                                      targets=targets[rest]).fit, ids)
    np.testing.assert_array_equal(with_nan.distances_, without.distances_)
    table = quietly(KernelDistances(given_squared=True, learner=learner, pairs=pd.DataFrame(pairs),
                                    targets=pd.Series(targets)).fit, ids)
    np.testing.assert_array_equal(table.distances_, without.distances_)


@pytest.mark.parametrize("y, message", [
    ([1.0, np.inf, 2.0], r"infinite squared distance \(inf\) at row 1"),
    (["1", "2", "3"], "holds the text '1' at row 0"),
    ([1.0, -2.0, 3.0], r"negative squared distance \(-2\) at row 1"),
])
def test_the_learner_names_the_row_of_a_bad_target(y, message):
    with pytest.raises(ValueError, match=message):
        MEGKernelRegressor(n_objects=3).fit([[0, 1], [1, 2], [0, 2]], y)


def test_a_matrix_given_as_pairs_or_missing_targets_are_named_before_the_learner():
    from megkernel import KernelDistances

    matrix = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="square matrix: give it as distances="):
        KernelDistances(pairs=matrix, learner=MEGKernelRegressor()).fit([0, 1, 2])
    with pytest.raises(ValueError, match="learns from distances: give targets="):
        KernelDistances(pairs=[[0, 1], [1, 2]], learner=MEGKernelRegressor()).fit([0, 1, 2])
