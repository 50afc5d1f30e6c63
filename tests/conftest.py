"""How the suite is scheduled: what kind of test each is, and which run first.

Every test is one of: fast (pure logic, recorded runs, short in-process watches without
TensorFlow), or marked with what makes it slow — ``tf`` (runs real TensorFlow), ``kernel`` (a
real Jupyter kernel), ``browser`` (JupyterLab in Chromium), ``slow`` (a minute or more).
``make check`` runs the fast ones; ``make test`` runs them all, several at a time with
pytest-xdist (``-n 5 --dist loadgroup``): much of the suite waits on kernels, workers, browsers
and time-boxed watches rather than computing, so five at a time fit two cores (measured: 12:30
against 12:58 with four, 14:39 against 16:20 with three before that; docs/development.md).

The marks are set here from what a test uses (its file, its fixtures), so a new test in a slow
file is marked without anyone remembering to; ``LEAKWIDGET_FAST_ONLY=1`` (set by ``make check``)
fails a test that imports TensorFlow anyway, so the fast set stays fast.

Tests that share a module-scoped fixture (one kernel, one JupyterLab, one Dask cluster, one
Keras model, one fresh process's results) run in one worker, in file order (``xdist_group``). The
slowest files are sent first, so the long tests do not start last and leave the other workers
idle.

TensorFlow is kept out of most workers (:func:`pytest_xdist_make_scheduler`). Once a test
imports it in a worker's own process, every later watch in that worker walks TensorFlow's
~350,000 objects in its collections, census and paths: the in-process tests of
test_attribution.py and test_garbage.py took 117 CPU s after an ``import tensorflow`` against
43 s without (docs/development.md). So the tests that import it in-process (``TF_HERE_FILES``,
and those using a fixture of ``TF_FIXTURES``, ``tf`` among them: grouped as ``tf:FILE``) run in
the first quarter of the workers (at least one: one of five), which take the rest only when
those are done; the others never import it, and a test that does there fails and says where it
belongs. Collecting the tests imports none of it. Nothing here imports TensorFlow or IPython.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Files whose every test runs TensorFlow (in its own process or a child); of those, the files whose
# every test imports it in its own process; files whose every test starts worker processes or a
# cluster (seconds each).
TF_FILES = {"test_bisect.py", "test_stages_tfdata.py", "test_keras.py", "test_native.py",
            "test_holding.py", "test_retracing.py"}
TF_HERE_FILES = {"test_bisect.py", "test_stages_tfdata.py", "test_keras.py"}
# Whole files of multi-second runs: worker processes, programs under the CLI, pytest in pytest.
SLOW_FILES = {"test_cluster.py", "test_compare.py", "test_holding.py", "test_cli.py", "test_isolate.py",
              "test_children.py", "test_pytest_plugin.py", "test_copy_on_write.py"}
# Fixtures that start a kernel, a JupyterLab or a TensorFlow pipeline.
KERNEL_FIXTURES = {"front", "kernel", "kernel_env", "lab", "open_notebook"}
# (``tf``: TensorFlow imported in the test's own process, for a test in another file.)
TF_FIXTURES = {"tfrecords", "model", "tf"}
# Roughly slowest first (measured: docs/development.md); the rest keep their order after these.
FIRST = ["test_notebooks.py", "browser", "test_bisect.py", "test_live_kernel.py", "test_cluster.py",
         "test_keras.py", "test_native.py", "test_verdict.py", "test_runner.py",
         "test_attribution.py"]


def _where(item: pytest.Item) -> tuple[str, str]:
    path = Path(str(item.fspath))
    return path.parent.name, path.name


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Does the test use a module-scoped fixture (one kernel, one cluster, one fresh process's
    results)? Then its module runs in one worker, set up once, in file order."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    return any(d.scope == "module" for chain in defs.values() for d in chain)


# tryfirst: xdist's worker reads the xdist_group marks in its own modifyitems hook, which runs
# before a conftest's (registered later, called first) unless this one goes first: without it
# every group was ignored and each module fixture (a kernel, a TensorFlow process) was set up
# once per xdist worker.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder, name = _where(item)
        # (A parameter named like a fixture is not that fixture: test_calm.py's ``tf`` says
        # whether its fresh processes import TensorFlow.)
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = set(getattr(item, "fixturenames", ())) - set(params)
        if folder == "browser":
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.xdist_group("browser"))
        if fixtures & KERNEL_FIXTURES:
            item.add_marker(pytest.mark.kernel)
        in_process_tf = name in TF_HERE_FILES or bool(fixtures & TF_FIXTURES)
        if name in TF_FILES or in_process_tf:
            item.add_marker(pytest.mark.tf)
        if name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if in_process_tf:
            item.add_marker(pytest.mark.xdist_group(TF_GROUP + name))
        elif _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(name))

    if not os.environ.get("LEAKWIDGET_SOAK"):
        for item in items:
            if item.get_closest_marker("soak"):
                item.add_marker(pytest.mark.skip(reason="a soak, or a claim for a quiet machine: `make soak` runs it"))

    def rank(item: pytest.Item) -> int:
        folder, name = _where(item)
        key = "browser" if folder == "browser" else name
        return FIRST.index(key) if key in FIRST else len(FIRST)

    # A stable sort by file keeps each module's tests together (module fixtures are set up once).
    items.sort(key=rank)


# Tests grouped under this prefix import TensorFlow in their own process (see the docstring).
TF_GROUP = "tf:"
# Files whose tests watch in other processes (kernels, Chromium, worker processes, programs,
# pytest in pytest): the heap of the xdist worker running them costs them nothing, so the workers
# holding TensorFlow take them once their ``tf:`` groups are done, and leave the tests that watch
# in their own process to the others. (A file missing here only costs time.)
ELSEWHERE = "elsewhere"
HERE = "here"
RUN_ELSEWHERE = {"test_notebooks.py", "browser", "test_cli.py", "test_compare.py", "test_cluster.py",
                 "test_isolate.py", "test_calm.py", "test_live_kernel.py", "test_pytest_plugin.py",
                 "test_copy_on_write.py", "test_children.py", "test_kernel.py", "test_docs.py",
                 "test_suite_groups.py"}


def _kind(scope: str) -> str:
    """A scheduling unit's kind, from its scope (a test's id, or its ``xdist_group``: a file's
    name, ``browser_…``, ``tf:…``)."""
    if scope.startswith(TF_GROUP):
        return TF_GROUP
    path = scope.split("::")[0]
    name = path.rsplit("/", 1)[-1]
    if "/browser/" in f"/{path}" or name.startswith("browser"):
        name = "browser"
    return ELSEWHERE if name in RUN_ELSEWHERE else HERE


def _may_import_tf(worker: str, workers: int) -> bool:
    """Is xdist worker ``gwN`` (of ``workers``) one of those that run the tests importing
    TensorFlow in-process: the first quarter, at least one? (The tests that do take about a
    quarter of the suite's worker time.)"""
    return int(worker.removeprefix("gw")) < max(1, workers // 4)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``, with the ``tf:`` groups only in the workers that may import
    TensorFlow, which take them before anything else; the others never get them, and stop when
    only those are left."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class TensorFlowApart(LoadGroupScheduling):
        workers = 0  # as started (nodes that stop leave ``self.nodes``)

        def schedule(self) -> None:
            self.workers = self.workers or len(self.nodes)
            super().schedule()

        def _next_unit(self, node) -> str | None:
            """The first unit of the queue this node takes first: a worker that may import
            TensorFlow, a ``tf:`` group, then a unit that runs elsewhere, then any; another,
            a unit in its own process, then one that runs elsewhere, never a ``tf:`` group."""
            heavy = _may_import_tf(node.gateway.id, self.workers or len(self.nodes))
            order = ((TF_GROUP, ELSEWHERE, HERE) if heavy else (HERE, ELSEWHERE))
            for kind in order:
                scope = next((s for s in self.workqueue if _kind(s) == kind), None)
                if scope is not None:
                    return scope
            return None

        def _assign_work_unit(self, node) -> None:
            scope = self._next_unit(node)
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid)
                                    for nodeid, done in work_unit.items() if not done])

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if self._next_unit(node) is None:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return TensorFlowApart(config, log)


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported in the test's own process: the test runs in a worker that may have it
    (see the docstring)."""
    return pytest.importorskip("tensorflow")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collecting the suite imports no TensorFlow: a test module that did would put it in every
    worker, the ones kept free of it too (a file that needs it imports it in a module fixture,
    or its tests ask for ``tf``)."""
    if "tensorflow" in sys.modules and not session.config.stash.get(_HAD_TF, False):
        raise pytest.UsageError("collecting the tests imported TensorFlow: import it in a fixture "
                                "or a test instead (tests/conftest.py)")


_HAD_TF = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_HAD_TF] = "tensorflow" in sys.modules


# Helpers multiprocessing starts once and keeps for the life of the process, by design.
PROCESS_WIDE = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _descendants() -> dict[int, str]:
    import psutil

    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and not any(w in cmd for w in PROCESS_WIDE):
                out[p.pid] = cmd[:120]
        except psutil.Error:
            pass
    return out


def _started_by(pid: int, older: set[int]) -> bool:
    """Is ``pid`` a descendant of one of the ``older`` processes (a browser's helper, a kernel's
    child: theirs to end)?"""
    import psutil

    try:
        return any(p.pid in older for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test():
    """Every process a test starts has ended by its teardown (module fixtures' kernels and
    clusters are older than the test and are left alone). Besides proving it, this keeps the
    tests apart: a watch counts the descendants of the process it runs in, so a process left
    over by one test would be measured as the next one's memory."""
    import psutil

    before = set(_descendants())
    yield
    left = {pid: cmd for pid, cmd in _descendants().items()
            if pid not in before and not _started_by(pid, before)}
    if left:
        _, alive = psutil.wait_procs([psutil.Process(pid) for pid in left if psutil.pid_exists(pid)],
                                     timeout=15)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if alive:
            for p in alive:
                p.kill()
            pytest.fail("processes left running after the test: "
                        + "; ".join(f"{p.pid} {left[p.pid]}" for p in alive), pytrace=False)


@pytest.fixture(autouse=True)
def _sigint_as_in_a_plain_process():
    """Each test starts with SIGINT's handler as a plain ``python`` has it (it raises
    KeyboardInterrupt), and gets the one it found back after. A suite started as a background
    job (``make test &``, a runner's ``setsid … &``) inherits SIGINT ignored: the tests of Ctrl-C
    in this process then heard nothing, or only after a notebook test's kernel client had put
    Python's default back (make check; run 46a). A handler of leakwidget's own left in place
    fails the test: a watch must put back what it found (one that notes and ignores interrupts
    while a result is made would leave a kernel deaf to Ctrl-C)."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    after = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, before)
    if str(getattr(after, "__module__", "")).startswith("leakwidget"):
        pytest.fail(f"the test left leakwidget's SIGINT handler {after!r} in place", pytrace=False)


@pytest.fixture(autouse=True)
def _widgets_closed():
    """The widgets a test made are closed after it. ipywidgets keeps every widget in a registry
    until it is closed, and a worker's heap of them slows every later in-process watch there,
    whose collections and census walk it: after test_widget.py, test_magics.py and
    test_runner.py, 1,722 widgets held a process of 300,000 objects (137,000 after collection).
    A module fixture's widgets are older than the test, and are left alone."""
    registry = _widget_registry()
    before = set(registry) if registry is not None else set()
    yield
    registry = _widget_registry()
    for model_id in [k for k in registry or () if k not in before]:
        widget = registry.get(model_id)
        if widget is not None:
            widget.close()


def _widget_registry() -> dict | None:
    if "ipywidgets" not in sys.modules:
        return None
    from ipywidgets.widgets import widget

    return getattr(widget, "_instances", None)


@pytest.fixture(autouse=True)
def _tensorflow_stays_where_it_belongs(request: pytest.FixtureRequest):
    """Under ``make check``, a test that imports TensorFlow is a slow test left unmarked; under
    ``make test``, one that imports it in a worker kept free of it belongs in ``TF_HERE_FILES``
    or should ask for the ``tf`` fixture (or run TensorFlow in a subprocess, and check for it
    with ``importlib.util.find_spec``)."""
    had = "tensorflow" in sys.modules
    yield
    if had or "tensorflow" not in sys.modules:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if os.environ.get("LEAKWIDGET_FAST_ONLY"):
        pytest.fail(f"{request.node.nodeid} imported TensorFlow: mark it `tf` (tests/conftest.py)",
                    pytrace=False)
    # (xdist sets ``loadgroup`` in its workers, where ``dist`` reads "no")
    elif (worker and getattr(request.config.option, "loadgroup", False)
          and not _may_import_tf(worker, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))):
        pytest.fail(f"{request.node.nodeid} imported TensorFlow in {worker}, a worker kept free of "
                    "it: ask for the `tf` fixture, put its file in TF_HERE_FILES, or run "
                    "TensorFlow in a subprocess (tests/conftest.py)", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """``LEAKWIDGET_TEST_CPU=FILE``: append each test's wall and CPU seconds (setup, call and
    teardown; this process and the children it waited for: kernels, fresh interpreters,
    workers), its xdist worker and when it ended to FILE as a JSON line, for
    docs/development.md's table of where the CPU goes (``python tests/cpu_table.py FILE``).
    Off by default: one ``getrusage`` pair per test."""
    out = os.environ.get("LEAKWIDGET_TEST_CPU")
    if not out:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    wall, used = time.monotonic(), cpu()
    yield
    with open(out, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - wall, 2),
                            "cpu": round(cpu() - used, 2), "end": round(time.time(), 1),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")
