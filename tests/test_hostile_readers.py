"""Hostile files for the dataset readers (issue 22).

Each file below either reads to exactly the records it holds, however they
are written (byte order mark, line ends, white space, case), or is refused
with a ``ValueError`` naming the problem, never a ``UnicodeDecodeError``, a
kernel with a zero diagonal, or a read without end.
"""

import bz2
import lzma
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from megkernel import datasets
from megkernel.datasets import load_fasta_kernel, read_fasta, spectrum_kernel

#: (name, file bytes, the records read) — the same two records every time.
RECORDS = (["a|x", "b|y"], ["MKVLAAGIT", "WWPPHHCCE"])
ACCEPTED = [
    ("plain", b">a|x\nMKVLAAGIT\n>b|y\nWWPPHHCCE\n"),
    ("no final line end", b">a|x\nMKVLAAGIT\n>b|y\nWWPPHHCCE"),
    ("CRLF", b">a|x\r\nMKVLAAGIT\r\n>b|y\r\nWWPPHHCCE\r\n"),
    ("CR only", b">a|x\rMKVLAAGIT\r>b|y\rWWPPHHCCE\r"),
    ("UTF-8 BOM", b"\xef\xbb\xbf>a|x\nMKVLAAGIT\n>b|y\nWWPPHHCCE\n"),
    ("BOM and CRLF", b"\xef\xbb\xbf>a|x\r\nMKV\r\nLAAGIT\r\n>b|y\r\nWWPPHHCCE\r\n"),
    ("wrapped lines", b">a|x\nMKV\nLAA\nGIT\n>b|y\nWW\nPPHHCCE\n"),
    ("spaces inside", b">a|x\nMKV LAA GIT\n>b|y\nWW PP\tHH CCE\n"),
    ("tabs and trailing", b">a|x\n\tMKVLAAGIT  \n>b|y\n WWPPHHCCE\t\n"),
    ("blank lines", b"\n\n>a|x\n\nMKVLAAGIT\n\n\n>b|y\nWWPPHHCCE\n\n"),
    ("white-space lines", b"  \n>a|x\n \t \nMKVLAAGIT\n>b|y\nWWPPHHCCE\n   \n"),
    ("header padding", b">  a|x  \nMKVLAAGIT\n>b|y\t\nWWPPHHCCE\n"),
    ("form feed and vertical tab", b">a|x\nMKV\x0cLAA\x0bGIT\n>b|y\nWWPPHHCCE\n"),
]

#: 10000 good records: past the first block read, so that a late problem is
#: found while reading, not by the first look at the file.
_MANY = b"".join(b">r%d\nMKV\n" % i for i in range(10_000))

#: (name, file bytes, what the message must say)
REFUSED = [
    ("empty file", b"", "no FASTA records"),
    ("only blank lines", b"\n \n\t\n", "no FASTA records"),
    ("only a BOM", b"\xef\xbb\xbf", "no FASTA records"),
    ("no header", b"MKVLAAGIT\n", "before any '>' header"),
    ("sequence first", b"MKV\n>a\nMKV\n", "before any '>' header"),
    ("empty record", b">a|x\n>b|y\nWWPPHHCCE\n", "empty sequence for record 'a|x'"),
    ("blank record", b">a|x\n  \t\n>b|y\nWWPPHHCCE\n", "empty sequence for record 'a|x'"),
    ("last record empty", b">a|x\nMKV\n>b|y\n", "empty sequence for record 'b|y'"),
    ("duplicate header", b">a|x\nMKV\n>a|x\nWWP\n", "repeats the header 'a|x' of line 1"),
    ("duplicate after padding", b">a|x\nMKV\n> a|x \nWWP\n", "repeats the header"),
    ("NUL bytes", b">a\nMKV\x00\x00LAA\n", "binary file"),
    ("gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(256)),
     "gzip-compressed data, not FASTA text; decompress it first"),
    ("bzip2", bz2.compress(b">a\nMKV\n", 1), "bzip2-compressed data"),
    ("bzip2, empty", bz2.compress(b""), "bzip2-compressed data"),
    ("xz", lzma.compress(b">a\nMKV\n"), "xz-compressed data"),
    ("zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(range(256)), "zip-compressed data"),
    ("Latin-1 text", b">caf\xe9\nMKV\n", "not UTF-8 text"),
    ("invalid UTF-8 late", _MANY + b">b\n\xff\xfe\n", "line 20002 is not UTF-8"),
    ("UTF-16", ">a\nMKV\n".encode("utf-16"), "not UTF-8 text"),
    ("NUL late", _MANY + b">b\nM\x00V\n", "line 20002 holds NUL"),
]


def _write(tmp_path, content):
    path = tmp_path / "hostile.faa"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(("name", "content"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted_files_read_to_the_same_records(tmp_path, name, content):
    assert read_fasta(_write(tmp_path, content)) == RECORDS
    kernel = load_fasta_kernel(_write(tmp_path, content), k=2).kernel
    np.testing.assert_allclose(np.diag(kernel), 0.5)  # unit diagonal / trace


@pytest.mark.parametrize(("name", "content", "message"), REFUSED,
                         ids=[c[0] for c in REFUSED])
def test_refused_files_say_why(tmp_path, name, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match="hostile.faa") as error:
        read_fasta(path)
    assert message in str(error.value)
    with pytest.raises(ValueError):
        load_fasta_kernel(path)


def test_the_number_of_hostile_files():
    """The count the issue's report quotes (kept in step with the lists)."""
    assert len(ACCEPTED) + len(REFUSED) == 33


def test_a_line_over_the_limit_stops_the_read(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_FASTA_LINE", 100)
    exactly = _write(tmp_path, b">a\n" + b"M" * 100 + b"\n>b\nKKK\n")
    assert read_fasta(exactly)[1] == ["M" * 100, "KKK"]
    too_long = _write(tmp_path, b">a\n" + b"M" * 101 + b"\n>b\nKKK\n")
    with pytest.raises(ValueError, match="line 2 is longer than 100 characters"):
        read_fasta(too_long)


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_FASTA_BYTES", 50)
    path = _write(tmp_path, b">a\n" + b"M" * 60 + b"\n")
    with pytest.raises(ValueError, match="64 bytes, more than the 50"):
        read_fasta(path)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_an_endless_stream_stops_with_a_clear_error(tmp_path):
    """/dev/zero (NUL bytes) and an endless line of residues through a pipe:
    both end with a ValueError, in a subprocess that may not hang."""
    script = textwrap.dedent(f"""
        import os, sys, threading
        from megkernel import datasets
        datasets.MAX_FASTA_LINE = 10_000
        datasets.MAX_FASTA_BYTES = 50_000
        messages = []
        for path in ["/dev/zero", None]:
            if path is None:  # a pipe writing '>a\\nMMMM...' without end
                path = os.path.join({str(tmp_path)!r}, "pipe")
                os.mkfifo(path)
                def write():
                    try:
                        with open(path, "wb") as pipe:
                            pipe.write(b">a\\n")
                            while True:
                                pipe.write(b"M" * 4096)
                    except BrokenPipeError:
                        pass
                threading.Thread(target=write, daemon=True).start()
            try:
                datasets.read_fasta(path)
            except ValueError as error:
                messages.append(str(error))
        print(repr(messages))
    """)
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    messages = eval(result.stdout)  # noqa: S307 - our own repr of a list of str
    assert len(messages) == 2, messages
    assert "binary file" in messages[0]
    assert "line 2 is longer than 10000 characters" in messages[1]


# -- the spectrum kernel over what the reader accepts --------------------------------

def test_case_and_white_space_do_not_change_the_k_mers():
    K = spectrum_kernel(["MKVLAAGIT", "mkvlaagit", "MkV LaA\ngIt", "WWPPHHCCE"], k=3)
    np.testing.assert_allclose(K[:3, :3], 1.0)
    np.testing.assert_allclose(np.diag(K), 1.0)
    assert K[0, 3] == 0.0


@pytest.mark.parametrize(("sequences", "message"), [
    (["MKV", "   "], "Sequence 1 is shorter than k=3 (0 residues"),
    (["MKV", "M K"], "Sequence 1 is shorter than k=3 (2 residues"),
    (["MKV", None], "Sequence 1 is None"),
    (["MKV", b"MKV"], "sequences must be strings"),
])
def test_blank_and_non_string_sequences_are_refused(sequences, message):
    with pytest.raises(ValueError) as error:
        spectrum_kernel(sequences, k=3)
    assert message in str(error.value)


# -- long lines, long headers, short reads, other formats ----------------------------

def test_accepted_files_read_the_same_over_any_block_boundaries(tmp_path, monkeypatch):
    """A line (or a \\r\\n) cut between two blocks reads as if it were not."""
    for block in (1, 2, 3, 5):
        monkeypatch.setattr(datasets, "_BLOCK_BYTES", block)
        for name, content in ACCEPTED:
            assert read_fasta(_write(tmp_path, content)) == RECORDS, (block, name)


class _CountingLineEnds:
    """Stands in for the reader's line-end pattern, counting the bytes searched."""

    def __init__(self, pattern):
        self.pattern, self.searched = pattern, 0

    def split(self, data):
        self.searched += len(data)
        return self.pattern.split(data)


def test_a_long_line_is_searched_once_not_once_per_block(tmp_path, monkeypatch):
    """Linear time: a line spanning 256 blocks is not re-searched (and re-copied)
    with each block, which made a 10-million-character line take seconds."""
    counter = _CountingLineEnds(datasets._LINE_END)
    monkeypatch.setattr(datasets, "_LINE_END", counter)
    monkeypatch.setattr(datasets, "_BLOCK_BYTES", 4096)
    content = b">a\n" + b"M" * 2**20 + b"\n>b\nKKK\n"
    assert read_fasta(_write(tmp_path, content))[1] == ["M" * 2**20, "KKK"]
    assert counter.searched <= 2 * len(content)  # quadratic: about 128 times the size


@pytest.mark.slow
def test_reading_a_long_line_takes_linear_time(tmp_path, monkeypatch):
    """Four times the line, about four times the time (quadratic: sixteen).

    Best of three runs each, small blocks to make a quadratic reader's cost
    plain; a ratio, not a time, so that a loaded machine does not fail it."""
    import time

    monkeypatch.setattr(datasets, "_BLOCK_BYTES", 4096)

    def seconds(n):
        path = tmp_path / f"line{n}.faa"
        path.write_bytes(b">a\n" + b"M" * n + b"\n")
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            read_fasta(path)
            best = min(best, time.perf_counter() - start)
        return best

    short, long = seconds(10**6), seconds(4 * 10**6)
    assert long / short < 9, (short, long)


class _ShortReads:
    """A file whose reads return at most ``size`` bytes, as a pipe's may."""

    def __init__(self, raw, size):
        self.raw, self.size = raw, size

    def read(self, n=-1):
        return self.raw.read(min(n, self.size))

    def fileno(self):
        return self.raw.fileno()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.close()


def test_a_byte_order_mark_read_on_its_own_is_not_the_end_of_the_file(tmp_path,
                                                                      monkeypatch):
    real_open = open
    monkeypatch.setattr(datasets, "open", lambda path, mode: _ShortReads(
        real_open(path, mode), 3), raising=False)
    for name, content in ACCEPTED:
        assert read_fasta(_write(tmp_path, content)) == RECORDS, name


def test_a_huge_header_is_refused_naming_file_and_line(tmp_path):
    path = _write(tmp_path, b">a\nMKV\n>" + b"H" * (datasets.MAX_FASTA_HEADER + 1)
                  + b"\nMKV\n")
    with pytest.raises(ValueError, match="hostile.faa") as error:
        read_fasta(path)
    message = str(error.value)
    assert f"line 3 is a header of {datasets.MAX_FASTA_HEADER + 1} characters" in message
    assert "MAX_FASTA_HEADER" in message and len(message) < 400


def test_a_header_at_the_limit_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_FASTA_HEADER", 100)
    assert read_fasta(_write(tmp_path, b">" + b"H" * 100 + b"\nMKV\n"))[0] == ["H" * 100]
    with pytest.raises(ValueError, match="line 1 is a header of 101 characters"):
        read_fasta(_write(tmp_path, b">" + b"H" * 101 + b"\nMKV\n"))


@pytest.mark.parametrize("content", [
    b">" + b"H" * 10_000 + b"\nMKV\n>" + b"H" * 10_000 + b"\nMKV\n",  # repeated
    b">" + b"H" * 10_000 + b"\n>b\nMKV\n",  # empty
])
def test_messages_quote_only_the_start_of_a_long_header(tmp_path, content):
    with pytest.raises(ValueError, match="hostile.faa") as error:
        read_fasta(_write(tmp_path, content))
    assert "(10000 characters)" in str(error.value) and len(str(error.value)) < 400


#: Other formats and plain text: refused at their first line, as not FASTA.
NOT_FASTA = [
    ("CSV", b"name,sequence\na,MKVLAAGIT\n"),
    ("FASTQ", b"@read1\nACGT\n+\nIIII\n"),
    ("GenBank", b"LOCUS       X 4 bp DNA\nORIGIN\n        1 acgt\n//\n"),
    ("JSON", b'{"a": "MKV"}\n'),
    ("HTML", b"<!DOCTYPE html>\n<html></html>\n"),
]


@pytest.mark.parametrize(("name", "content"), NOT_FASTA, ids=[c[0] for c in NOT_FASTA])
def test_other_formats_are_refused_at_their_first_line(tmp_path, name, content):
    with pytest.raises(ValueError, match="hostile.faa: line 1 holds sequence before any "
                                         "'>' header; not a FASTA file"):
        read_fasta(_write(tmp_path, content))
