"""A calm step is "stable" on its first run: the watch never reports its own memory as the step's.

What rose during a watch of a step that allocates nothing was the watch's own memory (issue
30; docs/attribution.md, "What the watch itself costs in memory"). Each source has a test of
its own here or beside the code it is in; the tests at the end watch a calm step in fresh
processes and fresh kernels, as a new user's first try does.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from leakwidget.engine.live import LIVE_RECORDS
from leakwidget.engine.records import IterationRecord, RecordLog, SpreadRows

KiB = 1024

_LIVE_VERDICTS_ON_A_HOLED_HEAP = r"""
import numpy as np
from leakwidget.engine import sampler
from leakwidget.engine.records import IterationRecord, RecordLog
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import rehearse_verdict, verdict_of
rng = np.random.default_rng(0)
# A heap with holes, as in a process that has run things: arrays of many sizes, every other
# one freed, then the clean-up a watch makes before iteration 0, then the rehearsal.
keep = [np.ones(int(s)) for s in rng.integers(200, 60000, 400)]
del keep[::2]
sampler.malloc_trim()
rehearse_verdict()
spec, log, rss = WatchSpec(lambda: None), RecordLog(), 3 << 28
before = sampler.rss()
for i in range(7000):  # a run's records, a live verdict every 150 of them
    rss += 4096 * (i % 97 == 0)
    log.append(IterationRecord(i, i * 1e-3, i * 1e-3 + 1e-3, rss, rss + 4096, 1e-3,
                               1000 + i % 5 if i % 8 == 0 else -1, 0, -1))
    if i % 150 == 149:
        verdict_of(log, spec, 1 << 33, 3 << 28, live=True)
print(sampler.rss() - before)
"""


def test_live_verdicts_take_no_new_memory_after_their_rehearsal() -> None:
    # Decided on the loop's thread, the live verdicts' temporaries found the heap's holes a
    # few pages at a time as their sizes changed (6 MiB here; 50-330 KiB in a calm step's 20 s
    # run), and those pages were then free and resident where a leak's next allocations went.
    out = subprocess.run([sys.executable, "-c", _LIVE_VERDICTS_ON_A_HOLED_HEAP],
                         capture_output=True, text=True, timeout=120, check=True)
    grew = int(out.stdout.split()[-1])
    assert grew < 256 * KiB, f"46 live verdicts took {grew / KiB:.0f} KiB of new memory"


def test_the_spread_a_live_verdict_reads_is_the_evenly_spread_records() -> None:
    log = RecordLog()
    for i in range(LIVE_RECORDS * 2 + 345):
        log.append(IterationRecord(i, i, i + 1.0, 1000 + i, 2000 + i, 1.0, i % 7 - 1, 0, -1))
    spread = SpreadRows(LIVE_RECORDS)
    rows = spread.of(log)
    pick = np.linspace(0, log.n - 1, LIVE_RECORDS).round().astype(np.intp)
    for name in ("index", "rss", "peak_rss", "blocks", "end"):
        assert np.array_equal(rows[name], log.column(name)[pick]), name
    assert rows["index"][0] == 0 and rows["index"][-1] == log.last("index")
    assert spread.of(log) is rows  # the same buffers at every call
