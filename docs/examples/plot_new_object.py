"""
A new sequence arrives
======================

A kernel was learned over the proteins a lab knows. Then new proteins are
sequenced: each one's distance is measured to *some* known proteins (a
handful of alignments, not all of them), and the lab wants its nearest
known proteins and its genus now, without learning the kernel again.

:class:`~megkernel.KernelDistances` places an id the fit never saw from its
distances to known objects (``new_pairs=``, ``new_distances=``: a pair
table, set before ``predict`` without a refit) by the out-of-sample
extension of the learned kernel, and the k-NN downstream labels it. The
baseline is the same table without learning (``learner=None``): the new
protein's few measured distances, the other known proteins missing.

Data: the 113 bundled gyrB proteins of three genera
(:func:`~megkernel.datasets.load_gyrb`), their distance the spectrum
kernel's; 13 of them play the new arrivals, never in the fit; 30 % of the
pairs of the 100 others are observed.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from megkernel import KernelDistances, MEGKernelRegressor
from megkernel.datasets import load_gyrb

gyrb = load_gyrb(None)
unit = gyrb.kernel / np.mean(np.diag(gyrb.kernel))  # unit diagonal: distances in [0, 2]
diagonal = np.diag(unit)
distances = np.sqrt(np.maximum(diagonal[:, None] + diagonal[None, :] - 2 * unit, 0.0))
ids = np.array([f"gyrB-{i:03d}" for i in range(len(unit))], dtype=object)
labels = gyrb.target_names[gyrb.labels]

rng = np.random.default_rng(0)
new = np.zeros(len(ids), dtype=bool)
new[rng.choice(len(ids), 13, replace=False)] = True
known = np.flatnonzero(~new)

# the lab's table over the known proteins: 30 % of their pairs
a, b = np.triu_indices(len(known), 1)
observed = rng.random(a.size) < 0.3
table = pd.DataFrame({"a": ids[known[a[observed]]], "b": ids[known[b[observed]]],
                      "distance": distances[known[a[observed]], known[b[observed]]]})

# the new proteins: each aligned with 8 known proteins
measured = [(ids[i], ids[j], distances[i, j])
            for i in np.flatnonzero(new) for j in rng.choice(known, 8, replace=False)]
new_table = pd.DataFrame(measured, columns=["new", "known", "distance"])

pipe = Pipeline([
    ("distances", KernelDistances(learner=MEGKernelRegressor(squared=False, random_state=0),
                                  pairs=table[["a", "b"]], targets=table["distance"])),
    ("knn", KNeighborsClassifier(n_neighbors=1, metric="precomputed")),
])
pipe.fit(ids[known], labels[known])

# they arrive: no refit, the table of their measured distances is all it takes
pipe.set_params(distances__new_pairs=new_table[["new", "known"]],
                distances__new_distances=new_table["distance"])
learned = pipe.score(ids[new], labels[new])
baseline = pipe.set_params(distances__learner=None).fit(ids[known], labels[known])
observed_only = baseline.score(ids[new], labels[new])
print(f"genus of the 13 new proteins, 1-NN among the 100 known, 8 distances each:\n"
      f"  learned kernel, placed: {learned:.2f}   observed distances alone: "
      f"{observed_only:.2f}")

# %%
# Where the kernel puts one of them: its placed distances to every known
# protein against the true ones (which the lab never measured but for 8).
pipe.set_params(distances__learner=MEGKernelRegressor(squared=False, random_state=0))
pipe.fit(ids[known], labels[known])
first = np.flatnonzero(new)[0]
placed = pipe[0].transform([ids[first]])[0]
given = new_table["known"][new_table["new"] == ids[first]]
is_given = np.isin(ids[known], given.to_numpy())

fig, ax = plt.subplots(figsize=(5.5, 4.5))
for genus, marker in zip(gyrb.target_names, "os^"):
    mine = labels[known] == genus
    ax.scatter(distances[first, known][mine & ~is_given], placed[mine & ~is_given],
               s=16, marker=marker, alpha=0.6, label=f"{genus}")
ax.scatter(distances[first, known][is_given], placed[is_given], s=70,
           facecolors="none", edgecolors="k", label="the 8 measured")
top = max(distances[first, known].max(), placed.max())
ax.plot([0, top], [0, top], color="grey", lw=0.8)
ax.set_xlabel("true distance to each known protein")
ax.set_ylabel("distance after placement")
ax.set_title(f"New protein {ids[first]} ({labels[first]})")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
