"""Evidence through the graph of given pairs: ``keep_given="paths"``.

Where few pairs are given, an object's few measured partners are all the
observed distances say about it, and a kernel learned from them may learn
next to nothing. With class labels of the fit objects, they say more: each
given distance tells how likely its two objects are of one class, and a
partner whose class is known (a fit object) turns that into evidence for a
class; a partner whose class is not known passes on what its own labelled
partners say about its class. So an object's class is weighed from all its
given distances at once, not from its nearest one alone.

The chance that a given pair is of one class is read off its given distance
by a decreasing isotonic regression over the labelled given pairs. An
object's log-odds for class ``c`` add, naive Bayes, over its given partners

- of class ``c`` (labelled): the log-likelihood ratio ``logit p(d) -
  logit p0`` of its distance ``d`` and of its being given (``p0``: the
  chance of one class of two objects drawn at random, from the class
  frequencies; Bayes' rule for ``p(d)``, the chance given both, so that
  pairs chosen as near ones, e.g. each object's nearest, weigh as evidence);
- not labelled: ``log(1 + b(c) (r(d) - 1))``, ``r(d)`` that likelihood
  ratio and ``b(c)`` the partner's chance of class ``c`` from its own
  labelled partners (two steps through the graph), the object's own label
  left out of its partner's chance (and the leave-one-out comparison of
  ``keep_given="auto"`` scores each object with a chance map fitted without
  its pairs: :func:`cross_fitted_block`);

from the class frequencies of the fit objects. The squared distance of an
object to a fit object is ``-log`` of its chance of that object's class (to
an object without a label: of the two sharing a class, their chances
independent), so the nearest fit objects are those of its most likely
class, and the learned kernel orders them. An object without any given
partner is at :data:`NO_EVIDENCE` from every other (its row), in the learned
kernel's order.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.special import logsumexp
from sklearn.isotonic import IsotonicRegression

from ._objects_verdict import TIE_BREAK

#: Squared distance from an object with no given partner (no evidence): a
#: constant row, ordered by the learned distance alone.
NO_EVIDENCE = 1e3

#: Chances are kept inside ``[PATH_CLIP, 1 - PATH_CLIP]``: an edge never
#: proves or rules out a class alone.
PATH_CLIP = 1e-3

#: Rows of a block scored at once: at most this many rows, and at most
#: :data:`MESSAGE_BUDGET` entries of the messages of their unlabelled partners
#: (one class vector per given pair of these rows; a row alone may exceed it).
ROW_CHUNK = 256
MESSAGE_BUDGET = 2_000_000


def _chunks(sizes, budget, most):
    """Yield ``(start, stop)`` runs of consecutive items of at most ``budget`` in size.

    At most ``most`` items a run; a run's first item may exceed the budget alone.
    """
    start, n = 0, len(sizes)
    ends = np.cumsum(sizes)
    while start < n:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + budget, side="right"))
        stop = min(max(stop, start + 1), start + most, n)
        yield start, stop
        start = stop


def _logit(p):
    return np.log(p) - np.log1p(-p)


def _log_softmax(scores):
    return scores - logsumexp(scores, axis=1, keepdims=True)


class PathEvidence:
    """Each object's chance of each class, from the given pairs and the known labels.

    Parameters
    ----------
    n_objects : int
    a, b : ndarray of int
        The given pairs (each once), object indices.
    sq : ndarray
        Their squared distances.
    labelled : ndarray of int
        Objects whose class is known (may repeat).
    labels : ndarray
        Their classes.
    learned_unit : float, default=1.0
        A learned squared distance of the fit (fixed there): the learned
        distances that break ties are read in this unit, so that the
        kernel's units never outweigh a class chance.
    held_out : ndarray of bool, optional
        Objects whose pairs the chance map is not fitted on: scored with
        such a map, their own labels have not shaped it (the leave-one-out
        comparison of ``keep_given="auto"``, cross-fitted by folds).
    """

    def __init__(self, n_objects, a, b, sq, labelled, labels, learned_unit=1.0,
                 held_out=None):
        n = int(n_objects)
        labelled = np.asarray(labelled, np.intp)
        label_of = np.full(n, -1)
        classes, codes = np.unique(np.asarray(labels), return_inverse=True)
        label_of[labelled] = codes
        # the map reads squared distances over the largest given one: the
        # isotonic fit merges abscissae closer than an absolute 1e-15
        largest = float(np.max(sq)) if np.size(sq) else 0.0
        self._unit = largest if largest > 0 and np.isfinite(largest) else 1.0
        unit = float(learned_unit)
        self._learned_unit = unit if unit > 0 and np.isfinite(unit) else 1.0
        both = (label_of[a] >= 0) & (label_of[b] >= 0)
        if held_out is not None:
            both &= ~(held_out[a] | held_out[b])
        same = (label_of[a[both]] == label_of[b[both]]).astype(float)
        freq = np.bincount(codes, minlength=len(classes)) / len(codes)
        # the chance of one class of two objects drawn at random (the class
        # frequencies): a given pair's chance is weighed against it, so that a
        # pair given because it is near (each object's nearest) is evidence too
        self.prior = float(np.clip(np.sum(freq**2), PATH_CLIP, 1 - PATH_CLIP))
        if same.size:
            fit = IsotonicRegression(increasing=False, out_of_bounds="clip").fit(
                sq[both] / self._unit, same)
            self._knots, self._values = fit.X_thresholds_, fit.y_thresholds_
        else:
            self._knots, self._values = np.array([0.0]), np.array([self.prior])
        self._n = n
        self._label_of = label_of
        self._log_freq = np.log(freq)
        rows, cols = np.concatenate([a, b]), np.concatenate([b, a])
        ratio = np.tile(self.log_ratio(sq), 2)
        self._ratios = sparse.csr_matrix((ratio, (rows, cols)), shape=(n, n))
        self._ratios.sort_indices()
        self._degree = np.bincount(rows, minlength=n)
        known = np.flatnonzero(label_of >= 0)
        onehot = sparse.csr_matrix(
            (np.ones(known.size), (known, label_of[known])), shape=(n, len(classes)))
        # each object's class log-odds from its labelled partners (and the frequencies)
        self._evidence = self._log_freq + np.asarray((self._ratios @ onehot).todense())

    @property
    def learned_unit(self):
        """The learned squared distance that breaks ties is read in this unit."""
        return self._learned_unit

    def chance(self, sq):
        """Return the chance of one class of pairs at squared distances ``sq``."""
        # the isotonic fit's own reading: linear between its knots, flat beyond
        return np.clip(np.interp(np.asarray(sq, float) / self._unit, self._knots, self._values),
                       PATH_CLIP, 1 - PATH_CLIP)

    def log_ratio(self, sq):
        """Return the log-likelihood ratio, one class against not, of given pairs at ``sq``."""
        return _logit(self.chance(np.asarray(sq, float))) - _logit(self.prior)

    def _messages(self, partners, ratios, own):
        """Class log-likelihoods that unlabelled ``partners`` pass on (one row each).

        ``own``: the class code of the object receiving each (-1: none), left
        out of its partner's chance.
        """
        beliefs = self._evidence[partners]
        mine = own >= 0
        beliefs[np.flatnonzero(mine), own[mine]] -= ratios[mine]
        chance = np.exp(_log_softmax(beliefs))
        return np.log1p(chance * np.expm1(ratios)[:, None])

    def _scores(self, rows):
        """Return the class log-odds of ``rows`` (each row's own label left out)."""
        rows = np.asarray(rows, np.intp)
        n_classes = self._evidence.shape[1]
        out = np.empty((rows.size, n_classes))
        for start, stop in _chunks(self._degree[rows] * n_classes, MESSAGE_BUDGET, ROW_CHUNK):
            chunk = rows[start:stop]
            scores = self._evidence[chunk].copy()
            edges = self._ratios[chunk]
            at = np.repeat(np.arange(chunk.size), np.diff(edges.indptr))
            unlabelled = self._label_of[edges.indices] < 0
            at, partners = at[unlabelled], edges.indices[unlabelled]
            messages = self._messages(partners, edges.data[unlabelled],
                                      self._label_of[chunk][at])
            gather = sparse.csr_matrix((np.ones(at.size), (at, np.arange(at.size))),
                                       shape=(chunk.size, at.size))
            out[start:start + chunk.size] = scores + gather @ messages
        return out

    def _as_sq(self, log_chance, partnered, cols, learned_sq):
        """Squared distances ``-log P(one class)`` to ``cols`` from the rows' class log-chances."""
        cols = np.asarray(cols, np.intp)
        label = self._label_of[cols]
        score = np.empty((log_chance.shape[0], cols.size))
        known = label >= 0
        score[:, known] = log_chance[:, label[known]]
        if not known.all():  # both chances unknown: of one class, independently
            other = np.exp(_log_softmax(self._scores(cols[~known])))
            with np.errstate(divide="ignore"):
                score[:, ~known] = np.log(np.exp(log_chance) @ other.T)
        sq = np.where(partnered[:, None], np.clip(-score, 0.0, NO_EVIDENCE), NO_EVIDENCE)
        return sq + TIE_BREAK * (learned_sq / self._learned_unit)

    def block(self, rows, cols, learned_sq):
        """Squared distances between ``rows`` and ``cols`` (``learned_sq`` breaks ties)."""
        rows = np.asarray(rows, np.intp)
        return self._as_sq(_log_softmax(self._scores(rows)), self._degree[rows] > 0, cols,
                           learned_sq)

    def new_rows(self, partners, partner_sq, cols, learned_sq):
        """Squared distances of new objects (their given partners and distances) to ``cols``."""
        scores = np.tile(self._log_freq, (len(partners), 1))
        partnered = np.zeros(len(partners), bool)
        for i, (at, sq) in enumerate(zip(partners, partner_sq)):
            if len(at) == 0:
                continue
            at, where = np.unique(np.asarray(at, np.intp), return_inverse=True)
            sq = np.bincount(where, np.asarray(sq, float)) / np.bincount(where)  # repeats: mean
            ratios = self.log_ratio(sq)
            label = self._label_of[at]
            known = label >= 0
            np.add.at(scores[i], label[known], ratios[known])
            scores[i] += self._messages(at[~known], ratios[~known],
                                        np.full((~known).sum(), -1)).sum(axis=0)
            partnered[i] = True
        return self._as_sq(_log_softmax(scores), partnered, cols, learned_sq)


def path_evidence(given, rows, labels, learned_unit=1.0, held_out=None):
    """Return the :class:`PathEvidence` of the given squared distances ``given``.

    Parameters
    ----------
    given : GivenSquaredDistances
        The given pairs (a pair given more than once: its mean).
    rows : ndarray of int
        The labelled objects (may repeat, with one class each).
    labels : ndarray
        Their classes.
    learned_unit, held_out
        As :class:`PathEvidence` takes them.
    """
    a, b, sq = given.unique_pairs()
    return PathEvidence(given.n_objects, a, b, sq, rows, labels, learned_unit, held_out)


#: Folds of the leave-one-out comparison's chance maps (:func:`cross_fitted_block`).
VERDICT_FOLDS = 5


def cross_fitted_block(given, rows, labels, unique_rows, learned, learned_unit):
    """Return the block of ``unique_rows`` against themselves, cross-fitted.

    Each row is scored with a chance map fitted without the pairs of its
    fold's objects. A map fitted on every labelled pair has seen the pairs of the row being
    left out, labels included, and favours its true class: on labels and
    distances of pure noise it won the leave-one-out comparison by 0.08.
    Folds are the rows in their order (every :data:`VERDICT_FOLDS`-th).
    """
    unique_rows = np.asarray(unique_rows, np.intp)
    block = np.empty((unique_rows.size, unique_rows.size))
    for fold in range(min(VERDICT_FOLDS, unique_rows.size)):
        at = np.arange(fold, unique_rows.size, VERDICT_FOLDS)
        held_out = np.zeros(given.n_objects, bool)
        held_out[unique_rows[at]] = True
        evidence = path_evidence(given, rows, labels, learned_unit, held_out)
        block[at] = evidence.block(unique_rows[at], unique_rows, learned[at])
    return block
