"""Attribution: real leaks of each kind, run through leakwidget.watch, classified right."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import linecache
import os
import tracemalloc

import numpy as np
import pytest

import leakwidget
from leakwidget import examples as ex
from leakwidget.engine.attribution import Tracker, find_step_code
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import Watch

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
HAS_TRIM = hasattr(_libc, "malloc_trim")


def _watch(step, **kw):
    kw.setdefault("widget", False)
    return leakwidget.watch(step, **kw)


def _watch_census(step, **kw):
    """A test-sized run (well under a second) whose object census is not held to the 0.5% budget,
    so it gets the checkpoints a minute-long run would get."""
    return Watch(WatchSpec(step, **kw), tracker=Tracker(census=True)).run()


def _line_of(fn, marker: str) -> int:
    """Line number of the line in fn's source that contains marker."""
    code = fn.__code__
    lines, start = __import__("inspect").getsourcelines(code)
    for k, text in enumerate(lines):
        if marker in text:
            return start + k
    raise AssertionError(f"{marker!r} not in {fn.__name__}")


def test_python_object_leak_is_attributed_to_python_objects():
    leak: list = []

    def step():
        leak.append([str(i) * 4 for i in range(300)])

    r = _watch(step, iterations=300)
    a = r.attribution
    assert r.verdict.kind == "leak"
    assert a.kind == "python", str(a)  # even without a census: the block count sees small objects
    r = _watch_census(step, iterations=300)
    a = r.attribution
    assert a.kind == "python", str(a)
    assert a.python_slope > 0.5 * a.rss_slope
    assert any(t.name == "list" or t.name.startswith("list of list") for t in a.top_types[:3]), str(a)
    assert "Python objects" in a.summary


def test_retained_numpy_arrays_count_as_python_objects():
    # The payloads live in malloc, not in pymalloc's blocks: only the census sees them.
    keep: list = []

    def step():
        keep.append(np.ones(32 * 1024))  # 256 KiB, touched

    r = _watch_census(step, iterations=120)
    a = r.attribution
    assert a.kind == "python", str(a)
    assert a.python_source == "object census"
    assert 0.5 * a.rss_slope < a.python_slope < 2 * a.rss_slope, str(a)
    assert any("ndarray" in t.name for t in a.top_types[:3]), str(a)


def test_native_malloc_leak_is_attributed_to_native_memory():
    ptrs: list[int] = []
    size = 256 * 1024

    def step():
        p = _libc.malloc(size)
        ctypes.memset(p, 1, size)  # resident, not just reserved
        ptrs.append(p)

    try:
        r = _watch(step, iterations=150)
    finally:
        for p in ptrs:
            _libc.free(p)
    a = r.attribution
    assert r.verdict.kind == "leak", (r.verdict.summary, np.diff(r.column("rss")) // 1024)
    assert a.kind == "native", str(a)
    assert a.native_slope > 0.8 * a.rss_slope
    assert a.python_slope < 0.1 * a.rss_slope
    if HAS_TRIM:
        assert a.reclaimed_bytes is not None and a.reclaimed_bytes < 0.25 * a.growth_bytes


@pytest.mark.skipif(not HAS_TRIM, reason="needs glibc's malloc_trim")
@pytest.mark.skipif("MALLOC_ARENA_MAX" in os.environ, reason="arena limit set: no per-thread arenas")
def test_allocator_retention_is_reclaimable_and_not_blamed_on_the_code():
    # Each iteration a new thread (so a new glibc arena) allocates 2 MiB in small blocks and
    # frees all but the last one, which pins the freed memory below it: RSS grows, nothing is
    # live, and only malloc_trim gives it back.
    _, step, release = ex.allocator_retention()
    try:
        r = _watch(step, iterations=30)
    finally:
        release()
    a = r.attribution
    rss = r.column("rss")
    assert rss[-1] - rss[0] > 8 * 2**20, str(a)
    assert a.kind == "allocator", str(a)
    assert a.reclaimed_bytes >= 0.5 * a.growth_bytes
    assert "MALLOC_ARENA_MAX" in a.summary and "not your code" in a.summary


def test_no_growth_is_attributed_to_nothing():
    def step():
        x = [str(i) for i in range(2000)]
        del x

    r = _watch(step, iterations=200)
    assert r.verdict.kind != "leak"
    assert r.attribution.kind == "none", str(r.attribution)
    assert r.attribution.reclaimed_bytes is None  # nothing grew, nothing trimmed


def _site_leaker(keep: list) -> None:
    keep.append(bytearray(20_000))  # LEAK-SITE
    tmp = [0] * 1000
    del tmp


def test_trace_finds_the_leaking_line_and_stops_tracemalloc():
    assert not tracemalloc.is_tracing()
    keep: list = []
    r = _watch(lambda: _site_leaker(keep), iterations=60, trace=True)
    a = r.attribution
    want = f"{__file__}:{_line_of(_site_leaker, 'LEAK-SITE')}"
    assert a.top_sites, str(a)
    assert a.top_sites[0].site == want, str(a)
    assert 15_000 < a.top_sites[0].bytes_per_iteration < 30_000
    assert a.python_source in ("tracemalloc", "object census")
    assert not tracemalloc.is_tracing()  # we started it, so we stopped it


def test_trace_leaves_a_users_tracemalloc_running():
    tracemalloc.start()
    try:
        keep: list = []
        r = _watch(lambda: _site_leaker(keep), iterations=30, trace=True)
        assert tracemalloc.is_tracing()
        assert r.attribution.top_sites
    finally:
        tracemalloc.stop()


def _line_leaker(keep: list) -> None:
    n = sum(range(100))
    keep.append(b"y" * (512 * 1024 + n))  # LEAK-LINE
    n += 1


def test_lines_finds_the_leaking_line_of_a_step():
    keep: list = []
    r = _watch(functools.partial(_line_leaker, keep), iterations=40, lines=True)
    lines = r.attribution.lines
    assert lines, str(r.attribution)
    worst = max(lines, key=lambda ln: ln.total_increment)
    assert worst.lineno == _line_of(_line_leaker, "LEAK-LINE"), str(r.attribution)
    # Not every iteration: an allocation may land in pages an earlier test left resident.
    assert worst.grew_share >= 0.5
    # RSS-based increments miss growth that lands in pages already resident (see above).
    assert worst.total_increment >= 0.5 * 40 * 512 * 1024
    assert "LEAK-LINE" in worst.source


def test_lines_on_a_notebook_cell_code_object_with_setup():
    # As the magic does: the cell compiled under a linecache-registered name that is not a file,
    # run by a function that exec()s it; with setup, the runner wraps it once more.
    src = "total = sum(range(50))\nstate.append(b\"x\" * 300_000)  # touched, so resident\ntotal += 1\n"
    filename = "<leakwatch-cell-test>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    code = compile(src, filename, "exec")
    ns: dict = {}

    def cell_step(state):
        ns["state"] = state
        exec(code, ns)

    cell_step.__code__cell__ = code
    try:
        r = _watch(cell_step, setup=list, iterations=30, lines=True)
    finally:
        linecache.cache.pop(filename, None)
    lines = {ln.lineno: ln for ln in r.attribution.lines}
    assert set(lines) >= {1, 2, 3}, str(r.attribution)
    assert max(lines.values(), key=lambda ln: ln.total_increment).lineno == 2
    assert lines[2].source.startswith("state.append")
    # Not every iteration: an allocation may land in pages an earlier test left resident.
    assert lines[2].grew_share > 0
    assert lines[1].grew_share <= 0.2 and lines[3].grew_share <= 0.2


def test_find_step_code_sees_through_wrappers():
    code = compile("x = 1\n", "<cell>", "exec")

    def via_closure():
        exec(code, {})

    def plain():
        return 1

    def outer():
        return via_closure()

    outer.__wrapped__ = via_closure
    assert find_step_code(code) is code
    assert find_step_code(via_closure) is code
    assert find_step_code(outer) is code
    assert find_step_code(functools.partial(outer)) is code
    assert find_step_code(plain) is plain.__code__
    assert find_step_code(functools.partial(plain)) is plain.__code__


def test_attribution_exports_to_json_and_text():
    leak: list = []
    r = _watch_census(lambda: leak.append({f"k{i}": str(i) * 8 for i in range(1000)}), iterations=150)
    a = r.attribution
    assert a.kind == "python", str(a)
    d = json.loads(json.dumps(a.to_dict()))
    assert d["kind"] == a.kind and d["summary"] == a.summary
    assert json.loads(r.to_json())["attribution"]["kind"] == a.kind
    assert d["top_types"] and d["top_types"][0]["bytes_per_iteration"] > 0
    text = str(a)
    assert a.summary in text and "per iteration" in text and "Growing Python objects" in text


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="budget"):
        Tracker(budget=2)
    with pytest.raises(ValueError, match="census"):
        Tracker(census="yes")


def test_an_unaffordable_census_is_skipped_and_said():
    leak: list = []
    r = Watch(
        WatchSpec(lambda: leak.append(np.ones(4096)), iterations=50),
        tracker=Tracker(budget=0.0, census=None),
    ).run()
    a = r.attribution
    if a.censuses == 0:  # the 10 ms allowance may still cover a small heap
        assert any("No object census" in n for n in a.notes)
    r2 = Watch(WatchSpec(lambda: leak.append(1), iterations=20), tracker=Tracker(census=False)).run()
    assert r2.attribution.censuses == 0 and r2.attribution.top_types == []


@pytest.mark.skipif(not os.path.exists("/dev/nvidia0"), reason="no GPU")
def test_gpu_memory_is_recorded_when_tensorflow_sees_a_gpu():
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU")
    keep: list = []
    with tf.device("/GPU:0"):
        r = _watch(lambda: keep.append(tf.ones((256, 1024))), iterations=30)
    g = r.attribution.gpu
    assert g is not None and g["slope"] > 0.5 * 256 * 1024 * 4


def test_shares_never_exceed_the_growth_nor_go_negative():
    # The object census can estimate more than RSS shows (RSS lags while freed memory is
    # reused; sizes come from samples): the shares must still add up to the growth.
    from leakwidget.engine.attribution.decide import Evidence, attribute
    from leakwidget.engine.attribution.growth import Growth

    growth = Growth("leak", rss_slope=593 * 1024, blocks_slope=2000.0, bytes=593 * 1024 * 200,
                    start=10, span=200, run=210)
    att = attribute(Evidence(growth, census_slope=47.8 * 2**20, reclaimed=0))
    assert att.kind == "python"
    assert att.python_slope == att.rss_slope and att.native_slope == 0
    assert att.python_slope + att.native_slope == att.rss_slope
    assert any("capped" in n for n in att.notes)
    assert "47.8 MiB" not in att.summary  # the sentence states shares of the growth only
    quiet = dataclasses.replace(growth, blocks_slope=0.0)
    small = attribute(Evidence(quiet, census_slope=100 * 1024, reclaimed=0))
    assert small.kind == "native" and small.python_slope == 100 * 1024
    assert small.native_slope == 493 * 1024 and not any("capped" in n for n in small.notes)
