"""The Tracker: runs the collectors of evidence along a watch, then has the evidence decided."""

from __future__ import annotations

import contextlib
import gc
import sys
import time
import types
from collections.abc import Callable

import numpy as np

from ..budget import planned_seconds
from ..records import IterationRecord, RecordLog
from ..spec import WatchSpec
from ..verdict import Verdict
from .allocator import Retention
from .census import CensusGrowth, ObjectCensus
from .decide import Evidence, attribute
from .garbage import Garbage, Phase
from .gpu import DeviceMemory, GpuMemory
from .graph_ops import GraphOps
from .growth import Growth, measure_growth
from .holders import cause as holder_cause
from .holders import reword
from .keras_objects import KerasObjects
from .lines import LineReport, require_memory_profiler
from .native import NativeStacks
from .paths import find_paths
from .result import Attribution, RefPath
from .retracing import Retracing
from .trace import PHASE_WARMUP, Tracing

# Share of the run's wall time the baseline object census may take (default mode). Without it a
# leak of NumPy arrays or bytes (invisible to the block count) reads as native memory: a wrong
# answer to "Python or native" costs the user more than one census (0.1-0.3 s with TensorFlow).
CENSUS_BUDGET = 0.03
TRACE_BUDGET = 0.10  # with --trace the user asked for slow; snapshots may take more
PATH_ROWS = 3  # growing types (and containers) whose reference paths are searched
PATH_SPECIMENS = 8  # objects of each whose paths are searched
PATH_SHARE = 0.10  # … among those holding at least this share of the growth

IterationHook = Callable[[IterationRecord, int], None]  # (record, iterations done)


class Tracker:
    """Watch observer that explains what grows; sets ``result.attribution`` at the end.

    ``trace``: start tracemalloc (unless already on) and report growing allocation sites.
    ``lines``: trace the step line by line (memory_profiler) and report each line's growth.
    ``budget``: share of the run's wall time the object census may take. ``census``: None
    (default) as the budget allows; True after iterations 1, 2, 4, 8, … at any cost; False never.
    ``native``: trace a window of iterations after the warm-up with memray and report the call
    stacks of memory allocated there and not freed (``attribution.native_sites``).
    ``paths``: search what keeps the growing Python types alive (``attribution.paths``).
    ``gpu``: the GPU memory collector (default: TensorFlow's first GPU, when it sees one).
    """

    def __init__(
        self,
        trace: bool = False,
        lines: bool = False,
        *,
        budget: float | None = None,
        census: bool | None = None,
        native: bool = False,
        paths: bool = True,
        gpu: GpuMemory | None = None,
    ) -> None:
        if budget is not None and not (0 <= budget < 1):
            raise ValueError(f"budget must be a share of the run time in [0, 1), not {budget!r}")
        if census not in (None, True, False):
            raise ValueError(f"census must be None, True or False, not {census!r}")
        self.census = census
        self.trace = bool(trace)
        self.lines = bool(lines)
        self.native = bool(native)
        self.paths = bool(paths)
        self._gpu_given = gpu
        self.budget = budget if budget is not None else (TRACE_BUDGET if trace else CENSUS_BUDGET)
        self._planned: float | None = None
        self._reset()

    def _reset(self) -> None:
        self._done = 0  # iterations finished
        self.after = 0  # iterations the phases after the run ran (counted by the watch)
        self.aside = contextlib.nullcontext  # what a census during the run is taken in (the watch's)
        # Bytes free inside malloc's heap once the watch trimmed it before iteration 0 (set by
        # the watch: watch.settle_memory), what malloc may touch again with nothing more in use
        self.free_at_start: int | None = None
        self._retention = Retention()
        self._garbage = Garbage()
        self._census = ObjectCensus(self.census, self.budget)
        self._tracing = Tracing()
        self._lines = LineReport()
        self._gpu = self._gpu_given if self._gpu_given is not None else GpuMemory()
        self._gpu.clear()
        self._native = NativeStacks()
        self._retracing = Retracing()
        self._keras = KerasObjects()
        self._graph_ops = GraphOps()
        self._warmup: int | None = None
        # What each iteration calls, chosen at the start: in the default mode nothing at all.
        self._hooks: tuple[IterationHook, ...] = ()
        self.corrects = False  # whether the records need correct(): set by start()
        self.hooked = False  # whether on_iteration() does anything: set by start()

    def start(self, spec: WatchSpec, defer_tracing: bool = False) -> None:
        """Before the setup. ``defer_tracing``: the watch can run the step after the measured
        run (its own loop does), so --trace traces a phase then, not the run (trace.py)."""
        self._reset()
        self._planned = planned_seconds(spec)
        if self.lines:
            require_memory_profiler()
        self._warmup = spec.warmup
        if self.native:
            self._native.start(spec)  # fails here, before anything runs, without memray
        self._retention.start()
        self._retracing.start()
        self._keras.start()
        self._graph_ops.start()
        hooks: list[IterationHook] = []
        if self._tracing.start(self.trace, spec.warmup or 0, defer_tracing):
            hooks.append(self._tracing.on_iteration)
        if self._gpu.start():
            hooks.append(self._gpu.on_iteration)
        if self.trace and not self._tracing.deferred:
            hooks.append(self._tracing.snapshot_after_warmup)
        if self.census is True:
            hooks.append(self._checkpoint)
        if self.native:
            hooks.append(self._native.on_iteration)
        self._hooks = tuple(hooks)
        self.hooked = bool(hooks)
        # Whether the records need correct(): memray's own memory moves RSS.
        self.corrects = self.native

    def baseline_census(self) -> bool:
        """After the setup, before iteration 0, right after the collection: the baseline object
        census (by default when affordable; always with census=True), which trims the allocator
        after it; True when taken. By default no other is taken during the run: one there put a
        step into the RSS series the verdict reads (a flat step read as a 6 KiB/iteration leak),
        and its trim handed back pages a leak then refilled unseen (a bisection's baseline
        configuration read inconclusive). census=True takes them at 1, 2, 4, 8, …"""
        if self.census is True or (
                self.census is None and self._census.affordable(sys.getallocatedblocks(), self._planned)):
            self._census.take(sys.getallocatedblocks(), self._done)
            return True
        return False

    def _checkpoint(self, record: IterationRecord, done: int) -> None:
        """A census during the run when one is due, ``aside`` (the watch's: unsampled, resettled)."""
        if (blocks := self._census.due(record, done)) is not None:
            with self.aside():
                self._census.take(blocks, done)

    held = property(lambda self: self._census.held, doc="(RSS, bytes in use) the checkpoints keep")

    def wrap(self, fn: Callable, code: types.CodeType | None) -> Callable:
        """After the setup: the step to call (traced line by line with lines=True)."""
        if not self.lines:
            return fn
        return self._lines.wrap(fn, code)

    def phases(self) -> tuple[Phase, ...]:
        """What runs the step again after the measured run, in turn (the watch drives them,
        nothing recorded): the garbage phase (garbage.py), then --trace's (trace.py)."""
        return (self._garbage, self._tracing)

    def on_iteration(self, record: IterationRecord) -> None:
        """After each iteration, when ``hooked`` (the watch's loop skips the call otherwise)."""
        self._done += 1
        for hook in self._hooks:
            hook(record, self._done)

    def finish(self, verdict: Verdict, log: RecordLog) -> Attribution:
        """After the final verdict: what grew."""
        self._done = log.total  # on_iteration counts only when hooked
        t0 = time.perf_counter()
        try:
            att = attribute(self._evidence(verdict, log))
        finally:
            self._tracing.stop()
        att.overhead_seconds = self._census.spent + self._tracing.spent + self._native.spent
        att.finish_seconds = time.perf_counter() - t0
        self._census.clear()
        return att

    def correct(self, record: IterationRecord) -> None:
        """Before the record is logged (the watch calls this when ``corrects``): take out
        of its RSS what memray's tracker made resident (native=True)."""
        self._native.correct(record)

    def gpu_series(self) -> np.ndarray:
        """(iteration, current bytes, peak bytes) rows for charting beside RSS."""
        return self._gpu.array().copy()

    def device(self) -> DeviceMemory:
        """GPU memory as a second series with its own verdict, or why it was not measured."""
        return self._gpu.device_memory(self._warmup)

    def _evidence(self, verdict: Verdict, log: RecordLog) -> Evidence:
        """Ask each collector what it saw; the order matters (see the comments)."""
        notes = [*self._retention.notes, *self._lines.notes, *self._gpu.notes,
                 *filter(None, [self._lines.sampling_note(), self._garbage.note()])]
        lines, gpu = tuple(self._lines.result()), self._gpu.result()
        growth = measure_growth(verdict, log)
        # memray's window closes (if the run ended inside it) and its file is read after the
        # trim and the final census: reading it allocates symbol tables the trim would return.
        if growth is None:
            self._native.finish(None)
            notes.extend(self._native.notes)
            return Evidence(None, tuple(notes), lines=lines, gpu=gpu)
        # Trim before the final census: the census allocates and frees memory of its own, which
        # the allocator may keep and a later trim would return.
        reclaimed = self._retention.reclaim(growth.grew)
        # The final census (0.1–0.3 s with TensorFlow's heap; after the phases, whose iterations
        # it counts) only explains growth: a run that did not grow has nothing for it to explain.
        done = self._done + self.after
        census = self._census.finish(done, verdict.warmup) if growth.grew else self._census.skip_final()
        if census.note:
            notes.append(census.note)
        traced_slope = self._traced_slope(growth)
        census_slope, census_outside = census.slope, census.outside
        if growth.verdict == "plateau" and census_slope is not None:
            # What the census counted since its baseline is what the rise holds now.
            census_slope = census_slope * census.span / growth.span
            census_outside = (census_outside or 0.0) * census.span / growth.span
        sites = self._tracing.sites(self._done) if self.trace else []
        if self._tracing.phase_done:
            notes.append(self._tracing.phase_note())
        paths = reword(self._paths(growth, census, notes))
        # Causes named from TensorFlow's and Keras's own counts (read once, worded twice: the
        # garbage kind says what the step made died with it).
        cause = garbage_cause = ""
        if growth.grew:
            cause = " ".join(filter(None, [self._retracing.finish(), self._keras.finish(self._done),
                                           self._graph_ops.finish(self._done), holder_cause(paths)]))
            garbage_cause = " ".join(filter(None, [self._retracing.cause(kept=False),
                                                   self._keras.cause(kept=False)]))
        window = self._native.finish(int(log.last("index")))
        notes.extend(self._native.notes)
        return Evidence(
            growth, tuple(notes), reclaimed, self._census.own_rss, traced_slope,
            census_slope=census_slope, bytes_per_block=census.bytes_per_block,
            censuses=census.checkpoints, top_types=census.top_types, census_outside=census_outside,
            top_sites=tuple(sites), lines=lines, gpu=gpu, paths=paths, garbage=self._garbage.rate,
            native_sites=window.sites if window is not None else (),
            native_window=(window.first, window.last) if window is not None else None,
            cause=cause, garbage_cause=garbage_cause, free_at_start=self.free_at_start,
            frozen=gc.get_freeze_count(),
        )

    def _traced_slope(self, growth: Growth) -> float | None:
        """tracemalloc's bytes per iteration of the growth: its trend since a leak's onset, or
        for a plateau what the traced memory rose by since the plateau's onset, per iteration
        of the rise. A traced phase after the run gives a leak's trend after its baseline
        snapshot, and nothing for a plateau (its rise was over before the phase)."""
        if self._tracing.phase_done:
            if growth.verdict == "plateau":
                return None
            return self._tracing.slope_since(PHASE_WARMUP)
        if growth.verdict != "plateau":
            return self._tracing.slope_since(growth.start)
        rose = self._tracing.rise_since(growth.start)
        return None if rose is None else rose / growth.span

    def _paths(self, growth: Growth, census: CensusGrowth, notes: list[str]) -> tuple[RefPath, ...]:
        """Reference paths to the new objects of the growing rows that hold a material share
        of the growth (bounded: see paths.py), one per root: a container's own words
        ("__main__.cache (dict) → [key] numpy.ndarray") rather than one of its items'."""
        floor = PATH_SHARE * growth.bytes / max(census.span, 1)
        rows = [g for g in census.top_types if g.bytes_per_iteration >= max(floor, 1.0)][:PATH_ROWS]
        if not (self.paths and growth.grew and rows):
            return ()
        found = self._census.specimens(rows, PATH_SPECIMENS)
        try:
            paths, note = find_paths(found.targets, holders=found.holders, existed=found.existed)
        finally:
            del found
        if note:
            notes.append(note)
        # A row whose objects a grown container holds is told by the container's path.
        containers = {g.name: g._item for g in rows if g.container}
        told = {containers[p.target] for p in paths if p.target in containers}
        paths = [p for p in paths if p.target in containers or p.target not in told]
        best: dict[str, RefPath] = {}
        for p in sorted(paths, key=lambda p: p.target not in containers):
            best.setdefault(p.root, p)
        return tuple(p for p in paths if best[p.root] is p)
