"""Tables like a user's own, with plain distances (for the speed benchmarks).

Two deterministic tables of the kinds a new user brings to
:class:`~megkernel.DefiniteBoostKernel` and :class:`~megkernel.MEGKernelRegressor`:

* :func:`word_table`: words descended from a few root words by typos
  (substitutions, insertions, deletions), their Levenshtein edit distance;
* :func:`survey_table`: respondents of a few latent groups answering numeric,
  ordinal and categorical questions, their Gower distance.

Each returns the ids, the planted class of each object (for held-out 1-NN)
and a random share of the pairs as a pandas table ``a, b, distance``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["word_table", "survey_table", "edit_distance", "gower_distances"]

_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def edit_distance(s, t):
    """Levenshtein distance of two strings (unit costs)."""
    previous = list(range(len(t) + 1))
    for i, cs in enumerate(s, 1):
        current = [i]
        for j, ct in enumerate(t, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (cs != ct)))
        previous = current
    return previous[-1]


def _pick_pairs(n, fraction, rng):
    rows, cols = np.triu_indices(n, k=1)
    pick = rng.random(rows.size) < fraction
    return rows[pick], cols[pick]


def _table(ids, rows, cols, distances):
    import pandas as pd

    return pd.DataFrame({"a": ids[rows], "b": ids[cols],
                         "distance": np.asarray(distances, dtype=float)})


def word_table(n_words=600, n_roots=12, fraction=0.2, seed=0):
    """Words of ``n_roots`` families and the edit distance of a random share of pairs.

    Each root is 6-10 random letters; a member makes 1-4 random edits
    (substitute, insert, delete) of its root.

    Returns
    -------
    ids : ndarray of str
    labels : ndarray of int
    table : DataFrame with columns ``a, b, distance``
    """
    rng = np.random.default_rng(seed)
    roots = ["".join(rng.choice(_LETTERS, size=rng.integers(6, 11)))
             for _ in range(n_roots)]
    labels = rng.integers(0, n_roots, size=n_words)
    words = []
    for label in labels:
        word = list(roots[label])
        for _ in range(rng.integers(1, 5)):
            kind = rng.integers(3)
            at = rng.integers(len(word))
            if kind == 0:
                word[at] = rng.choice(_LETTERS)
            elif kind == 1:
                word.insert(at, rng.choice(_LETTERS))
            elif len(word) > 3:
                del word[at]
        words.append("".join(word))
    ids = np.array([f"{w}#{k}" for k, w in enumerate(words)])
    rows, cols = _pick_pairs(n_words, fraction, rng)
    distances = [edit_distance(words[r], words[c]) for r, c in zip(rows, cols)]
    return ids, labels, _table(ids, rows, cols, distances)


def gower_distances(numeric, categorical):
    """Gower distance of mixed rows: numeric range-scaled, categorical mismatch."""
    span = numeric.max(axis=0) - numeric.min(axis=0)
    span[span == 0] = 1.0
    scaled = numeric / span
    total = np.zeros((len(numeric), len(numeric)))
    for column in scaled.T:
        total += np.abs(column[:, None] - column[None, :])
    for column in categorical.T:
        total += column[:, None] != column[None, :]
    return total / (numeric.shape[1] + categorical.shape[1])


def survey_table(n_respondents=944, n_groups=5, fraction=0.17, seed=0):
    """Survey answers of ``n_groups`` latent groups and the Gower distance of pairs.

    Four numeric answers (age, income, hours, a score), three 5-point ordinal
    answers (taken as numeric) and five categorical ones; each group shifts
    the numeric means and prefers some categories, with noise.

    Returns
    -------
    ids : ndarray of str
    labels : ndarray of int
    table : DataFrame with columns ``a, b, distance``
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_groups, size=n_respondents)
    centres = rng.normal(size=(n_groups, 4)) * [12.0, 15000.0, 8.0, 1.0]
    numeric = (np.array([45.0, 40000.0, 38.0, 0.0]) + centres[labels]
               + rng.normal(size=(n_respondents, 4)) * [10.0, 12000.0, 7.0, 1.0])
    ordinal = np.clip(np.round(rng.normal(size=(n_groups, 3)) * 1.2 + 3)[labels]
                      + rng.integers(-1, 2, size=(n_respondents, 3)), 1, 5)
    preferred = rng.integers(0, 4, size=(n_groups, 5))
    keep = rng.random((n_respondents, 5)) < 0.6
    categorical = np.where(keep, preferred[labels], rng.integers(0, 4, size=(n_respondents, 5)))
    distances = gower_distances(np.hstack([numeric, ordinal]), categorical)
    ids = np.array([f"resp{k:04d}" for k in range(n_respondents)])
    rows, cols = _pick_pairs(n_respondents, fraction, rng)
    return ids, labels, _table(ids, rows, cols, distances[rows, cols])
