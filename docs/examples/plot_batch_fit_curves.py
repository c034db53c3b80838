"""
Watching a batch fit: loss curve, held-out score and early stopping
===================================================================

:meth:`MEGKernelRegressor.fit <megkernel.MEGKernelRegressor.fit>` minimises
the total square loss of the observed squared distances over the kernels of
its trace, by MEG updates on the whole loss (mirror descent with a
step that needs no tuning). It starts from a spectral prior (classical
scaling of the observed distances, its rank chosen on held-out pairs), holds
out ``validation_fraction`` of the pairs, stops when their loss has not
improved for ``n_iter_no_change`` iterations, and refits the chosen number of
iterations on every pair. The fitted model keeps the record:

* ``validation_scores_``: R² of the held-out squared distances for the prior
  and each iterate of the run on the training pairs;
* ``loss_curve_``: the root mean square training error of the prior and
  each iterate of the returned kernel's run (the refit on every pair), in
  the units of ``y``;
* ``prior_score_`` and ``validation_score_``: the verdict, prior against the
  iterate early stopping chose.

Here: 120 objects with a hidden 4-dimensional configuration, a quarter of
the pairs observed, each squared distance off by a random factor of about
±20 % (noise), in arbitrary units (``trace="auto"`` adapts).
"""

import matplotlib.pyplot as plt
import numpy as np

from megkernel import MEGKernelRegressor

rng = np.random.default_rng(0)
n_objects = 120
points = rng.normal(size=(n_objects, 4)) * [3, 2, 1, 0.5]
rows, cols = np.triu_indices(n_objects, k=1)
observed = rng.random(len(rows)) < 0.25
pairs = np.column_stack([rows[observed], cols[observed]])
sq_distances = (np.sum((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2, axis=1)
                * rng.lognormal(0.0, 0.2, size=len(pairs)))

model = MEGKernelRegressor(random_state=0).fit(pairs, sq_distances)
chosen = int(np.argmax(model.validation_scores_))
print(f"{len(pairs)} pairs; prior of rank {model.prior_rank_}; "
      f"{model.n_iter_} iterations in all, converged: {model.converged_}")
print(f"held-out R^2: prior {model.prior_score_:.3f}, "
      f"learned {model.validation_score_:.3f} (iterate {chosen})")

# %%
# Left, the held-out score of each iterate: the fit stops
# ``n_iter_no_change = 5`` iterations after the best one. Right, the
# training error of the returned kernel's run, which repeats the chosen number
# of iterations on every pair; every accepted step lowers it.

fig, (score_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
score_ax.plot(model.validation_scores_, marker="o", label="held-out R² of each iterate")
score_ax.axhline(model.prior_score_, color="black", linestyle="--",
                 label=f"prior ({model.prior_score_:.3f})")
score_ax.plot(chosen, model.validation_scores_[chosen], marker="*", markersize=15,
              color="tab:red", linestyle="none",
              label=f"chosen by early stopping ({model.validation_score_:.3f})")
score_ax.set_xlabel("iteration (0: the prior)")
score_ax.set_ylabel("R² of held-out squared distances")
score_ax.legend()
score_ax.grid(alpha=0.3)
loss_ax.plot(model.loss_curve_, marker="o", color="tab:green")
loss_ax.set_yscale("log")
loss_ax.set_xlabel("iteration of the refit on every pair (0: the prior)")
loss_ax.set_ylabel("root mean square training error (units of y)")
loss_ax.grid(alpha=0.3)
