"""megkernel: kernel learning by Matrix Exponentiated Gradient updates.

Implements the two algorithms of Tsuda, Raetsch & Warmuth, "Matrix
Exponentiated Gradient Updates for On-line Learning and Bregman Projection"
(NIPS 2004): on-line MEG and batch DefiniteBoost, as scikit-learn estimators
and as plain solver functions.
"""

from ._version import __version__ as __version__

#: Where each public name lives: imported on first use (PEP 562), so that
#: ``import megkernel`` (and ``python -m megkernel --help``) loads nothing heavy.
_LAZY = {
    "definiteboost_rho": "._solvers.bounds",
    "definiteboost_step": "._solvers.bounds",
    "expm_symmetric": "._numerics.spectral",
    "logm_spd": "._numerics.spectral",
    "DefiniteBoostKernel": ".definiteboost_kernel",
    "DefiniteBoostMetric": ".metric",
    "MEGMetric": ".metric",
    "MEGPairMetric": ".metric",
    "DefiniteBoostPairMetric": ".metric",
    "draw_pairs": ".metric",
    "neighbor_pairs": ".metric",
    "MEGKernelRegressor": ".meg_regressor",
    "KernelKNeighborsClassifier": ".neighbors",
    "KernelDistances": ".objects",
    "KernelLearnerMixin": "._kernel_learner",
    "LearnedKernel": "._kernel_learner",
    "PairStream": "._kernel_learner",
    "NoImprovementWarning": "._warnings",
    "kernel_to_distances": ".neighbors",
    "make_knn_kernel_scorer": ".evaluation",
    "nearest_neighbor_error": ".evaluation",
    "definiteboost": "._solvers.definiteboost",
    "definiteboost_pairs": "._solvers.definiteboost",
    "meg": "._solvers.meg",
    "meg_general": "._solvers.meg",
    "meg_learning_rate": "._solvers.bounds",
    "meg_loss_bound": "._solvers.bounds",
    "meg_optimal_c": "._solvers.bounds",
    "meg_regret_bound": "._solvers.bounds",
    "normalized_expm": "._numerics.spectral",
    "von_neumann_divergence": "._numerics.spectral",
}

__all__ = [
    "definiteboost_rho",
    "definiteboost_step",
    "expm_symmetric",
    "logm_spd",
    "DefiniteBoostKernel",
    "DefiniteBoostMetric",
    "MEGMetric",
    "MEGPairMetric",
    "DefiniteBoostPairMetric",
    "draw_pairs",
    "neighbor_pairs",
    "MEGKernelRegressor",
    "KernelKNeighborsClassifier",
    "KernelDistances",
    "KernelLearnerMixin",
    "LearnedKernel",
    "PairStream",
    "NoImprovementWarning",
    "kernel_to_distances",
    "make_knn_kernel_scorer",
    "nearest_neighbor_error",
    "definiteboost",
    "definiteboost_pairs",
    "meg",
    "meg_general",
    "meg_learning_rate",
    "meg_loss_bound",
    "meg_optimal_c",
    "meg_regret_bound",
    "normalized_expm",
    "von_neumann_divergence",
]


def __getattr__(name):
    """Import a public name from its module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'megkernel' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later uses skip this function
    return value


def __dir__():
    """List the public names with the module's own."""
    return sorted(set(globals()) | set(__all__))
