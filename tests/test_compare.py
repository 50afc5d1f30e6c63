"""The same watch under several allocators, each in its own fresh worker, side by side.

The step reproduces glibc's per-thread arena retention for real: every iteration a new thread
allocates 2 MiB in small blocks and frees all but the last, then waits, so glibc gives it a new
arena whose freed memory stays pinned. ``MALLOC_ARENA_MAX=2`` caps the arenas and keeps the
growth down; that is the fix the comparison must show.
"""

from __future__ import annotations

import os
import signal
import threading

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import leakwidget
from leakwidget.engine.observer import BaseObserver
from leakwidget.engine.workers import isolate
from leakwidget.engine.workers.compare import DEFAULT_VARIANTS, CompareResult, Variant
from leakwidget.engine.workers.isolate import IsolationError
from leakwidget.report.compare import render_compare_svg

MiB = 1024 * 1024


def alive_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = {p.pid for p in alive_children()}
    yield
    left = [p for p in alive_children() if p.pid not in before]
    assert not left, f"processes left behind: {[p.pid for p in left]}"


def arena_setup():
    import ctypes
    import threading

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return {"libc": libc, "done": threading.Event()}


def arena_step(state):
    import threading

    libc, ready = state["libc"], threading.Event()

    def work():
        blocks = [libc.malloc(512) for _ in range(4096)]
        for p in blocks[:-1]:
            libc.free(p)
        ready.set()
        state["done"].wait()

    threading.Thread(target=work, daemon=True).start()
    ready.wait(30)


class Runs(BaseObserver):
    """What a view sees: one run at a time."""

    def __init__(self, stop_at: int | None = None, interrupt_at: int | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.stop_at, self.interrupt_at = stop_at, interrupt_at
        self.run = None

    def on_start(self, run) -> None:
        self.run = run
        self.events.append(("start", run.label))

    def on_iteration(self, record) -> None:
        if record.index == self.stop_at:
            self.run.request_stop("stopped")
        if record.index == self.interrupt_at:
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()
            self.interrupt_at = None

    def on_finish(self, result) -> None:
        self.events.append(("finish", result.spec.label))


def test_compare_runs_every_allocator_and_shows_the_arena_cap_shrinking_the_retention() -> None:
    seen = Runs()
    result = leakwidget.compare(arena_step, arena_setup, iterations=40, observers=[seen])
    names = [v.name for v in DEFAULT_VARIANTS]
    assert [v.name for v in result.variants] == names
    # Each ran with what it says: in its own worker, its allocator loaded.
    env = {n: result[n].environment for n in names}
    assert env["glibc"]["allocator"].endswith("malloc") and "LD_PRELOAD" not in env["glibc"]["allocator_variables"]
    # (Inherited malloc variables ride along: importing Dask sets MALLOC_TRIM_THRESHOLD_.)
    assert env["MALLOC_ARENA_MAX=2"]["allocator_variables"].get("MALLOC_ARENA_MAX") == "2"
    assert env["jemalloc"]["allocator"] == "jemalloc" and env["tcmalloc"]["allocator"] == "tcmalloc"
    assert all(result[n].iteration_count == 40 and result[n].error is None for n in names), str(result)
    # The fix shows: glibc keeps an arena's worth per thread, two arenas keep far less.
    assert result.growth("glibc") > 20 * MiB, str(result)
    assert result.growth("MALLOC_ARENA_MAX=2") < 0.5 * result.growth("glibc"), str(result)
    assert result.best != "glibc"
    # The view saw each variant as its own run, whole, one after another, in order.
    assert seen.events == [e for n in names for e in (("start", n), ("finish", n))]
    # The table and the overlaid chart.
    text = str(result)
    assert all(n in text for n in names) and "slope/iter" in text and "final RSS" in text
    assert result._repr_mimebundle_()["image/png"]
    svg = render_compare_svg(result)
    assert svg.count('id="leakwidget-variant-') == 4 and "MALLOC_ARENA_MAX=2: " in svg


def test_stop_from_the_view_stops_every_variant() -> None:
    seen = Runs(stop_at=5)
    result = leakwidget.compare(arena_step, arena_setup, seconds=60, variants=["glibc", "jemalloc"],
                                observers=[seen], jobs=2)
    assert [r.stopped for r in result.results] == ["stopped", "stopped"], str(result)
    assert all(r.elapsed < 30 for r in result.results)


def test_keyboard_interrupt_ends_every_worker_of_the_comparison() -> None:
    seen = Runs(interrupt_at=5)
    result = leakwidget.compare(arena_step, arena_setup, seconds=60, observers=[seen], jobs=2)
    assert len(result.results) == 4
    assert all(r.stopped == "interrupted" for r in result.results), [r.stopped for r in result.results]


def test_variants_are_named_from_strings_and_dicts_and_bad_ones_are_refused() -> None:
    assert Variant.of("jemalloc") == Variant("jemalloc", allocator="jemalloc")
    assert Variant.of("MALLOC_ARENA_MAX=4") == Variant("MALLOC_ARENA_MAX=4", env=(("MALLOC_ARENA_MAX", "4"),))
    custom = Variant.of({"allocator": "tcmalloc", "env": {"TCMALLOC_RELEASE_RATE": "10"}})
    assert custom.name == "tcmalloc TCMALLOC_RELEASE_RATE=10" and custom.allocator == "tcmalloc"
    with pytest.raises(ValueError, match="allocator .* or NAME=VALUE"):
        Variant.of("mimalloc")
    with pytest.raises(ValueError, match="must differ"):
        leakwidget.compare(arena_step, arena_setup, iterations=5, variants=["glibc", "glibc"])


def test_a_missing_allocator_fails_before_any_variant_runs(monkeypatch) -> None:
    monkeypatch.setitem(isolate._ALLOCATOR_SONAMES, "tcmalloc", "libtcmalloc-not-installed.so.9")
    with pytest.raises(IsolationError, match="libtcmalloc-not-installed"):
        leakwidget.compare(arena_step, arena_setup, iterations=5)


def test_the_magic_compares_allocators(tmp_path) -> None:
    ip = InteractiveShell.instance(history_length=0)
    ip.history_manager.enabled = False
    ip.run_line_magic("load_ext", "leakwidget")
    ip.user_ns.update(arena_setup=arena_setup, arena_step=arena_step)
    ip.run_cell("%%leakwatch --compare-allocators -n 20 -q -o cmp state = arena_setup()\n"
                "arena_step(state)\n")
    cmp = ip.user_ns["cmp"]
    assert isinstance(cmp, CompareResult) and len(cmp.results) == 4
    assert all(r.iteration_count == 20 for r in cmp.results), str(cmp)
    for bad in ("--compare-allocators --bisect", "--compare-allocators --allocator jemalloc"):
        with pytest.raises(UsageError, match="--compare-allocators"):
            ip.run_cell(f"%%leakwatch -n 5 {bad}\nx = 1\n").raise_error()


def test_the_dashboard_offers_try_the_fix_for_allocator_retention_and_shows_the_comparison() -> None:
    import asyncio

    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import NO_PAUSE, run_sync
    from leakwidget.engine.workers.isolate import run_watch
    from leakwidget.notebook.dashboard import Dashboard

    InteractiveShell.instance(history_length=0)
    d = Dashboard()
    spec = WatchSpec(step=arena_step, setup=arena_setup, iterations=40, isolate=True)
    first = run_sync(run_watch(spec, [d], NO_PAUSE))
    assert first.attribution is not None and first.attribution.kind == "allocator", str(first)
    assert d.try_fix_button.layout.display is None and not d.try_fix_button.disabled

    async def click() -> None:
        d.try_fix_button.click()
        assert d.scheduler.task is not None
        await d.scheduler.task

    asyncio.run(click())
    result = d.last_compare
    assert result is not None, d.note.value
    assert [v.name for v in result.variants] == [v.name for v in DEFAULT_VARIANTS]
    assert all(r.iteration_count == 40 for r in result.results), str(result)
    assert result.best != "glibc", str(result)
    # The answer is the headline, each variant was drawn as its own run beside the first one.
    assert "grew least" in d.banner.value and result.best in d.banner.value
    assert [s.label for s in d.series[1:]] == [v.name for v in DEFAULT_VARIANTS]


def test_try_the_fix_is_not_offered_for_a_leak_of_the_code() -> None:
    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import Watch
    from leakwidget.notebook.dashboard import Dashboard

    InteractiveShell.instance(history_length=0)
    import mmap

    keep: list = []

    def step() -> None:  # fresh pages every time: free heap pages of earlier tests cannot hide it
        m = mmap.mmap(-1, 256 * 1024)
        m.write(b"x" * (256 * 1024))
        keep.append(m)

    d = Dashboard()
    r = Watch(WatchSpec(step=step, iterations=200), [d]).run()
    assert r.verdict.kind == "leak" and r.attribution.kind != "allocator", str(r)
    assert d.try_fix_button.layout.display == "none" and d.try_fix_button.disabled


def test_run_again_of_an_isolated_watch_runs_in_a_fresh_worker_again() -> None:
    import asyncio

    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import NO_PAUSE, run_sync
    from leakwidget.engine.workers.isolate import run_watch
    from leakwidget.notebook.dashboard import Dashboard

    InteractiveShell.instance(history_length=0)
    assert "MALLOC_ARENA_MAX" not in os.environ
    d = Dashboard()
    spec = WatchSpec(step=arena_step, setup=arena_setup, iterations=20, isolate=True,
                     env=(("MALLOC_ARENA_MAX", "2"),))
    run_sync(run_watch(spec, [d], NO_PAUSE))

    async def click() -> None:
        d.run_again_button.click()
        await d.scheduler.task

    asyncio.run(click())
    again = d.last_result
    assert len(d.series) == 2 and again.iteration_count == 20, str(again)
    # Only a worker started with the variable has it: this process does not.
    assert again.environment["allocator_variables"].get("MALLOC_ARENA_MAX") == "2"


def test_the_best_variant_is_not_chosen_by_one_reading_at_the_end() -> None:
    # One run leaks 1 MiB an iteration; the other is flat but holds a 96 MiB batch at its last
    # iteration only. Two single readings (the end and the 10% mark) called the flat one the
    # larger growth, and the leak the best.
    import numpy as np

    held: list = []

    def leaking() -> None:
        held.append(np.ones(MiB // 8))

    def flat_then_spike(state: dict) -> None:
        state["i"] += 1
        if state["i"] == 60:
            state["batch"] = np.ones(96 * MiB // 8)

    leak = leakwidget.watch(leaking, iterations=60, widget=False)
    flat = leakwidget.watch(flat_then_spike, setup=lambda: {"i": 0}, iterations=60, widget=False)
    result = CompareResult([Variant("leaking"), Variant("flat")], [leak, flat])
    assert result.growth("leaking") > 40 * MiB, str(result)
    assert abs(result.growth("flat")) < 8 * MiB, str(result)
    assert result.best == "flat", str(result)
