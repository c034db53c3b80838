"""
Many objects: low-rank mode with ``init_factor``
================================================

A dense kernel over ``d`` objects costs ``d²`` memory and ``O(d³)`` per
eigendecomposition: fine for hundreds of objects, impossible for 10⁵. Given
the prior as a factor, ``init_factor=F`` (``d × r``: features, a Nyström or
kernel-PCA map), every iterate stays in the range of ``F``:
``W = P M Pᵀ`` with an ``r × r`` matrix ``M``. A step then costs
``O(r²)``–``O(r³)`` whatever ``d``, memory is ``O(d r)``, and no ``d × d``
array is ever formed. The von Neumann divergence restricted to the range is
the divergence of the ``r × r`` matrices, so nothing of the method changes.

Here: 100,000 objects with 10 features each; the hidden target kernel is
``F A Fᵀ`` for an unknown positive definite ``A`` (the features are right,
their weighting and correlations are not); 20,000 observed pairs, about
4 × 10⁻⁶ of all of them. The prior, ``F Fᵀ`` up to scale, weighs every
feature equally.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

from megkernel import MEGKernelRegressor

rng = np.random.default_rng(0)
n_objects, n_features = 100_000, 10
features = rng.normal(size=(n_objects, n_features))
mixing = rng.normal(size=(n_features, n_features)) * np.linspace(1.0, 0.1, n_features)
hidden = mixing @ mixing.T                  # the target kernel is F A F^T


def sq_distances(pairs):
    diff = features[pairs[:, 0]] - features[pairs[:, 1]]
    return np.einsum("ij,jk,ik->i", diff, hidden, diff)


train = rng.integers(0, n_objects, size=(20_000, 2))
test = rng.integers(0, n_objects, size=(5_000, 2))   # pairs never observed

start = time.perf_counter()
model = MEGKernelRegressor(init_factor=features, random_state=0).fit(train, sq_distances(train))
print(f"fit: {time.perf_counter() - start:.1f} s, {model.n_iter_} iterations, "
      f"rank {model.rank_}, kernel factor {model.kernel_factor_.shape}")
print(f"R^2 on unobserved pairs: prior {model.prior_score_:.3f} (held-out pairs), "
      f"learned {model.score(test, sq_distances(test)):.3f}")
print("K[:2, :2] =", model.kernel_entries([0, 1], [0, 1]).round(2).tolist())

# %%
# The kernel is read through ``kernel_factor_`` (``K = F Fᵀ``, ``d × r``),
# :meth:`~megkernel.MEGKernelRegressor.kernel_entries` and
# :meth:`~megkernel.MEGKernelRegressor.predict`; ``kernel_`` would be a
# 100,000 × 100,000 matrix (80 GB) and refuses, saying so.
#
# Predicted against true squared distances of the unobserved pairs, for the
# prior (at the same trace) and for the learned kernel:

truth = sq_distances(test)
diff = features[test[:, 0]] - features[test[:, 1]]
prior = model.trace_ * np.sum(diff**2, axis=1) / np.sum(features**2)
fig, ax = plt.subplots(figsize=(5, 5), layout="constrained")
ax.scatter(truth, prior, s=3, alpha=0.3, label="prior F Fᵀ (scaled)")
ax.scatter(truth, model.predict(test), s=3, alpha=0.3, label="learned")
top = np.quantile(truth, 0.99)
ax.plot([0, top], [0, top], color="black", linewidth=1)
ax.set_xlim(0, top)
ax.set_ylim(0, top)
ax.set_xlabel("true squared distance")
ax.set_ylabel("predicted squared distance")
ax.legend(markerscale=4)
