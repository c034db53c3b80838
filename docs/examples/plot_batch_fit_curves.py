"""
Watching a batch fit: loss curve, held-out score and early stopping
===================================================================

:meth:`MEGKernelRegressor.fit <megkernel.MEGKernelRegressor.fit>` minimizes
the total square loss of the observed squared distances over the kernels of
its trace, by MEG updates on the whole loss (mirror descent with a
step that needs no tuning). It starts from a spectral prior (classical
scaling of the observed distances, its rank chosen on held-out pairs), holds
out ``validation_fraction`` of the pairs, runs until the training loss has
not improved for ``n_iter_no_change`` iterations (or until the held-out pairs
show it overfitting: then it returns their best iterate), and refits the
chosen number of iterations on every pair. The fitted model keeps the
record:

* ``validation_scores_``: R² of the held-out squared distances for the prior
  and each iterate of the run on the training pairs;
* ``loss_curve_``: the root mean square training error of the prior and
  each iterate of the returned kernel's run (the refit on every pair), in
  the units of ``y``;
* ``prior_score_`` and ``validation_score_``: the verdict, prior against the
  iterate returned.

Here: 120 objects with a hidden 4-dimensional configuration, a quarter of
the pairs observed, each squared distance off by a random factor of about
±20 % (noise), in arbitrary units (``trace="auto"`` adapts).
"""

import matplotlib.pyplot as plt
import numpy as np

from megkernel import MEGKernelRegressor
from megkernel.plotting import plot_learning_curve

rng = np.random.default_rng(0)
n_objects = 120
points = rng.normal(size=(n_objects, 4)) * [3, 2, 1, 0.5]
rows, cols = np.triu_indices(n_objects, k=1)
observed = rng.random(len(rows)) < 0.25
pairs = np.column_stack([rows[observed], cols[observed]])
sq_distances = (np.sum((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2, axis=1)
                * rng.lognormal(0.0, 0.2, size=len(pairs)))

model = MEGKernelRegressor(random_state=0).fit(pairs, sq_distances)
chosen = int(np.flatnonzero(model.validation_scores_ == model.validation_score_)[-1])
print(f"{len(pairs)} pairs; prior of rank {model.prior_rank_}; "
      f"{model.n_iter_} iterations in all, converged: {model.converged_}")
print(f"held-out R^2: prior {model.prior_score_:.3f}, "
      f"learned {model.validation_score_:.3f} (iterate {chosen})")

# %%
# :func:`~megkernel.plotting.plot_learning_curve` draws this record for any
# fitted model, in one call: the training error of the returned kernel's run
# (left axis; every accepted step lowers it; the run repeats the chosen
# number of iterations on every pair), and the held-out R² of each iterate
# of the run on the training pairs (right axis), with the prior's score
# dotted and the iterate returned starred: the converged one, unless the
# held-out pairs had shown the fit overfitting (their loss above its minimum
# by more than two standard errors for ``n_iter_no_change = 5`` iterations in
# a row). It returns the matplotlib ``Axes`` (``ax=`` draws on one of yours).

ax = plot_learning_curve(model)

# %%
# The same call draws an on-line model's total loss (after ``partial_fit``,
# or ``fit`` with ``solver="online"``; with ``target=`` the kernel the
# distances come from, also Lemma 3.2's bound: see
# :ref:`sphx_glr_auto_examples_plot_streaming_partial_fit.py`) and a
# :class:`~megkernel.DefiniteBoostKernel`'s dual objective under Theorem
# 4.1's bound, with the largest constraint violation before each projection
# (right axis, log scale). Here DefiniteBoost learns from the same pairs,
# the closest 5 % as "similar" and the farthest 5 % as "dissimilar" (with
# the noise, wider bands would contradict each other). On the left, the
# paper's on-line algorithm on the same noisy distances: its total loss keeps
# growing, since no kernel meets them exactly (Lemma 3.2's bound is for the
# realizable case).

from megkernel import DefiniteBoostKernel  # noqa: E402

low, high = np.quantile(sq_distances, [0.05, 0.95])
labelled = (sq_distances <= low) | (sq_distances >= high)
labels = np.where(sq_distances[labelled] <= low, 1, -1)
boost = DefiniteBoostKernel(random_state=0).fit(pairs[labelled], labels)
print(f"DefiniteBoost: {boost.n_iter_} projections, held-out AUC: prior "
      f"{boost.prior_score_:.3f}, learned {boost.validation_score_:.3f}")
fig, (meg_ax, boost_ax) = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
plot_learning_curve(MEGKernelRegressor(solver="online", random_state=0).fit(pairs, sq_distances),
                    meg_ax)
plot_learning_curve(boost, boost_ax)
