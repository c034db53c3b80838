"""MEGMetric's training length and kind: its fold paths in the one validation loop.

Mini-batch MEG over a fold's training pairs, advanced epoch by epoch, or the
MEG ascent of the stochastic-neighbour objective over a fold's training
points, advanced iteration by iteration; scored at each checkpoint of
:mod:`megkernel._solvers.holdout`.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._warnings import warn_user
from .holdout import (
    _MIN_ITEMS,
    ELASTICITY,
    MAX_PASSES,
    PATIENCE_FROM,
    doubling_checkpoints,
    gain_is_real,
    validate_length,
)
from .metric_meg import (
    MetricExponent,
    embedding,
    pair_diffs,
    resolve_learning_rate,
    run_batches,
    targets_and_sides,
)
from .metric_pairs import component_codes
from .metric_soft_neighbors import (
    TEMPERATURES,
    SoftNeighborAscent,
    prior_temperature,
)

__all__ = ["PAIR_CLASSES", "SOFT_PAIRS", "soft_neighbor_checkpoints", "validate_epochs",
           "validate_kinds", "validate_soft_neighbors"]


class _EpochPath:
    """One fold of :func:`validate_epochs`.

    Mini-batch MEG over the fold's training pairs, advanced epoch by epoch
    (see :mod:`megkernel._solvers.holdout`).
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
        self.scores = {}  # a path met again (a race continued) does not recompute

    def score_at(self, epochs):
        if epochs not in self.scores:
            stop = self.scorer.steps(epochs)
            _, self.order = run_batches(
                self.exponent, self.diffs, self.targets, self.sides,
                learning_rate=self.learning_rate, n_seen=self.n_seen,
                n_more=stop - self.n_seen, batch_size=self.batch_size, rng=self.rng,
                order=self.order)
            self.n_seen = stop
            self.scores[epochs] = self.scorer.score(embedding(self.coordinates, self.exponent))
        return self.scores[epochs]


def validate_epochs(coordinates, pairs, targets, sides, signs, prior, *, learning_rate,
                    batch_size, rng, n_folds="auto", max_epochs=MAX_PASSES, checkpoints=None,
                    patience=2, z=2.0, elasticity=ELASTICITY, min_items=_MIN_ITEMS,
                    classes=None, looks_before=0, paths=None):
    """How many epochs of mini-batch MEG: cross-validated over the training points.

    :func:`megkernel._solvers.holdout.validate_length` with MEG's
    folds: each learns from the pairs among its training points from the
    prior ``prior`` (eigenvalues of the diagonal start) by
    :func:`megkernel._solvers.metric_meg.run_batches`, over the epochs of
    ``checkpoints`` (``None``: :func:`doubling_checkpoints` up to
    ``max_epochs``). Without a usable fold one epoch is run, as the paper's
    pass. ``classes``: as in ``validate_length`` (pairs drawn from labels,
    drawn again in each fold). ``paths``: a dict that keeps the folds'
    paths (by their order); a validation over the same folds (the same
    generator state) given it again continues each fold's trajectory where
    it stopped, with the generator it was drawing from, instead of running
    it again from the prior.

    Returns
    -------
    epochs : float
        The chosen checkpoint, times ``log["length_scale"]``.
    log : dict
        As :func:`~megkernel._solvers.holdout.validate_length`.
    """
    made = []

    def make_path(scorer):
        made.append(scorer)  # the folds come in the same order in every run
        if paths is None or len(made) not in paths:
            path = _EpochPath(scorer, coordinates, signs, targets, sides, prior,
                              learning_rate=learning_rate, batch_size=batch_size, rng=rng)
            if paths is None:
                return path
            paths[len(made)] = path
        return paths[len(made)]

    epochs, log = validate_length(len(coordinates), pairs, signs, make_path,
                                  checkpoints=(doubling_checkpoints(max_epochs)
                                               if checkpoints is None else checkpoints),
                                  n_folds=n_folds, rng=rng, patience=patience, z=z,
                                  elasticity=elasticity, min_items=min_items,
                                  learner="MEGMetric", classes=classes,
                                  safety_net=f"max_iter (now {max_epochs:g} epochs)",
                                  looks_before=looks_before)
    return (1.0 if epochs is None else epochs), log


def soft_neighbor_checkpoints(max_iter):
    """Return the iterations the soft-neighbour search scores: 0, 1, 2, 4, ..., ``max_iter``."""
    checkpoints, length = [0.0], 1.0
    while length < max_iter:
        checkpoints.append(length)
        length *= 2.0
    return checkpoints + [float(max_iter)]


class _SoftNeighborPath:
    """One fold of :func:`validate_soft_neighbors`.

    The monotone MEG ascent of the stochastic-neighbour objective over the
    fold's training points (its own temperature, by the final fit's rule:
    ``temperature`` times :func:`prior_temperature` of its points), scored
    on the held-out points after each number of iterations. Given pairs
    (``codes`` ``None``): their own objective over the fold's pairs, or
    (``pair_classes``) that of the classes rebuilt from the fold's pairs
    alone (:func:`~megkernel._solvers.metric_pairs.component_codes`: no
    held-out pair links the fold's points).
    """

    def __init__(self, scorer, coordinates, codes, prior, temperature=1.0, *,
                 pair_classes=False):
        self.scorer, self.coordinates = scorer, coordinates
        if pair_classes:
            self.ascent = SoftNeighborAscent.of_classes(
                coordinates, component_codes(len(coordinates), scorer.train_pairs,
                                             scorer.train_signs), prior, temperature)
        elif codes is None:  # given pairs: the fold's own (both ends among its points)
            self.ascent = SoftNeighborAscent.of_pairs(
                coordinates, scorer.train_pairs, scorer.train_signs, prior, temperature)
        else:
            train = scorer.references
            self.ascent = SoftNeighborAscent(
                coordinates[train], codes[train], prior,
                temperature * prior_temperature(coordinates[train], prior))
        self.scores = {}  # a path met again (a race continued) does not recompute

    def score_at(self, iterations):
        if iterations not in self.scores:
            self.ascent.advance(int(iterations) - self.ascent.n_iter)
            self.scores[iterations] = self.scorer.score(
                embedding(self.coordinates, self.ascent.exponent))
        return self.scores[iterations]


#: Iterations every temperature is validated to before only the leader goes on
#: (successive halving): three checkpoints from one iteration on, one past where
#: the patience of a validation that keeps the prior ends (a race to 2 changed
#: the temperature kept too often: see the metrics page of the user guide).
RACE_ITERATIONS = 4.0 * PATIENCE_FROM


def validate_soft_neighbors(coordinates, pairs, signs, prior, *, classes, rng, n_folds="auto",
                            max_iter=MAX_PASSES, patience=2, z=2.0,
                            elasticity=ELASTICITY, min_items=_MIN_ITEMS,
                            temperatures=TEMPERATURES, race=RACE_ITERATIONS,
                            pair_classes=False, looks_before=0, chosen_items=None,
                            unless_above=None):
    """How many ascent iterations of the stochastic-neighbour objective, at which temperature.

    :func:`~megkernel._solvers.holdout.validate_length` with the
    folds of :class:`_SoftNeighborPath` over the checkpoints of
    :func:`soft_neighbor_checkpoints`, for each temperature of
    ``temperatures`` (multiples of :func:`prior_temperature`) on the same
    folds (a copy of ``rng`` each). Successive halving: every temperature is
    validated up to ``race`` iterations; only the one whose choice so far has
    the highest held-out 1-NN accuracy, then margin (ties: the first, the
    broadest), goes on, its fold trajectories continued where they stopped
    (its validation is the one it has alone) and kept; ``race=None``: every
    temperature validated in full, the best kept by the same rule.
    ``pairs`` (the neighbourhoods) only make the folds as for the pair
    kinds; ``classes=None``: the objective of the given ``pairs`` and
    ``signs`` themselves (each fold's pairs among its points,
    :meth:`SoftNeighborAscent.of_pairs`), scored as the loop scores given
    pairs; with ``pair_classes``, the objective of the classes each fold
    rebuilds from its pairs' components (:meth:`SoftNeighborAscent.of_classes`).
    ``looks_before``: as :func:`~megkernel._solvers.holdout.validate_length`'s.
    ``chosen_items``: a list, given, receives the kept temperature's per-fold
    held-out scores at its chosen length (to compare candidates on the same
    folds). ``unless_above``: (accuracy, margin) of a candidate validated
    before on the same folds; where the race's leader is not above it, it is
    not continued (successive halving across candidates: a tie keeps the
    candidate before) and ``log["pruned"]`` is set.

    Returns
    -------
    iterations : float
    log : dict
        The kept temperature's, with ``"temperature"`` (the kept multiple)
        and ``"temperatures"`` (each multiple's held-out (1-NN accuracy,
        margin) at its chosen length; a multiple left in the race, at its
        choice within the race).
    """
    full = soft_neighbor_checkpoints(max_iter)
    caches = [{} for _ in temperatures]  # per temperature: fold number -> path

    def run(index, checkpoints):
        fold_rng, made = copy.deepcopy(rng), []

        def make_path(scorer, temperature=temperatures[index]):
            made.append(scorer)  # the folds come in the same order in every run
            if len(made) not in caches[index]:
                caches[index][len(made)] = _SoftNeighborPath(
                    scorer, coordinates, None if classes is None else classes.codes, prior,
                    temperature, pair_classes=pair_classes)
            return caches[index][len(made)]

        with warnings.catch_warnings(record=True) as caught:  # the kept one's only
            warnings.simplefilter("always")
            iterations, log = validate_length(
                len(coordinates), pairs, signs, make_path, checkpoints=checkpoints,
                n_folds=n_folds, rng=fold_rng, patience=patience, z=z,
                elasticity=elasticity, min_items=min_items, learner="MEGMetric",
                classes=classes, safety_net=f"max_iter (now {max_iter:g} iterations)",
                looks_before=looks_before)
        return (_held_out_at_choice(log), iterations, log, fold_rng, temperatures[index],
                caught)

    def leader(results):
        return max(range(len(results)), key=lambda i: (*results[i][0], -i))

    short = [checkpoint for checkpoint in full if race is not None and checkpoint <= race]
    if len(temperatures) > 1 and 1 < len(short) < len(full):
        raced = [run(index, short) for index in range(len(temperatures))]
        best = leader(raced)  # the others stop at the race's end
        pruned = unless_above is not None and not raced[best][0] > tuple(unless_above)
        results = [run(best, full) if index == best and not pruned else result
                   for index, result in enumerate(raced)]
    else:
        results, pruned = [run(index, full) for index in range(len(temperatures))], False
        best = leader(results)
    _, iterations, log, fold_rng, temperature, caught = results[best]
    for record in caught:
        warn_user(str(record.message), record.category)
    rng.bit_generator.state = fold_rng.bit_generator.state  # as if only it had run
    log["temperature"] = temperature
    log["temperatures"] = {result[4]: result[0] for result in results}
    log["looks"] = sum(result[2].get("looks", 0) for result in results)
    if pruned:
        log["pruned"] = True
    if chosen_items is not None and log["chosen"] is not None:
        paths = caches[best]
        chosen_items.extend(paths[k].scores[log["chosen"]] for k in sorted(paths))
    return (0.0 if iterations is None else iterations), log


def _held_out_at_choice(log):
    """Held-out (1-NN accuracy, margin) of a validation's chosen length (-inf: none)."""
    if log["chosen"] is None:
        return (-np.inf, -np.inf)
    at = log["checkpoints"].index(log["chosen"])
    return (log.get("accuracies", log["scores"])[at], log["scores"][at])


#: The candidate of given pairs' soft-neighbour objective
#: (:func:`~megkernel._solvers.metric_soft_neighbors.pair_masks`): each point's
#: stochastic neighbour drawn among the points it is paired with.
SOFT_PAIRS = "soft-pairs"

#: The candidate of the classes rebuilt from given pairs: their similar pairs'
#: connected components (:func:`~megkernel._solvers.metric_pairs.component_codes`),
#: learned by the labels' soft-neighbour objective.
PAIR_CLASSES = "pair-classes"


def _is_soft(candidate):
    """Whether a candidate is learned by the soft-neighbour ascent (labels' or pairs')."""
    return candidate in (SOFT_PAIRS, PAIR_CLASSES) or (
        candidate is not None and not isinstance(candidate, str)
        and candidate.from_labels == "soft-neighbors")


def _kind_name(candidate):
    if candidate is None:
        return "pairs"
    return candidate if isinstance(candidate, str) else candidate.from_labels


#: Epochs the pair loss of given pairs is validated to before it goes on only
#: where it has overtaken the pairs' soft-neighbour objective (successive
#: halving across candidates). The pair loss gains slowly where it wins: on the
#: validation folds of sparse high-dimensional sets it overtakes the objective
#: only after several epochs (the benchmarks page).
RACE_EPOCHS = 16.0


def _classes_beat_soft(log, items):
    """Whether the rebuilt classes' validation keeps them over the pairs' objective.

    Their own gain is real, their run was not pruned, and their held-out
    items beat the pairs' soft-neighbour objective's by more than two paired
    standard errors.
    """
    return bool(log["gain_is_real"] and not log.get("pruned")
                and gain_is_real(items[PAIR_CLASSES], items[SOFT_PAIRS], 2.0,
                                 log["n_repeats"]))


def _soft_choice(results, candidates, items):
    """Held-out (accuracy, margin) of the given pairs' objective that would be kept.

    The pairs' own soft-neighbour objective, or the classes rebuilt from them
    where their rule keeps them (a real gain, not pruned, above the pairs'
    objective by more than two paired standard errors).
    """
    soft = results[candidates.index(SOFT_PAIRS)][0]
    if PAIR_CLASSES not in candidates[:len(results)]:
        return soft
    classes, log = results[candidates.index(PAIR_CLASSES)][0], results[
        candidates.index(PAIR_CLASSES)][2]
    if _classes_beat_soft(log, items):
        return max(soft, classes)
    return soft


def _validate_pair_loss(coordinates, these, targets, sides, prior, *, learning_rate, batch_size,
                        rng, n_folds, max_iter, classes, looks_before, unless_above,
                        race=RACE_EPOCHS):
    """:func:`validate_epochs` of one pair kind, raced against the pairs' own objective.

    ``unless_above``: (accuracy, margin) of the given pairs' soft-neighbour
    objective that would be kept (:func:`_soft_choice`), on the same folds;
    the pair loss is first validated up to ``race`` epochs and validated
    in full (from the same folds, as without the race) only where its
    choice there is above it (successive halving across candidates: where
    the pair loss has not overtaken the objective by then, its long
    validation is not paid for; ``log["pruned"]`` is set and it is not
    kept). A race that stopped before its last checkpoint (patience, out of
    reach) is the full validation: its rules look no further than the next
    checkpoint, and its warnings are this validation's. The race's own end
    is no safety net of the user's: a warning that the score still rose
    there is not passed on (a race that reached its end is either pruned or
    continued in full, whose own end warns for itself). The chosen length is
    scaled for the refit on every pair (:func:`refit_epochs`). Returns
    ``(epochs, log, rng)``, ``rng`` the generator after the validation that
    counts.
    """
    paths, path_rng = {}, []  # the race's trajectories, continued by the full validation

    def run(checkpoints):
        fold_rng = copy.deepcopy(rng)
        epochs, log = validate_epochs(
            coordinates, these[0], targets, sides, these[1], prior,
            learning_rate=learning_rate, batch_size=batch_size, rng=fold_rng,
            n_folds=n_folds, max_epochs=max_iter, checkpoints=checkpoints, classes=classes,
            looks_before=looks_before, paths=paths)
        path_rng.append(fold_rng)  # the first run's generator draws both runs' epoch orders
        return refit_epochs(epochs, log, max_iter), log, path_rng[0]

    full = doubling_checkpoints(max_iter)
    short = [checkpoint for checkpoint in full if checkpoint <= race]
    if unless_above is not None and 1 < len(short) < len(full):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            epochs, log, fold_rng = run(short)
        pruned = not _held_out_at_choice(log) > tuple(unless_above)
        # the race's warnings are the validation's (a continued run does not
        # make the race's part again), but for the race's end reached
        for record in caught:
            if not (log["stopped"] == "max_length"
                    and issubclass(record.category, ConvergenceWarning)):
                warn_user(str(record.message), record.category)
        if pruned or log["stopped"] != "max_length":
            if pruned:
                log["pruned"] = True
            return epochs, log, fold_rng  # stopped early: so would the full validation
    return run(full)


#: Largest ratio of the refit's pairs to a fold's by which the pair loss's
#: refit is lengthened (:func:`refit_epochs`): five folds hold about 64 % of
#: the pairs (a ratio of 1.56), where the longer refit was measured to gain;
#: two folds (600 points or more) hold a quarter, with half the points, and
#: there a refit four times the choice lost (the benchmarks page).
MAX_PAIR_RATIO = 2.0


def refit_epochs(epochs, log, max_length):
    """Return the refit's length on every pair: the validated one, scaled where the folds allow.

    A fold learns from the pairs among its points (about ``((k-1)/k)**2``
    of them with ``k`` folds, a quarter with two), and its chosen length is
    the one that pays on that share: with more pairs a run overfits later
    and keeps gaining longer. The refit on every pair runs the chosen
    length times the pairs over a fold's (``log["pair_ratio"]``) where the
    held-out curve held the choice that far (``log["held_to"]``: no
    checkpoint up to it scored significantly below the choice: it stopped
    for a gain too small to repay the folds' length, not for a fall), else
    as far as it held. Only where the folds scored held-out 1-NN margins
    (``log["score"] == "knn"``): held-out pair AUC keeps rising with the
    length long after the neighbours stop improving, so its curve is no
    evidence for a longer refit. Only where a fold held at least half the
    pairs (``log["pair_ratio"]`` at most :data:`MAX_PAIR_RATIO`). Unchanged
    where no learned length was chosen, where the folds drew their pairs
    again (``log["length_scale"]`` is already their scaling), and at the
    safety net ``max_length``. The factor is recorded as
    ``log["length_scale"]``.
    """
    chosen = log.get("chosen")
    if (not log.get("gain_is_real") or not chosen or log.get("length_scale", 1.0) != 1.0
            or "held_to" not in log or log.get("score") != "knn"
            or log["pair_ratio"] > MAX_PAIR_RATIO):
        return epochs
    factor = min(log["pair_ratio"], log["held_to"] / chosen)
    if not factor > 1.0:
        return epochs
    log["length_scale"] = factor
    return min(chosen * factor, float(max_length))


def validate_kinds(coordinates, prior, pairs, signs, candidates, *, gamma, gamma_dissimilar,
                   trace, loss, learning_rate, batch_size, rng, n_folds, max_iter,
                   temperatures):
    """Validate MEGMetric's length and, given several candidates, its kind.

    Each candidate (:class:`~megkernel._solvers.metric_pairs.ClassPairs`: from
    labels the stochastic-neighbour objective and random pairs, or an
    explicit kind; ``None``: the given ``pairs`` and ``signs`` by MEG's pair
    loss; :data:`SOFT_PAIRS`: their soft-neighbour objective) is validated
    on the same folds (a copy of the generator); kept is the one whose
    chosen length has the higher held-out 1-NN accuracy, then margin (ties:
    the first). Accuracy comes first because the margins alone favour random
    pairs, whose dissimilar pairs spread the classes apart everywhere, even
    where the 1-NN accuracy does not rise.

    From labels, a soft-neighbour objective whose validated gain over the
    Euclidean prior is real is kept without validating the pair kinds
    after it: it is preferred, and the pairs' loss is its fallback where it
    shows no gain (fold accuracies of kinds close to each other are too
    noisy to choose between, and validating every kind costs several times
    as much). Given pairs, MEG's pair loss is validated beside their
    soft-neighbour objectives in every case: with few pairs per feature
    (sparse high-dimensional data) those objectives gain in their first
    iterations and then overfit, while the pair loss keeps gaining with
    its length (see the benchmarks page); it goes on past
    :data:`RACE_EPOCHS` only where it has overtaken the objective that
    would be kept (:func:`_validate_pair_loss`).

    :data:`PAIR_CLASSES` (given pairs whose components stand in for
    classes) comes after :data:`SOFT_PAIRS` on the same folds, its claim
    counting the looks before it, and is kept only where its held-out
    scores at its chosen length beat those of the pairs' own objective at
    theirs by more than ``z`` standard errors, paired over the same held-out
    points: classes rebuilt from pairs are a guess (one wrong similar pair
    merges two), so a tie keeps the pairs as pairs. Where its temperature
    race ends without its held-out (accuracy, margin) above the pairs'
    objective's at its choice, it is not validated further (successive
    halving; ``"pruned"`` in its log).

    Parameters
    ----------
    coordinates : ndarray of shape (n, rank)
        Whitened coordinates of the training points.
    prior : ndarray of shape (rank,)
        Eigenvalues of the diagonal prior.
    pairs, signs : ndarray
        The given pairs (used by a ``None`` candidate).
    candidates : list of ClassPairs, None or SOFT_PAIRS
        The kinds to validate.
    gamma, gamma_dissimilar, trace, loss
        The targets and the loss (:func:`~megkernel._solvers.metric_meg.targets_and_sides`).
    learning_rate : float or "auto"
        As MEGMetric's.
    batch_size : int
        Pairs per MEG update.
    rng : numpy.random.Generator
        Draws the folds and the epochs' orders.
    n_folds, max_iter
        As MEGMetric's.
    temperatures : tuple of float
        The soft-neighbour temperatures to validate.

    Returns
    -------
    epochs : float
        The kept candidate's chosen length.
    log : dict
        Its validation log; with several candidates, ``"from_labels"``: each
        validated kind's (accuracy, margin), and ``"kept"``: the kept kind's
        name.
    rng : numpy.random.Generator
        The kept candidate's generator, after its validation.
    kept : tuple
        ``(pairs, signs, candidate)`` of the kept candidate.
    """
    results, items = [], {}
    for candidate in candidates:
        if candidate is not None and not _is_soft(candidate) and any(
                _is_soft(c) and r[2]["gain_is_real"] and not r[2].get("pruned")
                for r, c in zip(results, candidates)):
            break  # a soft-neighbour objective learned: the pairs' loss is not needed
        looks_before = sum(result[2].get("looks", 0) for result in results)
        fold_rng = copy.deepcopy(rng)
        these = ((pairs, signs) if candidate is None or isinstance(candidate, str)
                 else (candidate.pairs, candidate.signs))
        diffs = pair_diffs(coordinates, these[0])
        targets, sides = targets_and_sides(these[1], gamma, gamma_dissimilar, trace, loss)
        with warnings.catch_warnings(record=True) as caught:  # the kept kind's only
            warnings.simplefilter("always")
            if _is_soft(candidate):
                items[_kind_name(candidate)] = []
                epochs, log = validate_soft_neighbors(
                    coordinates, these[0], these[1], prior,
                    classes=None if isinstance(candidate, str) else candidate,
                    rng=fold_rng, n_folds=n_folds, max_iter=max_iter,
                    temperatures=temperatures, pair_classes=candidate == PAIR_CLASSES,
                    looks_before=looks_before if candidate == PAIR_CLASSES else 0,
                    chosen_items=items[_kind_name(candidate)],
                    unless_above=(results[candidates.index(SOFT_PAIRS)][0]
                                  if candidate == PAIR_CLASSES and SOFT_PAIRS in candidates
                                  else None))
            else:
                epochs, log, fold_rng = _validate_pair_loss(
                    coordinates, these, targets, sides, prior,
                    learning_rate=resolve_learning_rate(diffs, learning_rate),
                    batch_size=batch_size, rng=rng, n_folds=n_folds, max_iter=max_iter,
                    classes=candidate, looks_before=looks_before,
                    unless_above=(_soft_choice(results, candidates, items)
                                  if candidate is None and SOFT_PAIRS in candidates[:len(results)]
                                  else None))
        results.append((_held_out_at_choice(log), epochs, log, fold_rng, these, candidate,
                        caught))
    validated = candidates[:len(results)]
    others = [i for i, c in enumerate(validated)
              if c != PAIR_CLASSES and not results[i][2].get("pruned")]
    best = max(others, key=lambda i: (*results[i][0], -i)) if others else 0
    if PAIR_CLASSES in validated:
        classes_at = validated.index(PAIR_CLASSES)
        log = results[classes_at][2]
        if ((validated[best] == SOFT_PAIRS or results[classes_at][0] > results[best][0])
                and _classes_beat_soft(log, items)):
            best = classes_at
    _, epochs, log, rng, (kept_pairs, kept_signs), candidate, caught = results[best]
    for record in caught:
        warn_user(str(record.message), record.category)
    if len(candidates) > 1:  # each kind validated (not those the rule skipped)
        log["from_labels"] = {_kind_name(c): r[0] for r, c in zip(results, candidates)}
        log["kept"] = _kind_name(candidate)
    return epochs, log, rng, (kept_pairs, kept_signs, candidate)
