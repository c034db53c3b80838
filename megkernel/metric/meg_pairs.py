""":class:`MEGPairMetric`: :class:`~megkernel.MEGMetric` learned from labeled pairs of points.

A thin subclass (metric-learn's pair-learner convention, ``X`` of shape
``(n_pairs, 2, n_features)``): the shared pair-input contract lives in
:class:`megkernel.metric._base._PairInput`, the learner in
:mod:`megkernel.metric.meg`.
"""

from __future__ import annotations

import numpy as np

from ._base import _PairInput, _preprocessed
from .meg import MEGMetric

__all__ = ["MEGPairMetric"]


class MEGPairMetric(_PairInput, MEGMetric):
    """:class:`MEGMetric` learned from labeled pairs of points.

    ``X`` holds pairs of points, shape (n_pairs, 2, n_features), and ``y``
    their labels, as metric-learn's pair learners (``ITML``): scikit-learn's
    ``GridSearchCV`` / ``cross_val_score`` then split the pairs. The distinct
    points of the pairs are the objects; :meth:`transform` embeds any point.
    After fitting, ``threshold_`` is calibrated on the training pairs
    (:meth:`calibrate_threshold`); :meth:`score` is the ROC AUC.

    Parameters
    ----------
    gamma : float or "auto", default="auto"
        Target squared distance of similar pairs, as in :class:`MEGMetric`.
    gamma_dissimilar : float or "auto", default="auto"
        Target of dissimilar pairs, as in :class:`MEGMetric`.
    loss : {"one-sided", "square"}, default="one-sided"
        The loss of each pair, as in :class:`MEGMetric`.
    learning_rate : float or "auto", default="auto"
        MEG's ``eta``, as in :class:`MEGMetric`.
    n_epochs : int, float or "auto", default="auto"
        Passes over the pairs, as in :class:`MEGMetric`; ``"auto"``
        validates it on folds of the pairs' points.
    max_iter : int, default=1000
        Safety net of ``n_epochs="auto"``, as in :class:`MEGMetric`.
    batch_size : int or "auto", default="auto"
        Pairs per MEG update, as in :class:`MEGMetric`.
    n_folds : int or "auto", default="auto"
        Folds of the validation, as in :class:`MEGMetric`.
    shuffle : bool, default=True
        Draw a new order of the pairs for each epoch (from an order of their
        content: the row order of the table changes nothing). ``False``: the
        user's order is the order of the updates.
    from_labels : {"auto", "soft-neighbors", "neighbors", "random"}, default="auto"
        As in :meth:`MEGMetric.fit_pairs`: with ``"auto"``, the pairs' own
        soft-neighbour objective and MEG's pair loss are validated side by
        side (the pair loss past 16 epochs only where it has overtaken the
        objective), and the classes rebuilt from the similar pairs'
        components where they stand in for classes; the held-out scores
        choose.
    n_neighbors : int, default=5
        As in :class:`MEGMetric`.
    temperature : float or "auto", default="auto"
        Temperature of the soft-neighbour objective, as in :class:`MEGMetric`.
    n_constraints : int, default=None
        Unused: the pairs are given.
    random_state : int, RandomState instance or None, default=None
        Seed for the folds and the order of the pairs.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Deprecated and ignored, as in :class:`MEGMetric`.
    verbose : int, default=0
        As in :class:`MEGMetric`.
    preprocessor : array-like, callable or None, default=None
        As in :class:`MEGMetric`: pairs may be given as (n_pairs, 2) indices
        (to :meth:`fit`, :meth:`partial_fit` and every method of pairs).

    Attributes
    ----------
    threshold_ : float
        The squared distance up to which a pair is predicted similar,
        calibrated on the training pairs (:meth:`calibrate_threshold`).
    classes_ : ndarray of shape (2,)
        The pair labels, ``[-1, 1]``.
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the pairs' distinct points, in
        sorted order) and their labels.
    components_, n_components_, mean_, coordinates_, scales_, directions_ : ndarray or int
        As in :class:`MEGMetric`, over the pairs' distinct points.
    trace_, exponent_, gamma_, gamma_dissimilar_, learning_rate_ : float or MetricExponent
        As in :class:`MEGMetric`.
    n_epochs_, n_iter_, validation_, pair_mse_, prior_pair_mse_ : float, int, dict or None
        As in :class:`MEGMetric`.
    from_labels_, soft_neighbor_objective_, temperature_ : str, tuple, float or None
        As in :class:`MEGMetric` after :meth:`~MEGMetric.fit_pairs`.
    n_pairs_seen_, online_loss_, online_normalised_loss_, online_range_ : int or float
        As in :class:`MEGMetric`.
    online_start_, online_start_log_, online_start_range_ : ndarray or float
        As in :class:`MEGMetric`.
    constraint_loss_, prior_constraint_loss_ : float
        Deprecated aliases, as in :class:`MEGMetric`.
    preprocessor_ : array-like, callable or None
        The preprocessor used (metric-learn's attribute).
    n_features_in_ : int

    See Also
    --------
    MEGMetric : The same learner, from points and class labels or index pairs.
    DefiniteBoostPairMetric : DefiniteBoost's metric from labeled pairs of points.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import MEGPairMetric
    >>> rng = np.random.default_rng(0)
    >>> points = rng.normal(size=(40, 3))
    >>> labels = (points[:, 0] > 0).astype(int)
    >>> a, b = rng.integers(0, 40, (2, 200))
    >>> pairs = np.stack([points[a], points[b]], axis=1)
    >>> model = MEGPairMetric(random_state=0).fit(pairs, labels[a] == labels[b])
    >>> model.predict(pairs[:3]).shape
    (3,)
    """

    def _online_input(self, X):
        """:meth:`partial_fit`'s ``X``: with a preprocessor, a 2-D ``X`` holds index pairs.

        As in :meth:`fit`; 1-D indices of points are resolved as by MEGMetric.
        """
        if getattr(self, "preprocessor", None) is not None and np.ndim(X) == 2:
            return _preprocessed(self.preprocessor, X, "X")
        return super()._online_input(X)
