"""The batch fit's spectral prior rank, chosen by the held-out loss of the
kernel fitted from it: checked against independent fits at each rank and a
naive dense computation of their held-out errors."""

import numpy as np
import pytest
from test_meg_batch import _family_table

from megkernel._numerics.state import ExponentState
from megkernel._solvers.meg_batch import fit_batch
from megkernel._solvers.spectral_prior import spectral_prior, within_noise


def _table(**kwargs):
    ids, table, _ = _family_table(**kwargs)
    index = {name: k for k, name in enumerate(ids)}
    pairs = np.column_stack([table["a"].map(index), table["b"].map(index)])
    return len(ids), pairs, table["sq"].to_numpy()


def _fit(d, pairs, y, **kwargs):
    return fit_batch(
        pairs, y, prior=ExponentState.identity(d), spectral=True, random_state=0, **kwargs
    )


def _held_out_errors(fit, pairs, y):
    """Squared errors of the training run's kernel on the held-out pairs (dense formula)."""
    kernel = fit.training.trace * fit.training.state.matrix()
    a, b = pairs[fit.held_pairs].T
    return (kernel[a, a] + kernel[b, b] - 2 * kernel[a, b] - y[fit.held_pairs]) ** 2


def test_within_noise_is_one_standard_error_of_the_paired_difference():
    rng = np.random.default_rng(0)
    reference = rng.random(400)
    difference = rng.normal(size=400)
    se = np.std(difference) / np.sqrt(400)
    centred = difference - difference.mean()
    assert within_noise(reference + centred + 0.9 * se, reference)
    assert not within_noise(reference + centred + 1.1 * se, reference)
    assert within_noise(reference - 5.0, reference)  # better is within noise
    assert not within_noise(np.zeros(0), np.zeros(0))  # no pairs, no evidence


def test_the_prior_records_each_ranks_held_out_errors():
    """Each rank scanned keeps the held-out squared errors of its best
    iterate (the race's noise is measured on them); the scan and its choice
    are unchanged by the recording."""
    d, pairs, y = _table(seed=1, d=100, fraction=0.05, noise=0.3)
    a, b = pairs.T
    held = np.random.default_rng(0).random(len(y)) < 0.2
    z = y / y.mean()
    prior = spectral_prior(d, a[~held], b[~held], z[~held], a[held], b[held], z[held])
    assert set(prior.errors) == {rank for rank, _ in prior.scores}
    for r, errors in prior.errors.items():
        assert errors.shape == (held.sum(),)
        assert errors.mean() == pytest.approx(
            min(s for (rank, _), s in prior.scores.items() if rank == r), rel=1e-12
        )
    best = min(prior.scores, key=prior.scores.get)
    assert prior.rank == best[0] and prior.imputations == best[1]


def test_the_rank_whose_fitted_kernel_predicts_held_out_pairs_best_is_kept():
    """On a sparse noisy table the prior's own held-out score prefers rank 1
    and a rank-2 prior within its noise; fitted, the rank-2 kernel predicts
    the held-out pairs better beyond noise (dense formula, independent fits
    at each rank), and the default fit is that rank-2 fit, bit for bit."""
    d, pairs, y = _table(seed=1, d=100, fraction=0.05, noise=0.3)
    default = _fit(d, pairs, y)
    fits = {r: _fit(d, pairs, y, ranks=(r,)) for r in (1, 2)}
    errors = {r: _held_out_errors(fit, pairs, y) for r, fit in fits.items()}
    for r, fit in fits.items():  # the naive errors are the fits' own held-out R^2
        r2 = 1 - errors[r].mean() / np.var(y[fit.held_pairs])
        assert r2 == pytest.approx(fit.validation_score, rel=1e-8)
    # the prior alone prefers rank 1 (its score before fitting) ...
    assert fits[1].prior_score > fits[2].prior_score
    # ... the fitted kernels prefer rank 2 beyond the held-out noise
    assert not within_noise(errors[1], errors[2])
    assert default.prior_rank == 2
    assert np.array_equal(default.state.exponent, fits[2].state.exponent)
    assert default.trace == fits[2].trace
    assert default.validation_score == fits[2].validation_score
    # the same pairs in another row order and orientation: the same answer
    order = np.random.default_rng(3).permutation(len(y))
    again = _fit(d, pairs[order][:, ::-1], y[order])
    assert again.prior_rank == 2
    assert np.array_equal(again.state.exponent, default.state.exponent)
