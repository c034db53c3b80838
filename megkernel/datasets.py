r"""Labeled target kernels from real data, and the paper's inputs made from them.

Section 5 of Tsuda, Raetsch & Warmuth (2004) learns a 52 x 52 target kernel
over gyrB proteins of three bacterial genera. That kernel is not available;
this module builds labeled target kernels of the same kind from real data:

- :func:`load_gyrb`: gyrB protein fragments of three bacterial genera
  (PubMLST), bundled with the package — the default target of
  ``python -m megkernel reproduce``, the closest stand-in for the paper's
  data; :func:`gyrb_path` is the bundled FASTA file.
- :func:`load_wine_kernel`: scikit-learn's bundled wine data (three cultivars),
  needing no download.
- :func:`load_fasta_kernel`: a normalized k-mer spectrum kernel over protein
  sequences read from a FASTA file (:func:`read_fasta`,
  :func:`spectrum_kernel`), for instance gyrB fragments from PubMLST. If you
  use PubMLST data, cite: Jolley KA, Bray JE, Maiden MCJ. Open-access
  bacterial population genomics: BIGSdb software, the PubMLST.org website and
  their applications. Wellcome Open Res 2018;3:124.

From a target kernel, :func:`distance_triples` makes the on-line examples of
the MEG experiment and :func:`similar_pairs` / :func:`dissimilar_pairs` /
:func:`labelled_pairs` the constraints of the DefiniteBoost experiment
(:func:`similarity_threshold` picks ``gamma`` by the fraction of pairs).
Distances are squared feature-space distances
``||x_a - x_b||^2 = K_aa + K_bb - 2 K_ab`` throughout.

**Input rule of the readers**: a file is read only as far as it is what it
claims to be, and never beyond a stated bound. :func:`read_fasta` refuses,
with a ``ValueError`` naming the file and line, anything but UTF-8 text
(binary data, a compressed file, another encoding), a line longer than
:data:`MAX_FASTA_LINE` characters, a header longer than :data:`MAX_FASTA_HEADER` or a file larger
than :data:`MAX_FASTA_BYTES` (counted while reading, so an endless stream
such as ``/dev/zero`` stops; reading takes time linear in the size), and records
without headers, sequence or distinct names; what it accepts means one thing
however it is written (byte order mark, ``\r\n`` line ends, white space
and line breaks inside sequences, residue case).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from importlib import resources
from numbers import Integral
from pathlib import Path

import numpy as np
from sklearn.datasets import load_wine
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.preprocessing import StandardScaler, normalize
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

# the paper's inputs made from a target kernel (a part of this module)
from ._datasets_pairs import (
    dissimilar_pairs,
    distance_triples,
    labelled_pairs,
    similar_pairs,
    similarity_threshold,
)

__all__ = [
    "load_gyrb",
    "gyrb_path",
    "load_wine_kernel",
    "read_fasta",
    "spectrum_kernel",
    "load_fasta_kernel",
    "distance_triples",
    "similar_pairs",
    "similarity_threshold",
    "dissimilar_pairs",
    "labelled_pairs",
]


# ---------------------------------------------------------------- sampling


def _balanced_counts(class_sizes, n_objects):
    """Split ``n_objects`` into per-class counts as equal as possible.

    The remainder goes to the last classes (52 over three classes: 17, 17,
    18).
    """
    n_classes = len(class_sizes)
    counts = np.full(n_classes, n_objects // n_classes)
    counts[n_classes - n_objects % n_classes:] += 1
    return counts


def _stratified_indices(labels, counts, random_state):
    """Draw a random sample with ``counts[c]`` objects of the c-th class.

    Classes in sorted order; the indices are returned sorted by class, then
    by original position.
    """
    rng = check_random_state(random_state)
    classes = np.unique(labels)
    chosen = []
    for label, count in zip(classes, counts):
        members = np.flatnonzero(labels == label)
        if count > len(members):
            raise ValueError(
                f"Class {label.item()!r} has {len(members)} objects, fewer than the "
                f"{count} requested."
            )
        chosen.append(np.sort(rng.choice(members, size=count, replace=False)))
    return np.concatenate(chosen)


def _symmetric_trace_one(kernel):
    """Make ``kernel`` exactly symmetric (removing round-off), then divide it by its trace."""
    kernel = 0.5 * (kernel + kernel.T)
    return kernel / np.trace(kernel)


# -------------------------------------------------------------------- wine


@validate_params(
    {"n_objects": [Interval(Integral, 3, None, closed="left")],
     "random_state": ["random_state"]},
    prefer_skip_nested_validation=True,
)
def load_wine_kernel(n_objects=52, random_state=0):
    """Labeled target kernel from scikit-learn's bundled wine data.

    The wine data (178 wines of three cultivars, 13 chemical measurements;
    UCI) ship with scikit-learn, so this needs no download. Three classes, as
    the paper's three bacterial genera.

    Construction: a stratified random sample of ``n_objects`` wines, as
    balanced as possible (17/17/18 for 52; the remainder goes to the last
    classes); features standardized over the sample; the Gaussian RBF kernel
    ``exp(-||x - x'||^2 / p)`` with ``p = 13`` features, i.e. scikit-learn's
    ``gamma="scale"`` default on standardized data (not tuned); divided by
    its trace. The RBF kernel is positive definite, so the target is a
    full-rank density matrix like the learned kernels, and it has a constant
    diagonal (``1/n_objects``): every object has the same feature-space
    norm, as with a normalized sequence kernel.

    Parameters
    ----------
    n_objects : int, default=52
        Number of wines, at most 144 (three times the smallest class, 48).
    random_state : int, RandomState instance or None, default=0
        Seed of the sample.

    Returns
    -------
    data : sklearn.utils.Bunch
        ``kernel`` (n_objects, n_objects), trace one; ``labels`` (int class
        codes, sorted); ``target_names``; ``sample_indices`` (rows of
        ``sklearn.datasets.load_wine()``); ``description``.
    """
    wine = load_wine()
    counts = _balanced_counts(np.bincount(wine.target), n_objects)
    indices = _stratified_indices(wine.target, counts, random_state)
    features = StandardScaler().fit_transform(wine.data[indices])
    kernel = rbf_kernel(features, gamma=1.0 / features.shape[1])
    description = (
        f"RBF kernel (gamma=1/{features.shape[1]}) on standardized features of "
        f"{n_objects} wines sampled {'/'.join(map(str, counts))} from the three "
        "cultivars of scikit-learn's wine data, trace one."
    )
    return Bunch(
        kernel=_symmetric_trace_one(kernel),
        labels=wine.target[indices],
        target_names=wine.target_names,
        sample_indices=indices,
        description=description,
    )


# ------------------------------------------------------------------- FASTA


#: Longest FASTA line read (characters): longer than any bacterial chromosome
#: on one line, and a bound on what one endless line (``/dev/zero``, a pipe)
#: can make :func:`read_fasta` hold.
MAX_FASTA_LINE = 2**24

#: Largest FASTA file read (bytes), checked before reading a regular file and
#: while reading a stream: everything read is held in memory.
MAX_FASTA_BYTES = 2**30

#: Longest FASTA header read (characters, after the ``>``): records are
#: named by their headers (object ids, labels, figure titles, messages), and
#: real headers, even NCBI's merged ones, are far shorter.
MAX_FASTA_HEADER = 2**16

#: Bytes read at a time (the first block is also examined for NUL bytes,
#: the mark of a binary file).
_BLOCK_BYTES = 2**16


def read_fasta(path):
    r"""Read a FASTA file.

    Input rules (each broken rule is a ``ValueError`` naming the file, and
    the line where there is one): UTF-8 text (a byte order mark is skipped;
    ``\n``, ``\r\n`` or ``\r`` line ends), not compressed (gzip, bzip2,
    xz, zstd or zip: named, to be decompressed first), no NUL bytes (a binary
    file), at most :data:`MAX_FASTA_BYTES` bytes and lines of at most
    :data:`MAX_FASTA_LINE` characters (checked while reading, so a stream
    without end stops; the time is linear in the file's size), headers of
    at most :data:`MAX_FASTA_HEADER` characters, at least one record, no sequence before the first
    header, no empty sequence, and distinct headers (records are named by
    them, e.g. as object ids).

    Parameters
    ----------
    path : str or path-like
        FASTA file; sequences may span several lines.

    Returns
    -------
    headers : list of str
        Header lines without the leading ``>`` (and surrounding white space).
    sequences : list of str
        The sequences as written (case kept), line breaks and all white space
        removed.
    """
    headers, chunks, first_line = [], [], {}
    for number, line in _fasta_lines(path):
        if line.startswith(">"):
            header = line[1:].strip()
            if len(header) > MAX_FASTA_HEADER:
                raise ValueError(
                    f"{path}: line {number} is a header of {len(header)} characters "
                    f"({_shown(header)}), longer than {MAX_FASTA_HEADER} "
                    "(MAX_FASTA_HEADER); records are named by their headers.")
            if header in first_line:
                raise ValueError(
                    f"{path}: line {number} repeats the header {_shown(header)} of "
                    f"line {first_line[header]}; records are named by their headers, "
                    "give each a distinct one.")
            first_line[header] = number
            headers.append(header)
            chunks.append([])
        else:
            residues = "".join(line.split())
            if not residues:
                continue
            if not headers:
                raise ValueError(
                    f"{path}: line {number} holds sequence before any "
                    "'>' header; not a FASTA file."
                )
            chunks[-1].append(residues)
    if not headers:
        raise ValueError(f"{path}: no FASTA records found (no line starts with '>').")
    sequences = ["".join(chunk) for chunk in chunks]
    empty = [header for header, seq in zip(headers, sequences) if not seq]
    if empty:
        raise ValueError(f"{path}: empty sequence for record {_shown(empty[0])} (line "
                         f"{first_line[empty[0]]}).")
    return headers, sequences


def _shown(header, limit=80):
    """``header`` quoted for a message: its start only, if long."""
    if len(header) <= limit:
        return repr(header)
    return f"{header[:limit]!r}... ({len(header)} characters)"


_LINE_END = re.compile(rb"\r\n|\r|\n")

#: Magic numbers of compressed files, and the command that decompresses
#: them. None can start UTF-8 text: each has a control character or a byte
#: invalid in UTF-8, or (bzip2) a block signature after its level digit.
_COMPRESSED = {rb"\x1f\x8b": ("gzip", "gunzip"),
               rb"BZh[1-9](1AY&SY|\x17rE8P\x90)": ("bzip2", "bunzip2"),
               rb"\xfd7zXZ\x00": ("xz", "unxz"), rb"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
               rb"PK\x03\x04": ("zip", "unzip")}


def _fasta_lines(path):
    """Yield ``(line number, line)`` of a text file under :func:`read_fasta`'s rules.

    Read in blocks: each line is decoded and checked on its own, so that an
    error names its line. Linear in the file's size however long its lines:
    only each new block is searched for line ends, and a line spanning blocks
    is kept as a list of its pieces, joined once when its end is found (not
    re-copied and re-searched with every block).
    """
    with open(path, "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        if size > MAX_FASTA_BYTES:
            raise ValueError(
                f"{path}: {size} bytes, more than the {MAX_FASTA_BYTES} "
                "(MAX_FASTA_BYTES) read into memory.")
        number, total, first = 0, 0, True
        parts, length = [], 0  # the line read so far: its pieces, their length
        held = b""  # a block's final \r, kept back: the next may start with its \n
        while True:
            block = raw.read(_BLOCK_BYTES)
            end = not block
            if first:
                first = False
                while 0 < len(block) < 4:  # a short read (a pipe) may cut a mark
                    more = raw.read(_BLOCK_BYTES)
                    if not more:
                        break
                    block += more
                for magic, (kind, command) in _COMPRESSED.items():
                    if re.match(magic, block):
                        raise ValueError(f"{path}: {kind}-compressed data, not FASTA text; "
                                         f"decompress it first ({command}).")
                if block.startswith((b"\xff\xfe", b"\xfe\xff")):
                    raise ValueError(f"{path}: UTF-16 or UTF-32 text (its byte order "
                                     "mark), not UTF-8 text; save it as UTF-8.")
                if b"\0" in block:
                    raise ValueError(f"{path}: holds NUL bytes: a binary file, not "
                                     "FASTA text.")
                # a UTF-8 byte order mark; ``end`` was set before: a first read
                # of the mark alone is not the end of the file
                block = block.removeprefix(b"\xef\xbb\xbf")
            data = held + block
            held = b"\r" if not end and data.endswith(b"\r") else b""
            pieces = _LINE_END.split(data[:len(data) - len(held)])
            # pieces[0] ends the line read so far; before the end of the file,
            # the last piece starts a line whose end is still to come
            rest = b"" if end else pieces.pop()
            lines = []
            if pieces:
                lines = [b"".join([*parts, pieces[0]]), *pieces[1:]]
                parts, length = [], 0
            if rest:
                parts.append(rest)
                length += len(rest)
            if length + len(held) > MAX_FASTA_LINE:
                raise ValueError(
                    f"{path}: line {number + len(lines) + 1} is longer than "
                    f"{MAX_FASTA_LINE} characters (MAX_FASTA_LINE); a file without "
                    "line breaks is not FASTA.")
            total += len(block)
            if total > MAX_FASTA_BYTES:
                raise ValueError(
                    f"{path}: more than {MAX_FASTA_BYTES} bytes (MAX_FASTA_BYTES) by "
                    f"line {number + len(lines) + 1}; larger files are not read into "
                    "memory.")
            for line in lines:
                number += 1
                yield number, _fasta_line(path, number, line)
            if end:
                return


def _fasta_line(path, number, line):
    if len(line) > MAX_FASTA_LINE:
        raise ValueError(f"{path}: line {number} is longer than {MAX_FASTA_LINE} "
                         "characters (MAX_FASTA_LINE); a file without line breaks is "
                         "not FASTA.")
    if b"\0" in line:
        raise ValueError(f"{path}: line {number} holds NUL bytes: a binary file, not "
                         "FASTA text.")
    try:
        return line.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: line {number} is not UTF-8 text ({error.reason} at byte "
            f"{line[error.start:error.start + 1]!r}); a binary file, or text in "
            "another encoding (save it as UTF-8).") from None


@validate_params(
    {"sequences": ["array-like"], "k": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def spectrum_kernel(sequences, k=3):
    """Compute the normalized k-mer spectrum kernel.

    ``K_ij = <phi(s_i), phi(s_j)> / (||phi(s_i)|| ||phi(s_j)||)``, where
    ``phi(s)`` counts each contiguous substring of length ``k`` of ``s``
    (Leslie, Eskin & Noble, 2002). Sequences are read as :func:`read_fasta`
    does: white space anywhere is removed, and case does not matter
    (lower-case residues, e.g. soft-masked ones, are the same residues: all
    are counted upper case). Counting is scikit-learn's
    ``CountVectorizer(analyzer="char", ngram_range=(k, k), lowercase=False)``.

    Parameters
    ----------
    sequences : list of str
        The sequences, one string each.
    k : int, default=3
        Length of the k-mers; every sequence must have at least one (a
        shorter or blank one is refused: it has no spectrum to normalize).

    Returns
    -------
    kernel : ndarray of shape (n_sequences, n_sequences)
        Cosine-normalized, positive semi-definite, unit diagonal.
    """
    if len(sequences) == 0:
        raise ValueError("sequences is empty: give at least one sequence.")
    residues = []
    for i, seq in enumerate(sequences):
        if not isinstance(seq, str):
            raise ValueError(f"Sequence {i} is {seq!r} of type {type(seq).__name__}; "
                             "sequences must be strings.")
        residues.append("".join(seq.split()).upper())
    short = [i for i, seq in enumerate(residues) if len(seq) < k]
    if short:
        raise ValueError(
            f"Sequence {short[0]} is shorter than k={k} ({len(residues[short[0]])} "
            f"residues without white space); it has no {k}-mers."
        )
    counts = CountVectorizer(
        analyzer="char", ngram_range=(k, k), lowercase=False
    ).fit_transform(residues)
    unit_rows = normalize(counts.astype(float))
    return (unit_rows @ unit_rows.T).toarray()


@validate_params(
    {
        "path": [str, os.PathLike],
        "n_objects": [Interval(Integral, 1, None, closed="left"), None],
        "per_class": [Interval(Integral, 1, None, closed="left"), dict, None],
        "k": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def load_fasta_kernel(path, *, n_objects=None, per_class=None, k=3, random_state=0):
    """Labeled target kernel from protein (or DNA) sequences in a FASTA file.

    The label of a record is its header's first ``|``-separated field, as in
    the gyrB files (``>Genus|scheme/locus|first_allele_id|n_alleles=...``).
    The kernel is :func:`spectrum_kernel` over the (sampled) sequences,
    divided by its trace.

    With the bundled gyrB set A file, :func:`gyrb_path` (PubMLST data; cite
    Jolley, Bray & Maiden, Wellcome Open Res 2018;3:124), ``n_objects=52``
    draws 17/17/18 proteins of Acinetobacter/Pseudomonas/Vibrio: a 52 x 52
    kernel like the paper's.

    Parameters
    ----------
    path : str or path-like
        FASTA file. The data are read from here, never copied.
    n_objects : int, default=None
        Draw this many records, as balanced over the classes as possible
        (remainder to the last classes in sorted order).
    per_class : int or dict, default=None
        Draw this many records of every class, or ``{label: count}`` (classes
        not in the dict are left out). Not together with ``n_objects``;
        if both are None, all records are used.
    k : int, default=3
        Length of the k-mers of the spectrum kernel.
    random_state : int, RandomState instance or None, default=0
        Seed of the sample.

    Returns
    -------
    data : sklearn.utils.Bunch
        ``kernel`` (trace one); ``labels`` (int class codes);
        ``target_names``; ``headers``; ``sequences``; ``description``.
    """
    headers, sequences = read_fasta(path)
    names = np.array([header.split("|")[0] for header in headers])
    indices = _fasta_sample(names, n_objects, per_class, random_state)
    target_names, labels = np.unique(names[indices], return_inverse=True)
    for i in indices:  # named by its record: spectrum_kernel knows only its place
        if len(sequences[i]) < k:
            raise ValueError(
                f"{path}: record {_shown(headers[i])} has {len(sequences[i])} residues, "
                f"fewer than k={k}; it has no {k}-mers (lower k, or leave the record out).")
    kernel = spectrum_kernel([sequences[i] for i in indices], k=k)
    counts = "/".join(str(n) for n in np.bincount(labels))
    description = (
        f"Normalized {k}-mer spectrum kernel of {len(indices)} sequences "
        f"({counts} of {', '.join(target_names)}) from {Path(path).name}, "
        "trace one."
    )
    return Bunch(
        kernel=_symmetric_trace_one(kernel),
        labels=labels,
        target_names=target_names,
        headers=[headers[i] for i in indices],
        sequences=[sequences[i] for i in indices],
        description=description,
    )


def _fasta_sample(names, n_objects, per_class, random_state):
    """Record indices for :func:`load_fasta_kernel`'s sampling options."""
    if n_objects is not None and per_class is not None:
        raise ValueError("Give n_objects or per_class, not both.")
    classes, sizes = np.unique(names, return_counts=True)
    if n_objects is not None:
        return _stratified_indices(names, _balanced_counts(sizes, n_objects),
                                   random_state)
    if per_class is None:
        return np.arange(len(names))
    if isinstance(per_class, dict):
        unknown = sorted(set(per_class) - set(classes))
        if unknown:
            raise ValueError(
                f"per_class names labels {unknown} not in the file; its labels "
                f"are {list(classes)}."
            )
        keep = np.isin(names, list(per_class))
        counts = [per_class[label] for label in classes if label in per_class]
        return np.flatnonzero(keep)[
            _stratified_indices(names[keep], counts, random_state)
        ]
    return _stratified_indices(names, np.full(len(classes), per_class), random_state)


# -------------------------------------------------------------------- gyrB

#: Fraction of pairs the paper's ``gamma`` made similar pairs: 980 of 1326.
PAPER_SIMILAR_FRACTION = 980 / 1326

#: The bundled FASTA file (package data, ``megkernel/data``).
GYRB_SET_A = "gyrB_setA_Acinetobacter_Pseudomonas_Vibrio.protein.faa"

#: Whom to cite for the gyrB data.
PUBMLST_CITATION = (
    "Jolley KA, Bray JE, Maiden MCJ. Open-access bacterial population genomics: "
    "BIGSdb software, the PubMLST.org website and their applications. "
    "Wellcome Open Res 2018;3:124."
)


@contextmanager
def gyrb_path():
    """Give the bundled gyrB set A FASTA file as a real path (a context manager).

    Works from an installed package (``importlib.resources``; a zipped
    install is extracted to a temporary file for the ``with`` block).

    Yields
    ------
    path : pathlib.Path
        The path of the FASTA file, valid inside the ``with`` block.

    Examples
    --------
    >>> from megkernel.datasets import gyrb_path, read_fasta
    >>> with gyrb_path() as path:
    ...     headers, sequences = read_fasta(path)
    >>> len(headers), headers[0].split("|")[0]
    (113, 'Acinetobacter')
    """
    with resources.as_file(resources.files("megkernel") / "data" / GYRB_SET_A) as path:
        yield path


@validate_params(
    {"n_objects": [Interval(Integral, 3, None, closed="left"), None],
     "random_state": ["random_state"],
     "k": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def load_gyrb(n_objects=52, random_state=0, k=3):
    """Labeled target kernel over bundled gyrB proteins of three genera.

    The paper's experiments use a 52 x 52 kernel over gyrB proteins of three
    bacterial genera. This draws ``n_objects`` of the 113 bundled gyrB
    fragments (set A: *Acinetobacter* 43, *Pseudomonas* 21, *Vibrio* 49;
    E. coli GyrB positions 250-395), as balanced over the genera as possible
    (17/17/18 for 52), and returns their normalized ``k``-mer spectrum
    kernel divided by its trace (:func:`load_fasta_kernel`).

    The data are PubMLST's (https://pubmlst.org/), via github.com/tseemann/mlst;
    see ``megkernel/data/README.md``. If you use them, cite: Jolley KA, Bray
    JE, Maiden MCJ. Open-access bacterial population genomics: BIGSdb
    software, the PubMLST.org website and their applications. Wellcome Open
    Res 2018;3:124.

    Parameters
    ----------
    n_objects : int or None, default=52
        Proteins drawn, at most 63 (three times the smallest genus, 21);
        ``None``: all 113.
    random_state : int, RandomState instance or None, default=0
        Seed of the sample.
    k : int, default=3
        Length of the k-mers of the spectrum kernel.

    Returns
    -------
    data : sklearn.utils.Bunch
        As :func:`load_fasta_kernel`: ``kernel`` (trace one), ``labels``,
        ``target_names``, ``headers``, ``sequences``, ``description``.

    Examples
    --------
    >>> from megkernel.datasets import load_gyrb
    >>> gyrb = load_gyrb()
    >>> gyrb.kernel.shape, gyrb.target_names.tolist()
    ((52, 52), ['Acinetobacter', 'Pseudomonas', 'Vibrio'])
    """
    with gyrb_path() as path:
        data = load_fasta_kernel(path, n_objects=n_objects, k=k, random_state=random_state)
    data.description = data.description.replace(
        f"from {GYRB_SET_A}", "of gyrB set A (PubMLST, bundled)")
    return data
