"""Command line: ``python -m megkernel reproduce``.

Reproduces both experiments of Section 5 of Tsuda, Raetsch & Warmuth (2004)
on a labeled target kernel — by default the bundled gyrB proteins of three
genera (PubMLST), like the paper's; ``--data wine`` or ``--fasta PATH`` for
others — and writes the Figure 2 / Figure 3 analogues (PNG and PDF) and a
summary table with the seed, the arguments, the versions and wall times.
Progress: one bar per experiment on stderr (``--quiet``: nothing but errors;
``--verbose``: a detail line per checkpoint and the whole table). Everything
is composed from :mod:`megkernel.datasets`, :mod:`megkernel.experiments` and
:mod:`megkernel.plotting`.

A refused run leaves no trace: every input (arguments, data, the similar
pairs ``gamma`` admits) is checked before the ``--out`` directory is made,
and directories made for a run that then fails are removed while empty.

Hostile inputs: the arguments are checked by the parser against the limits
of what a run can hold (``--trials``, ``--seed``, ``--n-objects``), before
any work; an output is written to a temporary file in ``--out`` and renamed
over its name, so that it is never half-written and never written through a
symbolic link (one in its place is refused, naming it); Ctrl-C ends the run
with one line and exit status 130 (SIGTERM: 143), cleaned up; a reader of stdout that leaves (``|
head``) does not end it (its messages are dropped, its files written). Only
the standard library is imported until the arguments are parsed: ``--help``
and argument errors are quick.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import stat
import sys
import threading
import time
from numbers import Integral
from pathlib import Path

# constants only (no imports): the parser states the library's limits
from ._numerics.limits import MAX_DENSE_OBJECTS, MAX_TRIAL_BYTES, MAX_TRIALS

__all__ = ["main"]

#: Default number of MEG trials, the paper's (for its running time, see the
#: benchmarks page).
DEFAULT_TRIALS = 300_000

#: Default k-mer length of the spectrum kernel of sequences (gyrB, --fasta).
DEFAULT_KMER = 3

#: Default number of 1-NN evaluations over the trials (fewer if fewer trials).
DEFAULT_CHECKPOINTS = 40

#: Bytes the on-line run keeps per trial: its pair (16), its distance (8),
#: its loss (8) and the running total loss (8).
BYTES_PER_TRIAL = 40

#: Most trials a run is asked for: their records within the library's
#: MAX_TRIAL_BYTES (8 GiB), and within its MAX_TRIALS.
MAX_RUN_TRIALS = min(MAX_TRIALS, MAX_TRIAL_BYTES // BYTES_PER_TRIAL)

#: Largest seed: numpy's RandomState (and scikit-learn's random_state) take
#: seeds from 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1

#: The files a run writes to ``--out``.
OUTPUTS = ("figure2_online.png", "figure2_online.pdf", "figure3_batch.png",
           "figure3_batch.pdf", "summary.csv", "summary.md")


def _shown(text, limit=40):
    """Quote an argument as typed for a message, cut short if long."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _integer(text, low, high, why=""):
    """``text`` as an integer from ``low`` to ``high`` (``None``: no bound).

    Digits, or an integral number in scientific notation (``3e5``).
    """
    bounds = f"from {low} to {high}{why}" if high is not None else f">= {low}"
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not number.is_integer():  # also inf, nan
            raise argparse.ArgumentTypeError(
                f"must be an integer {bounds}, got {_shown(text)}") from None
        value = int(number)
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {_shown(text)}")
    return value


def _positive_int(text):
    return _integer(text, 1, None)


def _n_objects(text):
    return _integer(text, 1, MAX_DENSE_OBJECTS,
                    " (MAX_DENSE_OBJECTS: the target and the learned kernels are "
                    "dense d x d matrices)")


def _trials(text):
    return _integer(text, 1, MAX_RUN_TRIALS,
                    f" (the run keeps {BYTES_PER_TRIAL} bytes a trial, within the "
                    f"library's {MAX_TRIAL_BYTES / 2**30:g} GiB MAX_TRIAL_BYTES)")


def _seed(text):
    return _integer(text, 0, MAX_SEED, " (2**32 - 1: numpy's RandomState seeds)")


def _real(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {_shown(text)}")
    return value


def _fraction(text):
    value = _real(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {_shown(text)}")
    return value


def _positive_float(text):
    value = _real(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {_shown(text)}")
    return value


def build_parser():
    """Build the argument parser of ``python -m megkernel``."""
    parser = argparse.ArgumentParser(
        prog="python -m megkernel",
        description="Kernel learning by Matrix Exponentiated Gradient updates "
                    "(Tsuda, Raetsch & Warmuth, NIPS 2004).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    reproduce = commands.add_parser(
        "reproduce",
        help="run both Section-5 experiments; write figures and a summary table",
        description="On-line MEG from random distance examples of a target kernel "
                    "(Figure 2) and DefiniteBoost from its similar pairs (Figure 3), "
                    "judged by the 1-NN error over 10 random 50/50 splits.",
    )
    data = reproduce.add_argument_group(
        "data (default: the bundled gyrB proteins of three genera, PubMLST)")
    data.add_argument("--data", choices=["gyrb", "wine"],  # None: gyrb, unless --fasta
                      help="bundled target: gyrB set A fragments of Acinetobacter, "
                           "Pseudomonas and Vibrio, 3-mer spectrum kernel (default; "
                           "PubMLST data: cite Jolley, Bray & Maiden, Wellcome Open Res "
                           "2018;3:124), or scikit-learn's wine data (RBF kernel)")
    data.add_argument("--fasta", type=Path, metavar="PATH",
                      help="FASTA file of labeled sequences instead (label = header "
                           "up to the first '|')")
    data.add_argument("--n-objects", type=_n_objects, default=52,
                      help="objects sampled, balanced over classes (default: 52; at "
                           f"most {MAX_DENSE_OBJECTS})")
    data.add_argument("--kmer", type=_positive_int,  # None: DEFAULT_KMER
                      help="k-mer length of the spectrum kernel of sequences (default: "
                           f"{DEFAULT_KMER})")
    online = reproduce.add_argument_group("on-line MEG (Figure 2)")
    online.add_argument("--trials", type=_trials, default=DEFAULT_TRIALS,
                        help=f"distance examples (default: {DEFAULT_TRIALS}; "
                             f"the paper: 300000; at most {MAX_RUN_TRIALS}, the "
                             "trials' records within 8 GiB)")
    online.add_argument("--checkpoints", type=_positive_int,
                        help="1-NN evaluations, log-spaced over the trials, at most "
                             f"one per trial (default: {DEFAULT_CHECKPOINTS}, or "
                             "--trials if fewer)")
    batch = reproduce.add_argument_group(
        "DefiniteBoost (Figure 3): similar pairs by count (default) or by gamma")
    batch.add_argument("--similar-fraction", type=_fraction,  # None: the paper's
                       help="make the closest fraction of all pairs similar-pair "
                            "constraints (default: the paper's share, 980 of 1326 "
                            "pairs = 0.739; the gamma it implies is printed)")
    batch.add_argument("--gamma", type=_positive_float,
                       help="squared-distance threshold of similar pairs in "
                            "trace-one units instead (the paper: 0.2/d on its kernel)")
    batch.add_argument("--max-iter", type=_positive_int, default=2000,
                       help="largest number of projections (default: 2000)")
    reproduce.add_argument("--seed", type=_seed, default=0,
                           help="seed of sampling, examples and splits, from 0 to "
                                f"2**32 - 1 = {MAX_SEED} (default: 0)")
    reproduce.add_argument("--out", type=Path, default=Path("megkernel-results"),
                           help="output directory (default: megkernel-results)")
    talk = reproduce.add_mutually_exclusive_group()
    talk.add_argument("--quiet", "-q", action="store_true",
                      help="print nothing but errors (the files are still written)")
    talk.add_argument("--verbose", "-v", action="store_true",
                      help="a detail line per checkpoint, and the whole table")
    return parser


def _load_target(args):
    import numpy as np

    from .datasets import load_fasta_kernel, load_gyrb, load_wine_kernel

    if args.fasta is None and args.data == "wine":
        target = load_wine_kernel(args.n_objects, random_state=args.seed)
    elif args.fasta is None:
        target = load_gyrb(args.n_objects, random_state=args.seed, k=args.kmer)
    else:
        target = load_fasta_kernel(args.fasta, n_objects=args.n_objects, k=args.kmer,
                                   random_state=args.seed)
    counts = np.bincount(target.labels)
    if len(counts) < 2 or counts.min() < 2:
        raise ValueError(
            f"the 1-NN protocol needs at least 2 classes with at least 2 objects each; "
            f"the data have {len(counts)} class(es) with "
            f"{'/'.join(map(str, counts))} objects (labels are the FASTA headers up "
            "to the first '|'; raise --n-objects or check the headers).")
    return target


#: Flags of every file a run creates: a new file only (O_EXCL), never through
#: a symbolic link (O_NOFOLLOW, where the system has it).
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
           | getattr(os, "O_BINARY", 0))


def _create_new(directory, name):
    """Create and open a new file of a random name for ``name`` in ``directory``.

    Return its path and a binary file object. Mode 0o666 less the umask, as
    an ordinary ``open`` would make it.
    """
    path = directory / f".{name}.{os.urandom(8).hex()}.tmp"
    return path, os.fdopen(os.open(path, _CREATE, 0o666), "wb")


def _check_replaceable(path):
    """Refuse to write ``path`` unless it is absent or a regular file (not a link)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise OSError(f"refusing to write {path}: it is a symbolic link (to "
                      f"{os.readlink(path)}); outputs are never written through links "
                      "(remove it, or choose another --out).")
    if not stat.S_ISREG(mode):
        raise OSError(f"refusing to write {path}: it is not a regular file (remove it, "
                      "or choose another --out).")


def _write_output(directory, name, write):
    """Write ``directory / name`` atomically, never through a symbolic link.

    ``write(file)`` fills a new file in ``directory``, which is then renamed
    over the name. So the output is never half-written (an interrupted run
    leaves the old file or none, and no temporary file), and never written
    through a symbolic link: one in its place is refused, and ``os.replace``
    renames over the name itself, not what a link made since points to.
    """
    path = directory / name
    _check_replaceable(path)
    temporary = None
    try:
        temporary, file = _create_new(directory, name)
        with file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        _check_replaceable(path)  # again: the run took a while
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if isinstance(error, OSError) and error.errno is not None:  # the system's words
            raise OSError(f"cannot write {path}: {error.strerror or error}") from error
        raise


def _prepare_output(directory):
    """Create the output directory and check it, before the experiments.

    It must be writable, and no output in it a symbolic link or other than a
    regular file. Return the directories created (innermost last).
    """
    missing = [path for path in [directory, *directory.parents] if not path.exists()]
    created, probe = [], None
    try:
        for path in reversed(missing):
            path.mkdir()
            created.append(path)
        probe, file = _create_new(directory, "megkernel-write-test")
        file.close()
        probe.unlink()
    except BaseException as error:  # Ctrl-C too: nothing left behind
        if probe is not None:
            with contextlib.suppress(OSError):
                probe.unlink()
        _remove_created(created)
        if not isinstance(error, OSError):
            raise
        raise OSError(f"cannot write to the output directory {directory}: "
                      f"{error.strerror or error}") from error
    for name in OUTPUTS:
        _check_replaceable(directory / name)
    return created


def _remove_created(created):
    """Remove the directories a refused run created, if still empty."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            return


def _data_name(args):
    if args.fasta is not None:
        return args.fasta.name
    return {"gyrb": "gyrB set A", "wine": "wine"}[args.data]


def _format(value):
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, Integral)):
        return str(value)
    return f"{value:.4g}"


def _versions():
    """Versions of Python and of the libraries the results depend on."""
    import platform
    from importlib import metadata

    from ._version import __version__

    versions = {"python": platform.python_version(), "megkernel": __version__}
    for name in ["numpy", "scipy", "scikit-learn", "numba", "matplotlib", "tqdm"]:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _run_record(args, argv, seconds):
    """Seed, command line, versions and wall times: rows of the summary."""
    import shlex

    import pandas as pd

    command = "python -m megkernel " + " ".join(shlex.quote(a) for a in argv)
    rows = [("seed", args.seed), ("command", command)]
    rows += [(f"version: {name}", version) for name, version in _versions().items()]
    rows += [(f"wall seconds: {name}", value) for name, value in seconds.items()
             if name not in ("on-line experiment", "batch experiment")]  # in the table
    return pd.DataFrame(rows, columns=["quantity", "value"])


def _markdown(table, record, heading, citation):
    lines = [f"# {heading}", "", "| quantity | value |", "|---|---|"]
    lines += [f"| {q} | {_format(v)} |" for q, v in table.itertuples(index=False)]
    lines += ["", "## Run", "", "| | |", "|---|---|"]
    lines += [f"| {q} | {_format(v).replace('|', '&#124;')} |"
              for q, v in record.itertuples(index=False)]
    if citation:
        lines += ["", f"Data: PubMLST (https://pubmlst.org/). Cite: {citation}"]
    return "\n".join(lines) + "\n"


def _engines_used(d, n_trials):
    """Names of the engines "auto" will run: MEG trials and DefiniteBoost steps."""
    from ._engines import select
    from ._numerics.state import prior_state

    state = prior_state(d)
    return [select("auto", state, n_trials).name,
            select("auto", state, need="update").name]


def _gamma(args, kernel):
    """gamma, and a line saying how it was chosen and what it implies."""
    from .datasets import PAPER_SIMILAR_FRACTION, similar_pairs, similarity_threshold

    n_pairs = len(kernel) * (len(kernel) - 1) // 2
    d = len(kernel)
    if args.gamma is not None:
        count = len(similar_pairs(kernel, args.gamma, shuffle=False))
        if count == 0:  # as run_batch_experiment would say, after the on-line run
            raise ValueError(f"No pair is closer than gamma={args.gamma:.4g} in the "
                             "target kernel; raise --gamma (or use --similar-fraction).")
        return args.gamma, (f"DefiniteBoost: gamma = {args.gamma * d:.4g}/d (--gamma) "
                            f"admits {count} of {n_pairs} pairs "
                            f"(fraction {count / n_pairs:.3f})")
    fraction = (PAPER_SIMILAR_FRACTION if args.similar_fraction is None
                else args.similar_fraction)
    gamma = similarity_threshold(kernel, fraction)
    count = len(similar_pairs(kernel, gamma, shuffle=False))
    if count == 0:  # as run_batch_experiment would say, after the on-line run
        raise ValueError(f"No pair is closer than gamma={gamma:.4g} in the target "
                         "kernel; raise --similar-fraction.")
    how = ("the paper's share, 980 of 1326" if fraction == PAPER_SIMILAR_FRACTION
           else f"--similar-fraction {fraction:g}")
    return gamma, (f"DefiniteBoost: {count} of {n_pairs} pairs similar ({how}), "
                   f"so gamma = {gamma * d:.4g}/d (the paper: 0.2/d on its kernel; "
                   "--gamma sets it instead)")


def _check_arguments(args):
    """Check the arguments together (each one alone is checked by the parser).

    Return an error message, or None. Options left out get their defaults
    here, where it can be told whether they were given.
    """
    if args.fasta is not None and args.data is not None:
        return (f"--data {args.data} and --fasta are alternatives (the bundled data or "
                "a FASTA file): give one.")
    if args.fasta is None and args.data is None:
        args.data = "gyrb"
    if args.kmer is not None and args.data == "wine":
        return ("--kmer sets the spectrum kernel of sequences (gyrB, --fasta); --data "
                "wine has an RBF kernel of its measurements.")
    if args.kmer is None:
        args.kmer = DEFAULT_KMER
    if args.checkpoints is None:
        args.checkpoints = min(DEFAULT_CHECKPOINTS, args.trials)
    elif args.checkpoints > args.trials:
        return (f"--checkpoints {args.checkpoints} is more than --trials {args.trials}: "
                "at most one 1-NN evaluation per trial.")
    return None


def reproduce(args, *, log=print, argv=()):
    """Run the ``reproduce`` command for parsed ``args``; return the table."""
    started = time.perf_counter()
    if args.quiet:
        def log(message):
            return None
    verbose = 0 if args.quiet else (2 if args.verbose else 1)
    message = _check_arguments(args)
    if message is not None:
        raise ValueError(message)
    # every input is checked before the output directory is made: a refused
    # run leaves no trace (and one that fails later removes it if still empty)
    target = _load_target(args)
    gamma, gamma_line = _gamma(args, target.kernel)
    created = _prepare_output(args.out)
    try:
        return _run(args, argv, log, verbose, target, gamma, gamma_line, started)
    except BaseException:
        _remove_created(created)
        raise


def _run(args, argv, log, verbose, target, gamma, gamma_line, started):
    """Run the experiments, figures and tables of :func:`reproduce`."""
    import pandas as pd
    from threadpoolctl import threadpool_limits

    from . import experiments
    from ._progress import note_compiling
    from .datasets import PUBMLST_CITATION
    from .plotting import plot_batch_experiment, plot_online_experiment

    log(f"Target: {target.description}")
    log(gamma_line)
    d = len(target.labels)
    if verbose:
        note_compiling(_engines_used(d, args.trials))
    seconds = {}
    # Small matrices: more BLAS threads only thrash.
    with threadpool_limits(limits=1):
        online = experiments.run_online_experiment(
            target.kernel, target.labels, n_trials=args.trials,
            n_checkpoints=args.checkpoints, random_state=args.seed, verbose=verbose)
        seconds["on-line experiment"] = online.wall_seconds
        log(f"MEG: {online.model.n_updates_} trials, total loss "
            f"{online.cumulative_loss[-1]:.4f} (Lemma 3.2 bound {online.loss_bound:.4f}), "
            f"1-NN error {online.knn_errors[-1]:.3f} (target {online.target_error:.3f}, "
            f"I/d {online.identity_error:.3f}), {online.wall_seconds:.1f} s")
        batch = experiments.run_batch_experiment(
            target.kernel, target.labels, gamma=gamma, max_iter=args.max_iter,
            random_state=args.seed, verbose=verbose)
        seconds["batch experiment"] = batch.wall_seconds
        model = batch.model
        log(f"DefiniteBoost: {batch.n_constraints} constraints, {model.n_iter_} iterations, "
            f"dual objective x d {d * model.dual_objective_[-1]:.2f} (Theorem 4.1 bound "
            f"{d * model.dual_bound_[-1]:.2f}, prior {d}), 1-NN error "
            f"{batch.knn_errors[-1]:.3f}, {batch.wall_seconds:.1f} s")
    table = experiments.summary_table(online, batch)
    name = _data_name(args)
    figures = {
        "figure2_online": plot_online_experiment(
            online, title=f"On-line MEG on {name} ($d = {d}$), "
                          f"learning rate $\\eta = {online.learning_rate:g}$"),
        "figure3_batch": plot_batch_experiment(
            batch, title=f"DefiniteBoost on {name} ($d = {d}$), "
                         f"{batch.n_constraints} similar pairs, "
                         f"$\\gamma = {gamma * d:.3g}/d$"),
    }
    written = []
    for stem, figure in figures.items():
        for suffix in (".png", ".pdf"):
            _write_output(args.out, stem + suffix, lambda file, figure=figure,
                          suffix=suffix: figure.savefig(file, format=suffix[1:], dpi=150))
            written.append(stem + suffix)
    seconds["total"] = time.perf_counter() - started
    record = _run_record(args, argv, seconds)
    csv = pd.concat([table, record], ignore_index=True).to_csv(index=False)
    _write_output(args.out, "summary.csv", lambda file: file.write(csv.encode("utf-8")))
    citation = PUBMLST_CITATION if (args.fasta is None and args.data == "gyrb") else None
    markdown = _markdown(table, record, target.description, citation)
    _write_output(args.out, "summary.md",
                  lambda file: file.write(markdown.encode("utf-8")))
    written += ["summary.md", "summary.csv"]
    if args.verbose:
        log(markdown)
    log(f"Wrote {', '.join(written)} to {args.out} ({seconds['total']:.1f} s)")
    return table


def _print_while_read(message):
    """``print`` to stdout, as long as it can be written.

    The outputs are the files: when the reader of stdout has gone (``|
    head``, a closed terminal) or its file cannot grow (a full disk), the run
    goes on without its messages (saying so on stderr, unless the reader
    merely left), instead of ending with the error of a message. stdout is
    then the null device, so that nothing fails on flushing it later, at
    exit included.
    """
    try:
        print(message, flush=True)
    except OSError as error:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
        if not isinstance(error, BrokenPipeError):
            sys.stderr.write(f"python -m megkernel reproduce: cannot write to stdout "
                             f"({error.strerror or error}); the run goes on without its "
                             "messages.\n")


class _Terminated(BaseException):
    """SIGTERM (``kill``, ``timeout``, a batch scheduler), raised in the run.

    A BaseException, as KeyboardInterrupt: the run cleans up as after
    Ctrl-C (no temporary file, no folder made for it left empty), and no
    ``except Exception`` on the way takes it for an error.
    """


def _raise_terminated(signum, frame):
    raise _Terminated


def main(argv=None):
    """Entry point of ``python -m megkernel`` and the ``megkernel`` script.

    Return the exit status: 0, or 130 after Ctrl-C and 143 after SIGTERM
    (one line, no traceback; the outputs already written are whole, the
    others not begun). Errors of the arguments, the data or the output
    directory end it with one line and status 2 (``SystemExit``).
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    prefix = f"{parser.prog} {args.command}"
    closed_stderr = sys.stderr is None  # started with it closed (a daemon, cron)
    if closed_stderr:  # the progress bars and messages go nowhere, not into an error
        sys.stderr = open(os.devnull, "w")  # closed below
    main_thread = threading.current_thread() is threading.main_thread()  # signals' thread
    if main_thread:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        reproduce(args, log=_print_while_read, argv=argv)
    except (ImportError, OSError, ValueError) as error:
        parser.exit(2, f"{prefix}: error: {error}\n")
    except KeyboardInterrupt:
        sys.stderr.write(f"{prefix}: interrupted\n")
        return 130
    except _Terminated:
        sys.stderr.write(f"{prefix}: terminated\n")
        return 128 + signal.SIGTERM
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if closed_stderr:
            sys.stderr.close()
            sys.stderr = None
    return 0
