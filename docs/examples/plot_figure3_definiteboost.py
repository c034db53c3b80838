"""
The paper's Figure 3: DefiniteBoost from similar pairs
======================================================

The batch experiment of Section 5: every pair closer than ``γ`` in the
target kernel becomes a constraint "``a`` and ``b`` are similar",
``‖x_a − x_b‖² ≤ γ``, and DefiniteBoost looks for the kernel closest to the
prior ``I/d`` (in von Neumann divergence) that meets them all, one greedy
Bregman projection at a time. Theorem 4.1 bounds the dual objective
``tr exp(log W₁ − Σ α_t C_t)``, which falls at every step.

The paper's ``γ = 0.2/d`` admitted 980 of its 1326 pairs; a threshold depends
on a kernel's scale while a count does not, so the closest 73.9 % of pairs
are taken here (:func:`~megkernel.datasets.similarity_threshold`), as
``python -m megkernel reproduce`` does.
"""

from megkernel.datasets import load_gyrb, similarity_threshold
from megkernel.experiments import run_batch_experiment
from megkernel.plotting import plot_batch_experiment

gyrb = load_gyrb(n_objects=52, random_state=0)
gamma = similarity_threshold(gyrb.kernel, 980 / 1326)
result = run_batch_experiment(gyrb.kernel, gyrb.labels, gamma=gamma, random_state=0)
model = result.model
print(f"gamma = {gamma * 52:.2f}/d: {result.n_constraints} constraints, "
      f"{model.n_iter_} iterations")
print(f"dual objective x d {52 * model.dual_objective_[-1]:.2f} "
      f"<= Theorem 4.1 bound x d {52 * model.dual_bound_[-1]:.2f}")
print(f"1-NN error: identity {result.identity_error:.3f}, "
      f"DefiniteBoost {result.knn_errors[-1]:.3f}, target {result.target_error:.3f}")

# %%
# (a) The dual objective on the paper's scale (``W₁ = I``, from ``d = 52``
# down; the right axis is the trace-one scale) under Theorem 4.1's bound.
# (b) The 1-NN error over the iterations. It is not monotone, and need not
# be (the note under the panel says so): DefiniteBoost lowers the dual
# objective, moving towards the kernel that meets the constraints, not
# towards a lower 1-NN error. With three genera of
# about 17 proteins, only about 400 of the 1326 pairs join two members of one
# genus, so most of the 981 "similar" constraints join different genera. The
# first few dozen projections already pull each genus together (the error
# falls below 0.1); meeting the constraints across genera then blurs that
# again, and the error settles at 0.14. The learned kernel stays above the
# target's error: turning distances into "similar" inequalities loses
# information, as the paper notes.

figure = plot_batch_experiment(result)
