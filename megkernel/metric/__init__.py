"""Learned metrics on features: MEG and DefiniteBoost as transformers.

The objects are the training points, the prior is the linear kernel of the
centered features ``X = U Sigma V^T`` (``W_1 = X X^T / ||X||_F^2``, the
Euclidean metric), and the kernel is learned in low-rank mode inside its
range: ``W = P M P^T = X A X^T`` with ``A = V Sigma^-1 M Sigma^-1 V^T``. So
it extends to new points, ``k(x, x') = tau phi(x)^T M phi(x')`` with
``phi(x) = Sigma^-1 V^T (x - mean)`` and ``tau = ||X||_F^2``, and
:meth:`transform` gives ``sqrt(tau) phi(x) M^{1/2}`` (up to a rotation),
whose Euclidean distances are the learned ones. Before learning they are
the Euclidean distances of the centered features (``M = S``).

The trace constraint fixes the mean squared distance between distinct
training points at ``D = 2 ||X||_F^2 / (n - 1)`` for every learned metric:
a metric can only trade distances against each other. Thresholds that ask
every dissimilar pair to be far beyond ``D`` (ITML's 95% quantile) cannot
all hold; each learner here has a default that allows for that:

* :class:`MEGMetric` learns with a one-sided square loss (a similar pair
  counts while farther than ``gamma``, a dissimilar one while nearer than
  ``gamma_dissimilar``, the median squared distance): an unreachable target
  only leaves a loss, never a failure;
* :class:`DefiniteBoostMetric` asks for thresholds the trace allows on
  average (``0.1 D`` and ``D``) and bounds what a constraint may cost
  (``slack``), the always-feasible soft-margin problem.

Both choose how long to learn by cross-validation over the training points
(``n_epochs="auto"``, ``max_iter="auto"``) and keep the Euclidean metric
unless learning gains clearly on held-out points. Both report how well the
learned metric meets the pairs
(``pair_mse_`` for MEG, ``violated_fraction_`` for DefiniteBoost) against the
Euclidean prior (``prior_pair_mse_``, ``prior_violated_fraction_``) and warn
when it is worse: a degraded metric
is never silent.

Layout: :mod:`megkernel.metric._base` holds the base transformer, pair-input
classification and the input checks; :mod:`megkernel.metric._pairs` the public
pair samplers :func:`neighbor_pairs` and :func:`draw_pairs`;
:mod:`megkernel.metric.meg` and :mod:`megkernel.metric.definiteboost` one
learner each (its pair-input variant a thin subclass, MEG's in
:mod:`megkernel.metric.meg_pairs`). Each ``fit`` validates, makes one solver
call (:func:`megkernel._solvers.metric_meg_fit.fit_meg_metric`,
:func:`megkernel._solvers.metric_definiteboost.fit_definiteboost_metric`) and
commits its result; :mod:`megkernel._solvers.holdout` is the one validation
loop that chooses how long either learns.
"""

from ._base import draw_pairs, neighbor_pairs
from .definiteboost import DefiniteBoostMetric, DefiniteBoostPairMetric
from .meg import MEGMetric
from .meg_pairs import MEGPairMetric

__all__ = [
    "MEGMetric",
    "DefiniteBoostMetric",
    "MEGPairMetric",
    "DefiniteBoostPairMetric",
    "draw_pairs",
    "neighbor_pairs",
]
