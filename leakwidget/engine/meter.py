"""Measuring one iteration: RSS at its start, end and peak, its duration, Python's block count
and glibc malloc's bytes in use."""

from __future__ import annotations

import sys
import time

from . import sampler
from .guard import MemoryGuard
from .inuse import InUseCheckpoints
from .records import IterationRecord
from .sources import MemorySource


class Meter:
    """``begin()`` before the step, ``end(index)`` after it: the iteration's record.

    The exact per-iteration peak comes from the kernel's high-water mark (:class:`PeakMeter`)
    where Linux allows resetting it, else from the sampler's readings during the iteration.
    Another process's tree (``source.in_process`` False) is seen only through its RSS: no
    block count or malloc's bytes in use (-1), peaks from the sampler.
    """

    def __init__(self, series_sampler: sampler.Sampler, guard: MemoryGuard, t0: float,
                 source: MemorySource) -> None:
        self._sampler = series_sampler
        self._guard = guard
        self._t0 = t0
        self._source = source
        self._inside = source.in_process
        self._peak = sampler.PeakMeter() if self._inside else None
        self._in_use = InUseCheckpoints()
        self._blocks: int | None = None
        self._t_start = 0.0
        self._rss0 = 0
        self._blocks0 = 0

    def begin(self) -> None:
        if self._inside:
            # The block count costs ~50–100 µs once TensorFlow is loaded: read it once per
            # iteration, the previous end serving as this start.
            self._blocks0 = self._blocks if self._blocks is not None else sys.getallocatedblocks()
            self._peak.reset()
        self._rss0 = self._source.rss()
        self._t_start = time.perf_counter()

    def end(self, index: int) -> IterationRecord:
        t_end = time.perf_counter()
        rss1 = self._source.rss()
        self._sampler.offer(t_end - self._t0, rss1)
        if self._inside:
            blocks1 = self._blocks = sys.getallocatedblocks()
            peak = self._peak.peak()
            in_use = self._in_use.read(t_end, index)
        else:
            blocks1, peak, in_use = -1, None, -1
            self._blocks0 = -1
        if peak is None:
            peak = self._sampler.buffer.max_since(self._t_start - self._t0) or rss1
        peak = max(peak, rss1, self._rss0)
        self._guard.max_rise = max(self._guard.max_rise, peak - self._rss0)
        return IterationRecord(index, self._t_start - self._t0, t_end - self._t0, rss1, peak,
                               t_end - self._t_start, blocks1, blocks1 - self._blocks0, in_use)

    def close(self) -> None:
        if self._peak is not None:
            self._peak.close()
