"""The same watch under several allocators, each in its own fresh worker, side by side.

The step reproduces glibc's per-thread arena retention for real: every iteration a new thread
allocates 2 MiB in small blocks and frees all but the last, then waits, so glibc gives it a new
arena whose freed memory stays pinned. ``MALLOC_ARENA_MAX=2`` caps the arenas and keeps the
growth down; that is the fix the comparison must show.
"""

from __future__ import annotations

import os
import re
import signal
import threading

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import leakwidget
from leakwidget import examples
from leakwidget.engine.observer import BaseObserver
from leakwidget.engine.workers import isolate
from leakwidget.engine.workers.compare import DEFAULT_VARIANTS, CompareResult, Variant
from leakwidget.engine.workers.isolate import IsolationError
from leakwidget.report.compare import render_compare_svg

MiB = 1024 * 1024
KiB = 1024


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


@pytest.mark.slow
def test_real_arena_retention_names_a_variant_with_an_interval_below_glibcs_and_says_how_to_apply_it() -> None:
    # ~25 s on two free cores (four workers, each until its verdict is sure or 6 s): a fix can
    # only be shown by runs long enough to separate the intervals.
    setup, step = examples.arena_growth()
    seen = Runs()
    result = leakwidget.compare(step, setup, seconds=6, jobs=2, observers=[seen])
    names = [v.name for v in DEFAULT_VARIANTS]
    # Each ran with what it says: in its own worker, its allocator loaded.
    env = {n: result[n].environment for n in names}
    assert env["glibc"]["allocator"].endswith("malloc") and "LD_PRELOAD" not in env["glibc"]["allocator_variables"]
    # (Inherited malloc variables ride along: importing Dask sets MALLOC_TRIM_THRESHOLD_.)
    assert env["MALLOC_ARENA_MAX=2"]["allocator_variables"].get("MALLOC_ARENA_MAX") == "2"
    assert env["jemalloc"]["allocator"] == "jemalloc" and env["tcmalloc"]["allocator"] == "tcmalloc"
    # Each ran as its verdict needed within the budget, not a fixed count.
    assert all(result[n].stopped in ("confident", "seconds") and result[n].error is None for n in names), str(result)
    # Named: a variant whose whole interval lies below glibc's, by at least 1 MiB over the run.
    best = result.best
    assert best is not None and best != "glibc" and result.answer.kind == "fix", str(result)
    glibc, fix = result.growth_rate("glibc"), result.growth_rate(best)
    assert fix.high < glibc.low and (glibc.slope - fix.slope) * result.horizon >= MiB, str(result)
    # ... and how to apply it, where the user runs.
    text = str(result)
    assert text.startswith(f"Fix: {best}") and "before Python starts" in text
    if best == "MALLOC_ARENA_MAX=2":
        assert "MALLOC_ARENA_MAX=2 jupyter lab" in text and "ENV MALLOC_ARENA_MAX=2" in text
    else:
        library = result[best].environment["allocator_variables"]["LD_PRELOAD"]
        assert os.path.isfile(library) and f"LD_PRELOAD={library} python train.py" in text
        assert f"leakwidget run --allocator {best} -- python train.py" in text
    # The view saw each variant as its own run, whole, one after another, in order.
    assert seen.events == [e for n in names for e in (("start", n), ("finish", n))]
    # The table (HTML) and the overlaid chart.
    bundle = result._repr_mimebundle_()
    html = bundle["text/html"]
    assert html.count("<tr data-variant=") == 4 and f'data-variant="{best}" data-status="finished" data-best="true"' in html
    assert 'class="leakwidget-answer" data-kind="fix"' in html
    assert bundle["image/png"] and '<img alt="RSS growth of each variant"' in html
    svg = render_compare_svg(result)
    assert svg.count('id="leakwidget-variant-') == 4 and "MALLOC_ARENA_MAX=2: " in svg


def test_a_stable_step_has_nothing_to_fix_and_its_workers_stderr_is_kept_not_printed(capfd) -> None:
    def setup():
        import os
        import sys

        print("python warning from the worker", file=sys.stderr)
        os.write(2, b"C library log line from the worker\n")  # as TensorFlow's C++ log does

    result = leakwidget.compare(lambda _state: sum(range(100)), setup, seconds=1.5, jobs=2)
    assert result.answer.kind == "nothing-to-fix" and result.best is None, str(result)
    assert str(result).startswith("No allocator retention: nothing to fix")
    assert all(r.iteration_count > 100 for r in result.results), str(result)
    for name in ("glibc", "tcmalloc"):
        assert "python warning from the worker" in result.worker_logs[name]
        assert "C library log line from the worker" in result.worker_logs[name]
    assert "--- jemalloc ---" in result.worker_log
    assert "from the worker" not in capfd.readouterr().err


def test_a_step_that_raises_shows_its_error_and_names_no_winner(capfd) -> None:
    def step(state: dict) -> None:
        import sys

        state["i"] += 1
        if state["i"] == 3:
            print("the worker's last words", file=sys.stderr)
            raise ValueError("bad record")

    result = leakwidget.compare(step, lambda: {"i": 0}, seconds=5, variants=["glibc", "jemalloc"])
    assert result.best is None and result.answer.kind == "no-answer", str(result)
    assert [row["status"] for row in result.rows()] == ["error", "error"]
    text = str(result)
    assert "glibc, the baseline, raised ValueError in iteration 2: bad record" in text
    assert text.count("raised ValueError in iteration 2: bad record") >= 2  # the table's rows
    assert 'data-status="error"' in result._repr_mimebundle_()["text/html"]
    # A worker that failed shows what it wrote.
    assert "the worker's last words" in capfd.readouterr().err


def test_stop_from_the_view_stops_every_variant_and_names_no_winner() -> None:
    setup, step = examples.arena_growth()
    seen = Runs(stop_at=5)
    result = leakwidget.compare(step, setup, seconds=60, variants=["glibc", "jemalloc"],
                                observers=[seen], jobs=2)
    assert [r.stopped for r in result.results] == ["stopped", "stopped"], str(result)
    assert all(r.elapsed < 30 for r in result.results)
    assert result.best is None and result.answer.kind == "no-answer", str(result)


def test_keyboard_interrupt_ends_every_worker_and_names_no_winner() -> None:
    setup, step = examples.arena_growth()
    seen = Runs(interrupt_at=5)
    result = leakwidget.compare(step, setup, seconds=60, observers=[seen], jobs=2)
    assert len(result.results) == 4
    assert all(r.stopped == "interrupted" for r in result.results), [r.stopped for r in result.results]
    assert result.best is None and "interrupted" in result.summary, str(result)
    assert {row["status"] for row in result.rows()} == {"interrupted"}


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
    # -n is the least a variant runs before a sure verdict may end it, -t the most (the
    # ceiling, even before -n: test_a_variant_stops_when_its_verdict_is_sure_but_not_before_the_iterations_asked).
    ip.run_cell("%%leakwatch --compare-allocators -n 20 -t 2 -q -o cmp state = arena_setup()\n"
                "arena_step(state)\n")
    cmp = ip.user_ns["cmp"]
    assert isinstance(cmp, CompareResult) and len(cmp.results) == 4
    # Each variant got both bounds and ran to its ceiling. (Not a count of iterations in its
    # 2 s: beside CI's load one variant, two at a time in their workers, ran under 20 while
    # glibc ran 101.)
    assert all((r.spec.confident_after, r.spec.seconds, r.spec.iterations) == (20, 2, None)
               and r.stopped == "seconds" and r.iteration_count > 0 for r in cmp.results), str(cmp)
    for bad in ("--compare-allocators --bisect", "--compare-allocators --allocator jemalloc"):
        with pytest.raises(UsageError, match="--compare-allocators"):
            ip.run_cell(f"%%leakwatch -n 5 {bad}\nx = 1\n").raise_error()


@pytest.mark.slow
def test_try_the_fix_runs_each_variant_as_long_as_the_first_run_and_shows_the_answer_as_the_headline(tmp_path) -> None:
    # ~25 s: a first run of 4 s, then four variants of at most 4 s, two at a time.
    import asyncio

    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import NO_PAUSE, run_sync
    from leakwidget.engine.workers.isolate import run_watch
    from leakwidget.notebook.dashboard import Dashboard

    InteractiveShell.instance(history_length=0)
    d = Dashboard()
    setup, step = examples.arena_growth()
    spec = WatchSpec(step=step, setup=setup, seconds=4, isolate=True)
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
    # As long as the first run needed, or the budget it had: never a fixed count.
    assert all(r.iteration_count >= first.iteration_count or r.stopped == "seconds" for r in result.results)
    assert result.best not in (None, "glibc"), str(result)
    # The headline is the comparison's answer in its own colour, not the last variant's verdict;
    # under it why, how to apply the fix, and the table.
    assert 'data-kind="fix"' in d.banner.value and f"Fix: {result.best}" in d.banner.value
    assert d.outcome.pane.layout.display is None and "leakwidget-compare-table" in d.outcome.pane.value
    assert "How to apply it" in d.outcome.pane.value
    assert [s.label for s in d.series[1:]] == [v.name for v in DEFAULT_VARIANTS]
    # Run again runs the user's watch, not the last variant's.
    assert d.scheduler.spec.allocator is None and not d.scheduler.spec.env
    # Save report writes the comparison, and says where.
    notes: list[str] = []
    d.note.observe(lambda change: notes.append(change["new"]), "value")
    path = d.save_report(str(tmp_path / "cmp.html"))
    assert path is not None and path in d.note.value
    assert "Saving the report to cmp.html" in notes[0]  # said at once: drawing it takes seconds
    page = (tmp_path / "cmp.html").read_text()
    assert f"Fix: {result.best}" in page and "leakwidget-compare-table" in page


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
    assert result.best == "flat" and result.answer.kind == "fix", str(result)


def _leaking(per_iteration: int):
    import numpy as np

    held: list = []
    return lambda: held.append(np.ones(per_iteration // 8))


def test_a_variant_that_keeps_only_a_little_of_the_growth_away_is_not_named(monkeypatch) -> None:
    # Both grow steadily: 1 MiB and 0.9 MiB an iteration. The second's interval lies below the
    # first's and it grows 6 MiB less, but an allocator that keeps 10% away is not the fix.
    # (Real leaking runs, their growths set to those numbers: beside stress-ng, run AK, glibc's
    # measured interval reached down to 0.88 MiB and the case was not the one this tests.)
    from leakwidget.engine.workers import fix

    glibc = leakwidget.watch(_leaking(MiB), iterations=60, widget=False)
    other = leakwidget.watch(_leaking(MiB * 9 // 10), iterations=60, widget=False)
    measured = {id(glibc): fix.Growth(MiB, 0.99 * MiB, 1.01 * MiB, 59),
                id(other): fix.Growth(0.9 * MiB, 0.89 * MiB, 0.91 * MiB, 59)}
    monkeypatch.setattr(fix, "growth_of", lambda r: measured[id(r)])
    result = CompareResult([Variant("glibc"), Variant("jemalloc", allocator="jemalloc")], [glibc, other])
    assert result.growth_rate("jemalloc").high < result.growth_rate("glibc").low, str(result)
    assert result.best is None and result.answer.kind == "no-variant-helps", str(result)
    assert "not the allocator's" in result.summary and "it would not stop the growth" in str(result)


def test_the_variant_named_is_the_one_surely_lowest_not_the_lowest_estimate(monkeypatch) -> None:
    # Lesson 1's run: jemalloc -3.1 MiB (95%: -7.4-0.9 MiB), tcmalloc +56 KiB (95%: 30-106 KiB),
    # both below glibc's +4.1 MiB (95%: 2.8-6.1 MiB). Sorted by the estimate, jemalloc was named,
    # though nothing shows it lower than tcmalloc. glibc is a real leaking run; the two variants'
    # growths are set to those numbers (per iteration over 10,965).
    from leakwidget.engine.workers import fix

    glibc = leakwidget.watch(_leaking(MiB), iterations=60, widget=False)
    jemalloc = leakwidget.watch(lambda: None, iterations=60, widget=False)
    tcmalloc = leakwidget.watch(lambda: None, iterations=60, widget=False)
    n = 10_965
    measured = {id(jemalloc): fix.Growth(-3.1 * MiB / n, -7.4 * MiB / n, 0.9 * MiB / n, n),
                id(tcmalloc): fix.Growth(56 * KiB / n, 30 * KiB / n, 106 * KiB / n, n)}
    real = fix.growth_of
    monkeypatch.setattr(fix, "growth_of", lambda r: measured.get(id(r)) or real(r))
    result = CompareResult([Variant("glibc"), Variant("jemalloc", allocator="jemalloc"),
                            Variant("tcmalloc", allocator="tcmalloc")], [glibc, jemalloc, tcmalloc])
    assert result.answer.kind == "fix" and result.best == "tcmalloc", str(result)
    assert result.answer.also == ("jemalloc",), str(result)
    assert "surely the least" in str(result), str(result)
    assert [name for name, _g in fix.ranked([("a", measured[id(jemalloc)]),
                                             ("b", measured[id(tcmalloc)])])] == ["b", "a"]


def test_a_variant_that_grew_more_than_glibc_is_said_to_have_grown_more() -> None:
    # It was said to have "an interval that overlaps glibc's" (the allocators notebook: tcmalloc
    # +36.4 MiB, 95%: 35.5-37.4, against glibc's 22.3-22.5).
    glibc = leakwidget.watch(_leaking(MiB), iterations=60, widget=False)
    worse = leakwidget.watch(_leaking(2 * MiB), iterations=60, widget=False)
    result = CompareResult([Variant("glibc"), Variant("tcmalloc", allocator="tcmalloc")], [glibc, worse])
    assert result.growth_rate("tcmalloc").low > result.growth_rate("glibc").high, str(result)
    assert result.answer.kind == "no-variant-helps", str(result)
    assert "an interval above glibc's: it grew more" in str(result) and "overlaps" not in str(result)


def test_a_variant_that_raised_is_shown_and_never_named_even_when_it_grew_least() -> None:
    def flat_then_raise(state: dict) -> None:
        state["i"] += 1
        if state["i"] == 40:
            raise RuntimeError("the reader broke")

    glibc = leakwidget.watch(_leaking(MiB), iterations=60, widget=False)
    broken = leakwidget.watch(flat_then_raise, setup=lambda: {"i": 0}, iterations=60, widget=False)
    result = CompareResult([Variant("glibc"), Variant("tcmalloc", allocator="tcmalloc")], [glibc, broken])
    assert broken.error is not None and result.best is None, str(result)
    assert result.answer.kind == "no-variant-helps"
    assert "tcmalloc raised RuntimeError in iteration 39: the reader broke: not compared." in str(result)
    (row,) = [r for r in result.rows() if r["variant"] == "tcmalloc"]
    assert row["status"] == "error" and not row["best"]


def test_a_comparison_saves_its_page_and_its_json(tmp_path) -> None:
    import json

    glibc = leakwidget.watch(_leaking(MiB), iterations=60, widget=False)
    flat = leakwidget.watch(lambda: None, iterations=60, widget=False)
    result = CompareResult([Variant("glibc"), Variant("MALLOC_ARENA_MAX=2", env=(("MALLOC_ARENA_MAX", "2"),))],
                           [glibc, flat], worker_logs={"glibc": "a warning\n", "MALLOC_ARENA_MAX=2": ""})
    assert result.best == "MALLOC_ARENA_MAX=2", str(result)
    doc = json.loads(result.to_json())
    assert doc["answer"]["kind"] == "fix" and doc["answer"]["best"] == "MALLOC_ARENA_MAX=2"
    assert ["A script", "MALLOC_ARENA_MAX=2 python train.py"] in doc["answer"]["apply"]
    assert [v["name"] for v in doc["variants"]] == ["glibc", "MALLOC_ARENA_MAX=2"]
    assert doc["variants"][1]["growth_high"] < doc["variants"][0]["growth_low"]
    assert doc["variants"][0]["result"]["iteration_count"] == 60
    # A variant that ran too few iterations has no bounds: null, not an invalid Infinity.
    short = leakwidget.watch(lambda: None, iterations=2, widget=False)
    doc = json.loads(CompareResult([Variant("glibc"), Variant("jemalloc", allocator="jemalloc")],
                                   [glibc, short]).to_json())
    assert doc["variants"][1]["growth"] is None and doc["answer"]["kind"] == "no-variant-helps"
    assert "jemalloc ran too few iterations to measure (2)." in doc["answer"]["why"]
    result.save_html(tmp_path / "cmp.html")
    page = (tmp_path / "cmp.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert not re.search(r'(src|href)="https?:', page)  # nothing fetched
    assert "Fix: MALLOC_ARENA_MAX=2" in page and "MALLOC_ARENA_MAX=2 jupyter lab" in page
    assert "a warning" in page and page.count("<tr data-variant=") == 2


def test_a_variant_stops_when_its_verdict_is_sure_but_not_before_the_iterations_asked() -> None:
    from leakwidget.engine.budget import Budget
    from leakwidget.engine.guard import MemoryGuard
    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.verdict import Verdict
    from leakwidget.engine.workers.compare import variant_spec

    spec = variant_spec(WatchSpec(step=lambda: None, iterations=40), Variant("jemalloc", allocator="jemalloc"),
                        seconds=30, at_least=500)
    assert (spec.iterations, spec.seconds, spec.confident_after) == (None, 30, 500)
    budget = Budget(spec, MemoryGuard(None, None, lambda: None))
    for _ in range(3):
        budget.count(Verdict("stable", confident=True), iterations=400, elapsed=12.0)
    assert budget.reason(400, 12.0, None) is None  # sure, but fewer than the first run needed
    assert budget.reason(500, 12.5, None) == "confident"
    assert budget.reason(450, 30.0, None) == "seconds"  # the budget is the ceiling
