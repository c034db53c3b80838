"""DefiniteBoost from distances: the warning of a returned prior says why, in its figures.

Its constraints are the closest and farthest tenth of the distances its prior
(MEG's fit of them) was fitted to: on the survey and word-list tables the
prior already ranks every held-out similar pair before every dissimilar one
(AUC 1 against 1), where no projection can do better. The warning says so,
rather than leave "worse, or better by less than their noise" to explain it.
"""

import warnings

import numpy as np

from megkernel import DefiniteBoostKernel, NoImprovementWarning
from megkernel._solvers.definiteboost_rules import prior_kept_message

_CEILING = ("The prior already ranks every held-out similar pair before every dissimilar "
            "one (AUC 1): no projection can rank them better.")


def _log(prior_score, projection_score):
    return dict(projection_score=projection_score, prior_score=prior_score, n_iter_total=128,
                pruned=128)


def test_the_ceiling_is_named_only_at_the_ceiling():
    said = prior_kept_message(_log(1.0, 1.0), "held-out pairs")
    assert _CEILING in said
    assert said.index("(AUC 1 against the prior's 1;") < said.index(_CEILING)
    assert said.endswith("give pair labels (y_kind='labels') with your own gamma to project "
                         "anyway.")
    assert _CEILING not in prior_kept_message(_log(0.8032, 0.7957), "held-out pairs")


def test_a_table_whose_prior_ranks_perfectly_says_so():
    """Points on a line, their exact distances: the closest and farthest
    tenth are told apart by the prior already."""
    rng = np.random.default_rng(0)
    d = 60
    x = np.sort(rng.uniform(0, 10, size=d))
    a, b = np.triu_indices(d, 1)
    keep = rng.random(a.size) < 0.5
    a, b = a[keep], b[keep]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DefiniteBoostKernel(random_state=0, y_kind="distances").fit(
            np.column_stack([a, b]), np.abs(x[a] - x[b]))
    said = [str(w.message) for w in caught if issubclass(w.category, NoImprovementWarning)]
    assert any("returned its prior" in s and _CEILING in s for s in said), said
