"""Measuring one iteration: RSS at its start, end and peak, its duration, and at checkpoints
Python's block count and glibc malloc's bytes in use.

Everything read every iteration costs a few microseconds whatever the heap's size (two RSS
reads, the high-water mark, two clock reads); what grows with the heap is read at checkpoints
(:mod:`.checkpoints`), so watching a TensorFlow process costs what watching a small one does.
"""

from __future__ import annotations

import sys
import time

from . import sampler
from .checkpoints import Checkpoints
from .guard import MemoryGuard
from .records import IterationRecord
from .sources import MemorySource
from .spec import WatchSpec

IN_USE_SHARE = 0.003  # of the run's time spent reading malloc's bytes in use, at most
BLOCKS_SHARE = 0.003  # ... and Python's block count
# Seconds each may spend whatever the run's length. At 5 ms, an 8 s run whose heap had
# 6,250 free chunks read malloc's bytes in use 34 times on a quiet machine; beside the test
# suite's load (each walk of the free lists slower) a leak into freed memory read
# "inconclusive", which 8 readings reproduce and 10 do not (tests/test_verdict.py). 20 ms: 54
# readings quiet. 100 ms since a host where each walk cost four times as much (up to 6 ms in
# that heap as the watch's own temporaries split its holes): 20 ms paid 3-10 readings in 8 s,
# and a leak of 4 KiB an iteration into freed memory read "Stable" (RSS flat).
CHECKPOINT_ALLOWANCE = 0.1
FRESH_AFTER = 0.0005  # seconds between iterations after which RSS and the mark are read again


class Meter:
    """``begin()`` before the step, ``end(index)`` after it: the iteration's record.

    An iteration's peak is the highest of: its RSS at start and end, the sampler's readings
    during it (125 Hz), and the kernel's high-water mark where that rose during it (a new high
    of the process is seen exactly, however short). The mark is only read, never reset, so the
    process's own record of its peak (``ru_maxrss``) stays true. ``spec.exact_peaks`` resets the
    mark at every iteration's start (:class:`PeakMeter`): every iteration's peak is then exact,
    spikes shorter than the sampling interval included, and the process's earlier peak is lost.
    Another process's tree (``source.in_process`` False) is seen only through its RSS: no block
    count or malloc's bytes in use (-1), peaks from the sampler. The run's iterations
    and seconds in the spec, where they bound it, spread those two readings evenly over it
    (:mod:`.checkpoints`).
    """

    def __init__(self, series_sampler: sampler.Sampler, guard: MemoryGuard, t0: float,
                 source: MemorySource, spec: WatchSpec) -> None:
        exact_peaks, planned = spec.exact_peaks, (spec.iterations, spec.seconds)
        self._sampler = series_sampler
        self._guard = guard
        self._t0 = t0
        self._source = source
        self._inside = source.in_process
        self._peak = sampler.PeakMeter(resets=exact_peaks) if self._inside else None
        self._exact = self._peak is not None and self._peak.available and exact_peaks
        self._mark = 0  # the high-water mark at the iteration's start (without resets)
        # (read only inside: ThisProcess's malloc counters, with its children's memory in a tree)
        in_use = source.in_use if self._inside else sampler.malloc_in_use
        self._in_use = Checkpoints(in_use, IN_USE_SHARE, CHECKPOINT_ALLOWANCE, *planned)
        self._blocks = Checkpoints(sys.getallocatedblocks, BLOCKS_SHARE, CHECKPOINT_ALLOWANCE, *planned)
        self._last_blocks: int | None = None
        self._t_start = self._t_end = 0.0
        self._rss0 = 0
        self._window = 0
        self.last_rss: int | None = None  # at the end of the latest iteration

    def begin(self, straight_on: bool = False) -> None:
        """Before the step. ``straight_on``: nothing ran since the previous iteration ended, so
        its end RSS (and the mark read then) is this one's start, saving reads. After a pause
        longer than ``FRESH_AFTER`` (a redraw, a live verdict ran) both are read afresh: what
        ran may have moved them."""
        t = time.perf_counter()
        rss0 = self.last_rss
        if not straight_on or rss0 is None or t - self._t_end > FRESH_AFTER:
            rss0 = self._source.rss()
            if self._inside and not self._exact:
                self._mark = self._peak.peak() or 0
        if self._exact:
            self._peak.reset()
        self._rss0 = rss0
        self._window = self._sampler.open_window()
        self._t_start = time.perf_counter()

    def end(self, index: int) -> IterationRecord:
        return IterationRecord(*self.row(index))

    def row(self, index: int) -> tuple[int | float, ...]:
        """:meth:`end`'s values in the record's field order, without building the record (the
        watch's own loop logs them straight into its table)."""
        t_end = time.perf_counter()
        rss1 = self._source.rss()
        self._sampler.offer(t_end - self._t0, rss1)
        blocks, delta, peak, in_use = -1, 0, None, -1
        self._t_end = t_end
        # The guard's worst rise also counts what grew between iterations (a Keras batch's
        # data loading runs outside the watched callback), end to end.
        if self.last_rss is not None and rss1 - self.last_rss > self._guard.max_rise:
            self._guard.max_rise = rss1 - self.last_rss
        self.last_rss = rss1
        if self._inside:
            peak = self._peak.peak()
            if not self._exact and peak is not None:
                if peak > self._mark:
                    self._mark = peak  # a new high, reached during this iteration
                else:
                    peak = None  # somewhere below the old mark: the sampler's readings tell
            if peak is not None:  # (the kernel's mark counts what census=True's checkpoints keep)
                peak -= getattr(self._source, "held_rss", 0)
            # Most iterations are before both checkpoints' next due time and index: no call.
            # (Checkpoints.refuses, written out.)
            cp = self._in_use
            if t_end >= cp.closed_until and (t_end >= cp.due_t or index >= cp.due_index):
                in_use = cp.read(t_end, index)
            cp = self._blocks
            if t_end >= cp.closed_until and (t_end >= cp.due_t or index >= cp.due_index):
                blocks = cp.read(t_end, index)
            if blocks >= 0:
                delta = blocks - self._last_blocks if self._last_blocks is not None else 0
                self._last_blocks = blocks
        if peak is None:
            peak = self._sampler.window_peak(self._window) or rss1
        peak = max(peak, rss1, self._rss0)
        if peak - self._rss0 > self._guard.max_rise:
            self._guard.max_rise = peak - self._rss0
        return (index, self._t_start - self._t0, t_end - self._t0, rss1, peak,
                t_end - self._t_start, blocks, delta, in_use)

    def keep_last(self) -> None:
        """Once the sampler has stopped: the last iteration's end reading ends its series."""
        if self.last_rss is not None:
            self._sampler.keep(self._t_end - self._t0, self.last_rss)

    def close(self) -> None:
        if self._peak is not None:
            self._peak.close()
