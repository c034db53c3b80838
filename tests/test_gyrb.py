"""The bundled gyrB set A proteins (PubMLST) and their loader."""

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from megkernel.datasets import (
    PAPER_SIMILAR_FRACTION,
    gyrb_path,
    load_fasta_kernel,
    load_gyrb,
    read_fasta,
    similar_pairs,
    similarity_threshold,
)

SHARED_SET_A = (Path(__file__).resolve().parents[2] / "shared" / "data" / "gyrb"
                / "gyrB_setA_Acinetobacter_Pseudomonas_Vibrio.protein.faa")


def test_bundled_file_is_package_data():
    data = resources.files("megkernel") / "data"
    assert (data / "gyrB_setA_Acinetobacter_Pseudomonas_Vibrio.protein.faa").is_file()
    assert "Wellcome Open Research 3:124" in (data / "README.md").read_text(encoding="utf-8")
    with gyrb_path() as path:
        headers, sequences = read_fasta(path)
    genera, counts = np.unique([h.split("|")[0] for h in headers], return_counts=True)
    assert list(genera) == ["Acinetobacter", "Pseudomonas", "Vibrio"]
    assert list(counts) == [43, 21, 49]


def test_load_gyrb_draws_the_papers_shape():
    gyrb = load_gyrb()
    assert gyrb.kernel.shape == (52, 52)
    assert np.trace(gyrb.kernel) == pytest.approx(1.0)
    assert list(np.bincount(gyrb.labels)) == [17, 17, 18]
    assert "PubMLST" in gyrb.description
    np.testing.assert_array_equal(load_gyrb(random_state=1).labels, gyrb.labels)
    assert not np.array_equal(load_gyrb(random_state=1).kernel, gyrb.kernel)
    assert load_gyrb(None).kernel.shape == (113, 113)


def test_the_papers_share_of_similar_pairs():
    K = load_gyrb().kernel
    count = len(similar_pairs(K, similarity_threshold(K, PAPER_SIMILAR_FRACTION)))
    assert count in (980, 981)  # 980 of 1326, one more for a tie in distances


@pytest.mark.skipif(not SHARED_SET_A.is_file(), reason=f"no {SHARED_SET_A}")
def test_bundled_file_equals_the_shared_one():
    with gyrb_path() as path:
        assert Path(path).read_bytes() == SHARED_SET_A.read_bytes()
    np.testing.assert_array_equal(
        load_fasta_kernel(SHARED_SET_A, n_objects=52, random_state=0).kernel,
        load_gyrb().kernel)
