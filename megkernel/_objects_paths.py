"""Evidence through the graph of given pairs: ``keep_given="paths"``.

Where few pairs are given, an object's few measured partners are all the
observed distances say about it, and a kernel learned from them may learn
next to nothing. What they say through the graph is more: two objects never
measured against each other are likely of one class when they share close
partners. With class labels of the fit objects, the chance that a given pair
is of one class is read off its given distance (a decreasing isotonic
regression over the labelled given pairs), and the chance for any pair adds
the evidence of its given distance and of every two-step path through a
shared partner (naive Bayes: each path's likelihood ratio multiplied in).
The squared distance returned is ``-log`` of that chance, so the nearest
object is the most likely to share the class; pairs with no evidence (not
given, no shared partner) come after all others, ordered by the learned
distance.

A path ``i - k - j`` with chances ``p, p'`` of one class on its two edges
has ``i, j`` of one class with chance ``p p' + (1 - p)(1 - p') q`` (``q``:
of one class when both differ from ``k``); its evidence is measured against
a path whose edges say nothing (each at the chance of a given pair), so
given pairs chosen as near ones (each object's nearest) are no evidence by
their number alone. The chances take few distinct
values (the isotonic fit is a step function, its values rounded to
:data:`PATH_LEVELS` levels), so the sum over shared partners is a sum of
sparse products, one per eigenvector of the levels' log-ratio matrix.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.isotonic import IsotonicRegression

from ._numerics.spectral import eigh_symmetric
from ._objects_verdict import TIE_BREAK

#: Largest number of distinct chances of one class along an edge (the
#: isotonic fit's values, rounded on the log-odds scale when more).
PATH_LEVELS = 32

#: Squared distance of a pair with no evidence (not given, no shared given
#: partner): ``-log`` of a chance below any with evidence, so such pairs come
#: after every pair with some, ordered by the learned distance.
NO_EVIDENCE = 1e3

#: Chances are kept inside ``[PATH_CLIP, 1 - PATH_CLIP]``: an edge never
#: proves or rules out a class alone.
PATH_CLIP = 1e-3


def _logit(p):
    return np.log(p) - np.log1p(-p)


class PathEvidence:
    """The chance of one class for any pair, from the given pairs' graph.

    Parameters
    ----------
    n_objects : int
    a, b : ndarray of int
        The given pairs (each once), object indices.
    sq : ndarray
        Their squared distances.
    labelled : ndarray of int
        Objects whose class is known.
    labels : ndarray
        Their classes.
    """

    def __init__(self, n_objects, a, b, sq, labelled, labels):
        n = int(n_objects)
        label_of = np.full(n, -1)
        classes, codes = np.unique(np.asarray(labels), return_inverse=True)
        label_of[np.asarray(labelled, np.intp)] = codes
        both = (label_of[a] >= 0) & (label_of[b] >= 0)
        same = (label_of[a[both]] == label_of[b[both]]).astype(float)
        freq = np.bincount(codes, minlength=len(classes)) / len(codes)
        s = float(np.sum(freq**2))
        prior = float(same.mean()) if same.size else s
        # the chance of one class of a given pair (the given pairs may be chosen,
        # e.g. each object's nearest) and of any pair (the class frequencies)
        self.prior = float(np.clip(prior, PATH_CLIP, 1 - PATH_CLIP))
        self.base = float(np.clip(s, PATH_CLIP, 1 - PATH_CLIP))
        # of one class when both differ from a third object's class
        differ = float(np.sum(freq * (1 - freq) ** 2))
        self.q = float(np.clip(np.sum(freq * (s - freq**2)) / differ if differ > 0 else s,
                               PATH_CLIP, 1 - PATH_CLIP))
        # a path whose two edges say nothing (each at the given pairs' chance)
        self.path_prior = float(np.clip(self.prior**2 + (1 - self.prior) ** 2 * self.q,
                                        PATH_CLIP, 1 - PATH_CLIP))
        if same.size:
            fit = IsotonicRegression(increasing=False, out_of_bounds="clip").fit(sq[both], same)
            self._knots, self._values = fit.X_thresholds_, fit.y_thresholds_
        else:
            self._knots, self._values = np.array([0.0]), np.array([self.prior])
        # the levels: the chances the edges take, at most PATH_LEVELS of them
        odds = _logit(np.clip(self._values, PATH_CLIP, 1 - PATH_CLIP))
        if np.unique(odds).size > PATH_LEVELS:
            grid = np.linspace(odds.min(), odds.max(), PATH_LEVELS)
            odds = grid[np.argmin(np.abs(odds[:, None] - grid[None]), axis=1)]
        self._odds = odds
        self.levels = np.unique(odds)
        p = 1.0 / (1.0 + np.exp(-self.levels))
        path = p[:, None] * p[None] + (1 - p[:, None]) * (1 - p[None]) * self.q
        ratio = _logit(np.clip(path, PATH_CLIP, 1 - PATH_CLIP)) - _logit(self.path_prior)
        lam, vecs = eigh_symmetric(0.5 * (ratio + ratio.T), name="the paths' ratio matrix")
        keep = np.abs(lam) > 1e-9 * max(np.abs(lam).max(), 1e-300)
        self._lam, self._vecs = lam[keep], vecs[:, keep]
        # edge levels, both orientations, and one sparse factor per eigenvector
        level = self._level(sq)
        rows, cols = np.concatenate([a, b]), np.concatenate([b, a])
        levels = np.concatenate([level, level])
        self._n = n
        self._direct = sparse.csr_matrix(
            (self.levels[levels] - _logit(self.prior), (rows, cols)), shape=(n, n))
        self._factors = [sparse.csr_matrix((v[levels], (rows, cols)), shape=(n, n))
                         for v in self._vecs.T]
        self._edges = sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))

    def _level(self, sq):
        """Return the level index of each squared distance."""
        at = np.clip(np.searchsorted(self._knots, sq, side="right") - 1, 0,
                     len(self._knots) - 1)
        return np.searchsorted(self.levels, self._odds[at])

    def _as_sq(self, score, evidence, learned_sq):
        """Squared distances ``-log P(one class)`` from log-odds ``score``."""
        sq = np.where(evidence > 0, np.logaddexp(0.0, -score), NO_EVIDENCE)
        return sq + TIE_BREAK * learned_sq

    def block(self, rows, cols, learned_sq):
        """Squared distances between ``rows`` and ``cols`` (``learned_sq`` breaks ties)."""
        edges_rows, edges_cols = self._edges[rows], self._edges[cols]
        evidence = (edges_rows[:, cols] + edges_rows @ edges_cols.T).toarray()
        score = _logit(self.base) + self._direct[rows][:, cols].toarray()
        for lam, factor in zip(self._lam, self._factors):
            score += lam * (factor[rows] @ factor[cols].T).toarray()
        return self._as_sq(score, evidence, learned_sq)

    def new_rows(self, partners, partner_sq, cols, learned_sq):
        """Squared distances of new objects (their given partners and distances) to ``cols``."""
        score = np.full((len(partners), len(cols)), _logit(self.base))
        evidence = np.zeros_like(score)
        col_of = np.full(self._n, -1)
        col_of[np.asarray(cols)] = np.arange(len(cols))
        for i, (at, sq) in enumerate(zip(partners, partner_sq)):
            if len(at) == 0:
                continue
            levels = self._level(np.asarray(sq, float))
            inside = col_of[at] >= 0
            np.add.at(score[i], col_of[at[inside]],
                      self.levels[levels[inside]] - _logit(self.prior))
            evidence[i, col_of[at[inside]]] += 1.0
            hit = np.zeros(self._n)
            hit[at] = 1.0
            evidence[i] += self._edges[cols] @ hit
            for lam, vec, factor in zip(self._lam, self._vecs.T, self._factors):
                row = np.zeros(self._n)
                np.add.at(row, at, vec[levels])
                score[i] += lam * (factor[cols] @ row)
        return self._as_sq(score, evidence, learned_sq)


def path_evidence(given, rows, labels):
    """Return the :class:`PathEvidence` of the given squared distances ``given``.

    Parameters
    ----------
    given : GivenSquaredDistances
        The given pairs (a pair given more than once: its mean).
    rows : ndarray of int
        The labelled objects (may repeat).
    labels : ndarray
        Their classes.
    """
    a, b, sq = given.unique_pairs()
    return PathEvidence(given.n_objects, a, b, sq, rows, labels)
