"""Target kernels from real data and the paper's inputs made from them."""

import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from megkernel.datasets import (
    dissimilar_pairs,
    distance_triples,
    labelled_pairs,
    load_fasta_kernel,
    load_wine_kernel,
    read_fasta,
    similar_pairs,
    similarity_threshold,
    spectrum_kernel,
)

GYRB_DIR = Path(os.environ.get(
    "MEGKERNEL_GYRB_DIR",
    Path(__file__).resolve().parents[2] / "shared" / "data" / "gyrb"))
GYRB_SET_A = GYRB_DIR / "gyrB_setA_Acinetobacter_Pseudomonas_Vibrio.protein.faa"
needs_gyrb = pytest.mark.skipif(not GYRB_SET_A.is_file(),
                                reason=f"gyrB data not found at {GYRB_DIR}")


def _assert_density_matrix(K):
    np.testing.assert_array_equal(K, K.T)
    assert np.trace(K) == pytest.approx(1.0, abs=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-12


def _squared_distance(K, a, b):
    return K[a, a] + K[b, b] - 2 * K[a, b]


# -------------------------------------------------------------------- wine


def test_wine_kernel_default():
    wine = load_wine_kernel()
    assert wine.kernel.shape == (52, 52)
    _assert_density_matrix(wine.kernel)
    assert np.linalg.eigvalsh(wine.kernel).min() > 0  # RBF: positive definite
    np.testing.assert_allclose(np.diag(wine.kernel), 1 / 52)
    np.testing.assert_array_equal(np.bincount(wine.labels), [17, 17, 18])
    assert list(wine.target_names) == ["class_0", "class_1", "class_2"]
    assert len(set(wine.sample_indices)) == 52
    assert "RBF" in wine.description


def test_wine_kernel_seed_and_size():
    first, again = load_wine_kernel(30, random_state=5), load_wine_kernel(30, random_state=5)
    np.testing.assert_array_equal(first.kernel, again.kernel)
    np.testing.assert_array_equal(np.bincount(first.labels), [10, 10, 10])
    other = load_wine_kernel(30, random_state=6)
    assert not np.array_equal(first.sample_indices, other.sample_indices)
    np.testing.assert_array_equal(np.bincount(load_wine_kernel(10).labels), [3, 3, 4])


@pytest.mark.parametrize("n_objects", [2, 145])
def test_wine_kernel_rejects_impossible_sizes(n_objects):
    with pytest.raises(ValueError):
        load_wine_kernel(n_objects)


# ------------------------------------------------------------------- FASTA


@pytest.fixture
def fasta_file(tmp_path):
    path = tmp_path / "toy.faa"
    records = [(f"{genus}|scheme/locus|{genus}_{i}|n_alleles=1", seq)
               for genus, base in [("Alpha", "MKVLAAGIT"), ("Beta", "WWPPHHCCE")]
               for i, seq in enumerate([base, base[::-1], base + "K", "G" + base])]
    path.write_text("".join(f">{header}\n{seq[:4]}\n{seq[4:]}\n\n"
                            for header, seq in records))
    return path


def test_read_fasta_joins_lines(fasta_file):
    headers, sequences = read_fasta(fasta_file)
    assert len(headers) == len(sequences) == 8
    assert headers[0] == "Alpha|scheme/locus|Alpha_0|n_alleles=1"
    assert sequences[0] == "MKVLAAGIT"


@pytest.mark.parametrize(
    ("text", "match"),
    [("MKV\n>a\nMKV\n", "before any"), ("", "no FASTA records"), (">a\n>b\nMK\n", "empty")],
)
def test_read_fasta_rejects_malformed_files(tmp_path, text, match):
    path = tmp_path / "bad.faa"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_fasta(path)


def _naive_spectrum_kernel(sequences, k):
    sequences = [s.upper() for s in sequences]  # residues, whatever their case
    spectra = [Counter(s[i:i + k] for i in range(len(s) - k + 1)) for s in sequences]
    gram = np.array([[sum(p[m] * q[m] for m in p) for q in spectra] for p in spectra],
                    dtype=float)
    norms = np.sqrt(np.diag(gram))
    return gram / np.outer(norms, norms)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_spectrum_kernel_equals_naive_counting(k):
    sequences = ["AAAA", "AAAB", "aaab", "MKVLAAGIT", "TIGAALVKM", "ABABAB"]
    K = spectrum_kernel(sequences, k=k)
    np.testing.assert_allclose(K, _naive_spectrum_kernel(sequences, k), atol=1e-15)
    np.testing.assert_allclose(np.diag(K), 1.0)


def test_spectrum_kernel_hand_value_and_case():
    K = spectrum_kernel(["AAAA", "AAAB", "aaab"], k=3)
    assert K[0, 1] == pytest.approx(2 / (2 * np.sqrt(2)))  # AAA:2 . (AAA:1, AAB:1)
    assert K[1, 2] == pytest.approx(1.0)  # case does not matter: the same residues


def test_spectrum_kernel_rejects_short_sequences():
    with pytest.raises(ValueError, match="shorter than k=3"):
        spectrum_kernel(["MKV", "MK"], k=3)


def test_load_fasta_kernel_sampling_options(fasta_file):
    everything = load_fasta_kernel(fasta_file)
    assert everything.kernel.shape == (8, 8)
    _assert_density_matrix(everything.kernel)
    assert list(everything.target_names) == ["Alpha", "Beta"]
    for header, label in zip(everything.headers, everything.labels):
        assert header.startswith(everything.target_names[label] + "|")

    balanced = load_fasta_kernel(fasta_file, n_objects=5, random_state=1)
    np.testing.assert_array_equal(np.bincount(balanced.labels), [2, 3])
    per_class = load_fasta_kernel(fasta_file, per_class=3)
    np.testing.assert_array_equal(np.bincount(per_class.labels), [3, 3])
    only_beta = load_fasta_kernel(fasta_file, per_class={"Beta": 2})
    assert list(only_beta.target_names) == ["Beta"]
    assert all(h.startswith("Beta|") for h in only_beta.headers)
    np.testing.assert_allclose(
        only_beta.kernel * 2, spectrum_kernel(only_beta.sequences, k=3))


@pytest.mark.parametrize(
    ("params", "match"),
    [({"n_objects": 4, "per_class": 2}, "not both"),
     ({"per_class": {"Gamma": 1}}, "Gamma"),
     ({"per_class": 5}, "fewer than the 5"),
     ({"k": 0}, "k")],
)
def test_load_fasta_kernel_rejects_bad_options(fasta_file, params, match):
    with pytest.raises(ValueError, match=match):
        load_fasta_kernel(fasta_file, **params)


def test_too_few_objects_of_a_class_name_it_as_the_user_wrote_it(fasta_file):
    """The label as in the file (not numpy's ``np.str_('Alpha')``)."""
    with pytest.raises(ValueError, match=r"^Class 'Alpha' has 4 objects, fewer than the 5 "):
        load_fasta_kernel(fasta_file, n_objects=10)
    with pytest.raises(ValueError, match=r"^Class 0 has 59 objects, fewer than the 66 "):
        load_wine_kernel(200)


def test_a_record_shorter_than_k_is_named_by_its_header(fasta_file):
    """Not by its place among the sampled sequences, which the file does not show."""
    text = fasta_file.read_text() + ">Beta|short\nWW\n"
    fasta_file.write_text(text)
    with pytest.raises(ValueError, match=f"^{re.escape(str(fasta_file))}: record "
                                         r"'Beta\|short' has 2 residues, fewer than k=3"):
        load_fasta_kernel(fasta_file, k=3)
    assert load_fasta_kernel(fasta_file, k=2).kernel.shape == (9, 9)


@needs_gyrb
def test_gyrb_set_a_gives_a_paper_sized_kernel():
    gyrb = load_fasta_kernel(GYRB_SET_A, n_objects=52, random_state=0)
    assert gyrb.kernel.shape == (52, 52)
    _assert_density_matrix(gyrb.kernel)
    np.testing.assert_allclose(np.diag(gyrb.kernel), 1 / 52)
    assert list(gyrb.target_names) == ["Acinetobacter", "Pseudomonas", "Vibrio"]
    np.testing.assert_array_equal(np.bincount(gyrb.labels), [17, 17, 18])
    assert all(len(seq) in (143, 146) for seq in gyrb.sequences)
    again = load_fasta_kernel(GYRB_SET_A, n_objects=52, random_state=0)
    np.testing.assert_array_equal(gyrb.kernel, again.kernel)


# ------------------------------------------------- the paper's inputs


def test_distance_triples():
    K = load_wine_kernel(12).kernel
    pairs, y = distance_triples(K, 5000, random_state=0)
    assert pairs.shape == (5000, 2) and y.shape == (5000,)
    assert np.issubdtype(pairs.dtype, np.integer)
    assert np.all(pairs[:, 0] != pairs[:, 1])
    np.testing.assert_array_equal(y, _squared_distance(K, pairs[:, 0], pairs[:, 1]))
    assert len({tuple(p) for p in pairs}) == 12 * 11  # every ordered pair drawn
    again, _ = distance_triples(K, 5000, random_state=0)
    np.testing.assert_array_equal(pairs, again)


@pytest.mark.parametrize(
    ("K", "n_triples", "match"),
    [(np.ones((3, 2)), 5, "square"), (np.ones((1, 1)), 5, "at least 2"),
     (np.eye(3), 0, "n_triples")],
)
def test_distance_triples_rejects_bad_input(K, n_triples, match):
    with pytest.raises(ValueError, match=match):
        distance_triples(K, n_triples)


def test_similar_and_dissimilar_pairs_partition_by_threshold():
    K = load_wine_kernel(20).kernel
    a, b = np.triu_indices(20, k=1)
    distances = _squared_distance(K, a, b)
    gamma = np.median(distances)
    similar = similar_pairs(K, gamma)
    dissimilar = dissimilar_pairs(K, gamma)
    assert np.all(similar[:, 0] < similar[:, 1])
    assert np.all(_squared_distance(K, similar[:, 0], similar[:, 1]) < gamma)
    assert np.all(_squared_distance(K, dissimilar[:, 0], dissimilar[:, 1]) > gamma)
    assert len(similar) == np.sum(distances < gamma)
    assert len(similar) + len(dissimilar) == len(distances) - np.sum(distances == gamma)
    assert len(similar_pairs(K, distances.min() / 2)) == 0


def test_labelled_pairs():
    K = load_wine_kernel(20).kernel
    gamma, gamma_dissimilar = 0.5 / 20, 1.5 / 20
    pairs, y = labelled_pairs(K, gamma, gamma_dissimilar, shuffle=False)
    n_similar = len(similar_pairs(K, gamma))
    np.testing.assert_array_equal(pairs[:n_similar], similar_pairs(K, gamma, shuffle=False))
    np.testing.assert_array_equal(pairs[n_similar:],
                                  dissimilar_pairs(K, gamma_dissimilar, shuffle=False))
    np.testing.assert_array_equal(y, np.r_[np.ones(n_similar), -np.ones(len(y) - n_similar)])
    with pytest.raises(ValueError, match="at least gamma"):
        labelled_pairs(K, gamma_dissimilar, gamma)


def test_pair_helpers_shuffle_under_random_state():
    """No cross-validation trap: every fold of a plain KFold holds both kinds."""
    K = load_wine_kernel(20).kernel
    gamma, gamma_dissimilar = similarity_threshold(K, 0.3), similarity_threshold(K, 0.6)
    ordered, y_ordered = labelled_pairs(K, gamma, gamma_dissimilar, shuffle=False)
    pairs, y = labelled_pairs(K, gamma, gamma_dissimilar, random_state=0)
    again, y_again = labelled_pairs(K, gamma, gamma_dissimilar, random_state=0)
    np.testing.assert_array_equal(pairs, again)
    np.testing.assert_array_equal(y, y_again)
    # the same labelled pairs, in another order
    key = {tuple(p): label for p, label in zip(ordered.tolist(), y_ordered)}
    assert {tuple(p): label for p, label in zip(pairs.tolist(), y)} == key
    for fold in np.array_split(y, 3):
        assert set(fold) == {-1, 1}
    assert set(np.array_split(y_ordered, 3)[0]) == {1}   # the trap without shuffling
    similar = similar_pairs(K, gamma, random_state=1)
    assert sorted(map(tuple, similar.tolist())) == sorted(
        map(tuple, similar_pairs(K, gamma, shuffle=False).tolist()))


@pytest.mark.parametrize("gamma", [0.0, -1.0, np.nan])
def test_pair_thresholds_must_be_positive(gamma):
    with pytest.raises(ValueError, match="gamma"):
        similar_pairs(np.eye(3), gamma)
    with pytest.raises(ValueError, match="gamma_dissimilar"):
        dissimilar_pairs(np.eye(3), gamma)


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5, 1.0])
def test_similarity_threshold_admits_the_fraction(fraction):
    K = load_wine_kernel(30).kernel
    n_pairs = 30 * 29 // 2
    gamma = similarity_threshold(K, fraction)
    assert len(similar_pairs(K, gamma)) == int(np.ceil(fraction * n_pairs))
    assert len(similar_pairs(K, np.nextafter(gamma, 0) * (1 - 1e-12))) < len(
        similar_pairs(K, gamma))


@needs_gyrb
def test_similarity_threshold_matches_paper_gamma_on_gyrb():
    gyrb = load_fasta_kernel(GYRB_SET_A, n_objects=52, random_state=0)
    assert similarity_threshold(gyrb.kernel, 0.1) * 52 == pytest.approx(0.2, rel=0.1)


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_similarity_threshold_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="fraction"):
        similarity_threshold(np.eye(3), fraction)
