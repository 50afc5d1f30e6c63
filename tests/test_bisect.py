"""Bisection: the pure search (Bisector) and real bisections of real pipelines.

The TensorFlow cases run real tf.data pipelines on the CPU over TFRecords written to a temporary
folder; each configuration is a real watch that runs until its verdict is confident. Leaks are
256 KiB per iteration and every step waits a few ms (as a training step waits on its ops), so
verdicts come in seconds without eating much memory or CPU on a shared machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_tf import pause, write_tfrecords  # noqa: E402

import leakwidget  # noqa: E402
from leakwidget import bisect  # noqa: E402
from leakwidget import examples as ex  # noqa: E402
from leakwidget.engine import sampler  # noqa: E402
from leakwidget.engine.bisect import ConfigGuard, run_bisection
from leakwidget.engine.records import IterationRecord
from leakwidget.engine.sampler import malloc_in_use  # noqa: E402
from leakwidget.engine.search import Bisector, Observed
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.verdict import Verdict  # noqa: E402
from leakwidget.stages import Stage  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tfrecords(tmp_path: Path) -> list[str]:
    """Three small TFRecord files; record j of file i is b"i-j"."""
    pytest.importorskip("tensorflow")
    return write_tfrecords(tmp_path / "records")
KIB256 = 256 * 1024


# --------------------------------------------------------------------------------------------
# The pure search


def drive(k: int, culprit_sets: list[set[str]], slope=lambda on: 1e6, ids: list[str] | None = None,
          **kwargs):
    """Run a Bisector against an oracle: a configuration leaks when one culprit set is all on."""
    ids = ids or [f"s{i}@{i}" for i in range(k)]
    stage_list = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True)
                  for i in ids]
    b = Bisector(**kwargs)
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        leak = any(c <= on for c in culprit_sets)
        verdict = Verdict("leak" if leak else "stable", slope=slope(on) if leak else 0.0)
        b.report(config, Observed(verdict, stages=stage_list))
    return b.result()


@pytest.mark.parametrize("all_off_first", [True, False])
def test_one_culprit_is_found_within_the_budget(all_off_first):
    for k in range(1, 17):
        bound = math.ceil(math.log2(k)) + 2 + (1 if all_off_first and k > 1 else 0)
        for i in range(k):
            result = drive(k, [{f"s{i}@{i}"}], all_off_first=all_off_first)
            assert result.culprit_ids == [f"s{i}@{i}"]
            assert len(result.configurations) <= bound, (k, i)
            assert not result.outside and result.leak


def test_a_leak_needing_two_stages_is_found_as_the_pair():
    for k in (2, 5, 8):
        for a, b in itertools.combinations(range(k), 2):
            result = drive(k, [{f"s{a}@{a}", f"s{b}@{b}"}])
            assert sorted(result.culprit_ids) == sorted([f"s{a}@{a}", f"s{b}@{b}"])
            assert "together" in result.summary


@pytest.mark.parametrize("measured", [True, False], ids=["python-measured", "rss-only"])
def test_a_python_leak_is_judged_by_its_objects_not_by_the_rss_creep_around_it(measured):
    # A pipeline rebuilt every step: TensorFlow's own creep (2.5 KiB/iteration) stays whatever
    # is switched off; the map's Python objects (40 blocks/iteration) go when the map is off.
    ids = ["map@1", "prefetch@2", "shuffle@3"]
    stage_list = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True)
                  for i in ids]
    b = Bisector()
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        leaking_map = "map@1" in on
        verdict = Verdict("leak", slope=5000.0 if leaking_map else 2500.0)
        python = (40.0, 36.0) if leaking_map else (0.3, -0.2)
        b.report(config, Observed(verdict, stages=stage_list,
                                  **({"python_slope": python[0], "python_low": python[1]} if measured else {})))
    result = b.result()
    if measured:
        assert result.culprit_ids == ["map@1"] and not result.outside
    else:  # by RSS alone the creep with every stage off is half the leak: "outside"
        assert result.outside


def test_a_configuration_whose_objects_pile_up_reproduces_a_python_leak_before_its_rss_shows_it():
    # Beside a CPU hog (run 46c) the configuration with only the leaking stage on read RSS flat
    # in its 1.5 s ("inconclusive, 0 B": it reused memory freed before), and the search named
    # that stage together with one that does nothing. Its Python blocks grew as the baseline's.
    ids = ["grow@1", "passthrough@2"]
    stage_list = [Stage(id=i, kind="user", site=i.split("@")[1], toggleable=True) for i in ids]
    b = Bisector()
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        baseline = config.on is None
        leaking = "grow@1" in on
        verdict = (Verdict("leak", slope=150 * 1024.0) if baseline
                   else Verdict("inconclusive") if leaking else Verdict("stable"))
        python = (1024.0, 1000.0) if leaking else (0.2, -0.3)
        b.report(config, Observed(verdict, stages=stage_list, python_slope=python[0], python_low=python[1]))
    result = b.result()
    assert result.culprit_ids == ["grow@1"], str(result)
    assert "together" not in result.summary


def test_after_a_python_leak_baseline_each_configuration_is_guarded_by_its_objects():
    # The guard that ends a configuration early reads the baseline's Python objects when the
    # leak is theirs (a refactor once read them off the configuration and raised instead).
    from leakwidget.engine.bisect import _guard_for

    ids = ["map@1", "prefetch@2"]
    stage_list = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True)
                  for i in ids]
    b = Bisector()
    base = b.next_configuration()
    b.report(base, Observed(Verdict("leak", slope=5000.0), stages=stage_list,
                            python_slope=40.0, python_low=36.0))
    guard = _guard_for(b, b.next_configuration(), 30.0)
    assert b.python_leak()
    assert guard.python_threshold == pytest.approx(b.slope_ratio * 40.0)


def test_a_leak_with_every_stage_off_is_outside_and_stops():
    for all_off_first in (True, False):
        result = drive(6, [set()], all_off_first=all_off_first)
        assert result.outside and result.culprits == []
        assert "outside the stages" in result.summary
    assert len(drive(6, [set()]).configurations) == 2


def test_a_stage_that_only_slows_the_growth_is_not_the_cause():
    # s1 leaks 1 MB/iteration; s3 alone leaks 0.1 MB (say, allocator noise it stirs up):
    # a leak verdict, but not this leak.
    def slope(on):
        return (1e6 if "s1@1" in on else 0) + (1e5 if "s3@3" in on else 0)

    result = drive(6, [{"s1@1"}, {"s3@3"}], slope=slope)
    assert result.culprit_ids == ["s1@1"]
    weak = [c for c in result.configurations if c.on is not None and c.on and "s1@1" not in c.on
            and "s3@3" in c.on]
    assert all(c.kind == "leak" and c.reproduces is False for c in weak)


def test_the_table_and_the_summary_read_well():
    result = drive(4, [{"s2@2"}])
    text = str(result)
    assert text.splitlines()[0] == result.summary
    assert "s2@2 (s2 at line 2)" in result.summary
    assert "baseline (all on)" in text and "all off" in text and "reproduces" in text
    assert json.loads(json.dumps(result.to_dict()))["culprits"][0]["id"] == "s2@2"


def test_each_configuration_is_named_in_words_short_enough_for_a_legend():
    # A legend entry reads "s2@2 and 5 more on, the rest off", not "on: s2@2 +5".
    result = drive(16, [{"s2@2", "s11@11"}])
    labels = [c.label for c in result.configurations]
    assert labels[:2] == ["baseline (all on)", "all off"]
    for config, label in zip(result.configurations[2:], labels[2:], strict=True):
        assert len(label) <= 48 and "+" not in label and not label.startswith("on:"), label
        assert label.endswith(" on, the rest off"), label
        first = sorted(config.on, key=lambda s: int(s.split("@")[1]))[0]
        assert label.startswith(first), label
    assert any(" more on, the rest off" in label for label in labels)  # a long one, counted
    assert "s2@2 and s11@11 on, the rest off" in labels  # a short one, named
    # One stage with a long name is named whole, not "and 0 more".
    ids = ["passthrough_with_a_long_name@pipeline.py:31", "grow@pipeline.py:25"]
    labels = [c.label for c in drive(2, [{ids[1]}], ids=ids).configurations]
    assert f"{ids[0]} on, the rest off" in labels or f"{ids[1]} on, the rest off" in labels, labels
    assert not any("and 0 more" in label for label in labels), labels


def test_the_search_refuses_reports_out_of_turn():
    b = Bisector()
    config = b.next_configuration()
    with pytest.raises(TypeError, match="verdict"):
        b.report(config, None)
    b.report(config, Observed(Verdict("stable"), stages=[]))
    assert b.done and "Nothing to bisect" in b.result().summary
    with pytest.raises(ValueError, match="next_configuration"):
        b.report(config, Observed(Verdict("leak")))


def test_growth_the_allocator_hands_back_is_nothing_to_bisect():
    stage_list = [Stage(id="map@1", kind="map", site="1", toggleable=True)]
    b = Bisector()
    retention = SimpleNamespace(kind="allocator", reclaimed_bytes=3 * 2**20)
    b.report(b.next_configuration(), Observed(Verdict("leak", slope=2048.0), stages=stage_list,
                                              attribution=retention))
    result = b.result()
    assert b.done and not result.leak and result.culprits == []
    assert [c.reproduces for c in result.configurations] == [False]
    assert "Nothing to bisect" in result.summary and "allocator retention" in result.summary
    assert "3.0 MiB" in result.summary and "MALLOC_ARENA_MAX" in result.summary


def test_a_leak_whose_bytes_stay_in_use_is_bisected_whatever_malloc_trim_returned():
    # malloc_trim also hands back memory something else freed during the run; a leak through
    # malloc keeps its bytes in use, and glibc's count of them says so.
    result = drive(3, [{"s1@1"}], slope=lambda on: 2048.0)
    b = Bisector()
    stage_list = [Stage(id=f"s{i}@{i}", kind=f"s{i}", site=str(i), toggleable=True) for i in range(3)]
    retention = SimpleNamespace(kind="allocator", reclaimed_bytes=3 * 2**20)
    b.report(b.next_configuration(), Observed(Verdict("leak", slope=2048.0), stages=stage_list,
                                              attribution=retention, malloc_slope=2000.0))
    assert not b.done and b.configurations[0].reproduces
    while (config := b.next_configuration()) is not None:
        leak = config.on is not None and "s1@1" in config.on
        b.report(config, Observed(Verdict("leak" if leak else "stable", slope=2048.0 if leak else 0.0)))
    assert b.result().culprit_ids == result.culprit_ids == ["s1@1"]


def test_a_configuration_refilling_freed_memory_is_not_called_clean_early():
    # RSS can lag a leak that refills memory an earlier configuration freed; malloc's own count
    # of bytes handed out does not lag. Real mallocs, 64 KiB each, against a 32 KiB threshold.
    if malloc_in_use() is None:
        pytest.skip("needs glibc 2.33's mallinfo2")
    libc = ex._libc_handle()
    guard = ConfigGuard(seconds=60, threshold=32 * 1024)

    def reading(index: int) -> IterationRecord:  # what the watch records at a checkpoint
        return IterationRecord(index, 0.0, 0.0, 0, 0, 0.0, 0, 0, malloc_in_use())

    guard.on_iteration(reading(0))
    guard.on_iteration(reading(10))
    assert not guard._malloc_keeps_up()  # nothing handed out yet
    held = [libc.malloc(64 * 1024) for _ in range(10)]
    try:
        guard.on_iteration(reading(10))
        assert guard._malloc_keeps_up()
        guard.on_iteration(reading(100))
        assert not guard._malloc_keeps_up()  # 6.4 KiB per iteration over 100: below
    finally:
        for p in held:
            libc.free(p)


class _Stops:
    """A run that records when a guard asks it to stop."""

    def __init__(self) -> None:
        self.stopped: str | None = None

    def request_stop(self, reason: str = "stopped") -> None:
        self.stopped = reason


def _plateau_verdict(rise: float, iterations: int, kind: str = "plateau") -> Verdict:
    top = min(iterations, 200)
    return Verdict(kind, slope=0.0, onset=0, iterations=iterations,
                   fit=[(0.0, 100 * MiB), (float(top), 100 * MiB + rise), (float(iterations), 100 * MiB + rise)])


def _guarded(verdicts: list[tuple[float, Verdict]], yardstick) -> tuple[str | None, int]:
    """Feed (seconds, verdict) pairs to a plateau's ConfigGuard: why it stopped, after how many."""
    from leakwidget.engine.bisect import ConfigGuard as Guard

    guard, run = Guard(60, plateau=yardstick), _Stops()
    guard.on_start(run)
    for n, (t, v) in enumerate(verdicts, 1):
        guard.on_iteration(IterationRecord(v.iterations, t, t, 0, 0, 0.0, 0, 0, -1))
        guard.on_verdict(v)
        if run.stopped:
            return run.stopped, n
    return None, len(verdicts)


def test_a_plateaus_configuration_ends_once_its_answer_is_known_not_when_its_verdict_is_confident():
    # The baseline rose 40 MiB by iteration 200, 2 s into its run: a configuration rising as
    # high reproduces it at once; one that stays flat, only once three times the baseline's
    # iterations and seconds (and the settle time) have passed; one still rising, not yet.
    from leakwidget.engine.bisect import PlateauYardstick

    yard = PlateauYardstick(rise=20 * MiB, iterations=200, seconds=2.0)
    rising = [(0.5 * k, _plateau_verdict(8 * MiB * k, 100 * k, "inconclusive")) for k in range(1, 8)]
    assert _guarded(rising, yard) == ("confident", 4)  # 24 and 32 MiB: two verdicts as high
    flat = [(0.5 * k, _plateau_verdict(0.0, 100 * k, "stable")) for k in range(1, 40)]
    why, n = _guarded(flat, yard)
    assert why == "confident" and 0.5 * n >= 3 * 2.0 + 3.0 and 100 * n >= 600, n
    late = flat[:11] + [(0.5 * k, _plateau_verdict(12 * MiB, 100 * k, "inconclusive")) for k in range(12, 40)]
    assert _guarded(late, yard) == (None, 39)  # half as high after the wait: not said "no"
    # Made from a real baseline's configuration: its fit's top, and its time per iteration.
    base = SimpleNamespace(verdict=_plateau_verdict(40 * MiB, 600), observed=Observed(
        _plateau_verdict(40 * MiB, 600), iterations=600, seconds=6.0))
    assert PlateauYardstick.of(base, 0.5) == PlateauYardstick(20 * MiB, 200.0, 2.0)


def test_an_unsure_baseline_runs_on_until_its_verdict_is_confident_at_most_three_times_as_long():
    # Every configuration is measured against the baseline: one stopped at its time while
    # "inconclusive, run longer" ended the search with nothing bisected.
    from leakwidget.engine.bisect import BASELINE_PATIENCE

    def stopped_at(confident_from: float | None) -> float | None:
        guard, run = ConfigGuard(4.0, patience=BASELINE_PATIENCE), _Stops()
        guard.on_start(run)
        for k in range(1, 200):
            t = 0.1 * k
            guard.on_iteration(IterationRecord(k, t, t, 0, 0, 0.0, 0, 0, -1))
            if k % 5 == 0:  # a live verdict every half second
                sure = confident_from is not None and t >= confident_from
                guard.on_verdict(Verdict("leak" if sure else "inconclusive", confident=sure))
            if run.stopped:
                return t
        return None

    assert stopped_at(0.0) == pytest.approx(4.0)  # sure in time: at its time
    assert stopped_at(6.0) == pytest.approx(6.1)  # sure at 6 s: the iteration after
    assert stopped_at(None) == pytest.approx(3 * 4.0)  # never sure: three times its time
    # The other configurations keep their cap: the baseline's slope is their yardstick.
    guard, run = ConfigGuard(4.0, threshold=1024.0), _Stops()
    guard.on_start(run)
    guard.on_verdict(Verdict("inconclusive"))
    guard.on_iteration(IterationRecord(50, 4.0, 4.0, 0, 0, 0.0, 0, 0, -1))
    assert run.stopped == "seconds"


_RETENTION_CHILD = r"""
import json
import leakwidget
from leakwidget import bisect, examples as ex
setup, spawn, release = ex.allocator_retention()
churn = leakwidget.stage(spawn)
def step(state):
    churn(state)
try:
    result = bisect(step, setup, iterations=30)
finally:
    release()
print(json.dumps({"leak": result.leak, "culprits": result.culprits, "summary": result.summary,
                  "kinds": [c.kind for c in result.configurations], "text": str(result)}))
"""


@pytest.mark.skipif(not sampler.malloc_trim(), reason="needs glibc's malloc_trim")
@pytest.mark.skipif("MALLOC_ARENA_MAX" in os.environ, reason="arena limit set: no per-thread arenas")
def test_a_real_allocator_retention_is_not_bisected():
    # In a fresh process: the example's growth needs each thread to get a new malloc arena. In
    # this long-lived test process, after TensorFlow's threads, glibc's arenas may be at their
    # cap (8 per core) and shared, so the memory it retains can be reused instead of grown. The
    # in-process version failed once in six full runs (CI-like run 8), and passed alone.
    proc = subprocess.run([sys.executable, "-c", _RETENTION_CHILD], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["leak"] and out["culprits"] == [], out["text"]
    # The baseline alone ran, and grew: by new arenas of 2.2 MiB an iteration until glibc's cap
    # of arenas, when threads share them (a "leak", or growth "slowing down" if the cap comes
    # within the 30 iterations).
    assert len(out["kinds"]) == 1 and out["kinds"][0] in ("leak", "inconclusive"), out["text"]
    assert re.search(r"memory grew \([\d.]+ [KM]iB/iteration\)", out["summary"]), out["summary"]
    assert "allocator retention" in out["summary"], out["text"]


# --------------------------------------------------------------------------------------------
# Real bisections over @leakwidget.stage functions (no TensorFlow)

HOLD: list = []


def user_pipeline(k: int, culprit: int):
    fns = []
    for i in range(k):
        def f(x, i=i):
            if i == culprit:
                HOLD.append(np.ones(KIB256 // 8))
            return x + 1
        f.__qualname__ = f"part{i}"
        fns.append(leakwidget.stage(f))

    def setup():
        HOLD.clear()

    def step(_):
        x = 0
        for f in fns:
            x = f(x)
        pause()

    return step, setup


def test_bisection_awaited_on_an_event_loop_finds_the_leaking_user_stage():
    step, setup = user_pipeline(4, culprit=2)
    seen = []
    result = asyncio.run(run_bisection(WatchSpec(step, setup), seconds_per_config=20,
                                       on_configuration=lambda c, w: seen.append(w.spec.label)))
    HOLD.clear()
    assert [s.kind for s in result.culprits] == ["part2"], str(result)
    assert seen == [c.label for c in result.configurations]
    assert len(result.configurations) <= math.ceil(math.log2(4)) + 3
    assert result.configurations[0].kind == "leak"


# --------------------------------------------------------------------------------------------
# Real TensorFlow pipelines

LEAK: list = []
MEMO: dict = {}


def _keep(x):
    LEAK.append(np.ones(KIB256 // 8))  # a Python-level leak inside the map function
    return x


def _remember(key):
    # an unbounded memo keyed by the element: grows only if keys keep changing
    k = key.numpy()
    if k not in MEMO:
        MEMO[k] = np.ones(KIB256 // 8)
    return key


def _next_and_work(it):
    next(it)
    pause()


def in_fresh_process(case: str, *args: str) -> None:
    """Run ``case`` (a function of this module) in a fresh interpreter, as in a fresh kernel.

    A bisection runs its configurations back to back for minutes; in the long-lived test
    process the memory that a hundred earlier tests freed is reused first and blurs the growth
    (the README's limits), which is not what these tests are about.
    """
    code = ("import sys; sys.path.insert(0, 'tests'); import test_bisect; "
            f"test_bisect.{case}(*sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]


def test_a_python_leak_inside_map_is_found_as_that_map_and_the_shuffle_buffer_is_not(tfrecords):
    in_fresh_process("_python_leak_in_map", *tfrecords)


def _python_leak_in_map(*tfrecords: str) -> None:
    import tensorflow as tf

    def setup():
        LEAK.clear()
        names = tf.data.Dataset.from_tensor_slices(list(tfrecords))
        ds = names.interleave(lambda f: tf.data.TFRecordDataset(f), cycle_length=2,
                              num_parallel_calls=2)
        ds = ds.map(lambda r: tf.fill([16384], 1.0))  # 64 KiB elements
        ds = ds.shuffle(256).repeat()  # a 16 MiB buffer filling up: growth that is no leak
        ds = ds.map(lambda x: tf.py_function(_keep, [x], tf.float32))  # <leaky map>
        return iter(ds.prefetch(2))

    result = bisect(_next_and_work, setup, seconds_per_config=20)
    LEAK.clear()
    leaky_line = next(n for n, t in enumerate(Path(__file__).read_text().splitlines(), 1)
                      if t.rstrip().endswith("# <leaky map>"))
    assert [s.id for s in result.culprits] == [f"map@{Path(__file__).resolve()}:{leaky_line}"], str(result)
    assert result.culprits[0].args.get("python") == "tf.py_function"
    assert not result.outside
    searched = {s.id for s in result.stages if s.toggleable or s.parallel}
    assert len(searched) >= 9  # interleave, 2 maps, shuffle, prefetch and TensorFlow's own
    assert len(result.configurations) <= math.ceil(math.log2(len(searched))) + 3


def test_a_shuffle_buffer_filling_up_alone_is_nothing_to_bisect():
    pytest.importorskip("tensorflow")
    in_fresh_process("_shuffle_buffer_alone")


def _shuffle_buffer_alone() -> None:
    import tensorflow as tf

    def setup():
        ds = tf.data.Dataset.range(10**9).map(lambda i: tf.fill([16384], 1.0)).shuffle(512)
        return iter(ds.prefetch(2))

    result = bisect(_next_and_work, setup, seconds_per_config=20)
    assert not result.leak and result.culprits == [], str(result)
    assert len(result.configurations) == 1
    # Either no leak at all, or growth that malloc_trim handed back (threads' arenas).
    assert result.configurations[0].kind != "leak" or "allocator retention" in result.summary


def test_a_leak_that_needs_two_stages_together_is_found_as_the_pair():
    pytest.importorskip("tensorflow")
    in_fresh_process("_two_stages_together")


def _two_stages_together() -> None:
    import tensorflow as tf

    def setup():
        MEMO.clear()
        ds = tf.data.Dataset.counter().map(lambda i: tf.strings.as_string(i))  # <keys>
        ds = ds.map(lambda k: tf.py_function(_remember, [k], tf.string))  # <memo>
        return iter(ds.prefetch(2))

    result = bisect(_next_and_work, setup, seconds_per_config=20)
    MEMO.clear()
    lines = {m: next(n for n, t in enumerate(Path(__file__).read_text().splitlines(), 1)
                     if t.rstrip().endswith(f"# <{m}>")) for m in ("keys", "memo")}
    here = Path(__file__).resolve()
    assert sorted(s.id for s in result.culprits) == sorted(
        f"map@{here}:{lines[m]}" for m in ("keys", "memo")), str(result)
    assert "together" in result.summary


def test_a_leak_in_the_step_body_is_outside_the_stages():
    pytest.importorskip("tensorflow")
    in_fresh_process("_leak_in_the_step_body")


def _leak_in_the_step_body() -> None:
    import tensorflow as tf

    def setup():
        LEAK.clear()
        return iter(tf.data.Dataset.range(10**9).map(lambda i: i * 2).prefetch(2))

    def step(it):
        next(it)
        LEAK.append(np.ones(KIB256 // 8))
        pause()

    result = bisect(step, setup, seconds_per_config=20)
    LEAK.clear()
    assert result.outside and result.culprits == [], str(result)
    assert [c.label for c in result.configurations] == ["baseline (all on)", "all off"]
    assert "outside the stages" in result.summary


# --------------------------------------------------------------------------------------------
# Without TensorFlow


def test_without_tensorflow_stage_options_explain_themselves_and_user_stages_bisect():
    code = textwrap.dedent("""
        import importlib.abc, json, sys, warnings
        sys.path.insert(0, "tests")

        class NoTensorFlow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "tensorflow" or name.startswith("tensorflow."):
                    raise ModuleNotFoundError("No module named 'tensorflow'", name=name)

        sys.meta_path.insert(0, NoTensorFlow())
        warnings.simplefilter("ignore")
        import leakwidget
        from leakwidget import stages
        from test_bisect import user_pipeline, HOLD

        with stages.session(off=["prefetch", "map@3"]) as s:
            pass
        step, setup = user_pipeline(3, culprit=0)
        result = leakwidget.bisect(step, setup, seconds_per_config=20)
        print(json.dumps({"notes": s.notes, "stages": len(s.stages),
                          "culprits": [c.kind for c in result.culprits],
                          "tf": "tensorflow" in sys.modules}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=180, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["tf"] is False and got["stages"] == 0
    notes = " ".join(got["notes"])
    assert "TensorFlow is not installed" in notes and "@leakwidget.stage" in notes
    assert "prefetch" in notes and "map@3" in notes
    assert got["culprits"] == ["part0"]


# --------------------------------------------------------------------------------------------
# Bisecting a plateau: which stages make memory rise that high

MiB = 2**20


def _plateau(rise: float) -> Verdict:
    """A plateau verdict whose fit rises by ``rise`` (onset 0, top at 200, flat to 600)."""
    return Verdict("plateau", slope=0.0, onset=0, iterations=600,
                   fit=[(0.0, 100 * MiB), (200.0, 100 * MiB + rise), (600.0, 100 * MiB + rise)])


def drive_plateau(k: int, rise_of, **kwargs) -> leakwidget.engine.search.BisectResult:
    ids = [f"s{i}@{i}" for i in range(k)]
    stage_list = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True)
                  for i in ids]
    b = Bisector(**kwargs)
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        rise = rise_of(on)
        verdict = _plateau(rise) if rise >= MiB else Verdict("stable", iterations=600)
        b.report(config, Observed(verdict, stages=stage_list))
    return b.result()


def test_a_plateau_is_bisected_to_the_stage_that_holds_it_and_says_it_is_no_leak():
    # s2 holds 40 MiB (a cache); s4 a small 8 MiB buffer: less than half, not the cause.
    def rise(on):
        return (40 * MiB if "s2@2" in on else 0) + (8 * MiB if "s4@4" in on else 0)

    result = drive_plateau(6, rise)
    assert result.culprit_ids == ["s2@2"], str(result)
    assert result.plateau and not result.leak and not result.outside
    assert "bisected a plateau" in result.summary and "not a leak" in result.summary
    assert "40.0 MiB" in result.summary and "s2@2 (s2 at line 2)" in result.summary
    assert "rise" in str(result).splitlines()[2]  # the table's column
    small = [c for c in result.configurations if c.on and "s2@2" not in c.on and "s4@4" in c.on]
    assert all(c.kind == "plateau" and c.reproduces is False for c in small)
    assert json.loads(json.dumps(result.to_dict()))["configurations"][0]["rise"] == 48 * MiB


def test_a_rise_with_what_is_in_use_still_climbing_is_bisected_like_a_plateau_and_not_called_one():
    # The quickstart's leaking map, bisected with -t 4 beside CI's load: with every stage on, RSS
    # rose then held while what is in use kept climbing ("no plateau yet", inconclusive). It is
    # bisected by its rise, as a plateau would be, and its words do not say "not a leak".
    reason = "RSS levelled off after iteration 200, but Python's allocator blocks kept rising"

    def rise(on):
        return 20 * MiB if "s1@1" in on else 0

    ids = [f"s{i}@{i}" for i in range(4)]
    stage_list = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True)
                  for i in ids]
    b = Bisector()
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        verdict = _plateau(rise(on)) if rise(on) else Verdict("stable", iterations=600)
        if config.on is None:
            verdict = Verdict("inconclusive", iterations=600, fit=verdict.fit, climbing=True,
                              reason=reason)
        b.report(config, Observed(verdict, stages=stage_list))
    result = b.result()
    assert result.culprit_ids == ["s1@1"], str(result)
    assert reason in result.summary and "not a leak" not in result.summary, result.summary
    assert result.summary.startswith("The rise comes from s1@1"), result.summary
    from leakwidget.notebook.banner import bisect_banner

    banner = bisect_banner(result)
    assert banner.headline.startswith("Culprit of the rise: s1@1"), banner
    assert banner.kind == "inconclusive", banner


def test_a_plateau_held_by_two_stages_together_or_by_none_of_them():
    both = drive_plateau(5, lambda on: 30 * MiB if {"s1@1", "s3@3"} <= on else 0)
    assert sorted(both.culprit_ids) == ["s1@1", "s3@3"] and "together" in both.summary
    outside = drive_plateau(4, lambda on: 30 * MiB)
    assert outside.outside and outside.culprits == [] and outside.plateau
    assert "plateau lies outside the stages" in outside.summary
    assert "bisected a plateau" in outside.summary


def test_a_small_plateau_is_not_bisected_unless_asked():
    # A few MiB is what buffers and the allocator's creep add in a pipeline whatever is on.
    small = drive_plateau(4, lambda on: 3 * MiB if "s1@1" in on else 0)
    assert not small.plateau and small.culprits == [] and len(small.configurations) == 1
    assert "Nothing to bisect" in small.summary and "min_plateau" in small.summary
    asked = drive_plateau(4, lambda on: 3 * MiB if "s1@1" in on else 0, min_plateau=MiB)
    assert asked.plateau and asked.culprit_ids == ["s1@1"]


def bounded_buffer_pipeline(k: int, culprit: int, cap: int = 160):
    """``k`` user stages; stage ``culprit`` keeps its last ``cap`` inputs as 256 KiB arrays
    (a buffer that fills, then holds: a plateau of cap × 256 KiB)."""
    fns = []
    for i in range(k):
        def f(x, i=i):
            if i == culprit and len(HOLD) < cap:
                HOLD.append(np.ones(KIB256 // 8))
            return x + 1
        f.__qualname__ = f"part{i}"
        fns.append(leakwidget.stage(f))

    def setup():
        HOLD.clear()

    def step(_):
        x = 0
        for f in fns:
            x = f(x)
        pause(1.0)

    return step, setup


def test_a_real_plateau_is_bisected_to_the_user_stage_holding_the_buffer():
    in_fresh_process("_bisect_a_bounded_buffer")


def _bisect_a_bounded_buffer() -> None:
    step, setup = bounded_buffer_pipeline(4, culprit=1)
    result = bisect(step, setup, seconds_per_config=25)
    HOLD.clear()
    base = result.configurations[0]
    assert base.kind == "plateau", str(result)
    assert [s.kind for s in result.culprits] == ["part1"], str(result)
    assert result.plateau and not result.leak
    assert "bisected a plateau" in result.summary


def test_a_tf_data_cache_is_bisected_as_the_stage_holding_the_plateau():
    pytest.importorskip("tensorflow")
    in_fresh_process("_cache_plateau")


def _cache_plateau() -> None:
    import tensorflow as tf

    def elements():
        for i in range(200):
            yield np.full(49152, i, np.float32)

    def setup():
        # A source that is no stage (from_generator cannot be switched off) making new tensors,
        # so the cache is the only thing that can hold them: 200 elements of 192 KiB cached in
        # the first pass, then served, a plateau of 37.5 MiB. (Built with a map instead, the
        # map off makes every element the same tensor, and the bisection rightly names the map
        # and the cache together.) 600 elements of 64 KiB were too many beside CI's load: the
        # baseline's 30 s ended before the first pass did, and a cache still filling at every
        # iteration is rightly a leak.
        ds = tf.data.Dataset.from_generator(
            elements, output_signature=tf.TensorSpec((49152,), tf.float32))
        ds = ds.cache().repeat()  # <cache>
        ds = ds.map(lambda x: x * 2.0, num_parallel_calls=2)
        return iter(ds.prefetch(2))

    result = bisect(_next_and_work, setup, seconds_per_config=30)
    line = next(n for n, t in enumerate(Path(__file__).read_text().splitlines(), 1)
                if t.rstrip().endswith("# <cache>"))
    assert result.configurations[0].kind == "plateau", str(result)
    assert [s.id for s in result.culprits] == [f"cache@{Path(__file__).resolve()}:{line}"], str(result)
    assert result.plateau and not result.leak and "bisected a plateau" in result.summary
