"""Family-structured data sets in a user's own units (for the DefiniteBoost benchmarks).

Objects are DNA-like sequences descended from a few planted family ancestors
(random substitutions); the distance of two objects is ``1000 (1 - cosine)``
of their 4-mer count vectors, the kind of units a practitioner brings. A random
fraction of the pairs is "observed" and handed over as a pandas table with
string ids, as a user would.
"""

from __future__ import annotations

from itertools import product

import numpy as np

__all__ = ["family_sequences", "observed_pairs", "raw_knn_accuracy", "knn_accuracy"]

_KMERS = {"".join(word): i for i, word in enumerate(product("ACGT", repeat=4))}


def _kmer_counts(sequence):
    counts = np.zeros(len(_KMERS))
    for start in range(len(sequence) - 3):
        counts[_KMERS[sequence[start:start + 4]]] += 1
    return counts


def family_sequences(n_objects=200, n_families=4, length=300, mutation=0.35,
                     n_subfamilies=1, seed=0):
    """Sequences in ``n_families`` planted families and their distances.

    Each family has an ancestor; ``n_subfamilies`` intermediate ancestors per
    family (mutated from it at ``mutation / 2``) and members mutated from one
    of those at ``mutation`` (each site replaced by a random base with that
    probability).

    Returns
    -------
    ids : ndarray of str, shape (n_objects,)
    labels : ndarray of int, shape (n_objects,)
    distances : ndarray of shape (n_objects, n_objects)
        ``1000 (1 - cosine)`` of the 4-mer counts.
    """
    rng = np.random.default_rng(seed)
    bases = np.array(list("ACGT"))

    def mutate(seq, rate):
        seq = seq.copy()
        hit = rng.random(seq.size) < rate
        seq[hit] = rng.choice(bases, size=int(hit.sum()))
        return seq

    labels = np.sort(rng.integers(0, n_families, size=n_objects))
    ancestors = [rng.choice(bases, size=length) for _ in range(n_families)]
    subs = [[mutate(a, mutation / 2) for _ in range(n_subfamilies)] for a in ancestors]
    sequences = ["".join(mutate(subs[f][rng.integers(n_subfamilies)], mutation))
                 for f in labels]
    counts = np.array([_kmer_counts(s) for s in sequences])
    unit = counts / np.linalg.norm(counts, axis=1, keepdims=True)
    distances = 1000.0 * np.clip(1.0 - unit @ unit.T, 0.0, None)
    np.fill_diagonal(distances, 0.0)
    order = rng.permutation(n_objects)  # id numbers not in family order
    ids = np.array([f"seq{k:04d}" for k in range(n_objects)])[order]
    return ids, labels, distances


def observed_pairs(ids, distances, fraction=0.2, seed=0):
    """A random ``fraction`` of the pairs as a pandas DataFrame ``a, b, distance``."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(len(ids), k=1)
    pick = rng.random(rows.size) < fraction
    rows, cols = rows[pick], cols[pick]
    return pd.DataFrame({"a": ids[rows], "b": ids[cols],
                         "distance": distances[rows, cols]})


def _split_accuracy(matrix, labels, n_splits=10, seed=0):
    from sklearn.model_selection import ShuffleSplit
    from sklearn.neighbors import KNeighborsClassifier

    scores = []
    for train, test in ShuffleSplit(n_splits, test_size=0.5,
                                    random_state=seed).split(labels):
        knn = KNeighborsClassifier(n_neighbors=1, metric="precomputed")
        knn.fit(matrix[np.ix_(train, train)], labels[train])
        scores.append(knn.score(matrix[np.ix_(test, train)], labels[test]))
    return float(np.mean(scores))


def raw_knn_accuracy(ids, labels, table):
    """1-NN accuracy on the observed distances only (a missing pair is never a
    neighbour: a distance far beyond every observed one)."""
    position = {name: k for k, name in enumerate(ids)}
    a = table["a"].map(position).to_numpy()
    b = table["b"].map(position).to_numpy()
    matrix = np.full((len(ids), len(ids)), 1e300)
    np.fill_diagonal(matrix, 0.0)
    matrix[a, b] = matrix[b, a] = table["distance"].to_numpy()
    return _split_accuracy(matrix, labels)


def knn_accuracy(model, ids, labels):
    """1-NN accuracy under the squared distances of a fitted kernel learner."""
    K = model.kernel_
    position = {name: k for k, name in enumerate(model.objects_)}
    order = np.array([position[name] for name in ids])
    K = K[np.ix_(order, order)]
    diag = np.diag(K)
    return _split_accuracy(np.maximum(diag[:, None] + diag[None, :] - 2 * K, 0.0),
                           labels)


def planted_partition_hops(n_objects=500, n_blocks=8, degree_in=6.0, degree_out=2.0, seed=0):
    """Nodes of a planted-partition graph and their hop counts (shortest paths).

    Each node links to about ``degree_in`` nodes of its own block and
    ``degree_out`` of the others; the distance of two nodes is the number of
    edges on a shortest path between them (one more than the largest for
    nodes in different components), the kind of distance a graph user has.

    Returns
    -------
    ids : ndarray of str, shape (n_objects,)
    labels : ndarray of int, shape (n_objects,)
        The planted blocks.
    distances : ndarray of shape (n_objects, n_objects)
        Hop counts.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    rng = np.random.default_rng(seed)
    labels = np.sort(rng.integers(0, n_blocks, size=n_objects))
    size = n_objects / n_blocks
    same = labels[:, None] == labels[None, :]
    p = np.where(same, degree_in / size, degree_out / (n_objects - size))
    edges = np.triu(rng.random((n_objects, n_objects)) < p, 1)
    hops = shortest_path(csr_matrix(edges | edges.T), unweighted=True, directed=False)
    reachable = np.isfinite(hops)
    hops[~reachable] = hops[reachable].max() + 1.0
    ids = np.array([f"node{k:05d}" for k in rng.permutation(n_objects)])
    return ids, labels, hops
