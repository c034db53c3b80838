"""The learned-kernel cache of KernelDistances: never a wrong kernel, never a
writeable shared array, each kernel learned once (in a process, and with
``memory`` across the processes of a parallel search)."""

import os

import joblib
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import ShuffleSplit, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

import megkernel
from megkernel import KernelDistances
from megkernel import MEGKernelRegressor as BaseMEG
from megkernel.objects import cache_info, clear_cache

D = 10


def _side(seed=0, n=300):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(D, 3))
    a, b = rng.integers(0, D, (2, n))
    return np.column_stack([a, b]), ((points[a] - points[b]) ** 2).sum(1)


def _step(learner=None, **params):
    pairs, y = _side()
    if learner is None:
        learner = BaseMEG(solver="online", n_objects=D)
    return KernelDistances(learner=learner, given_squared=True,
                           pairs=pairs, targets=y, **params)


class MEGKernelRegressor(BaseMEG):
    """Same name as megkernel's, another kernel (twice the trace)."""

    def fit(self, X, y):
        super().fit(X, y)
        self.trace_ *= 2.0
        return self


def _same_named_class(factor):
    class Scaled(BaseMEG):
        def fit(self, X, y):
            super().fit(X, y)
            self.trace_ *= factor
            return self
    return Scaled


class CountingMEG(BaseMEG):
    """Writes a line to ``log`` at every fit (counts fits across processes)."""

    def __init__(self, *, n_objects=None, learning_rate="auto", log=None):
        super().__init__(n_objects=n_objects, learning_rate=learning_rate)
        self.log = log

    def fit(self, X, y):
        with open(self.log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return super().fit(X, y)


def _n_fits(log):
    if not os.path.exists(log):
        return 0
    with open(log) as handle:
        return len(handle.read().split())


def test_cached_kernels_are_read_only_for_good():
    clear_cache()
    first, second = _step().fit(np.arange(D)), _step().fit(np.arange(D))
    assert cache_info()["fits"] == 1
    reference = first.kernel_.copy()
    for array in (first.kernel_, first.objects_):
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
        with pytest.raises(ValueError):
            array.setflags(write=True)
        base = array
        while isinstance(base, np.ndarray):  # nothing down the chain can be unlocked
            if base.base is None or not isinstance(base.base, np.ndarray):
                with pytest.raises(ValueError):
                    base.setflags(write=True)
            base = base.base
    # an in-place edit by one pipeline cannot reach another's kernel
    with pytest.raises(ValueError):
        np.add(first.kernel_, 1.0, out=first.kernel_)
    assert_array_equal(second.kernel_, reference)
    out = second.transform(np.arange(3))
    out[:] = -1.0                                 # outputs are the caller's own
    assert np.all(second.transform(np.arange(3)) >= 0)
    # a fixed kernel is copied and read-only too
    K = np.eye(D) + 1.0
    fixed = KernelDistances(kernel=K).fit(np.arange(D))
    K[0, 0] = 50.0
    assert fixed.kernel_[0, 0] == 2.0 and not fixed.kernel_.flags.writeable


def test_a_class_of_the_same_name_gets_its_own_kernel():
    clear_cache()
    base = _step().fit(np.arange(D))
    other = _step(MEGKernelRegressor(solver="online", n_objects=D)).fit(np.arange(D))
    assert type(other.learner).__qualname__ == type(base.learner).__qualname__
    assert_allclose(other.kernel_, 2.0 * base.kernel_, rtol=1e-12)
    # same module and qualified name: still two classes, two kernels
    one, two = _same_named_class(3.0), _same_named_class(5.0)
    assert (one.__module__, one.__qualname__) == (two.__module__, two.__qualname__)
    k3 = _step(one(solver="online", n_objects=D)).fit(np.arange(D)).kernel_
    k5 = _step(two(solver="online", n_objects=D)).fit(np.arange(D)).kernel_
    assert_allclose(k3, 3.0 * base.kernel_, rtol=1e-12)
    assert_allclose(k5, 5.0 * base.kernel_, rtol=1e-12)
    assert cache_info()["fits"] == 4


def test_a_parameter_change_gets_its_own_kernel():
    clear_cache()
    pairs, y = _side()
    prior = np.eye(D) + 0.5
    step = _step(BaseMEG(solver="online", init=prior))
    first = step.fit(np.arange(D)).kernel_
    prior[0, 1] = prior[1, 0] = 0.9              # the same array, edited in place
    edited = step.fit(np.arange(D)).kernel_
    direct = BaseMEG(solver="online", init=prior).fit(pairs, y).kernel_
    assert_allclose(edited, direct, rtol=1e-12)
    assert not np.allclose(first, edited)
    step.set_params(learner__learning_rate=0.1)
    assert_allclose(step.fit(np.arange(D)).kernel_,
                    BaseMEG(solver="online", init=prior, learning_rate=0.1).fit(pairs, y).kernel_,
                    rtol=1e-12)
    assert cache_info()["fits"] == 3


def test_a_data_change_gets_its_own_kernel():
    clear_cache()
    pairs, y = _side()
    step = KernelDistances(given_squared=True,
                           learner=BaseMEG(solver="online", n_objects=D), pairs=pairs, targets=y)
    first = step.fit(np.arange(D)).kernel_
    y[:10] *= 3.0                                 # targets edited in place
    second = step.fit(np.arange(D)).kernel_
    assert_allclose(second, BaseMEG(solver="online", n_objects=D).fit(pairs, y).kernel_, rtol=1e-12)
    pairs[0] = [1, 2]                             # pairs edited in place
    third = step.fit(np.arange(D)).kernel_
    assert_allclose(third, BaseMEG(solver="online", n_objects=D).fit(pairs, y).kernel_, rtol=1e-12)
    assert not np.allclose(first, second) and not np.allclose(second, third)
    assert cache_info()["fits"] == 3


def test_memory_keeps_kernels_on_disk_keyed_by_the_version(tmp_path, monkeypatch):
    clear_cache()
    first = _step(memory=tmp_path).fit(np.arange(D))
    assert cache_info()["fits"] == 1
    clear_cache()                                 # a new process, in effect
    again = _step(memory=str(tmp_path)).fit(np.arange(D))
    assert cache_info() == dict(hits=0, misses=1, fits=0, size=1, bytes=cache_info()["bytes"])
    assert_array_equal(again.kernel_, first.kernel_)
    assert not again.kernel_.flags.writeable
    clear_cache()
    joblib_memory = joblib.Memory(str(tmp_path), verbose=0)  # the same folder
    _step(memory=joblib_memory).fit(np.arange(D))
    assert cache_info()["fits"] == 0
    clear_cache()
    monkeypatch.setattr(megkernel._version, "__version__", "0.0.0-other")
    _step(memory=tmp_path).fit(np.arange(D))
    assert cache_info()["fits"] == 1              # another version learns anew


def _search_fits(tmp_path, backend, n_jobs, memory=True):
    log = str(tmp_path / f"fits-{backend}.log")
    pairs, y = _side(n=600)
    labels = np.arange(D) % 2
    results = []
    with joblib.parallel_backend(backend, n_jobs=n_jobs):
        for rate in (0.2, 0.5):
            step = KernelDistances(given_squared=True,
                                   learner=CountingMEG(n_objects=D, learning_rate=rate,
                                                       log=log),
                                   pairs=pairs, targets=y,
                                   memory=tmp_path / "cache" if memory else None)
            pipe = Pipeline([("d", step), ("knn", KNeighborsClassifier(1, metric="precomputed"))])
            results.append(cross_val_score(pipe, np.arange(D), labels, n_jobs=n_jobs,
                                           cv=ShuffleSplit(6, test_size=0.5, random_state=0)))
    return _n_fits(log), results


@pytest.mark.slow
@pytest.mark.parametrize("memory", [False, True])
def test_threads_learn_each_kernel_once(tmp_path, memory):
    clear_cache()
    fits, scores = _search_fits(tmp_path, "threading", 2, memory)
    assert fits == 2
    clear_cache()
    fits_sequential, sequential = _search_fits(tmp_path / "sequential", "threading", 1)
    assert fits_sequential == 2
    for a, b in zip(scores, sequential):
        assert_array_equal(a, b)


@pytest.mark.slow
def test_processes_with_memory_learn_each_kernel_once(tmp_path):
    clear_cache()
    fits, scores = _search_fits(tmp_path, "loky", 2)
    assert fits == 2                              # not once per worker
    clear_cache()
    _, sequential = _search_fits(tmp_path / "sequential", "threading", 1)
    for a, b in zip(scores, sequential):
        assert_array_equal(a, b)


def test_a_process_new_to_the_folder_reads_what_another_learned(tmp_path):
    """A kernel learned by a process that used another folder first is read
    (not learned again) by a process new to both (the on-disk cache once
    went through joblib.Memory, which records a function per folder only
    the first time a process meets it)."""
    clear_cache()
    _step(memory=tmp_path / "first").fit(np.arange(D))
    _step(BaseMEG(solver="online", n_objects=D, learning_rate=0.3), memory=tmp_path / "second").fit(
        np.arange(D))
    assert cache_info()["fits"] == 2
    clear_cache()
    joblib.memory._FUNCTION_HASHES.clear()        # a process that never met _learn
    _step(BaseMEG(solver="online", n_objects=D, learning_rate=0.3), memory=tmp_path / "second").fit(
        np.arange(D))
    assert cache_info()["fits"] == 0


@pytest.mark.slow
# the benchmark's problem at 24 objects is too small for the learner's verdict
@pytest.mark.filterwarnings(
    "ignore:MEGKernelRegressor. .* pairs are too few to hold out:UserWarning")
def test_the_search_benchmark_runs_and_counts_its_fits(tmp_path):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_search.py"
    spec = importlib.util.spec_from_file_location("bench_search", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_search"] = bench
    spec.loader.exec_module(bench)
    problem = bench.make_problem(24)
    assert problem[2].shape[1] == 2 and len(problem[3]) == len(problem[2])
    for memory in (False, True):
        seconds, learned = bench.run("GridSearchCV", problem, 1, memory, str(tmp_path))
        assert learned == 3 and seconds > 0      # 3 learning rates, once each


def test_a_worker_process_without_memory_says_it_learns_again(tmp_path, monkeypatch):
    import multiprocessing
    import warnings

    from megkernel import _objects_cache

    clear_cache()
    monkeypatch.setattr(_objects_cache, "_warned_in_worker", [])
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    with pytest.warns(UserWarning, match="worker process without memory.*memory="):
        _step().fit(np.arange(D))
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _step().fit(np.arange(D))                 # once per process
        monkeypatch.setattr(_objects_cache, "_warned_in_worker", [])
        clear_cache()
        _step(memory=tmp_path).fit(np.arange(D))  # with memory: nothing to say
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: None)
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _step().fit(np.arange(D))                 # the main process


def test_the_key_reads_content_fast_and_keeps_types():
    import pandas as pd

    from megkernel._objects_cache import _key

    clear_cache()
    pairs, y = _side()
    names = np.array([f"n{i}" for i in range(D)], dtype=object)
    ids = names[pairs]
    fresh = np.array([str(v) for v in ids.ravel()], dtype=object).reshape(ids.shape)
    learner = BaseMEG(solver="online")
    first = KernelDistances(given_squared=True, learner=learner, pairs=ids, targets=y).fit(names)
    again = KernelDistances(given_squared=True,
                            learner=learner, pairs=fresh, targets=y).fit(names)  # equal ids
    assert cache_info()["fits"] == 1 and again.kernel_ is not first.kernel_
    # the same ids as another type, or categories in another order: other kernels
    as_ints = pairs.astype(object)
    assert _key(learner, (as_ints, y)) != _key(learner, (as_ints.astype(str).astype(object), y))
    frame = pd.DataFrame({"a": pd.Categorical(ids[:, 0], categories=names),
                          "b": pd.Categorical(ids[:, 1], categories=names)})
    reordered = frame.apply(lambda c: c.cat.reorder_categories(names[::-1]))
    assert _key(learner, (frame, y)) != _key(learner, (reordered, y))
    step = KernelDistances(given_squared=True, learner=learner, pairs=frame, targets=y).fit(names)
    other = KernelDistances(given_squared=True,
                            learner=learner, pairs=reordered, targets=y).fit(names)
    assert_array_equal(step.objects_, names)
    assert_array_equal(other.objects_, names[::-1])
    edited = frame.copy()
    edited.iloc[0, 0] = names[(list(names).index(edited.iloc[0, 0]) + 1) % D]
    assert _key(learner, (frame, y)) != _key(learner, (edited, y))
    long_list = ids.tolist()
    assert _key(learner, (long_list, y)) == _key(learner, (fresh.tolist(), y))
    long_list[5][1] = "elsewhere"
    assert _key(learner, (long_list, y)) != _key(learner, (fresh.tolist(), y))


def test_clones_share_the_data_and_clone_the_learner():
    from sklearn.base import clone

    step = _step(memory=None)
    twin = clone(step)
    for name in ("pairs", "targets"):
        assert getattr(twin, name) is getattr(step, name)
    assert twin.learner is not step.learner
    assert twin.learner.get_params() == step.learner.get_params()
    twin.set_params(learner__learning_rate=0.1)
    assert step.learner.learning_rate == "auto"
    fitted = step.fit(np.arange(D))
    assert not hasattr(clone(fitted), "kernel_")


# -- the memory folder: paths, locks, read-only folders -----------------------------

def _lock_name(tmp_path):
    """The lock file name of ``_step()``'s kernel (learned once in a folder aside)."""
    clear_cache()
    _step(memory=tmp_path / "aside").fit(np.arange(D))
    clear_cache()
    (name,) = os.listdir(tmp_path / "aside" / "megkernel_locks")
    return name


def test_a_link_at_the_lock_path_is_refused_never_followed(tmp_path):
    name = _lock_name(tmp_path)
    locks = tmp_path / "memory" / "megkernel_locks"
    locks.mkdir(parents=True)
    target = tmp_path / "created-through-the-link"
    (locks / name).symlink_to(target)            # dangling
    with pytest.raises(ValueError, match=f"lock file {locks / name} is a symbolic link"):
        _step(memory=tmp_path / "memory").fit(np.arange(D))
    assert not target.exists()


def test_a_folder_at_the_lock_path_or_a_file_at_the_lock_folder_is_named(tmp_path):
    name = _lock_name(tmp_path)
    locks = tmp_path / "one" / "megkernel_locks"
    (locks / name).mkdir(parents=True)
    with pytest.raises(ValueError, match=f"lock file {locks / name} is a folder"):
        _step(memory=tmp_path / "one").fit(np.arange(D))
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "megkernel_locks").write_text("")
    clear_cache()
    with pytest.raises(ValueError, match=f"{tmp_path / 'two' / 'megkernel_locks'} is not a "
                                         "folder"):
        _step(memory=tmp_path / "two").fit(np.arange(D))


def test_a_tilde_folder_keeps_data_and_locks_in_the_home_folder(tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    clear_cache()
    _step(memory="~/c").fit(np.arange(D))
    assert os.listdir(work) == []                # no literal ./~/c
    assert {"megkernel_locks", "megkernel_kernels"} <= set(os.listdir(home / "c"))
    clear_cache()
    _step(memory=joblib.Memory("~/c", verbose=0)).fit(np.arange(D))
    assert cache_info()["fits"] == 0 and os.listdir(work) == []


@pytest.fixture
def read_only():
    """Make a folder read-only, even for root (the immutable attribute)."""
    import shutil
    import subprocess

    made = []

    def make(folder):
        paths = [str(p) for p in [folder, *folder.rglob("*")]]
        if os.geteuid() == 0:
            if shutil.which("chattr") is None or subprocess.run(
                    ["chattr", "+i", *paths], capture_output=True).returncode:
                pytest.skip("root, and no immutable attribute here")
            made.extend(paths)
        else:
            for path in paths:
                os.chmod(path, 0o555 if os.path.isdir(path) else 0o444)
        try:
            (folder / "probe").write_text("")
        except OSError:
            return
        pytest.skip("the folder stays writable")

    yield make
    if made:
        subprocess.run(["chattr", "-i", *made], capture_output=True)


def test_a_read_only_folder_serves_its_kernels(tmp_path, read_only):
    clear_cache()
    first = _step(memory=tmp_path).fit(np.arange(D)).transform(np.arange(D))
    read_only(tmp_path)
    clear_cache()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = _step(memory=tmp_path).fit(np.arange(D)).transform(np.arange(D))
    assert cache_info()["fits"] == 0
    assert_array_equal(again, first)


def test_an_empty_read_only_folder_learns_without_storing(tmp_path, read_only):
    from megkernel import _objects_cache

    getattr(_objects_cache, "_warned_once", set()).clear()
    clear_cache()
    reference = _step().fit(np.arange(D)).transform(np.arange(D))
    folder = tmp_path / "empty"
    folder.mkdir()
    read_only(folder)
    clear_cache()
    with pytest.warns(UserWarning, match=f"cannot write to its memory folder {folder}"):
        out = _step(memory=folder).fit(np.arange(D)).transform(np.arange(D))
    assert_allclose(out, reference, rtol=1e-12)
    clear_cache()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # once per folder
        _step(memory=folder).fit(np.arange(D))
    assert cache_info()["fits"] == 1


class Waiting(BaseMEG):
    """Learns while ``flag`` exists (so another process holds the kernel's lock)."""

    def __init__(self, *, n_objects=None, flag=None):
        super().__init__(n_objects=n_objects)
        self.flag = flag

    def fit(self, X, y):
        import time
        with open(self.flag + ".learning", "w"):
            pass
        deadline = time.monotonic() + 60
        while os.path.exists(self.flag) and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().fit(X, y)


HOLDER = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_kernel_distances_cache import D, Waiting, _side
from megkernel import KernelDistances
pairs, y = _side()
KernelDistances(learner=Waiting(n_objects=D, flag={flag!r}), pairs=pairs, targets=y,
                memory={memory!r}, given_squared=True).fit(np.arange(D))
"""


def test_a_lock_held_too_long_is_a_timeout_naming_the_lock_and_its_holder(tmp_path,
                                                                          monkeypatch):
    """The lock of another process that learns (or was interrupted holding it)."""
    import subprocess
    import sys
    import threading
    import time

    from megkernel import _objects_cache

    flag, memory = str(tmp_path / "flag"), str(tmp_path / "memory")
    open(flag, "w").close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(
        tests=os.path.dirname(__file__), flag=flag, memory=memory)])
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(flag + ".learning") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(flag + ".learning"), "the holder did not start learning"
        monkeypatch.setattr(_objects_cache, "LOCK_TIMEOUT", 0.5, raising=False)
        clear_cache()
        pairs, y = _side()
        step = KernelDistances(given_squared=True,
                               learner=Waiting(n_objects=D, flag=flag), pairs=pairs,
                               targets=y, memory=memory)
        outcome = []

        def fit():
            try:
                step.fit(np.arange(D))
                outcome.append(None)
            except Exception as error:  # noqa: BLE001 - the test reads it
                outcome.append(error)

        thread = threading.Thread(target=fit, daemon=True)
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "waited for the lock without a bound"
        (error,) = outcome
        assert isinstance(error, TimeoutError), error
        assert "megkernel_locks" in str(error) and f"pid {holder.pid}" in str(error)
    finally:
        os.unlink(flag)
        holder.wait(60)
    assert holder.returncode == 0
    clear_cache()
    _step(Waiting(n_objects=D, flag=flag), memory=memory).fit(np.arange(D))
    assert cache_info()["fits"] == 0              # the holder stored it


@pytest.mark.parametrize("name", ["ENOLCK", "EOPNOTSUPP"])
def test_a_folder_without_file_locks_learns_and_stores_unlocked(tmp_path, monkeypatch,
                                                                 name):
    """Some NFS, SMB and FUSE mounts refuse flock: a fit still learns and stores."""
    import errno
    import warnings

    from megkernel import _objects_cache

    def no_locks(fd, operation):
        raise OSError(getattr(errno, name), os.strerror(getattr(errno, name)))

    _objects_cache._warned_once.clear()
    clear_cache()
    reference = _step().fit(np.arange(D)).transform(np.arange(D))
    monkeypatch.setattr(_objects_cache.fcntl, "flock", no_locks)
    clear_cache()
    with pytest.warns(UserWarning, match=f"cannot lock files in its memory folder {tmp_path}"):
        out = _step(memory=tmp_path).fit(np.arange(D)).transform(np.arange(D))
    assert_allclose(out, reference, rtol=1e-12)
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # read back, without a lock or a warning
        again = _step(memory=tmp_path).fit(np.arange(D)).transform(np.arange(D))
    assert cache_info()["fits"] == 0
    assert_array_equal(again, out)


def test_a_memory_folder_below_a_file_is_refused_naming_the_file(tmp_path):
    """Not numpy's or the OS's words (``NotADirectoryError: [Errno 20]``)."""
    (tmp_path / "results.csv").write_text("")
    step = _step(memory=tmp_path / "results.csv" / "cache")
    clear_cache()
    with pytest.raises(ValueError, match=f"cannot make the folder {tmp_path}/results.csv/"
                                         f"cache: {tmp_path}/results.csv is not a folder"):
        step.fit(np.arange(D))
    assert not hasattr(step, "kernel_")


@pytest.mark.parametrize("made", [False, True], ids=["new folder", "its folders made"])
def test_a_full_disk_learns_without_storing(tmp_path, monkeypatch, made):
    """No space (or quota) for a new folder or lock file: as a read-only
    folder, not an ``OSError: [Errno 28]`` from every fit."""
    import errno

    from megkernel import _objects_cache

    folder = tmp_path / "memory"
    if made:
        (folder / "megkernel_locks").mkdir(parents=True)
        (folder / "megkernel_kernels").mkdir()
    real_open = os.open

    def no_space(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    def open_no_new_file(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and not os.path.exists(path):
            no_space(path)
        return real_open(path, flags, *args, **kwargs)

    _objects_cache._warned_once.clear()
    clear_cache()
    reference = _step().fit(np.arange(D)).transform(np.arange(D))
    clear_cache()
    monkeypatch.setattr(os, "mkdir", no_space)
    monkeypatch.setattr(os, "open", open_no_new_file)
    with pytest.warns(UserWarning, match=f"cannot write to its memory folder {folder} "
                                         r"\(read-only or full\)"):
        out = _step(memory=folder).fit(np.arange(D)).transform(np.arange(D))
    assert_allclose(out, reference, rtol=1e-12)
    assert cache_info()["fits"] == 1
