"""Seeds drawn from a ``random_state``: the one idiom of the learners.

A learner that needs a NumPy ``Generator`` (or a seed of its own) from
scikit-learn's ``random_state`` convention (``None``, an int, or a
``RandomState``) draws one int from it here, so equal ``random_state``
values give equal draws everywhere.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["derived_seed", "derived_generator"]

#: Seeds are drawn from ``[0, SEED_BOUND)``.
SEED_BOUND = np.iinfo(np.int32).max


def derived_seed(random_state):
    """Draw an int seed from ``random_state``.

    Parameters
    ----------
    random_state : int, RandomState instance or None
        scikit-learn's convention: ``None`` draws from NumPy's global
        ``RandomState``, an int seeds a new one (so the seed is a fixed
        function of it), an instance is drawn from (and advanced).

    Returns
    -------
    int
        In ``[0, SEED_BOUND)``.
    """
    return int(check_random_state(random_state).randint(SEED_BOUND))


def derived_generator(random_state):
    """Return a NumPy ``Generator`` seeded by :func:`derived_seed` of ``random_state``."""
    return np.random.default_rng(derived_seed(random_state))
