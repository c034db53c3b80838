"""MEGMetric's training length: its fold path in the one validation loop.

Mini-batch MEG over a fold's training pairs, advanced epoch by epoch and
scored at each checkpoint of :mod:`megkernel.metric._training_length`.
"""

from __future__ import annotations

import numpy as np

from .._solvers.metric_meg import MetricExponent, embedding, run_batches
from ._training_length import (
    _MIN_ITEMS,
    ELASTICITY,
    MAX_PASSES,
    doubling_checkpoints,
    validate_length,
)

__all__ = ["validate_epochs"]


class _EpochPath:
    """One fold of :func:`validate_epochs`.

    Mini-batch MEG over the fold's training pairs, advanced epoch by epoch
    (see :mod:`megkernel.metric._training_length`).
    """

    def __init__(self, scorer, coordinates, signs, targets, sides, prior, *,
                 learning_rate, batch_size, rng):
        self.scorer, self.coordinates = scorer, coordinates
        fold_pairs, fold_signs = scorer.train_pairs, scorer.train_signs
        self.diffs = coordinates[fold_pairs[:, 0]] - coordinates[fold_pairs[:, 1]]
        like = np.where(fold_signs > 0, np.argmax(signs > 0), np.argmax(signs < 0))
        self.targets, self.sides = targets[like], sides[like]  # functions of the sign
        self.exponent = MetricExponent.from_prior(prior)
        self.learning_rate, self.batch_size = learning_rate, batch_size
        self.rng, self.order, self.n_seen = rng, None, 0

    def score_at(self, epochs):
        stop = self.scorer.steps(epochs)
        _, self.order = run_batches(
            self.exponent, self.diffs, self.targets, self.sides,
            learning_rate=self.learning_rate, n_seen=self.n_seen,
            n_more=stop - self.n_seen, batch_size=self.batch_size, rng=self.rng,
            order=self.order)
        self.n_seen = stop
        return self.scorer.score(embedding(self.coordinates, self.exponent))


def validate_epochs(coordinates, pairs, targets, sides, signs, prior, *, learning_rate,
                    batch_size, rng, n_folds=2, max_epochs=MAX_PASSES, checkpoints=None,
                    patience=2, z=2.0, elasticity=ELASTICITY, min_items=_MIN_ITEMS,
                    classes=None):
    """How many epochs of mini-batch MEG: cross-validated over the training points.

    :func:`megkernel.metric._training_length.validate_length` with MEG's
    folds: each learns from the pairs among its training points from the
    prior ``prior`` (eigenvalues of the diagonal start) by
    :func:`megkernel._solvers.metric_meg.run_batches`, over the epochs of
    ``checkpoints`` (``None``: :func:`doubling_checkpoints` up to
    ``max_epochs``). Without a usable fold one epoch is run, as the paper's
    pass. ``classes``: as in ``validate_length`` (pairs drawn from labels,
    drawn again in each fold).

    Returns
    -------
    epochs : float
        The chosen checkpoint.
    log : dict
        As :func:`~megkernel.metric._training_length.validate_length`.
    """
    def make_path(scorer):
        return _EpochPath(scorer, coordinates, signs, targets, sides, prior,
                          learning_rate=learning_rate, batch_size=batch_size, rng=rng)

    epochs, log = validate_length(len(coordinates), pairs, signs, make_path,
                                  checkpoints=(doubling_checkpoints(max_epochs)
                                               if checkpoints is None else checkpoints),
                                  n_folds=n_folds, rng=rng, patience=patience, z=z,
                                  elasticity=elasticity, min_items=min_items,
                                  learner="MEGMetric", classes=classes,
                                  safety_net=f"max_iter (now {max_epochs:g} epochs)")
    return (1.0 if epochs is None else epochs), log
