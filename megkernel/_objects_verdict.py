"""KernelDistances' verdict: a learned kernel against the distances it was given.

A kernel learner sees only pairs and targets, never the labels, and its
own verdict (``validation_score_`` against ``prior_score_``) is about the
distances it fits. What the user wants to know is whether the learned
kernel's neighbors beat those of the observed distances it was given. In a
Pipeline, ``KernelDistances.fit(ids, labels)`` receives the training
objects' labels: it compares the two by leave-one-out 1-NN accuracy on those
objects (the labels still never reach the learner), keeps both figures in
``verdict_`` and warns (:class:`~megkernel.NoImprovementWarning`) when the
learned kernel is worse by more than two standard errors of the paired
difference.

Measured (``benchmarks/bench_own_data.py --verdict``, MEG at its defaults):
on 52 sparse, noisy family tables and 10 random half-splits each, the
splits it warns on (18 of 520) lose on average 0.086 of held-out 1-NN
accuracy against the observed distances (the others gain 0.022); on 24
tables generated after the rule was set, 6 of 240 splits, -0.016 against
+0.025. It catches large losses: 5 of the 12 (2 of the 6) tables whose
learned kernel is worse on held-out objects warn on some split.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression
from sklearn.utils.multiclass import type_of_target

from ._numerics.validation import row_label
from ._objects_given import MISSING_DISTANCE
from ._warnings import warn_user

#: At most this many training objects are compared (a seeded sample of them
#: beyond it): their distance matrices are formed whole.
VERDICT_OBJECTS = 2000

#: The learned kernel is called worse when its leave-one-out 1-NN accuracy is
#: below the observed distances' by more than this many standard errors of the
#: paired difference (McNemar's statistic on the objects they disagree on): two,
#: the rule of megkernel's other paired comparisons (a one-sided test at about
#: 2 %: of ten splits where learning changed nothing, one warns with
#: probability 0.2; at one standard error it would be 0.8).
WORSE_Z = 2.0


def class_labels(y, n_objects, *, required_by=None, chooses=None):
    """``y`` as an array of class labels, or ``None`` when it holds none.

    Labels with a missing one (``None``, NaN, ``pd.NA``) give no verdict,
    with a warning that names the first such row: the verdict is advice
    about the kernel, which is fitted as usual (the labels never reach the
    learner), so a label it cannot use is no reason to refuse the fit; but
    skipping it without a word would look like a verdict-free success.
    Where the distances themselves are read off the labels (``required_by``
    names the option that does), a missing label is an error instead.
    ``chooses``: the option that then chooses as without labels, said in
    that warning.
    """
    if y is None:
        return None
    rows = y.index if isinstance(y, pd.Series) else None
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == 1:  # a column vector, as classifiers take
        labels = labels.ravel()
    if labels.ndim != 1:  # several outputs: no single label to judge neighbors by
        return None
    if len(labels) != n_objects:
        raise ValueError(f"y must hold one label per object of X ({n_objects}), got "
                         f"{len(labels)}.")
    missing = np.flatnonzero(pd.isna(labels))
    if missing.size:
        first = int(missing[0]) if rows is None else row_label(rows, int(missing[0]))
        if required_by is not None:
            raise ValueError(
                f"{required_by} needs a class label for every fit object, but y has "
                f"{missing.size} missing label(s) (None or NaN), the first at row "
                f"{first!r}.")
        warn_user(
            f"KernelDistances: y has {missing.size} missing class label(s) (None or NaN), "
            f"the first at row {first!r}: no verdict on the learned kernel's neighbors "
            "(verdict_ is None); the kernel is fitted as usual"
            f"{'' if chooses is None else f', and {chooses} chooses as without labels'}. "
            "Give every object a label for the verdict.", UserWarning)
        return None
    try:
        kind = type_of_target(labels)
    except ValueError:
        return None
    return labels if kind in ("binary", "multiclass") else None


def verdict_rows(n_rows):
    """Positions of the training objects the verdict compares (all, or a seeded sample)."""
    if n_rows <= VERDICT_OBJECTS:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng(0).choice(n_rows, VERDICT_OBJECTS, replace=False))


def observed_distances_known(learner, targets):
    """Whether the learner's targets are distances (squared or not) one can rank by.

    The learner says so (``targets_are_distances`` of the kernel-learner
    protocol); no targets are no distances.
    """
    return targets is not None and bool(learner.targets_are_distances(targets))


def loo_nearest_correct(distances, labels):
    """Whether each object's nearest other object (leave-one-out 1-NN) shares its label.

    NaN (missing) distances are never nearer than a measured one; ties go
    to the first column, as scikit-learn's precomputed k-NN breaks them.
    """
    D = np.where(np.isnan(distances), MISSING_DISTANCE, distances)
    np.fill_diagonal(D, np.inf)
    return labels[np.argmin(D, axis=1)] == labels


def _paired_z(right, right_other):
    """Return McNemar's statistic: the paired difference in standard errors.

    Positive when ``right`` is right more often.
    """
    gains = int(np.sum(right & ~right_other))
    losses = int(np.sum(right_other & ~right))
    return (gains - losses) / np.sqrt(gains + losses) if gains + losses else 0.0


#: ``keep_given="auto"`` leaves a mode for a later one of :data:`KEEP_GIVEN_MODES`
#: only when the later one's leave-one-out 1-NN is better by more than this
#: many standard errors of their paired difference: the one-standard-error
#: rule of model selection (the simpler choice unless another is better by
#: more than the noise of the comparison). A difference of an object or two
#: is noise, and choosing on it cost new objects placed after the fit; two
#: standard errors, the rule for calling a gain real, kept the kernel alone
#: on small sparse tables where the given distances were better (the
#: benchmarks page, "Sparse tables").
KEEP_Z = 1.0

#: The ways ``KernelDistances(keep_given=...)`` combines the learned kernel
#: with the distances it was taught, in the order a tie prefers them
#: (``"paths"``, the evidence of the given pairs' graph, needs class labels:
#: :mod:`megkernel._objects_paths`).
KEEP_GIVEN_MODES = ("never", "where_given", "first", "blend", "paths")

#: What ``keep_given="auto"`` keeps without labels to choose by: ``"blend"``.
#: Label-free scores can only judge a combination by how it reproduces the
#: given distances, which prefers keeping them even where the kernel ranks
#: neighbours far better (planted-partition graphs); of the modes, the blend
#: lost least where the kernel alone lost and kept most of its gains where it
#: won (the benchmarks page, "Sparse tables").
UNLABELLED_MODE = "blend"

#: What ``keep_given="auto"`` keeps without labels when the learner found
#: that its kernel explains little of its held-out pairs: ``"first"`` (the
#: given distances rank every measured pair first; the kernel ranks the
#: rest). A blend with a kernel that predicts next to nothing mostly adds
#: noise to the given order: on the sparse grid's 2 % tables, where the
#: learner says so, the blend lost to the given distances on 5 of 8 (by up
#: to 0.09 of 1-NN) and gained at most 0.026 (the benchmarks page, "Sparse
#: tables"). With labels it is where the comparison starts: the modes that
#: trust the kernel more are no candidates, a later one replaces it only
#: when better by the one-standard-error rule.
WEAK_KERNEL_MODE = "first"

#: Ties of the scale map's flat stretches are broken by the learned distance
#: itself, at this fraction of it: the learned kernel's order among pairs the
#: map cannot tell apart is kept, at no visible change of a distance.
TIE_BREAK = 1e-9


class ScaleMap(NamedTuple):
    """The learned squared distances mapped onto the given ones' scale.

    A non-decreasing piecewise-linear map through the origin (an object's
    distance to itself is 0 under both), fitted by isotonic regression of
    the given squared distances on the learned ones over the given pairs:
    a learned distance becomes the given distance it predicts, so where the
    kernel explains little its distances shrink towards the typical given
    one and rarely outrank a measured pair.

    Parameters
    ----------
    learned : ndarray
        Learned squared distances at the knots (increasing, from 0).
    given : ndarray
        The given squared distances they map to (non-decreasing, from 0).
    """

    learned: np.ndarray
    given: np.ndarray

    def __call__(self, learned_sq):
        """Return ``learned_sq`` on the given distances' scale."""
        return np.interp(learned_sq, self.learned, self.given) + TIE_BREAK * learned_sq


def scale_map(learned_sq, given_sq):
    """Fit the :class:`ScaleMap` of learned squared distances onto the given ones.

    Parameters
    ----------
    learned_sq, given_sq : ndarray of shape (n_pairs,)
        The learned and the given squared distances of the given pairs.

    Returns
    -------
    ScaleMap
    """
    learned_sq = np.asarray(learned_sq, dtype=float)
    given_sq = np.asarray(given_sq, dtype=float)
    if learned_sq.size == 0:
        return ScaleMap(np.array([0.0, 1.0]), np.array([0.0, 1.0]))
    fit = IsotonicRegression(out_of_bounds="clip").fit(learned_sq, given_sq)
    knots, values = fit.X_thresholds_, fit.y_thresholds_
    keep = knots > 0  # the origin is the first knot
    return ScaleMap(np.concatenate([[0.0], knots[keep]]),
                    np.concatenate([[0.0], np.maximum(values[keep], 0.0)]))


def with_given(learned_sq, given_sq, mode, offset, scale=None):
    """Combine learned and given squared distances as ``keep_given=mode`` says.

    Parameters
    ----------
    learned_sq, given_sq : ndarray of the same shape
        The learned kernel's squared distances; the given ones (NaN where
        none was given).
    mode : {"never", "where_given", "first", "blend"}
        ``"where_given"``: the given distance where there is one;
        ``"first"``: that, and the learned ones beyond every given one
        (``offset`` added), so a measured pair is nearer than any other;
        ``"blend"``: the learned distances mapped onto the given ones' scale
        (``scale``), and where a given one exists the mean of the two.
    offset : float
        The largest given squared distance.
    scale : ScaleMap, optional
        The map of ``"blend"``.

    Returns
    -------
    ndarray
        Squared distances.
    """
    if mode == "never":
        return learned_sq
    missing = np.isnan(given_sq)
    if mode == "blend":
        mapped = scale(learned_sq)
        return np.where(missing, mapped, 0.5 * (given_sq + mapped))
    return np.where(missing, learned_sq + (offset if mode == "first" else 0.0), given_sq)


def neighbour_verdict(learned, observed, labels, *, sampled=False, combined=None, start=None):
    """Leave-one-out 1-NN of the learned distances against the observed ones.

    Parameters
    ----------
    learned, observed : ndarray of shape (m, m)
        Distances among the same objects (``observed`` NaN where missing,
        or ``None`` when there are none to compare with).
    labels : ndarray of shape (m,)
    sampled : bool, default=False
        Whether the objects are a sample of the fit's (said in the warning).
    combined : dict, optional
        The learned distances combined with the observed ones, by
        ``keep_given`` mode (:func:`with_given`).
    start : str, optional
        A mode of ``combined`` kept unless a later one is better (by the
        rule below); the modes before it are not candidates (a kernel its
        learner found weak: :data:`WEAK_KERNEL_MODE`). ``None``: ``"never"``.

    Returns
    -------
    verdict : dict
        ``learned``, ``observed`` and each mode of ``combined`` (accuracies;
        NaN without those distances, all NaN for fewer than two objects),
        ``n_objects``, ``sampled`` (as given), ``z`` (the learned against
        the observed distances' paired difference in standard errors,
        positive when the learned kernel is better), ``worse`` (``z <
        -WORSE_Z``) and ``keep_given``: the mode kept (``"never"``: the
        learned kernel alone); a later mode of :data:`KEEP_GIVEN_MODES`
        replaces the one kept only when it is more accurate by more than
        :data:`KEEP_Z` standard errors of their paired difference.
    """
    out = {"learned": np.nan, "observed": np.nan, "n_objects": len(labels),
           "z": np.nan, "worse": False, "keep_given": "never", "sampled": bool(sampled)}
    out.update({mode: np.nan for mode in KEEP_GIVEN_MODES[1:]})
    if len(labels) < 2:  # no other object to be a neighbor
        return out
    right = loo_nearest_correct(learned, labels)
    out["learned"] = float(right.mean())
    best = right
    candidate = start is None or combined is None or start not in combined
    for mode in KEEP_GIVEN_MODES[1:]:
        if combined is not None and mode in combined:
            right_mode = loo_nearest_correct(combined[mode], labels)
            out[mode] = float(right_mode.mean())
            if mode == start and not candidate:
                best, out["keep_given"], candidate = right_mode, mode, True
            elif candidate and _paired_z(right_mode, best) > KEEP_Z:
                best, out["keep_given"] = right_mode, mode
    if observed is None:
        return out
    right_observed = loo_nearest_correct(observed, labels)
    z = _paired_z(right, right_observed)
    out.update(observed=float(right_observed.mean()), z=float(z),
               worse=bool(z < -WORSE_Z))
    return out


_MODE_WORDS = {
    "where_given": "keeps the given distance for every pair that has one and the learned "
                   "one for the others",
    "first": "keeps the given distance for every pair that has one and places the others "
             "beyond them (a measured pair is always nearer)",
    "blend": "averages the given and the learned distance where both exist, the learned "
             "distances mapped onto the given ones' scale",
    "paths": "ranks the fit objects by the chance of their class that each object's given "
             "distances imply (its labelled partners' classes, and its other partners' own "
             "labelled partners)",
}


def verdict_message(learner_name, verdict):
    """Return the warning's text: both accuracies, the objects, the remedy."""
    sampled = " (a sample of them)" if verdict.get("sampled") else ""
    return (f"On the {verdict['n_objects']} objects of this fit{sampled}, the "
            f"{learner_name} kernel's leave-one-out 1-NN accuracy is "
            f"{verdict['learned']:.3f} against {verdict['observed']:.3f} for the observed "
            f"distances it was given ({-verdict['z']:.1f} standard errors below): it did "
            "not beat them here. "
            + (f"The step {_MODE_WORDS[verdict['keep_given']]} (keep_given="
               f"{verdict['keep_given']!r}: leave-one-out "
               f"{verdict[verdict['keep_given']]:.3f}). "
               if verdict.get("keep_given", "never") != "never" else "")
            + "Compare with the observed distances in the same grid, e.g. "
            "{'<step>__learner': [None, learner]} (None: the observed distances), and "
            "see KernelDistances.verdict_.")
