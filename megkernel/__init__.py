"""megkernel: kernel learning by Matrix Exponentiated Gradient updates.

Implements the two algorithms of Tsuda, Raetsch & Warmuth, "Matrix
Exponentiated Gradient Updates for On-line Learning and Bregman Projection"
(NIPS 2004): on-line MEG and batch DefiniteBoost, as scikit-learn estimators
and as plain solver functions.
"""

from ._kernel_learner import KernelLearnerMixin, LearnedKernel, PairStream
from ._numerics.spectral import (
    expm_symmetric,
    logm_spd,
    normalized_expm,
    von_neumann_divergence,
)
from ._solvers.bounds import (
    definiteboost_rho,
    definiteboost_step,
    meg_learning_rate,
    meg_loss_bound,
    meg_optimal_c,
    meg_regret_bound,
)
from ._solvers.definiteboost import definiteboost, definiteboost_pairs
from ._solvers.meg import meg, meg_general
from ._version import __version__ as __version__
from ._warnings import NoImprovementWarning
from .definiteboost_kernel import DefiniteBoostKernel
from .evaluation import make_knn_kernel_scorer, nearest_neighbor_error
from .meg_regressor import MEGKernelRegressor
from .metric import (
    DefiniteBoostMetric,
    DefiniteBoostPairMetric,
    MEGMetric,
    MEGPairMetric,
    draw_pairs,
    neighbor_pairs,
)
from .neighbors import KernelKNeighborsClassifier, kernel_to_distances
from .objects import KernelDistances

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
