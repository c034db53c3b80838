"""
DefiniteBoost's corrective steps: reaching the exact Bregman projection
=======================================================================

DefiniteBoost wants the kernel closest to the prior ``W₁`` in von Neumann
divergence among those that meet every constraint (the Bregman projection
onto their intersection). The paper's algorithm projects onto one violated
constraint at a time and only ever *increases* the multipliers ``α_j``; it
stops at the first kernel that meets every constraint, which need not be the
closest one. With ``corrective=True`` (beyond the paper, in the manner of
Hildreth's method) a step may also *reduce* an earlier ``α_j``, never below
0, and the fit converges to the exact projection. There, by duality,
``−log`` of the dual objective equals the divergence from the prior; for the
paper's stopping point it is only a lower bound.

The data: 52 objects in three clusters, the pairs closer than ``γ = 0.2/d``
in a target kernel as similar-pair constraints.
"""

import matplotlib.pyplot as plt
import numpy as np

from megkernel import DefiniteBoostKernel, von_neumann_divergence

rng = np.random.default_rng(0)
centres = rng.normal(size=(3, 4))
features = np.repeat(centres, [17, 17, 18], axis=0) + 0.3 * rng.normal(size=(52, 4))
features -= features.min(axis=0)
target = features @ features.T
target /= np.trace(target)
sq_dist = np.diag(target)[:, None] + np.diag(target)[None, :] - 2 * target
gamma = 0.2 / 52
rows, cols = np.triu_indices(52, k=1)
close = sq_dist[rows, cols] < gamma
pairs = np.column_stack([rows[close], cols[close]])

prior = np.eye(52) / 52
fits = {
    "paper (increasing steps)": DefiniteBoostKernel(
        n_objects=52, gamma=gamma, trace=1.0, validation_fraction=None),
    "corrective=True": DefiniteBoostKernel(
        n_objects=52, gamma=gamma, trace=1.0, validation_fraction=None,
        corrective=True, max_iter=20_000),
}
for name, model in fits.items():
    model.fit(pairs)
    print(f"{name}: {model.n_iter_} iterations, "
          f"divergence from the prior {von_neumann_divergence(model.kernel_, prior):.3f}, "
          f"-log dual {-np.log(model.dual_objective_[-1]):.3f}, "
          f"{np.count_nonzero(model.alphas_ < 0)} corrective steps")

# %%
# Left: ``−log`` of the dual objective rises at every step (Theorem 4.1); the
# dotted lines are the divergences of the two final kernels from the prior.
# The paper's run stops below its kernel's divergence; the corrective run
# goes on until the two meet, at a kernel closer to the prior. Right: the
# largest violation before each step (relative to ``γ``); a corrective step
# (negative ``α``) can let a constraint slip a little, which a later step
# repairs, and the run ends when all hold within the tolerance ``tol · γ``.

fig, (dual_ax, violation_ax) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for (name, model), color in zip(fits.items(), ["tab:blue", "tab:orange"]):
    dual_ax.plot(-np.log(model.dual_objective_), color=color, label=name)
    dual_ax.axhline(von_neumann_divergence(model.kernel_, prior), color=color, linestyle=":")
    violation_ax.plot(np.maximum(model.violations_ / gamma, 1e-6), color=color, label=name)
dual_ax.set_xscale("symlog", linthresh=10)
dual_ax.set_xlim(left=0)
dual_ax.set_xlabel("iterations")
dual_ax.set_ylabel("−log dual objective")
dual_ax.legend(loc="lower right")
dual_ax.grid(alpha=0.3)
violation_ax.set_xscale("symlog", linthresh=10)
violation_ax.set_xlim(left=0)
violation_ax.set_yscale("log")
violation_ax.set_xlabel("iterations")
violation_ax.set_ylabel("largest violation / γ")
violation_ax.legend()
violation_ax.grid(alpha=0.3)
