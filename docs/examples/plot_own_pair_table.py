"""
Your own pair table: raw distances against a learned kernel
===========================================================

What a user typically has: objects with their own ids, a distance for *some*
of the pairs, in their own units, as a table, and class labels of the
objects. :class:`~megkernel.KernelDistances` turns object ids into distances
to the fitted objects, so a scikit-learn ``Pipeline`` into
``KNeighborsClassifier(metric="precomputed")`` classifies objects by id, and
one ``GridSearchCV`` compares

* the observed distances themselves (``learner=None``: the no-learning
  baseline; a pair nobody measured is never a neighbor), and
* the kernel that :class:`~megkernel.MEGKernelRegressor` learns from the
  observed pairs at its defaults, which fills in the missing ones.

The labels reach the k-NN only: the kernel is learned from the pairs, once
per parameter setting, and reused by every split. (The learner's own
verdict, from the pairs alone, is shown in
:ref:`sphx_glr_auto_examples_plot_batch_fit_curves.py`.)
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV, ShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from megkernel import KernelDistances, MEGKernelRegressor

# The user's data: a table of pairs by id with squared distances (here in
# units of 1e6), 40 % of the pairs observed, and a label per object
features, species = load_iris(return_X_y=True)
ids = np.array([f"flower-{i:03d}" for i in range(150)])
rng = np.random.default_rng(0)
a, b = rng.integers(0, 150, size=(2, 5000))
table = pd.DataFrame({"id_a": ids[a], "id_b": ids[b],
                      "sq_distance": 1e6 * np.sum((features[a] - features[b]) ** 2, axis=1)})
labels = pd.Series(species, index=ids)
print(table.head())

# %%
# One pipeline, one search: the learner is a parameter (``None`` or a
# learner), searchable like any other (e.g. ``kernel__learner__max_iter``).

pipe = Pipeline([
    ("kernel", KernelDistances(pairs=table[["id_a", "id_b"]], targets=table["sq_distance"],
                               given_squared=True)),
    ("knn", KNeighborsClassifier(n_neighbors=1, metric="precomputed")),
])
learner = MEGKernelRegressor(objects=ids, random_state=0)
search = GridSearchCV(pipe, {"kernel__learner": [None, learner]},
                      cv=ShuffleSplit(10, test_size=0.5, random_state=0))
search.fit(labels.index, labels)
raw, learned = search.cv_results_["mean_test_score"]
print(f"1-NN accuracy: observed distances {raw:.3f}, learned kernel {learned:.3f}")

# %%
# The accuracy of both on each of the ten splits (the same splits for both):

splits = np.array([[search.cv_results_[f"split{i}_test_score"][j] for j in range(2)]
                   for i in range(10)])
fig, ax = plt.subplots(figsize=(5, 4), layout="constrained")
ax.plot([0, 1], splits.T, color="tab:gray", alpha=0.5, marker="o")
ax.plot([0, 1], splits.mean(axis=0), color="tab:blue", marker="o", linewidth=3, label="mean")
ax.set_xticks([0, 1], ["observed distances", "learned kernel"])
ax.set_xlim(-0.3, 1.3)
ax.set_ylabel("1-NN accuracy (50/50 split of the objects)")
ax.legend()
ax.grid(alpha=0.3)
