"""A ``memory=`` folder others could write: nothing read from it is trusted.

KernelDistances stores learned kernels there as a JSON header and ``.npy``
arrays read without pickle. Whatever the folder holds instead (arbitrary
bytes, truncated files, the entry of another key or of other ids, a kernel
that is not PSD, a pickle that would run code, links, FIFOs, folders), a fit
either uses a valid entry or discards it with a warning naming the file and
learns the kernel again: the same distances as without a cache, never an
exception blaming the user's ids, never code run. The property test draws
those contents with hypothesis (profiles as in ``test_hostile.py``:
``MEGKERNEL_HYPOTHESIS_PROFILE=ci`` for the long search).
"""

import json
import os
import pickle
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose
from sklearn.base import BaseEstimator

from megkernel import KernelDistances
from megkernel import _objects_cache as cache
from megkernel.objects import KernelLearnerMixin, LearnedKernel, cache_info, clear_cache

_PROFILE = os.environ.get("MEGKERNEL_HYPOTHESIS_PROFILE", "default")
if _PROFILE not in ("default", "ci"):
    raise ValueError(f"MEGKERNEL_HYPOTHESIS_PROFILE must be 'default' or 'ci', got {_PROFILE!r}")
HOSTILE = settings(max_examples=40 if _PROFILE == "default" else 1000, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow,
                                          HealthCheck.function_scoped_fixture],
                   print_blob=True, derandomize=_PROFILE == "ci")  # as test_hostile.py's ci

N = 8
#: Created by the planted pickles if they were ever loaded.
MARKER = os.path.join(tempfile.gettempdir(), f"megkernel-planted-pickle-ran-{os.getpid()}")


class Planted:
    """Unpickling it creates :data:`MARKER`."""

    def __reduce__(self):
        return (os.mkdir, (MARKER,))


class Scaling(KernelLearnerMixin, BaseEstimator):
    """An instant learner: the kernel of classical scaling of the pairs' targets."""

    def __init__(self, shift=0.0):
        self.shift = shift

    def fit(self, pairs, targets, objects=None):
        values = np.asarray(pairs, dtype=object)
        ids = sorted(set(values.ravel().tolist())) if objects is None else list(objects)
        at = {key: i for i, key in enumerate(ids)}
        a = np.array([at[key] for key in values[:, 0]])
        b = np.array([at[key] for key in values[:, 1]])
        sq = np.zeros((len(ids), len(ids)))
        sq[a, b] = sq[b, a] = np.asarray(targets, dtype=float) + self.shift
        centring = np.eye(len(ids)) - 1.0 / len(ids)
        gram = -0.5 * centring @ sq @ centring
        values, vectors = np.linalg.eigh(gram)
        self.kernel_ = (vectors * np.maximum(values, 0.0)) @ vectors.T
        self.objects_ = np.empty(len(ids), dtype=object)
        for i, key in enumerate(ids):  # one by one: a tuple id stays whole
            self.objects_[i] = key
        if all(type(key) is int for key in ids):
            self.objects_ = self.objects_.astype(np.int64)  # stored as a .npy array
        return self

    def learn_kernel(self, pairs, targets=None, *, objects=None):
        model = type(self)(**self.get_params()).fit(pairs, targets, objects=objects)
        return LearnedKernel(model.kernel_, model.objects_)


def _ids(kind):
    if kind == "str":
        return [f"obj{i}" for i in range(N)]
    if kind == "int":
        return list(range(N))
    return [("t", i) for i in range(N)]


def _problem(kind):
    ids = _ids(kind)
    points = np.random.default_rng(0).normal(size=(N, 2))
    pairs, targets = [], []
    for i in range(N):
        for j in range(i + 1, N):
            pairs.append((ids[i], ids[j]))
            targets.append(float(((points[i] - points[j]) ** 2).sum()))
    table = np.empty((len(pairs), 2), dtype=object)
    for row, (a, b) in enumerate(pairs):
        table[row, 0], table[row, 1] = a, b
    if kind == "int":
        table = table.astype(int)
    return ids, table, np.array(targets)


def _step(kind, memory, shift=0.0):
    ids, pairs, targets = _problem(kind)
    return KernelDistances(learner=Scaling(shift), pairs=pairs, targets=targets, memory=memory)


def _fit(kind, memory, shift=0.0):
    """``(distances, fits, warnings)`` of a fit in a process new to the folder."""
    clear_cache()
    ids = _ids(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = _step(kind, memory, shift).fit(ids)
        distances = step.transform(ids)
    return distances, cache_info()["fits"], [str(w.message) for w in caught]


_REFERENCE = {}


def _reference(kind):
    if kind not in _REFERENCE:
        _REFERENCE[kind] = _fit(kind, None)[0]
    return _REFERENCE[kind]


def _entry_files(folder):
    entries = Path(folder) / "megkernel_kernels"
    return sorted(path for path in entries.iterdir() if not path.name.startswith("."))


def _header(folder):
    path = next(p for p in _entry_files(folder) if p.suffix == ".json")
    if path.is_symlink():  # maybe to /dev/zero: never read here either
        raise ValueError(f"{path} is a link")
    return path, json.loads(path.read_text())


def _rewrite(folder, *, kernel=None, ids=None):
    """Rewrite the entry with another kernel (or a change of it) or ids.

    Its digest is made to match.
    """
    path, header = _header(folder)
    key = header["key"]
    entries = path.parent
    if kernel is None or callable(kernel):  # a change of the stored kernel
        stored = np.load(entries / f"{key}.kernel.npy", allow_pickle=False)
        kernel = stored if kernel is None else kernel(stored)
    record, ids_bytes = header["ids"], b""
    if ids is not None:
        if record["kind"] == "json":
            record = {"kind": "json", "values": [cache._encode_id(v) for v in ids]}
        else:
            array = np.asarray(ids).astype(np.load(entries / f"{key}.ids.npy").dtype)
            np.save(entries / f"{key}.ids.npy", array, allow_pickle=False)
    if record["kind"] == "npy":
        ids_bytes = np.load(entries / f"{key}.ids.npy", allow_pickle=False).tobytes()
    np.save(entries / f"{key}.kernel.npy", np.asarray(kernel, dtype="<f8"), allow_pickle=False)
    header.update(ids=record, n=len(kernel), sha256=cache._digest(key, np.asarray(kernel),
                                                                    record, ids_bytes))
    path.write_text(json.dumps(header))


def _stored_ids(folder):
    path, header = _header(folder)
    record = header["ids"]
    if record["kind"] == "json":
        return [cache._decode_id(value) for value in record["values"]]
    return np.load(path.with_name(f"{header['key']}.ids.npy"), allow_pickle=False).tolist()


def _assert_relearned_or_valid(kind, folder):
    """The rule: the distances of no cache; relearned with a warning, or a valid entry."""
    distances, fits, messages = _fit(kind, folder)
    assert not os.path.exists(MARKER), "a planted pickle was loaded"
    assert_allclose(distances, _reference(kind), rtol=1e-9, atol=1e-12)
    discarded = [m for m in messages if "Discarded the cached kernel" in m]
    relearned = fits
    if fits:
        assert discarded, messages
        assert str(Path(folder) / "megkernel_kernels") in discarded[0]
    else:
        assert not discarded, messages
    # relearned: stored anew, read back by the next process without a word
    distances, fits, messages = _fit(kind, folder)
    assert fits == 0 and not [m for m in messages if "cached kernel" in m], messages
    assert_allclose(distances, _reference(kind), rtol=1e-9, atol=1e-12)
    return relearned


@pytest.fixture(autouse=True)
def _fresh():
    clear_cache()
    if os.path.isdir(MARKER):
        os.rmdir(MARKER)
    yield
    clear_cache()
    assert not os.path.exists(MARKER), "a planted pickle was loaded"


@pytest.mark.parametrize("kind", ["str", "int", "tuple"])
def test_a_kernel_is_stored_without_pickle_and_read_back(kind, tmp_path):
    first, fits, _ = _fit(kind, tmp_path)
    assert fits == 1
    files = _entry_files(tmp_path)
    assert {p.name.split(".", 1)[1] for p in files} == (
        {"json", "kernel.npy", "ids.npy"} if kind == "int" else {"json", "kernel.npy"})
    for path in files:
        if path.suffix == ".npy":
            np.load(path, allow_pickle=False)  # plain arrays
    again, fits, messages = _fit(kind, tmp_path)
    assert fits == 0 and not messages
    assert_allclose(again, first, rtol=0, atol=0)
    step = _step(kind, tmp_path).fit(_ids(kind))
    assert [type(v) for v in step.objects_.tolist()] == [type(v) for v in _ids(kind)]


def _plant_pickles(folder):
    """Replace every file the cache wrote (whatever its format) by a planted pickle."""
    planted = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if name.endswith(".lock"):
                continue
            if name.endswith(".npy"):
                array = np.empty(2, dtype=object)
                array[0] = Planted()
                np.save(path, array, allow_pickle=True)
            else:
                with open(path, "wb") as handle:
                    pickle.dump((Planted(), Planted()), handle)
            planted += 1
    return planted


@pytest.mark.parametrize("kind", ["str", "int"])
def test_a_planted_pickle_never_runs(kind, tmp_path):
    _fit(kind, tmp_path)
    assert _plant_pickles(tmp_path) >= 2
    assert _assert_relearned_or_valid(kind, tmp_path) == 1


def test_a_kernel_that_is_not_psd_is_discarded(tmp_path):
    """A negated kernel (negative definite) made all distances 0 when read."""
    _fit("str", tmp_path)
    _rewrite(tmp_path, kernel=lambda k: -k)
    distances, fits, messages = _fit("str", tmp_path)
    assert fits == 1 and any("not positive semi-definite" in m for m in messages), messages
    assert_allclose(distances, _reference("str"), rtol=1e-9, atol=1e-12)
    for change in (lambda k: k + np.triu(np.full_like(k, 1e-3), 1),  # not symmetric
                   lambda k: np.where(np.eye(len(k)) > 0, np.nan, k)):
        _rewrite(tmp_path, kernel=change)
        assert _assert_relearned_or_valid("str", tmp_path) == 1


@pytest.mark.parametrize("kind", ["str", "int", "tuple"])
def test_an_entry_of_other_ids_is_discarded(kind, tmp_path):
    """Other ids raised an error naming the user's ids as unknown."""
    _fit(kind, tmp_path)
    other = {"str": [f"x{i}" for i in range(N)], "int": list(range(100, 100 + N)),
             "tuple": [("u", i) for i in range(N)]}[kind]
    _rewrite(tmp_path, ids=other)
    distances, fits, messages = _fit(kind, tmp_path)
    assert fits == 1 and any("ids" in m and "Discarded" in m for m in messages), messages
    assert_allclose(distances, _reference(kind), rtol=1e-9, atol=1e-12)


def test_an_entry_of_another_key_is_discarded(tmp_path):
    other = tmp_path / "other"
    _fit("str", other, shift=0.5)
    _fit("str", tmp_path)
    mine = {p.name.split(".", 1)[1]: p for p in _entry_files(tmp_path)}
    for path in _entry_files(other):
        os.replace(path, mine[path.name.split(".", 1)[1]])
    distances, fits, messages = _fit("str", tmp_path)
    assert fits == 1 and any("another key" in m for m in messages), messages
    assert_allclose(distances, _reference("str"), rtol=1e-9, atol=1e-12)


def test_nothing_beyond_the_expected_size_is_read(tmp_path, monkeypatch):
    """A header claiming a huge kernel, or a file longer than its shape, is not read."""
    _fit("str", tmp_path)
    path, header = _header(tmp_path)
    kernel_path = path.with_name(f"{header['key']}.kernel.npy")
    read = []
    real_read = cache._read_bounded
    monkeypatch.setattr(cache, "_read_bounded",
                        lambda handle, size: read.append(size) or real_read(handle, size))
    with open(kernel_path, "ab") as handle:  # one byte too many
        handle.write(b"\0")
    distances, fits, messages = _fit("str", tmp_path)
    assert fits == 1 and any("size" in m for m in messages), messages
    assert all(size <= N * N * 8 for size in read)
    header["n"] = 10**6
    path.write_text(json.dumps(header))
    read.clear()
    distances, fits, messages = _fit("str", tmp_path)
    assert fits == 1 and all(size <= N * N * 8 for size in read)
    assert_allclose(distances, _reference("str"), rtol=1e-9, atol=1e-12)


def test_a_fifo_or_a_link_in_place_of_an_entry_file_is_discarded(tmp_path):
    for plant in ("fifo", "link", "folder"):
        folder = tmp_path / plant
        _fit("int", folder)
        for path in _entry_files(folder):
            if path.name.endswith(".kernel.npy"):
                path.unlink()
                if plant == "fifo":
                    os.mkfifo(path)  # an open for reading would wait forever
                elif plant == "link":
                    path.symlink_to("/dev/zero")
                else:
                    path.mkdir()
        _, fits, messages = _fit("int", folder)
        assert fits == 1 and any("Discarded" in m for m in messages), (plant, messages)


class Opaque:
    """An id megkernel cannot store without pickle."""

    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.name == self.name

    def __lt__(self, other):
        return self.name < other.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"Opaque({self.name!r})"


def test_ids_that_cannot_be_stored_safely_stay_in_this_process(tmp_path):
    ids = [Opaque(f"o{i}") for i in range(N)]
    _, pairs, targets = _problem("str")
    mapping = dict(zip(_ids("str"), ids))
    table = np.empty(pairs.shape, dtype=object)
    for index, value in np.ndenumerate(pairs):
        table[index] = mapping[value]
    step = KernelDistances(learner=Scaling(), pairs=table, targets=targets, memory=tmp_path)
    with pytest.warns(UserWarning, match="in this process only.*Opaque.*without pickle"):
        distances = step.fit(ids).transform(ids)
    assert not list((tmp_path / "megkernel_kernels").iterdir())
    assert_allclose(distances, _reference("str"), rtol=1e-9, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step.fit(ids)  # the in-process cache
    assert cache_info()["fits"] == 1


# -- the property: whatever the folder holds ----------------------------------------

_FILES = st.sampled_from(["json", "kernel.npy", "ids.npy"])


def _json_values():
    return st.recursive(
        st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
        | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6),
                                                                     inner, max_size=4),
        max_leaves=12)


_MUTATIONS = st.one_of(
    st.tuples(st.just("bytes"), _FILES, st.binary(max_size=1200)),
    st.tuples(st.just("truncate"), _FILES, st.floats(0, 1)),
    st.tuples(st.just("flip"), _FILES, st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("pickle"), _FILES, st.sampled_from(["raw", "npy"])),
    st.tuples(st.just("other key"), _FILES),
    st.tuples(st.just("field"), st.sampled_from(
        ["format", "version", "key", "n", "kernel", "ids", "sha256", "extra"]), _json_values()),
    # a foreign id in one place (an id lost for good), or the same id
    st.tuples(st.just("id"), st.integers(0, N - 1), st.sampled_from(
        ["x", 10**9, 10**30, 1.5, True, ("u", 0), ("t", 0, 1), "same"])),
    st.tuples(st.just("repeat"), st.integers(0, N - 1), st.integers(0, N - 1)),
    st.tuples(st.just("permute"), st.permutations(range(N))),
    st.tuples(st.just("kernel"), st.sampled_from(["negate", "indefinite", "asymmetric",
                                                  "inf", "nan", "transpose", "same"])),
    st.tuples(st.just("link"), _FILES, st.sampled_from(["dangling", "zero", "other"])),
)


def _mutate(folder, other, kind, mutation, learned):
    try:
        _change(folder, other, kind, mutation, learned)
    except Exception:  # noqa: BLE001 - an earlier change left nothing this one can read
        pass


def _change(folder, other, kind, mutation, learned):
    """Change the folder's entry by ``mutation``.

    Rewrites whose digest is made to match start from the ``learned``
    entry and change it consistently (ids and rows alike) or make it
    invalid, never into a valid entry of other distances (which a writer of
    the folder could plant: the folder must be private).
    """
    files = {p.name.split(".", 1)[1]: p for p in _entry_files(folder)}
    how, *args = mutation
    if how in ("bytes", "truncate", "flip", "pickle", "other key", "link") \
            and args[0] not in files:
        return  # no such file for these ids: nothing to change
    if how in ("truncate", "flip") and files[args[0]].is_symlink():
        return  # maybe to /dev/zero: never read here either
    if how == "bytes":
        files[args[0]].write_bytes(args[1])
    elif how == "truncate":
        data = files[args[0]].read_bytes()
        files[args[0]].write_bytes(data[:int(len(data) * args[1])])
    elif how == "flip":
        data = bytearray(files[args[0]].read_bytes())
        data[args[1] % len(data)] ^= 1 << args[2]
        files[args[0]].write_bytes(bytes(data))
    elif how == "pickle":
        if args[1] == "raw":
            files[args[0]].write_bytes(pickle.dumps((Planted(), [Planted()])))
        else:
            array = np.empty(3, dtype=object)
            array[:] = [Planted(), Planted(), Planted()]
            with open(files[args[0]], "wb") as handle:
                np.save(handle, array, allow_pickle=True)
    elif how == "other key":
        theirs = {p.name.split(".", 1)[1]: p for p in _entry_files(other)}
        if args[0] in theirs:
            files[args[0]].write_bytes(theirs[args[0]].read_bytes())
    elif how == "field":
        path, header = _header(folder)
        header[args[0]] = args[1]
        path.write_text(json.dumps(header))
    elif how in ("id", "repeat"):  # one id of the learned entry changed
        ids = list(learned[1])
        if how == "repeat":
            ids[args[0]] = ids[args[1]]
        elif args[1] != "same":
            ids[args[0]] = args[1]
        if kind == "int" and (type(ids[args[0]]) is not int or abs(ids[args[0]]) > 2**62):
            return  # not an id of an int64 array
        _rewrite(folder, kernel=learned[0], ids=ids)
    elif how == "permute":  # ids and kernel rows alike: a valid entry
        order = list(args[0])
        _rewrite(folder, ids=[learned[1][i] for i in order],
                 kernel=learned[0][np.ix_(order, order)])
    elif how == "kernel":  # the learned entry, its kernel changed
        change = {"negate": lambda k: -k,
                  "indefinite": lambda k: k - 10 * np.outer(k[0], k[0]) / (k[0, 0] + 1),
                  "asymmetric": lambda k: k + np.triu(np.ones_like(k), 1),
                  "inf": lambda k: np.where(np.eye(N) > 0, np.inf, k),
                  "nan": lambda k: np.full_like(k, np.nan),
                  "transpose": lambda k: k.T.copy(),
                  "same": lambda k: k}[args[0]]
        _rewrite(folder, kernel=change(learned[0]), ids=learned[1])
    elif how == "link":
        path = files[args[0]]
        path.unlink()
        target = {"dangling": Path(folder) / "nowhere", "zero": Path("/dev/zero"),
                  "other": next(iter(_entry_files(other)))}[args[1]]
        path.symlink_to(target)


@HOSTILE
@given(kind=st.sampled_from(["str", "int", "tuple"]),
       mutations=st.lists(_MUTATIONS, min_size=1, max_size=3))
def test_whatever_the_folder_holds_the_distances_are_right(kind, mutations):
    with tempfile.TemporaryDirectory() as root:
        folder, other = os.path.join(root, "memory"), os.path.join(root, "other")
        _fit(kind, other, shift=0.25)
        _fit(kind, folder)
        path, header = _header(folder)
        learned = (np.load(path.with_name(f"{header['key']}.kernel.npy")), _stored_ids(folder))
        for mutation in mutations:
            _mutate(folder, other, kind, mutation, learned)
        _assert_relearned_or_valid(kind, folder)
