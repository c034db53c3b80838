"""Data sets a user might bring: objects in planted families, distances in the
user's own units, string ids, only some pairs observed.

Used by ``bench_own_data.py``; nothing here is tuned on, every generator takes
a seed and its shape as arguments.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["family_sequences", "kmer_counts", "pair_table", "observed_distance_matrix"]


def family_sequences(n_families=4, per_family=51, length=300, mutation=0.25, seed=0):
    """DNA-like sequences: ``n_families`` random ancestors, each copied with
    point mutations at rate ``mutation``. Returns ``(ids, sequences, labels)``."""
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("ACGT"))
    ids, sequences, labels = [], [], []
    for family in range(n_families):
        ancestor = rng.integers(0, 4, size=length)
        for member in range(per_family):
            seq = ancestor.copy()
            hit = rng.random(length) < mutation
            seq[hit] = rng.integers(0, 4, size=hit.sum())
            ids.append(f"seq{family}_{member:03d}_{rng.integers(1e6):06d}")
            sequences.append("".join(alphabet[seq]))
            labels.append(family)
    order = rng.permutation(len(ids))
    return ([ids[i] for i in order], [sequences[i] for i in order],
            np.asarray(labels)[order])


def kmer_counts(sequences, k=4):
    """Counts of every k-mer over ACGT, one row per sequence."""
    index = {c: i for i, c in enumerate("ACGT")}
    out = np.zeros((len(sequences), 4 ** k))
    for row, seq in enumerate(sequences):
        codes = np.array([index[c] for c in seq])
        words = np.zeros(len(seq) - k + 1, dtype=np.int64)
        for j in range(k):
            words = words * 4 + codes[j:len(seq) - k + 1 + j]
        np.add.at(out[row], words, 1.0)
    return out


def pair_table(ids, distances, fraction=0.2, seed=0, column="distance"):
    """A random ``fraction`` of the pairs of distinct objects as a DataFrame
    ``(a, b, column)`` with string ids."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    a, b = np.triu_indices(n, k=1)
    keep = rng.random(len(a)) < fraction
    a, b = a[keep], b[keep]
    swap = rng.random(len(a)) < 0.5  # no order to rely on
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    ids = np.asarray(ids, dtype=object)
    return pd.DataFrame({"a": ids[a], "b": ids[b], column: distances[a, b]})


def observed_distance_matrix(table, ids, column="distance"):
    """The observed distances as a square matrix over ``ids``, NaN where missing."""
    position = {obj: i for i, obj in enumerate(ids)}
    D = np.full((len(ids), len(ids)), np.nan)
    rows = table["a"].map(position).to_numpy()
    cols = table["b"].map(position).to_numpy()
    D[rows, cols] = D[cols, rows] = table[column].to_numpy()
    np.fill_diagonal(D, 0.0)
    return D
