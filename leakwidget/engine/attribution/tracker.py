"""The Tracker: runs the collectors of evidence along a watch, then has the evidence decided."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable

import numpy as np

from ..records import IterationRecord, RecordLog
from ..spec import WatchSpec
from ..verdict import Verdict
from .allocator import Retention
from .census import ObjectCensus
from .decide import Evidence, attribute
from .gpu import GpuMemory
from .growth import measure_growth
from .lines import LineReport, require_memory_profiler
from .result import Attribution
from .trace import Tracing

CENSUS_BUDGET = 0.005  # share of the run's wall time the object census may take (default mode)
TRACE_BUDGET = 0.10  # with --trace the user asked for slow; snapshots may take more

IterationHook = Callable[[IterationRecord, int], None]  # (record, iterations done)


class Tracker:
    """Watch observer that explains what grows; sets ``result.attribution`` at the end.

    ``trace``: start tracemalloc (unless already on) and report growing allocation sites.
    ``lines``: trace the step line by line (memory_profiler) and report each line's growth.
    ``budget``: share of the run's wall time the object census may take between iterations.
    ``census``: None (default) takes object censuses as the budget allows; True takes one after
    iterations 1, 2, 4, 8, … whatever it costs; False never.
    """

    def __init__(
        self,
        trace: bool = False,
        lines: bool = False,
        *,
        budget: float | None = None,
        census: bool | None = None,
    ) -> None:
        if budget is not None and not (0 <= budget < 1):
            raise ValueError(f"budget must be a share of the run time in [0, 1), not {budget!r}")
        if census not in (None, True, False):
            raise ValueError(f"census must be None, True or False, not {census!r}")
        self.census = census
        self.trace = bool(trace)
        self.lines = bool(lines)
        self.budget = budget if budget is not None else (TRACE_BUDGET if trace else CENSUS_BUDGET)
        self._reset()

    def _reset(self) -> None:
        self._done = 0  # iterations finished
        self._retention = Retention()
        self._census = ObjectCensus(self.census, self.budget)
        self._tracing = Tracing()
        self._lines = LineReport()
        self._gpu = GpuMemory()
        # What each iteration calls, chosen at the start: in the default mode nothing at all.
        self._hooks: tuple[IterationHook, ...] = ()

    def start(self, spec: WatchSpec) -> None:
        """Before the setup."""
        self._reset()
        if self.lines:
            require_memory_profiler()
        self._retention.start()
        hooks: list[IterationHook] = []
        if self._tracing.start(self.trace, spec.warmup or 0):
            hooks.append(self._tracing.on_iteration)
        if self._gpu.start():
            hooks.append(self._gpu.on_iteration)
        if self.trace:
            hooks.append(self._tracing.snapshot_after_warmup)
        if self.census is True:
            hooks.append(self._census.on_iteration)
        self._hooks = tuple(hooks)

    def wrap(self, fn: Callable, code: types.CodeType | None) -> Callable:
        """After the setup: the step to call (traced line by line with lines=True)."""
        # The baseline census, after the setup and before iteration 0: whatever it leaves with
        # the allocator lands in iteration 0, which the verdict always treats as warm-up. A
        # census in the middle of a run would put a step into the very RSS series the verdict
        # reads (measured in a kernel: a flat step looked like a 6 KiB/iteration leak), so the
        # others are taken only at the end, after the verdict, unless census=True asks for them.
        if self.census is not False:
            self._census.take(sys.getallocatedblocks(), self._done)
        if not self.lines:
            return fn
        return self._lines.wrap(fn, code)

    def on_iteration(self, record: IterationRecord) -> None:
        self._done += 1
        for hook in self._hooks:
            hook(record, self._done)

    def finish(self, verdict: Verdict, log: RecordLog) -> Attribution:
        """After the final verdict: what grew."""
        t0 = time.perf_counter()
        try:
            att = attribute(self._evidence(verdict, log))
        finally:
            self._tracing.stop()
        att.overhead_seconds = self._census.spent + self._tracing.spent
        att.finish_seconds = time.perf_counter() - t0
        self._census.clear()
        return att

    def gpu_series(self) -> np.ndarray:
        """(iteration, current bytes, peak bytes) rows for charting beside RSS."""
        return self._gpu.array().copy()

    def _evidence(self, verdict: Verdict, log: RecordLog) -> Evidence:
        """Ask each collector what it saw; the order matters (see the comments)."""
        notes = [*self._retention.notes, *self._lines.notes, *self._gpu.notes]
        lines = tuple(self._lines.result())
        gpu = self._gpu.result()
        growth = measure_growth(verdict, log)
        if growth is None:
            return Evidence(None, tuple(notes), lines=lines, gpu=gpu)
        # Trim before the final census: the census allocates and frees memory of its own, which
        # the allocator may keep and a later trim would return.
        reclaimed = self._retention.reclaim(growth.grew)
        census = self._census.finish(self._done, verdict.warmup)
        if census.note:
            notes.append(census.note)
        traced_slope = self._tracing.slope_since(growth.start)
        sites = self._tracing.sites(self._done) if self.trace else []
        return Evidence(
            growth, tuple(notes), reclaimed, self._census.own_rss, traced_slope,
            census_slope=census.slope, bytes_per_block=census.bytes_per_block,
            censuses=census.checkpoints, top_types=census.top_types,
            top_sites=tuple(sites), lines=lines, gpu=gpu,
        )
