"""Isolated watches: the setup and the step run in a fresh worker process.

Every test runs real worker processes and checks, with psutil, that none is left after its way
out: the normal end, Stop, an exception in the step, KeyboardInterrupt, a worker killed or
exiting by itself, and the parent itself dying.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import leakwidget
from leakwidget.engine.observer import BaseObserver
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import NO_PAUSE, YieldToLoop, run_sync
from leakwidget.engine.workers import isolate
from leakwidget.engine.workers.isolate import (
    IsolationError,
    WorkerDied,
    _how_it_ended,
    run_isolated,
)

MiB = 1024 * 1024
KEEP: list = []  # a step that leaks here must leak in the worker, not in this process


def no_workers_left() -> list[psutil.Process]:
    """This process's descendants still alive (zombies are not alive)."""
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = {p.pid for p in no_workers_left()}
    yield
    left = [p for p in no_workers_left() if p.pid not in before]
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


class Stream(BaseObserver):
    """Records what an observer sees of a run."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.events: list[str] = []
        self.records: list = []
        self.samples = 0
        self.verdicts = 0
        self.run = None
        self.result = None

    def on_start(self, run) -> None:
        self.run = run
        self.events.append("start")

    def on_samples(self, t, rss) -> None:
        self.samples += len(t)

    def on_iteration(self, record) -> None:
        self.records.append(record)
        if self.stop_at is not None and record.index == self.stop_at:
            self.run.request_stop("stopped")

    def on_verdict(self, verdict) -> None:
        self.verdicts += 1

    def on_finish(self, result) -> None:
        self.result = result
        self.events.append("finish")


def leak_step(_state=None) -> None:
    KEEP.append(np.ones(256 * 1024 // 8))
    time.sleep(0.002)


def sleepy_step() -> None:
    time.sleep(0.005)


# ------------------------------------------------------------------ the stream and the result


def test_an_isolated_watch_measures_the_worker_and_streams_everything_to_its_observers() -> None:
    stream = Stream()
    rss_before = psutil.Process().memory_info().rss
    result = run_sync(run_isolated(WatchSpec(leak_step, seconds=4), [stream], NO_PAUSE))
    assert result.verdict.kind == "leak", str(result)
    assert result.verdict.slope == pytest.approx(256 * 1024, rel=0.1)
    assert not KEEP, "the step ran in this process"
    # The leak is in the worker: this process did not grow by anything like it.
    grown = result.column("rss")[-1] - result.baseline_rss
    assert grown > 50 * MiB
    assert psutil.Process().memory_info().rss - rss_before < grown / 4
    # Everything streamed: every record, samples, live verdicts, and the one result.
    assert stream.events == ["start", "finish"] and stream.result is result
    assert [r.index for r in stream.records] == list(range(result.iteration_count))
    assert stream.samples > 100 and stream.verdicts >= 2
    assert result.spec.step is leak_step  # the caller's spec: Run again works from it
    assert result.stopped == "seconds" and result.attribution is not None


class StopAndMark(Stream):
    """Stops at ``stop_at`` and then, once the stop is sent, creates ``sent``."""

    def __init__(self, stop_at: int, sent) -> None:
        super().__init__(stop_at)
        self.sent = sent

    def on_iteration(self, record) -> None:
        super().on_iteration(record)
        if record.index == self.stop_at:
            self.sent.touch()


def test_stop_from_an_observer_ends_the_worker_at_the_next_iteration(tmp_path) -> None:
    # The iteration after the one the observer stops at does not end until the stop is sent: the
    # parent reading the records late (a loaded host: run AT of 2026-11-29 read 15 iterations, 4
    # past the stop) is not what is tested; the worker ending at its next boundary is.
    sent = tmp_path / "sent"
    calls = []

    def step():
        calls.append(None)
        time.sleep(0.05)
        deadline = time.monotonic() + 60
        while len(calls) > 11 and not sent.exists() and time.monotonic() < deadline:
            time.sleep(0.005)

    stream = StopAndMark(10, sent)
    result = run_sync(run_isolated(WatchSpec(step, seconds=120), [stream], NO_PAUSE))
    assert result.stopped == "stopped"
    # The stop was sent before iteration 11 began or while it ran; at most one more starts
    # while the worker's listener thread takes the message from its pipe.
    assert 11 <= result.iteration_count <= 13, result.iteration_count


def test_stop_while_awaited_on_an_event_loop_as_the_dashboard_does() -> None:
    stream = Stream()

    async def main():
        task = asyncio.ensure_future(run_isolated(WatchSpec(sleepy_step, seconds=30), [stream],
                                                  YieldToLoop()))
        while len(stream.records) < 5:  # the loop keeps running while the worker streams
            await asyncio.sleep(0.01)
        assert stream.run.yields_to_loop
        stream.run.request_stop("stopped")
        return await task

    t = time.perf_counter()
    result = asyncio.run(main())
    assert result.stopped == "stopped" and time.perf_counter() - t < 20


def test_an_exception_in_the_step_is_the_results_error() -> None:
    def step():
        raise ValueError("bad batch")

    result = run_sync(run_isolated(WatchSpec(step, seconds=20), [], NO_PAUSE))
    assert result.stopped == "error" and result.error_iteration == 0
    assert isinstance(result.error, ValueError) and str(result.error) == "bad batch"
    assert "bad batch" in result.error_traceback


class InterruptAt(Stream):
    """Ctrl-C (SIGINT to this process, from another thread) once iteration ``at`` is seen."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_iteration(self, record) -> None:
        super().on_iteration(record)
        if record.index == self.at:
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()


def test_keyboard_interrupt_ends_the_worker_and_keeps_its_partial_result() -> None:
    stream = InterruptAt(5)
    result = run_sync(run_isolated(WatchSpec(sleepy_step, seconds=30), [stream], NO_PAUSE))
    assert result.stopped == "interrupted"
    assert result.iteration_count >= 6 and stream.result is result
    assert result.elapsed < 15


def test_keyboard_interrupt_while_the_worker_still_loads_is_an_interrupted_run() -> None:
    timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        result = run_sync(run_isolated(WatchSpec(sleepy_step, seconds=30), [], NO_PAUSE))
    finally:
        timer.cancel()
    assert result.stopped == "interrupted" and result.error is None


# ------------------------------------------------------------------ a worker that dies


@pytest.mark.parametrize("pause", [0.002, 0.0], ids=["2ms-step", "fast-step"])
def test_a_worker_killed_mid_run_leaves_a_partial_result_saying_how_and_where(pause: float) -> None:
    n = [0]

    def step():
        n[0] += 1
        if n[0] == 8:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(pause)

    stream = Stream()
    result = run_sync(run_isolated(WatchSpec(step, seconds=20), [stream], NO_PAUSE))
    assert n[0] == 0, "the step ran here"
    assert result.stopped == "worker-died" and isinstance(result.error, WorkerDied)
    assert result.error_iteration == 7
    # A fast step's records travel in batches; those the worker had not sent come from the
    # shared ring.
    assert result.iteration_count == 7
    text = str(result)
    assert "killed by SIGKILL in iteration 7" in text and "kernel is untouched" in text
    assert stream.result is result  # observers get it as any result


@pytest.mark.parametrize("at", [30, 100])
def test_every_iteration_a_dying_worker_finished_is_in_the_result(at: int) -> None:
    n = [0]

    def step():
        n[0] += 1
        if n[0] == at:
            os._exit(3)

    result = leakwidget.watch(step, isolate=True, iterations=150, widget=False)
    assert result.stopped == "worker-died" and result.error_iteration == at - 1, str(result)
    assert [r.index for r in result.iterations] == list(range(at - 1))
    stream = Stream()  # a view sees them too
    result = run_sync(run_isolated(WatchSpec(step, iterations=150), [stream], NO_PAUSE))
    assert [r.index for r in stream.records] == list(range(at - 1)) and stream.result is result


def test_a_worker_that_exits_gives_its_exit_code() -> None:
    def step():
        time.sleep(0.002)
        os._exit(7)

    result = run_sync(run_isolated(WatchSpec(step, seconds=20), [], NO_PAUSE))
    assert result.stopped == "worker-died"
    assert "exited with code 7 in the setup or iteration 0" in str(result.error)


def test_a_worker_killed_from_outside_near_the_memory_limit_says_so() -> None:
    killed = []

    class KillAt(Stream):
        def on_iteration(self, record) -> None:
            super().on_iteration(record)
            if record.index == 5 and not killed:
                killed.append(self.run.pid)
                os.kill(self.run.pid, signal.SIGKILL)

    result = run_sync(run_isolated(WatchSpec(sleepy_step, seconds=20), [KillAt()], NO_PAUSE))
    assert killed and result.stopped == "worker-died"
    assert f"pid {killed[0]}" in str(result.error) and "SIGKILL" in str(result.error)
    # How the words change near the memory limit (the kernel's OOM killer sends SIGKILL).
    near = _how_it_ended((0, signal.SIGKILL), last_rss=3900 * MiB, limit=4096 * MiB)
    assert "near the memory limit (4.0 GiB)" in near and "out-of-memory" in near
    assert "memory limit" not in _how_it_ended((0, signal.SIGKILL), last_rss=100 * MiB, limit=4096 * MiB)
    assert _how_it_ended((3, 0), 0, None) == "exited with code 3"


def test_the_worker_ends_when_the_process_that_started_it_dies(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import leakwidget
        from leakwidget.engine.observer import BaseObserver

        class Tell(BaseObserver):
            def on_start(self, run):
                print(run.pid, flush=True)

        def step():
            time.sleep(0.01)

        leakwidget.watch(step, seconds=120, isolate=True, widget=False, observers=[Tell()])
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        worker = psutil.Process(int(parent.stdout.readline()))
        time.sleep(0.5)  # it is running its steps
        assert worker.is_running()
        parent.kill()
        parent.wait()
        gone = False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not gone:
            try:
                gone = worker.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            time.sleep(0.05)
        assert gone, "the orphaned worker kept running"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_processes_the_step_started_end_with_the_worker() -> None:
    def setup():
        return subprocess.Popen(["sleep", "300"])  # never waited for: left behind by the step

    def step(proc):
        time.sleep(0.01)

    # Long enough for the worker's watch to find its child (it looks every second).
    result = run_sync(run_isolated(WatchSpec(step, setup, seconds=2.5), [], NO_PAUSE))
    assert result.stopped == "seconds"
    pids = [c.pid for c in result.children]
    assert pids, "the worker's child process was not seen"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


# ------------------------------------------------------------------ env and allocator


def test_env_reaches_the_worker_and_not_this_process() -> None:
    def step():
        if os.environ.get("LEAKWIDGET_TEST_VALUE") != "hello":
            raise AssertionError(f"worker env: {os.environ.get('LEAKWIDGET_TEST_VALUE')!r}")

    result = leakwidget.watch(step, iterations=5, env={"LEAKWIDGET_TEST_VALUE": "hello"}, widget=False)
    assert result.error is None and result.iteration_count == 5
    assert "LEAKWIDGET_TEST_VALUE" not in os.environ


@pytest.mark.parametrize("allocator, library", [("jemalloc", "libjemalloc"), ("tcmalloc", "libtcmalloc")])
def test_an_allocator_is_preloaded_into_the_worker(allocator: str, library: str) -> None:
    def step():
        with open("/proc/self/maps") as f:
            if library not in f.read():
                raise AssertionError(f"{library} is not loaded")

    result = leakwidget.watch(step, iterations=5, allocator=allocator, widget=False)
    assert result.error is None and result.iteration_count == 5
    assert result.environment["allocator"] == allocator


def test_a_missing_allocator_library_is_a_clear_error_not_a_glibc_run(monkeypatch) -> None:
    monkeypatch.setitem(isolate._ALLOCATOR_SONAMES, "jemalloc", "libjemalloc-not-installed.so.9")
    with pytest.raises(IsolationError, match="libjemalloc-not-installed.so.9.*apt-get install libjemalloc2"):
        leakwidget.watch(sleepy_step, iterations=5, allocator="jemalloc", widget=False)


def test_a_step_that_cannot_travel_is_refused_before_any_worker_starts() -> None:
    gen = (i for i in range(10))

    def step():
        next(gen)

    with pytest.raises(IsolationError, match="cannot travel to a worker process"):
        leakwidget.watch(step, iterations=5, isolate=True, widget=False)


def test_bad_env_and_allocator_values_are_refused() -> None:
    with pytest.raises(ValueError, match="allocator must be one of"):
        WatchSpec(sleepy_step, allocator="mimalloc")
    with pytest.raises(ValueError, match="not a variable name"):
        WatchSpec(sleepy_step, env={"A=B": "1"})
    assert WatchSpec(sleepy_step, env={"A": "1"}).isolate
    assert WatchSpec(sleepy_step, allocator="glibc").isolate


# ------------------------------------------------------------------ the magic


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance(history_length=0)
    ip.history_manager.enabled = False
    ip.run_line_magic("load_ext", "leakwidget")
    return ip


def test_the_magic_ships_the_cell_and_the_names_it_uses(shell: InteractiveShell) -> None:
    shell.run_cell(textwrap.dedent("""
        import numpy as np
        kept = []
        size = 256 * 1024
        def grow(n):
            kept.append(np.ones(n // 8))
    """))
    shell.run_cell("%%leakwatch -t 4 --isolate --no-widget -q -o iso\ngrow(size)\n")
    res = shell.user_ns["iso"]
    assert res.verdict.kind == "leak" and res.error is None, str(res)
    assert res.verdict.slope == pytest.approx(256 * 1024, rel=0.1)
    assert shell.user_ns["kept"] == [], "the cell ran in the notebook"


def test_a_shipped_cell_unpickles_in_a_worker_without_the_notebook_machinery() -> None:
    # What the worker measures is its own memory: unpickling the cell must not load IPython.
    import cloudpickle

    from leakwidget.notebook.cell import CellCode

    cell = CellCode(compile("x = 1", "<cell>", "exec"), namespace={"y": 2})
    probe = ("import pickle, sys; cell = pickle.loads(sys.stdin.buffer.read()); cell.step(); "
             "print(cell.namespace['x'], [m for m in ('IPython', 'ipywidgets', 'anywidget') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], input=cloudpickle.dumps(cell),
                         capture_output=True, timeout=60, check=True)
    assert out.stdout.decode().split() == ["1", "[]"], out.stderr.decode()


def test_the_magic_names_what_cannot_travel(shell: InteractiveShell) -> None:
    shell.run_cell("batches = (i for i in range(10**6))")
    with pytest.raises(UsageError, match=r"'batches' \(generator\) cannot travel.*setup statement"):
        shell.run_cell("%%leakwatch -t 2 --isolate --no-widget -q\nnext(batches)\n",
                       ).raise_error()
    # Built in the setup statement instead, it works; the stale notebook value is not shipped.
    shell.run_cell("%%leakwatch -n 20 --isolate --no-widget -q -o built batches = iter(range(10**6))\n"
                   "next(batches)\n")
    assert shell.user_ns["built"].iteration_count == 20


def test_the_magic_passes_env_and_allocator(shell: InteractiveShell) -> None:
    shell.run_cell("import os\n")
    shell.run_cell("%%leakwatch -n 5 --env LW_A=1 --env LW_B=two --allocator tcmalloc --no-widget -q -o al\n"
                   "assert os.environ['LW_A'] + os.environ['LW_B'] == '1two'\n")
    res = shell.user_ns["al"]
    assert res.error is None and res.iteration_count == 5
    assert res.environment["allocator"] == "tcmalloc"
    for bad in ("--env NOEQUALS", "--allocator mimalloc", "--jobs 2", "--cluster tcp://x:1"):
        with pytest.raises(UsageError, match="usage:"):
            shell.run_cell(f"%%leakwatch -n 5 {bad}\nx = 1\n").raise_error()


def test_env_values_are_quoted_as_in_a_shell(shell: InteractiveShell) -> None:
    shell.run_cell("import os\n")
    shell.run_cell("""%%leakwatch -n 3 --env MALLOC_ARENA_MAX="2" --env LW_A='x y' --env XLA_FLAGS="--a --b" --no-widget -q -o quoted
assert (os.environ['MALLOC_ARENA_MAX'], os.environ['LW_A'], os.environ['XLA_FLAGS']) == ('2', 'x y', '--a --b')
""")
    res = shell.user_ns["quoted"]
    assert res.error is None and res.iteration_count == 3, str(res)
    with pytest.raises(UsageError, match="No closing quotation"):
        shell.run_cell("%%leakwatch -n 3 --env LW_A=\"x\nx = 1\n").raise_error()


def test_a_nul_in_an_env_value_is_named_as_such() -> None:
    with pytest.raises(ValueError, match=r"the value of A holds a NUL character"):
        WatchSpec(sleepy_step, env={"A": "x\0y"})
    with pytest.raises(ValueError, match="the value of A must be a string, not 3"):
        WatchSpec(sleepy_step, env={"A": 3})


DAEMONIZE = """
import os, subprocess, sys, time
def start_them(pids_file):
    # One child in a new session (its own process group), and a daemon: a double fork whose
    # grandchild ends up nobody's child but a subreaper's (or init's).
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pids_file, "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(300)
        os._exit(0)
    os.wait()
    with open(pids_file, "a") as f:
        f.write(f"{child.pid}\\n")
"""


def _started_by_the_step(tmp_path, dies: bool):
    namespace: dict = {}
    exec(DAEMONIZE, namespace)
    # Only the function travels, not the namespace exec filled: its __builtins__ carry whatever
    # an earlier test's IPython shell left there (a shell's bound method cannot be pickled).
    start_them = namespace["start_them"]
    pids_file = str(tmp_path / "pids")
    n = [0]

    def setup():
        start_them(pids_file)

    def step(_state):
        n[0] += 1
        if dies and n[0] == 30:
            os._exit(3)  # the worker dies first: what it started left its group and tree
        time.sleep(0.01)

    # In a thread: a process left holding the worker's pipes could hang the run's end.
    done: list = []

    def run() -> None:
        try:
            done.append(run_sync(run_isolated(WatchSpec(step, setup, seconds=2), [], NO_PAUSE)))
        except BaseException as exc:  # said below
            done.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout=30)
    if not (tmp_path / "pids").exists():
        r = done[0] if done else None
        raise AssertionError("the setup started nothing: " + (
            repr(r) if isinstance(r, BaseException) else
            f"{r.stopped}, {r.error!r}, {r.stage_notes}" if r else "no result within 30 s"))
    pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
    return (done[0] if done else None), pids


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("dies", [False, True], ids=["worker-ends", "worker-dies"])
def test_processes_in_a_new_session_and_daemons_end_with_the_worker(tmp_path, dies: bool) -> None:
    result, pids = _started_by_the_step(tmp_path, dies)
    try:
        assert result is not None, "the watch did not end"
        assert len(pids) == 2
        assert result.stopped == ("worker-died" if dies else "seconds"), str(result)
        # Signalled when the watch ends; a busy machine may take a moment to reap them.
        psutil.wait_procs([p for p in map(_process, pids) if p is not None], timeout=5)
        left = [pid for pid in pids if not _ended(pid)]
        assert not left, f"left running: {left}"
        if not dies:  # the worker watched them too: the daemon came back to it, its subreaper
            assert set(pids) <= {c.pid for c in result.children}, result.children
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_workers_phase_after_its_run_is_told_to_the_parents_views() -> None:
    # The garbage phase runs in the worker after its measured run; its iterations are not
    # drawn, so the parent's views (the dashboard's banner) are told what it does meanwhile,
    # as an in-process watch tells them. A step whose cycles of 64 KiB each outlive the young
    # collections in a heap of 300,000 long-lived objects: garbage that piles up like a leak.
    def setup():
        import gc

        ballast = [[] for _ in range(300_000)]
        gc.collect()
        return ballast

    def step(_ballast):
        import gc

        node = {"payload": bytearray(64 * 1024)}
        node["self"] = node
        gc.collect(1)

    class Phases(BaseObserver):
        said: list[str] = []

        def on_phase(self, what: str) -> None:
            self.said.append(what)

    result = leakwidget.watch(step, setup, seconds=3, isolate=True, widget=False, observers=[Phases()])
    assert result.attribution is not None and result.attribution.kind == "garbage", str(result)
    assert len(Phases.said) == 1, Phases.said
    assert Phases.said[0].startswith("After the run: measuring the garbage Python's cycle collector frees"), Phases.said
