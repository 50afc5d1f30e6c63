"""Bisection in fresh worker processes, several at a time, and on a real Dask cluster.

The pipeline is four ``@leakwidget.stage`` functions, one of which keeps 256 KiB per call; each
configuration of the search runs in its own worker process (``jobs``) or as a task on a
``LocalCluster`` of two worker processes (``client``). The search handing out two
configurations at a time must find what the sequential one finds.
"""

from __future__ import annotations

import http.server
import importlib
import importlib.util
import itertools
import os
import random
import signal
import sys
import threading
import time

import numpy as np
import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from lazy import lazy

import leakwidget
from leakwidget.engine.observer import BaseObserver
from leakwidget.engine.search import Bisector, Observed
from leakwidget.engine.verdict import Verdict
from leakwidget.engine.workers import cluster
from leakwidget.stages import Stage

pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="Dask distributed is not installed")
# 54,000 objects: imported when the first test starts a cluster, not when the suite is collected
# (tests/lazy.py).
distributed = lazy("distributed")

KIB256 = 256 * 1024
SECONDS = 8.0  # per configuration, at most


def alive_children() -> set[int]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture
def no_worker_left(request):
    before = alive_children()
    yield
    left = alive_children() - before
    assert not left, f"processes left behind: {sorted(left)}"


def pipeline(culprit: int, k: int = 4, pid_dir: str | None = None):
    """(step, setup): k user stages, the ``culprit``-th keeping 256 KiB per call."""
    hold: list = []
    fns = []
    for i in range(k):
        def part(x, i=i):
            if i == culprit:
                hold.append(np.ones(KIB256 // 8))
            return x + 1
        part.__qualname__ = f"part{i}"
        fns.append(leakwidget.stage(part))

    def setup():
        hold.clear()
        if pid_dir is not None:
            open(os.path.join(pid_dir, str(os.getpid())), "w").close()

    def step(_):
        x = 0
        for f in fns:
            x = f(x)
        t = time.perf_counter()
        while time.perf_counter() - t < 0.002:
            pass

    return step, setup


class Seen(BaseObserver):
    def __init__(self, interrupt_after: int | None = None) -> None:
        self.starts: list[str] = []
        self.finishes: list[str] = []
        self.interrupt_after = interrupt_after

    def on_start(self, run) -> None:
        self.starts.append(run.label)

    def on_iteration(self, record) -> None:
        if self.interrupt_after is not None and len(self.starts) >= self.interrupt_after and record.index == 20:
            self.interrupt_after = None
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()

    def on_finish(self, result) -> None:
        self.finishes.append(result.spec.label)


# ------------------------------------------------------------------ the search, two at a time


def _stages(k: int) -> list[Stage]:
    return [Stage(id=f"s{i}@{i}", kind="map", site=str(i), toggleable=True) for i in range(k)]


def _run(k: int, culprits: list[frozenset], jobs: int, rng: random.Random, **kw):
    b = Bisector(**kw)
    stages, running = _stages(k), []

    def answer(c):
        leaks = c.on is None or any(s <= c.on for s in culprits)
        b.report(c, Observed(Verdict("leak" if leaks else "stable", slope=1e5 if leaks else 0.0), stages=stages))

    while True:
        running += b.next_configurations(jobs - len(running)) if jobs > 1 else (
            [b.next_configuration()] if b.next_configuration() is not None else [])
        if not running:
            return b.result()
        answer(running.pop(rng.randrange(len(running))))  # any order of completion
        if b.done:
            for c in running:
                answer(c)
            return b.result()


def test_handing_out_configurations_ahead_finds_what_the_sequential_search_finds() -> None:
    rng = random.Random(7)
    for k in (2, 3, 5, 8):
        ids = [f"s{i}@{i}" for i in range(k)]
        cases = [[]] + [[frozenset([i])] for i in ids] + [[frozenset(p)] for p in itertools.combinations(ids, 2)]
        for culprits, all_off_first, jobs in itertools.product(cases, (True, False), (2, 3)):
            seq = _run(k, culprits, 1, rng, all_off_first=all_off_first)
            par = _run(k, culprits, jobs, rng, all_off_first=all_off_first)
            assert par.culprit_ids == seq.culprit_ids and par.outside == seq.outside, (k, culprits, jobs)
    # Two at a time: the halves of a split run together.
    b = Bisector()
    (base,) = b.next_configurations(2)
    b.report(base, Observed(Verdict("leak", slope=1e5), stages=_stages(4)))
    batch = b.next_configurations(2)
    assert [c.label for c in batch][0] == "all off" and len(batch) == 2


# ------------------------------------------------------------------ real runs


def test_each_configuration_runs_in_its_own_worker_two_at_a_time(no_worker_left, tmp_path) -> None:
    step, setup = pipeline(culprit=2, pid_dir=str(tmp_path))
    seen = Seen()
    result = leakwidget.bisect(step, setup, seconds_per_config=SECONDS, jobs=2, observers=[seen])
    assert [s.kind for s in result.culprits] == ["part2"], str(result)
    pids = {int(p.name) for p in tmp_path.iterdir()}
    assert len(pids) == len(result.configurations) and os.getpid() not in pids
    # The view saw every configuration, each whole, one after another.
    assert sorted(seen.starts) == sorted(c.label for c in result.configurations)
    assert seen.finishes == seen.starts


def test_a_bisection_runs_as_tasks_on_a_dask_cluster(client, tmp_path) -> None:
    step, setup = pipeline(culprit=1, pid_dir=str(tmp_path))
    seen = Seen()
    result = leakwidget.bisect(step, setup, seconds_per_config=SECONDS, client=client, observers=[seen])
    assert [s.kind for s in result.culprits] == ["part1"], str(result)
    assert result.configurations[0].kind == "leak"
    ran_in = {int(p.name) for p in tmp_path.iterdir()}
    workers = set(client.run(os.getpid).values())
    assert ran_in and ran_in <= workers, (ran_in, workers)
    assert len(seen.finishes) == len(result.configurations)


def test_keyboard_interrupt_ends_a_parallel_bisection_and_every_worker(no_worker_left) -> None:
    step, setup = pipeline(culprit=3)
    seen = Seen(interrupt_after=1)  # in the baseline's 20th iteration
    t = time.perf_counter()
    result = leakwidget.bisect(step, setup, seconds_per_config=60, jobs=2, observers=[seen])
    assert "interrupted" in result.summary, str(result)
    assert result.configurations[0].stopped == "interrupted"
    assert time.perf_counter() - t < 30


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance(history_length=0)
    ip.history_manager.enabled = False
    ip.run_line_magic("load_ext", "leakwidget")
    step, setup = pipeline(culprit=0)
    ip.user_ns.update(step=step, setup=setup)
    return ip


def test_the_magic_bisects_in_workers(shell, no_worker_left) -> None:
    shell.run_cell(f"%%leakwatch --bisect --jobs 2 -t {SECONDS} -q -o b1 setup()\nstep(None)\n")
    assert [s.kind for s in shell.user_ns["b1"].culprits] == ["part0"], str(shell.user_ns["b1"])


def test_the_magic_bisects_on_a_cluster(shell, client, monkeypatch) -> None:
    address = client.scheduler.address
    shell.run_cell(f"%%leakwatch --bisect --cluster {address} -t {SECONDS} -q -o b2 setup()\nstep(None)\n")
    assert [s.kind for s in shell.user_ns["b2"].culprits] == ["part0"], str(shell.user_ns["b2"])
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    with pytest.raises(UsageError, match="cannot reach the Dask scheduler"):
        shell.run_cell("%%leakwatch --bisect --cluster tcp://127.0.0.1:9 -t 5\nstep(None)\n").raise_error()


# ------------------------------------------------------------------ a task that fails


def test_a_task_that_fails_is_that_configurations_error_and_the_bisection_is_returned(client, tmp_path) -> None:
    # The step lives in a module this process imported and the Dask workers cannot find (it is
    # gone by the time they look): every task fails as it unpickles the step.
    (tmp_path / "gone_from_the_workers.py").write_text("def step(_):\n    return None\n")
    sys.path.insert(0, str(tmp_path))
    try:
        gone = importlib.import_module("gone_from_the_workers")
    finally:
        sys.path.remove(str(tmp_path))
    (tmp_path / "gone_from_the_workers.py").unlink()
    try:
        result = leakwidget.bisect(gone.step, seconds_per_config=SECONDS, client=client)
    finally:
        sys.modules.pop("gone_from_the_workers", None)
    base = result.configurations[0]
    assert base.stopped == "error" and "ModuleNotFoundError" in base.error, str(result)
    assert "gone_from_the_workers" in result.summary and not result.culprits


def test_an_interrupt_keeps_the_iterations_a_dask_task_ran(client, tmp_path) -> None:
    step, setup = pipeline(culprit=1)
    calls = [0]

    def counted(state):
        calls[0] += 1
        if calls[0] == 40:  # in the worker: tell the test the task is well under way
            (tmp_path / "ran").touch()
        step(state)

    def interrupt_once_it_runs() -> None:
        while not (tmp_path / "ran").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
    t = time.perf_counter()
    result = leakwidget.bisect(counted, setup, seconds_per_config=60, client=client)
    assert time.perf_counter() - t < 30
    base = result.configurations[0]
    # The task heard the interrupt (its stop event) and sent what it had measured.
    assert base.stopped == "interrupted" and base.observed.iterations >= 40, str(result)
    assert "interrupted" in result.summary


def test_a_task_whose_worker_dies_is_worker_died_with_the_cause(tmp_path) -> None:
    # Its own one-worker cluster that gives a task one try: the dying step kills its worker.
    import dask
    import distributed as loaded  # noqa: F401  (before the config's context, see below)

    # (Were distributed first imported inside the context, its exit would remove every default
    # distributed had added to dask's config, and a later test in this worker failed with
    # KeyError('distributed') from dask.config.get: run AQ.)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as lc, distributed.Client(lc) as c:
            calls = [0]

            def dies(_):
                calls[0] += 1
                if calls[0] == 10:
                    os.kill(os.getpid(), signal.SIGKILL)  # as a native crash would end it

            result = leakwidget.bisect(dies, lambda: None, seconds_per_config=SECONDS, client=c)
    base = result.configurations[0]
    assert base.stopped == "worker-died" and "KilledWorker" in base.error, str(result)
    assert "its worker process died" in result.summary


def test_an_address_where_no_dask_scheduler_answers_is_a_clear_error_within_the_timeout(monkeypatch) -> None:
    # A real HTTP server: it accepts the connection, reads Dask's handshake and waits for more.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            cluster.connect(f"tcp://127.0.0.1:{server.server_port}").close()
        except BaseException as exc:
            errors.append(exc)

    # The bound is on the attempt, not on importing Dask: imported inside it, distributed took
    # the attempt past 5 s in a worker beside four others on two cores (run AG).
    importlib.import_module("distributed.comm")
    attempt = threading.Thread(target=connect, daemon=True)
    t = time.perf_counter()
    attempt.start()
    attempt.join(timeout=15)
    server.shutdown()
    server.server_close()
    assert not attempt.is_alive(), "connecting to an HTTP server hangs"
    assert time.perf_counter() - t < 5
    assert len(errors) == 1 and isinstance(errors[0], cluster.ClusterError), errors
    assert "did not answer Dask's handshake within 1 s" in str(errors[0])
