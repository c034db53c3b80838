"""MEGMetric from given pairs: MEG's pair loss validated beside the pairs' soft objectives.

On sparse high-dimensional data (word counts) the pairs' soft-neighbour
objectives gain in their first iterations and then overfit, while MEG's pair
loss keeps gaining with its length; the pair loss is validated in every case
(raced: past a few epochs only where it has overtaken the objective that would
be kept), and the held-out choice decides.
"""

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from megkernel import MEGMetric, draw_pairs
from megkernel._numerics.seeding import derived_generator
from megkernel._solvers.metric_meg import pair_diffs, resolve_learning_rate, targets_and_sides
from megkernel._solvers.metric_meg_fit import content_order, metric_space
from megkernel._solvers.metric_validation import (
    RACE_EPOCHS,
    _validate_pair_loss,
    refit_epochs,
    validate_epochs,
)


def word_counts(seed, n_topics=3, n_docs=120, vocab=400, words=30, topic_words=25):
    """Documents of a few topics over a Zipf background, log counts of the 40 commonest words."""
    rng = np.random.default_rng(seed)
    background = 1.0 / np.arange(1, vocab + 1) ** 1.1
    background /= background.sum()
    y = np.repeat(np.arange(n_topics), n_docs // n_topics)
    topics = np.zeros((n_topics, vocab))
    for t in range(n_topics):
        own = rng.choice(vocab, topic_words, replace=False)
        topics[t, own] = rng.dirichlet(np.full(topic_words, 0.5))
    share = rng.uniform(0.15, 0.4, len(y))[:, None]
    counts = np.array(
        [
            rng.multinomial(rng.poisson(words) + 5, p)
            for p in share * topics[y] + (1 - share) * background
        ]
    )
    X = np.log1p(counts[:, np.argsort(-(counts > 0).sum(0), kind="stable")[:40]])
    return (X - X.mean(0)) / (X.std(0) + 1e-12), y


def _split(seed):
    X, y = word_counts(seed)
    train = np.arange(len(y)) % 2 == 0
    pairs, signs = draw_pairs(y[train], 150, random_state=0)
    return X[train], y[train], X[~train], y[~train], pairs, signs


def _one_nn(model, X_train, y_train, X_test, y_test):
    return (
        KNeighborsClassifier(1)
        .fit(model.transform(X_train), y_train)
        .score(model.transform(X_test), y_test)
    )


def test_the_pair_loss_is_validated_and_learns_sparse_counts_beyond_euclidean():
    X_train, y_train, X_test, y_test, pairs, signs = _split(0)
    model = MEGMetric(random_state=0).fit_pairs(X_train, pairs, signs)
    # validated beside the soft objectives even where their gain is real, and kept
    assert {"soft-pairs", "pairs"} <= set(model.validation_["from_labels"])
    assert model.validation_["kept"] == "pairs" and model.validation_["gain_is_real"]
    euclidean = KNeighborsClassifier(1).fit(X_train, y_train).score(X_test, y_test)
    # the rebuilt classes the soft objectives alone kept: 0.017 below Euclidean;
    # the pair loss: three or more more of the 60 test points right
    assert round(_one_nn(model, X_train, y_train, X_test, y_test) - euclidean, 9) >= 0.05


def _pair_loss_problem(seed=0):
    X_train, _, _, _, pairs, signs = _split(seed)
    centred = X_train - X_train.mean(axis=0)
    coordinates, scales, _, trace, gamma, gamma_dissimilar = metric_space(
        centred, "auto", "auto", derived_generator(0)
    )
    targets, sides = targets_and_sides(signs, gamma, gamma_dissimilar, trace, "one-sided")
    rate = resolve_learning_rate(pair_diffs(coordinates, pairs), "auto")
    return coordinates, (pairs, signs), targets, sides, scales**2 / trace, rate


def _race(unless_above, max_iter=64):
    coordinates, these, targets, sides, prior, rate = _pair_loss_problem()
    return _validate_pair_loss(
        coordinates,
        these,
        targets,
        sides,
        prior,
        learning_rate=rate,
        batch_size=80,
        rng=np.random.default_rng(5),
        n_folds="auto",
        max_iter=max_iter,
        classes=None,
        looks_before=0,
        unless_above=unless_above,
    )


def test_the_race_prunes_a_pair_loss_that_has_not_overtaken_and_stops_at_its_end():
    epochs, log, _ = _race((1.0, 1.0))  # nothing is above a perfect score
    assert log["pruned"] is True
    assert max(log["checkpoints"]) <= RACE_EPOCHS


@pytest.mark.parametrize("unless_above", [None, (-np.inf, -np.inf)])
def test_where_the_race_goes_on_the_validation_is_the_one_without_it(unless_above):
    coordinates, these, targets, sides, prior, rate = _pair_loss_problem()
    rng = np.random.default_rng(5)
    expected = validate_epochs(
        coordinates,
        these[0],
        targets,
        sides,
        these[1],
        prior,
        learning_rate=rate,
        batch_size=80,
        rng=rng,
        max_epochs=64,
    )
    epochs, log, after = _race(unless_above)
    assert "pruned" not in log
    assert epochs == refit_epochs(expected[0], expected[1], 64)
    assert log["scores"] == expected[1]["scores"]
    assert after.bit_generator.state == rng.bit_generator.state


def test_the_pair_loss_kept_does_not_depend_on_the_pairs_row_order():
    """Rows of the pairs shuffled and their ends swapped: the same metric, bit for bit.

    (The mini-batches' random order is drawn over the pairs in an order of
    their content; before, the user's row order changed the metric.)
    """
    X_train, _, _, _, pairs, signs = _split(0)
    rows = np.random.default_rng(1).permutation(len(pairs))
    model = MEGMetric(random_state=0).fit_pairs(X_train, pairs, signs)
    shuffled = MEGMetric(random_state=0).fit_pairs(X_train, pairs[rows, ::-1], signs[rows])
    assert model.validation_["kept"] == shuffled.validation_["kept"] == "pairs"
    np.testing.assert_array_equal(shuffled.get_mahalanobis_matrix(), model.get_mahalanobis_matrix())
    # the fitted pairs are the user's, in the user's order
    np.testing.assert_array_equal(shuffled.pairs_, pairs[rows, ::-1])


def test_content_order_is_that_of_the_content():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    pairs = rng.integers(0, 30, size=(40, 2))
    signs = np.where(rng.random(40) < 0.5, 1, -1)
    ordered = content_order(X, pairs, signs)
    rows = rng.permutation(40)
    np.testing.assert_array_equal(content_order(X, pairs[rows, ::-1], signs[rows])[1], ordered[1])
    renumber = rng.permutation(30)
    inverse = np.argsort(renumber)
    moved = content_order(X[renumber], inverse[pairs], signs)
    # the same pairs of points, in the same order, whatever their numbers
    np.testing.assert_array_equal(
        np.sort(X[renumber][moved[0]], axis=1), np.sort(X[ordered[0]], axis=1)
    )
    np.testing.assert_array_equal(moved[1], ordered[1])


def test_content_order_of_identical_points_does_not_depend_on_their_numbers():
    """Two points with the same features, paired with different partners: swapping
    the two points' numbers leaves the sequence of feature pairs unchanged."""
    X = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 0.0], [6.0, 0.0], [7.0, 1.0], [8.0, 2.0]])
    pairs, signs = np.array([[0, 1], [2, 3], [4, 5]]), np.ones(3)
    swapped = np.array([2, 1, 0, 3, 4, 5])  # point 0 is now numbered 2 and back
    first = content_order(X, pairs, signs)[0]
    second = content_order(X, swapped[pairs], signs)[0]

    def features(ordered):
        return np.sort(X[ordered], axis=1)

    np.testing.assert_array_equal(features(first), features(second))
