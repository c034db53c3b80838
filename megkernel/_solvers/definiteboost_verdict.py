"""The held-out verdict of a kernel learned from labelled pairs.

A fraction of the pairs is held out of training; a kernel is scored by how
well its squared distances *rank* them: the AUC of "closer" against
"farther" pairs (the probability that a pair that should be closer is, ties
counting one half). The pairs that should be closer are the held-out
similar pairs, the farther ones the held-out dissimilar pairs; with only one
kind held out, random pairs of distinct objects take the other side (a
similar pair should be closer than a random one, a dissimilar pair
farther).

Why a ranking and not the fraction of held-out constraints met: the
fraction depends on the threshold ``gamma`` itself (a larger ``gamma``
meets more of them without learning anything; the prior ``I / d`` meets
none), so it cannot compare kernels learned at different ``gamma`` nor a
kernel with its prior. The ranking is free of thresholds and of the
kernel's scale, and it is what a nearest-neighbour rule uses: an object's
neighbour is found when the pairs that should be close rank before the
others (the prior ``I / d`` ties every pair: AUC 0.5).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata
from sklearn.utils import check_random_state

__all__ = ["HeldOutPairs", "split_pairs", "pair_ranking_auc", "MIN_HELD_OUT"]

#: Fewest held-out pairs for a verdict (and for validating ``gamma``): with
#: fewer, the AUC's standard error exceeds about 0.1.
MIN_HELD_OUT = 10

#: Random pairs drawn as the other side when only one kind is held out: at
#: least this many, and at least as many as the held-out pairs.
MIN_RANDOM_PAIRS = 200


class HeldOutPairs:
    """Held-out pairs split into the side that should be closer and the side
    that should be farther (object indices, shape (n, 2) each)."""

    def __init__(self, closer, farther, description):
        self.closer = closer
        self.farther = farther
        #: What is ranked against what, for messages and the docs.
        self.description = description

    def score(self, sq_distances):
        """AUC of the kernel whose squared distances ``sq_distances(a, b)`` gives."""
        return pair_ranking_auc(sq_distances(self.closer[:, 0], self.closer[:, 1]),
                                sq_distances(self.farther[:, 0], self.farther[:, 1]))


def pair_ranking_auc(closer, farther):
    """``P(closer < farther) + P(closer == farther) / 2`` over all pairs of one
    value from each side (Mann-Whitney, by ranks: ``O(n log n)``).

    Values equal up to round-off (relative ``1e-12``) count as ties, so that
    the prior ``I / d``, whose pair distances differ only by round-off,
    scores 0.5.
    """
    closer = np.asarray(closer, dtype=float)
    farther = np.asarray(farther, dtype=float)
    values = np.concatenate([closer, farther])
    scale = np.max(np.abs(values), initial=0.0)
    if scale > 0:
        values = np.round(values / scale, 12)
    ranks = rankdata(values)
    n_closer, n_farther = closer.size, farther.size
    # rank sum of the farther side: each (closer, farther) with closer < farther adds 1
    u = ranks[n_closer:].sum() - n_farther * (n_farther + 1) / 2.0
    return float(u / (n_closer * n_farther))


def split_pairs(pairs, signs, n_objects, fraction, random_state):
    """Hold out ``fraction`` of each kind of pair (similar / dissimilar).

    Returns
    -------
    train : ndarray of int or None
        Indices of the training pairs; ``None``: too few pairs to hold any
        out (see ``reason``).
    held_out : HeldOutPairs or None
    reason : str
        Why nothing was held out (empty when something was).
    """
    rng = check_random_state(random_state)
    similar, dissimilar = np.flatnonzero(signs > 0), np.flatnonzero(signs < 0)
    held = []
    for kind in (similar, dissimilar):
        n_held = int(np.floor(fraction * kind.size))
        held.append(rng.permutation(kind)[:n_held] if n_held else kind[:0])
    n_held = sum(part.size for part in held)
    if n_held < MIN_HELD_OUT or n_held == len(pairs):
        needed = int(np.ceil(MIN_HELD_OUT / fraction))
        return None, None, (
            f"{len(pairs)} pairs are too few to hold out {MIN_HELD_OUT} at "
            f"validation_fraction={fraction:g} (it takes about {needed})")
    sim_held, dis_held = held
    if sim_held.size and dis_held.size:
        held_out = HeldOutPairs(pairs[sim_held], pairs[dis_held],
                                "held-out similar pairs against held-out dissimilar pairs")
    else:
        n_random = max(MIN_RANDOM_PAIRS, n_held)
        a = rng.randint(n_objects, size=n_random)
        b = (a + 1 + rng.randint(n_objects - 1, size=n_random)) % n_objects  # b != a
        random_pairs = np.column_stack([a, b])
        if sim_held.size:
            held_out = HeldOutPairs(pairs[sim_held], random_pairs,
                                    "held-out similar pairs against random pairs")
        else:
            held_out = HeldOutPairs(random_pairs, pairs[dis_held],
                                    "random pairs against held-out dissimilar pairs")
    train = np.setdiff1d(np.arange(len(pairs)), np.concatenate(held))
    return train, held_out, ""
