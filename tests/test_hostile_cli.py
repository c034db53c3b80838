"""Hostile use of ``python -m megkernel reproduce``: links among the outputs,
arguments beyond what a run can hold, Ctrl-C and SIGTERM, a stdout or stderr
that cannot be written, and the cost of ``--help``.

An output is never written through a symbolic link (one in its place is
refused, naming it) nor half-written (a new file renamed over the name); an
argument beyond its limit is refused by the parser, naming the option and
the limit, before any work; Ctrl-C ends a run with one line and status 130;
``--help`` and argument errors import only the standard library.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from megkernel import cli
from megkernel.cli import build_parser, main

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
SMALL_RUN = ["--data", "wine", "--trials", "1500", "--checkpoints", "3",
             "--n-objects", "24", "--quiet"]
PROG = "python -m megkernel reproduce"
OUTPUTS = ["figure2_online.png", "figure2_online.pdf", "figure3_batch.png",
           "figure3_batch.pdf", "summary.csv", "summary.md"]


def _refused(capsys, *arguments):
    """Run the command expecting a refusal; return its message (one line)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", *arguments])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{PROG}: error: "), err
    return last


# -- outputs: no symbolic link followed, nothing half-written -------------------------

@pytest.mark.parametrize("name", OUTPUTS)
def test_a_link_in_place_of_an_output_is_refused_before_the_run(tmp_path, capsys, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    message = _refused(capsys, *SMALL_RUN, "--out", str(out))
    assert f"refusing to write {out / name}: it is a symbolic link (to {victim})" in message
    assert victim.read_text() == "precious"
    assert (out / name).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing else written


def test_a_dangling_link_in_place_of_an_output_creates_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.csv"
    (out / "summary.csv").symlink_to(elsewhere)
    assert "symbolic link" in _refused(capsys, *SMALL_RUN, "--out", str(out))
    assert not elsewhere.exists()


def test_an_output_that_is_not_a_file_is_refused_before_the_run(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "summary.md").mkdir(parents=True)
    message = _refused(capsys, *SMALL_RUN, "--out", str(out))
    assert f"refusing to write {out / 'summary.md'}: it is not a regular file" in message


def test_the_write_check_follows_no_link(tmp_path, monkeypatch):
    """The check that ``--out`` is writable creates a new file of its own: a link
    at a name it could guess does not make it truncate the link's target."""
    import megkernel.experiments as experiments

    def stop(*args, **kwargs):
        raise RuntimeError("stop after the output checks")

    monkeypatch.setattr(experiments, "run_online_experiment", stop)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".megkernel-write-test").symlink_to(victim)
    with pytest.raises(RuntimeError, match="stop after"):
        main(["reproduce", *SMALL_RUN, "--out", str(out)])
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == [".megkernel-write-test"]


def _write(content):
    return lambda file: file.write(content)


def test_an_output_replaces_a_file_without_writing_into_it(tmp_path):
    """A hard link to another file in place of an output: the name gets a new
    file, the other keeps its content (writing into the old file would not)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / "summary.md")
    cli._write_output(out, "summary.md", _write(b"new"))
    assert (out / "summary.md").read_bytes() == b"new"
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["summary.md"]  # no temporary left


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_write_leaves_the_old_output_whole(tmp_path, error):
    (tmp_path / "summary.csv").write_text("old")

    def half(file):
        file.write(b"half of the new ")
        raise error

    with pytest.raises(error):
        cli._write_output(tmp_path, "summary.csv", half)
    assert (tmp_path / "summary.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_check_leaves_no_folder_and_no_probe(tmp_path, monkeypatch,
                                                                  error):
    """Ctrl-C (or an error) after the write check made its probe file."""
    made = tmp_path / "made"
    real_create = cli._create_new

    class Stopping:
        def __init__(self, file):
            self.file = file

        def close(self):
            self.file.close()
            raise error

    def create_then_stop(directory, name):
        path, file = real_create(directory, name)
        return path, Stopping(file)

    monkeypatch.setattr(cli, "_create_new", create_then_stop)
    with pytest.raises(error):
        cli._prepare_output(made / "out")
    assert os.listdir(tmp_path) == []


def test_a_full_disk_is_named_with_the_output_it_stopped(tmp_path, capsys, monkeypatch):
    """Not a bare "[Errno 28] No space left on device" (a write's error names no file)."""
    import errno

    (tmp_path / "summary.csv").write_text("old")

    def full(file):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match=f"^cannot write {tmp_path / 'summary.csv'}: No space "
                                      "left on device$"):
        cli._write_output(tmp_path, "summary.csv", full)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv"]
    assert (tmp_path / "summary.csv").read_text() == "old"


def test_a_link_made_during_the_write_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()

    def meanwhile(file):
        (out / "figure2_online.png").symlink_to(victim)
        file.write(b"new")

    with pytest.raises(OSError, match="it is a symbolic link"):
        cli._write_output(out, "figure2_online.png", meanwhile)
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["figure2_online.png"]


def test_outputs_get_the_mode_of_an_ordinary_new_file(tmp_path):
    umask = os.umask(0o022)
    try:
        cli._write_output(tmp_path, "summary.md", _write(b"x"))
    finally:
        os.umask(umask)
    assert (tmp_path / "summary.md").stat().st_mode & 0o777 == 0o644


@pytest.mark.slow
def test_a_run_interrupted_while_writing_leaves_whole_files(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the third figure: two new figures, the old others, and no
    partial or temporary file."""
    from matplotlib.figure import Figure

    out = tmp_path / "out"
    out.mkdir()
    for name in OUTPUTS:
        (out / name).write_text("old")
    real_savefig, calls = Figure.savefig, []

    def savefig(self, file, **kwargs):
        calls.append(file)
        if len(calls) == 3:
            file.write(b"part of a figure")
            raise KeyboardInterrupt
        return real_savefig(self, file, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    assert main(["reproduce", *SMALL_RUN, "--out", str(out)]) == 130
    assert capsys.readouterr().err == f"{PROG}: interrupted\n"
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    assert (out / "figure2_online.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "figure2_online.pdf").read_bytes()[:5] == b"%PDF-"
    for name in OUTPUTS[2:]:
        assert (out / name).read_text() == "old"


# -- arguments beyond their limits: refused by the parser, before any work ----------

@pytest.mark.parametrize(("arguments", "expected"), [
    (["--trials", "1e15"], f"argument --trials: must be an integer from 1 to "
                           f"{2**33 // 40} (the run keeps 40 bytes a trial, "
                           "within the library's 8 GiB MAX_TRIAL_BYTES), got '1e15'"),
    (["--trials", str(10**15)], "argument --trials: must be an integer from 1 to"),
    (["--trials", "2.5"], "argument --trials: must be an integer from 1 to"),
    (["--trials", "many"], "argument --trials: must be an integer from 1 to"),
    (["--seed", str(2**70)], "argument --seed: must be an integer from 0 to 4294967295 "
                             "(2**32 - 1: numpy's RandomState seeds), got "
                             f"'{2**70}'"),
    (["--seed", str(2**32)], "argument --seed: must be an integer from 0 to 4294967295"),
    (["--seed", "-1"], "argument --seed: must be an integer from 0 to 4294967295"),
    (["--seed", "9" * 5000], "argument --seed: must be an integer from 0 to 4294967295 "
                             "(2**32 - 1: numpy's RandomState seeds), got '9999"),
    (["--n-objects", "1e20"], "argument --n-objects: must be an integer from 1 to 5000 "
                              "(MAX_DENSE_OBJECTS"),
    (["--checkpoints", "1e15"], "--checkpoints 1000000000000000 is more than --trials "
                                "300000: at most one 1-NN evaluation per trial."),
    (["--gamma", "inf"], "argument --gamma: must be a finite number, got 'inf'"),
    (["--gamma", "nan"], "argument --gamma: must be a finite number, got 'nan'"),
    (["--similar-fraction", "nan"], "argument --similar-fraction: must be a finite number"),
])
def test_an_argument_beyond_its_limit_is_refused_naming_it(tmp_path, capsys, monkeypatch,
                                                           arguments, expected):
    def no_work(args):
        raise AssertionError("the run began")

    monkeypatch.setattr(cli, "_load_target", no_work)
    out = tmp_path / "out"
    message = _refused(capsys, *arguments, "--out", str(out))
    assert expected in message
    assert len(message) < 400  # a 5000-digit seed is not echoed whole
    assert not out.exists()


@pytest.mark.parametrize(("arguments", "expected"), [
    (["--data", "wine", "--fasta", "mine.faa"], "--data wine and --fasta are alternatives"),
    (["--fasta", "mine.faa", "--data", "gyrb"], "--data gyrb and --fasta are alternatives"),
    (["--data", "wine", "--kmer", "4"], "--kmer sets the spectrum kernel of sequences"),
])
def test_options_that_would_be_ignored_are_refused_naming_them(tmp_path, capsys,
                                                               arguments, expected):
    """--fasta used to win over --data silently, and --kmer to do nothing for wine."""
    out = tmp_path / "out"
    message = _refused(capsys, *arguments, "--out", str(out))
    assert expected in message
    assert not out.exists()


def test_the_outputs_checked_are_the_outputs_written():
    assert sorted(cli.OUTPUTS) == sorted(OUTPUTS)


def test_integers_in_scientific_notation_and_the_largest_seed_are_accepted():
    args = build_parser().parse_args(
        ["reproduce", "--trials", "3e5", "--seed", str(2**32 - 1), "--n-objects", "5e1"])
    assert (args.trials, args.seed, args.n_objects) == (300_000, 2**32 - 1, 50)
    assert args.checkpoints is None  # 40, or --trials if fewer: see below


def test_few_trials_get_fewer_checkpoints_by_default():
    args = build_parser().parse_args(["reproduce", "--trials", "10"])
    assert cli._check_arguments(args) is None and args.checkpoints == 10


# -- Ctrl-C: one line, status 130 ----------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_in_a_real_run_prints_one_line_and_exits_130(tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "megkernel", "reproduce", "--data", "wine", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # a shell's background job may ignore SIGINT; the child must not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        err = b""
        deadline = time.monotonic() + 120
        # in the on-line experiment, its bar drawn (with a rate: updating)
        while b"trial/s," not in err and time.monotonic() < deadline:
            byte = process.stderr.read(1)
            if not byte:
                break
            err += byte
        assert b"trial/s," in err, err
        process.send_signal(signal.SIGINT)
        rest_out, rest_err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = (err + rest_err).decode()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.rstrip().endswith(f"\n{PROG}: interrupted")
    assert not out.exists()  # made for the run, still empty: removed


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_in_a_real_run_cleans_up_and_exits_143(tmp_path):
    """``kill``, ``timeout`` or a batch scheduler's end of a job: the run
    cleans up as after Ctrl-C (the folders made for it removed while empty)."""
    out = tmp_path / "made" / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "megkernel", "reproduce", "--data", "wine", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = b""
        deadline = time.monotonic() + 120
        while b"trial/s," not in err and time.monotonic() < deadline:
            byte = process.stderr.read(1)
            if not byte:
                break
            err += byte
        assert b"trial/s," in err, err
        assert out.is_dir()
        process.send_signal(signal.SIGTERM)
        rest_out, rest_err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = (err + rest_err).decode()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert err.rstrip().endswith(f"\n{PROG}: terminated")
    assert not (tmp_path / "made").exists()


def test_main_leaves_the_sigterm_handler_as_it_found_it(tmp_path, capsys):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit):
        main(["reproduce", "--fasta", str(tmp_path / "missing.faa"), "--out",
              str(tmp_path / "out")])
    assert signal.getsignal(signal.SIGTERM) is before


# -- stdout read by a reader that leaves: the run goes on ------------------------------

@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")
def test_a_reader_of_stdout_that_leaves_does_not_end_the_run(tmp_path):
    """``reproduce | head -1``: the outputs are the files; the messages the
    reader no longer reads are dropped, not a broken pipe ending the run."""
    out = tmp_path / "out"
    read, write = os.pipe()
    os.close(read)                               # the reader has gone already
    arguments = [a for a in SMALL_RUN if a != "--quiet"]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "megkernel", "reproduce", *arguments, "--out", str(out)],
            cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert result.returncode == 0, result.stderr
    assert "Broken pipe" not in result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_stdout_that_cannot_grow_does_not_end_the_run(tmp_path):
    """``> log.txt`` on a full disk (/dev/full): one line says so on stderr."""
    out = tmp_path / "out"
    arguments = [a for a in SMALL_RUN if a != "--quiet"]
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "megkernel", "reproduce", *arguments, "--out", str(out)],
            cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("cannot write to stdout (No space left on device); the "
                               "run goes on without its messages.") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
def test_a_run_started_with_stderr_closed_writes_its_outputs(tmp_path):
    """A daemon or cron job without file descriptor 2: Python's sys.stderr is
    None, which the progress bars used to write to (AttributeError, status 1)."""
    out = tmp_path / "out"
    arguments = [a for a in SMALL_RUN if a != "--quiet"]
    result = subprocess.run(
        [sys.executable, "-m", "megkernel", "reproduce", *arguments, "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=300,
        preexec_fn=lambda: os.close(2))
    assert result.returncode == 0
    assert "Wrote figure2_online.png" in result.stdout
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)


# -- imports: --help and argument errors load only the standard library -------------

HEAVY = ["numpy", "scipy", "sklearn", "numba", "matplotlib", "pandas", "threadpoolctl",
         "tqdm", "megkernel.datasets", "megkernel.experiments", "megkernel.plotting",
         "megkernel._engines", "megkernel._progress"]


@pytest.mark.parametrize("arguments", [
    ["--help"], ["reproduce", "--help"], ["reproduce", "--trials", "1e15"],
    ["reproduce", "--seed", str(2**70)], ["reproduce", "--checkpoints", "50",
                                          "--trials", "10"],
])
def test_help_and_argument_errors_import_no_heavy_module(arguments):
    """The command's own modules (``__main__``, ``cli``), the package's
    ``__init__`` left out: a bare package stands in for it."""
    script = textwrap.dedent(f"""
        import sys, types
        package = types.ModuleType("megkernel")
        package.__path__ = [{str(ROOT / "megkernel")!r}]
        sys.modules["megkernel"] = package
        from megkernel.__main__ import main
        try:
            main({arguments!r})
        except SystemExit:
            pass
        print(sorted(name for name in {HEAVY!r} if name in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def _imported(*arguments):
    result = subprocess.run([sys.executable, "-X", "importtime", *arguments],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    return {line.split("|")[-1].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:")} - {"package"}


@pytest.mark.slow
def test_python_dash_m_help_imports_nothing_beyond_the_package():
    """``python -m megkernel --help`` imports what ``import megkernel`` does
    (its ``__init__``), and only standard-library modules besides."""
    extra = _imported("-m", "megkernel", "reproduce", "--help") - _imported(
        "-c", "import megkernel")
    assert not {name for name in extra if name.split(".")[0] in (
        "numpy", "scipy", "sklearn", "numba", "matplotlib", "pandas", "threadpoolctl",
        "tqdm") or name in HEAVY}, sorted(extra)
