"""Interrupts at every line of the other public fits (issue 22, item 2): the
object-level pipeline (``KernelDistances.fit`` with a fixed kernel, the
user's distances and a learned kernel, its cache included) and the metric
learners (``fit``, ``fit_pairs``, the pair-input ``fit``).

As ``tests/test_interrupts.py`` does for the pair estimators: a
``KeyboardInterrupt`` is raised at a line event of megkernel's code (through
a trace function) during a refit of a fitted model, which must stay
byte-identical; then an uninterrupted refit must give what a fresh process
gives (no torn cache entry, no lock or pin left held). The sweeps run in a
subprocess with a time limit, so that a lock left held fails instead of
hanging the run.
"""

import json
import subprocess
import sys
import textwrap

import pytest

# every test here sweeps in a subprocess of its own (imports megkernel, seconds
# each): the full suite (CI) runs them, the quick loop (-m 'not slow') does not
pytestmark = pytest.mark.slow

SWEEP = textwrap.dedent("""
    import json, os, pickle, sys, warnings
    import numpy as np
    import megkernel
    from megkernel import (DefiniteBoostMetric, DefiniteBoostPairMetric, KernelDistances,
                           MEGKernelRegressor, MEGMetric)
    from megkernel._numerics import threads
    from megkernel.objects import clear_cache

    PACKAGE = os.path.dirname(megkernel.__file__)
    STRIDE, OFFSET = int(sys.argv[1]), int(sys.argv[2])
    MAX_POINTS = 2000
    warnings.simplefilter("ignore")
    rng = np.random.RandomState(0)
    ids = ["a", "b", "c", "d", "e"]
    F = rng.normal(size=(5, 2))
    K = F @ F.T
    D = np.sqrt(np.maximum(np.diag(K)[:, None] + np.diag(K)[None] - 2 * K, 0))
    D[0, 3] = D[3, 0] = np.nan
    pairs = [[ids[i], ids[(i + 1 + j) % 5]] for i in range(5) for j in range(4)]
    y = rng.uniform(0.1, 0.5, len(pairs))
    X = rng.normal(size=(12, 3))
    labels = np.repeat([0, 1, 2], 4)
    object_labels = np.array([0, 0, 1, 1, 0])
    point_pairs = np.array([[i, (i + 1 + j) % 12] for i in range(12) for j in range(3)])
    signs = np.where(labels[point_pairs[:, 0]] == labels[point_pairs[:, 1]], 1, -1)

    def learned():
        return KernelDistances(learner=MEGKernelRegressor(solver="online"), pairs=pairs,
                               targets=y)
    # (a fitted model, a refit that changes it, what a successful refit gives)
    CASES = {
        "KernelDistances.fit, fixed kernel": (
            lambda: KernelDistances(kernel=K, objects=ids).fit(ids[:2]),
            lambda m: m.fit(ids[1:]), lambda m: m.transform(ids)),
        "KernelDistances.fit, given distances": (
            lambda: KernelDistances(distances=D, objects=ids).fit(ids[:2]),
            lambda m: m.fit(ids[1:]), lambda m: m.transform(ids)),
        "KernelDistances.fit, learned kernel": (
            lambda: learned().fit(ids[:2]),
            lambda m: (clear_cache(), m.fit(ids[1:]))[1],  # learns the kernel again
            lambda m: m.transform(ids)),
        "KernelDistances.fit, learned kernel, labels (the verdict)": (
            lambda: learned().fit(ids[:2]),
            lambda m: m.fit(ids[1:], object_labels[1:]), lambda m: m.transform(ids)),
        "KernelDistances.fit, learned from distances, labels (the verdict)": (
            lambda: KernelDistances(learner=MEGKernelRegressor(solver="online"),
                                    distances=D, objects=ids).fit(ids[:2]),
            lambda m: m.fit(ids, object_labels), lambda m: m.transform(ids)),
        "MEGMetric.fit": (
            lambda: MEGMetric(n_epochs=1, n_constraints=6, random_state=0).fit(X, labels),
            lambda m: m.fit(X + 1.0, labels), lambda m: m.transform(X)),
        "DefiniteBoostMetric.fit_pairs": (
            lambda: DefiniteBoostMetric(max_iter=5, random_state=0).fit_pairs(
                X, point_pairs, signs),
            lambda m: m.fit_pairs(2 * X, point_pairs, signs), lambda m: m.transform(X)),
        "DefiniteBoostPairMetric.fit": (
            lambda: DefiniteBoostPairMetric(max_iter=5, random_state=0).fit(
                X[point_pairs], signs),
            lambda m: m.fit(2 * X[point_pairs], signs),
            lambda m: m.decision_function(X[point_pairs])),
    }
    def line_events(call, model):
        count = [0]

        def local(frame, event, arg):
            count[0] += (event == "line")
            return local

        sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.startswith(
            PACKAGE) else None)
        try:
            call(model)
        finally:
            sys.settrace(None)
        return count[0]

    report = {}
    for name, (make, call, result) in CASES.items():
        # A sweep reruns the refit up to each interrupt (quadratic in its line
        # events): past MAX_POINTS events it interrupts at every k-th one.
        clear_cache()
        stride = max(STRIDE, -(-line_events(call, make()) // MAX_POINTS))
        clear_cache()
        reference = result(call(make()))  # an uninterrupted refit
        model = make()
        before = pickle.dumps(model)
        points, changed, pending = 0, [], 0
        for target in range(OFFSET, 10**6, stride):
            events = [0]

            def local(frame, event, arg):
                if event == "line":
                    events[0] += 1
                    if events[0] == target:
                        raise KeyboardInterrupt(f"line event {target}")
                return local

            def tracer(frame, event, arg):
                return local if frame.f_code.co_filename.startswith(PACKAGE) else None

            sys.settrace(tracer)
            try:
                call(model)
                interrupted = False
            except KeyboardInterrupt:
                interrupted = True
            finally:
                sys.settrace(None)
            if not interrupted:
                break
            points += 1
            if pickle.dumps(model) != before:
                changed.append(target)
                model = pickle.loads(before)
            pending += bool(threads._holders) or threads._saved is not None
        again = result(call(pickle.loads(before)))  # after all the interrupts
        held = bool(threads._holders) or threads._saved is not None
        report[name] = {"points": points, "changed": changed[:5],
                        "same result": bool(np.array_equal(again, reference)),
                        "held after a clean fit": held, "stride": stride}
    print(json.dumps(report))
""")


CACHE_SWEEP = textwrap.dedent("""
    import json, os, shutil, sys, tempfile, threading, warnings
    import numpy as np
    from megkernel import KernelDistances, MEGKernelRegressor
    from megkernel import objects

    # objects.py and its private modules (the cache, streams, the user's inputs)
    PACKAGE = os.path.dirname(objects.__file__)
    FILES = {os.path.join(PACKAGE, name) for name in os.listdir(PACKAGE)
             if name == "objects.py" or (name.startswith("_objects_")
                                         and name.endswith(".py"))}

    warnings.simplefilter("ignore")
    ids = ["a", "b", "c", "d", "e"]
    rng = np.random.RandomState(0)
    pairs = [[ids[i], ids[(i + 1 + j) % 5]] for i in range(5) for j in range(4)]
    y = rng.uniform(0.1, 0.5, len(pairs))
    on_disk = sys.argv[1] == "memory"
    kept, points, failures = [], 0, []
    for target in range(1, 10**5):
        folder = tempfile.mkdtemp() if on_disk else None
        step = KernelDistances(learner=MEGKernelRegressor(solver="online"), pairs=pairs,
                               targets=y, memory=folder)
        objects.clear_cache()
        events = [0]

        def local(frame, event, arg):
            if event == "line":
                events[0] += 1
                if events[0] == target:
                    raise KeyboardInterrupt(f"line event {target}")
            return local

        sys.settrace(lambda frame, event, arg: local
                     if frame.f_code.co_filename in FILES else None)
        try:
            step.fit(ids[1:])
            interrupted = False
        except KeyboardInterrupt as error:
            kept.append(error)  # as an interactive session does: frames, files alive
            interrupted = True
        finally:
            sys.settrace(None)
        if not interrupted:
            break
        points += 1
        other = []
        thread = threading.Thread(target=lambda: other.append(
            step.fit(ids[1:]).transform(ids)), daemon=True)
        thread.start()
        thread.join(20)
        if thread.is_alive():
            failures.append(f"a fit in another thread waits after line event {target}")
            break
        if not np.array_equal(other[0], step.fit(ids[1:]).transform(ids)):
            failures.append(f"another kernel after line event {target}")
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"points": points, "failures": failures,
                      "files": sorted(os.path.basename(name) for name in FILES)}))
""")


@pytest.mark.parametrize("memory", ["none", "memory"])
def test_an_interrupt_at_every_line_of_the_kernel_cache_leaves_no_lock_held(memory):
    """Found by the sweep below: an interrupt at the exit of ``with
    _locks_guard:`` in the cache of learned kernels left the lock held, and
    every later fit of a learned kernel (and clear_cache) waited forever.
    The cache now holds no lock while it learns (``_become_learner``); here
    an interrupt at each line event of ``megkernel/objects.py``, with the
    interrupted frames kept alive, then the same fit in another thread (which
    must neither wait nor get another kernel) and in this one. The sweep
    covers ``objects.py`` and its private modules ``_objects_*.py`` (the
    cache lives in ``_objects_cache.py``)."""
    try:
        result = subprocess.run([sys.executable, "-c", CACHE_SWEEP, memory],
                                capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.fail("a fit after an injected interrupt waited forever (a lock left held)")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert "_objects_cache.py" in report["files"], report
    assert report["points"] >= 100, report  # the sweep reached the cache
    assert not report["failures"], report


def _sweep(stride, offset):
    try:
        result = subprocess.run([sys.executable, "-c", SWEEP, str(stride), str(offset)],
                                capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.fail("a fit after an injected interrupt waited forever (a lock left held)")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    for name, case in report.items():
        assert case["points"] >= 20 // stride, (name, case)  # the sweep reached the fit
        assert not case["changed"], (name, case)  # byte-identical after each interrupt
        assert case["same result"], (name, case)  # no torn cache entry
        assert not case["held after a clean fit"], (name, case)
    return report


def test_an_interrupt_at_sampled_lines_of_the_other_fits_leaves_the_model_unchanged():
    """Every 37th line event of megkernel's code in each refit."""
    _sweep(37, 11)


@pytest.mark.slow
def test_an_interrupt_at_every_line_of_the_other_fits_leaves_the_model_unchanged():
    """One interrupt at each line event of each refit (of every k-th where a
    refit runs more than 2000, so that the sweep ends in minutes)."""
    _sweep(1, 1)
