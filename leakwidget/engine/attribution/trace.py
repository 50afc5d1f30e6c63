"""tracemalloc: traced memory each iteration, and with --trace the allocation sites that grow."""

from __future__ import annotations

import linecache
import os
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from ..records import IterationRecord, RecordLog
from .result import TOP_N, SiteGrowth
from .series import Series, robust_slope

# The engine's own allocations (the records, the sampler) are the watcher's, not the user's.
_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --trace traces the allocation sites in a phase of its own, after the measured run:
# tracemalloc slows an allocating step by up to ~15x, and it cannot be paused (stopping it drops
# every trace), so tracing the measured run made the whole watch that much slower and put
# tracemalloc's own memory into the RSS the verdict reads.
PHASE_WARMUP = 2  # traced iterations before the phase's baseline snapshot
PHASE_MIN_ITERATIONS = 12  # traced after the baseline, however slow the step
PHASE_SHARE = 1.0  # the phase lasts at most this share of the measured run's time


class Tracing:
    """The traced-memory series (whenever tracemalloc is on) and, with --trace, allocation sites:
    a baseline snapshot and a final one, compared at the end.

    With --trace and tracemalloc off, a watch that drives its own loop does not trace the
    measured run: the sites come from a phase after it (:meth:`begin_phase`,
    :meth:`on_phase_iteration`, :meth:`end_phase`). With the user's tracemalloc already on, or
    when the loop is someone else's (a Keras ``fit``), the measured run is traced, from the
    warm-up on."""

    doing = "tracing the allocation sites"  # what a view says during the traced phase

    def __init__(self) -> None:
        self.spent = 0.0  # seconds spent on snapshots during the run
        self._started = False  # tracemalloc was started here, so it is stopped here
        self._warmup = 1
        self._series = Series(1)
        self._snapshot: tuple[int, tracemalloc.Snapshot] | None = None  # (done, baseline)
        self._final: tracemalloc.Snapshot | None = None  # at the traced phase's end
        self.deferred = False  # --trace, tracemalloc off, our own loop: a traced phase after it
        self.phase_done = 0  # iterations of that phase (0: it did not run)
        self.phase_ended_by: BaseException | None = None  # what stopped it early

    def start(self, trace: bool, warmup: int, defer: bool) -> bool:
        """At the run's start; whether traced memory is recorded during it. ``defer``: trace in
        a phase after the run (the watch drives the loop), else from the start as before (a
        Keras callback's run, driven by ``fit``)."""
        self.deferred = defer and trace and not tracemalloc.is_tracing()
        if trace and not self.deferred and not tracemalloc.is_tracing():
            tracemalloc.start(1)
            self._started = True
        self.phase_done = 0
        self.phase_ended_by = None
        self._warmup = max(1, warmup)
        return tracemalloc.is_tracing()

    def plan_phase(self, log: RecordLog, seconds: float, grew: Callable[[], bool],
                   spare: float = 0.0) -> tuple[int, int, float] | None:
        """--trace with tracemalloc off, after the measured run: the traced phase's iterations
        at least (however long they take) and at most, and its seconds at most; None when no
        iteration finished. Every verdict gets one, "stable" too: a short run of a small leak
        that fills memory the heap already held reads stable, and --trace is asked for to see
        the sites all the same."""
        if not (self.deferred and log.n):
            return None
        least = PHASE_WARMUP + PHASE_MIN_ITERATIONS
        return least, max(least, log.total), PHASE_SHARE * seconds

    def begin_phase(self) -> None:
        """The traced phase starts (the measured run is over)."""
        tracemalloc.start(1)
        self._started = True
        self._series = Series(1)
        self._snapshot = self._final = None

    def end_phase(self, exc: BaseException | None) -> None:
        """The traced phase is over: its final snapshot, before the watch puts its result
        together (whose arrays would be among the newest allocations)."""
        self.phase_ended_by = exc
        if tracemalloc.is_tracing() and self._snapshot is not None:
            now = time.perf_counter()
            self._final = tracemalloc.take_snapshot()
            self.spent += time.perf_counter() - now

    def extend_phase(self) -> None:
        """The traced phase is as long as planned (its sites need no more)."""
        return None

    def on_phase_iteration(self) -> None:
        """After each iteration of the traced phase."""
        self.phase_done += 1
        self._series.append(self.phase_done, tracemalloc.get_traced_memory()[0])
        if self.phase_done == PHASE_WARMUP:
            now = time.perf_counter()
            self._snapshot = (self.phase_done, tracemalloc.take_snapshot())
            self.spent += time.perf_counter() - now

    def phase_note(self) -> str:
        ended = ("" if self.phase_ended_by is None else
                 f" The traced phase stopped early: {type(self.phase_ended_by).__name__}"
                 f"{': ' + str(self.phase_ended_by) if str(self.phase_ended_by) else ''}.")
        return (f"Allocation sites were traced over {self.phase_done} more iterations after the "
                "measured run (tracemalloc slows the step several times over; the run the "
                f"verdict reads was not traced).{ended}")

    def on_iteration(self, record: IterationRecord, done: int) -> None:
        """Traced memory after this iteration (the user may have stopped tracemalloc)."""
        if tracemalloc.is_tracing():
            self._series.append(record.index, tracemalloc.get_traced_memory()[0])

    def snapshot_after_warmup(self, record: IterationRecord, done: int) -> None:
        # With --trace the user asked for thoroughness: the baseline snapshot is taken as soon as
        # the warm-up is over, whatever it costs (the budget governs only the census).
        if self._snapshot is None and done >= self._warmup and tracemalloc.is_tracing():
            now = time.perf_counter()
            self._snapshot = (done, tracemalloc.take_snapshot())
            self.spent += time.perf_counter() - now

    def slope_since(self, start: float) -> float | None:
        """Traced bytes per iteration from iteration ``start`` on; None with under two readings."""
        if self._series.n < 2:
            return None
        tr = self._series.array()
        keep = tr[:, 0] >= start
        if keep.sum() < 2:
            return None
        return robust_slope(tr[keep, 0], tr[keep, 1])

    def rise_since(self, start: float) -> float | None:
        """Traced bytes now minus at iteration ``start`` (medians of a few readings at each end);
        None with too few readings."""
        if self._series.n < 2:
            return None
        tr = self._series.array()
        after = tr[tr[:, 0] >= start, 1]
        if after.size < 2:
            return None
        k = max(1, min(5, after.size // 4))
        return float(np.median(after[-k:]) - np.median(after[:k]))

    def sites(self, done: int) -> list[SiteGrowth]:
        """The allocation sites whose live memory grew since the baseline snapshot, largest first
        (``done``: iterations of the measured run, or of the traced phase when one ran)."""
        if self._snapshot is None or not tracemalloc.is_tracing():
            return []
        if self.phase_done:
            done = self.phase_done
        done0, snap0 = self._snapshot
        span = done - done0
        if span < 1:
            return []
        snap1 = self._final if self._final is not None else tracemalloc.take_snapshot()
        skip = (_ENGINE_DIR, tracemalloc.__file__, "<frozen importlib", "<unknown>")
        out = []
        for st in snap1.compare_to(snap0, "lineno"):
            if st.size_diff <= 0:
                continue
            fr = st.traceback[0]
            if fr.filename.startswith(skip):
                continue
            out.append(SiteGrowth(
                f"{fr.filename}:{fr.lineno}", st.size_diff / span, st.count_diff / span,
                int(st.size_diff), linecache.getline(fr.filename, fr.lineno).strip(),
            ))
            if len(out) >= TOP_N:
                break
        return out

    def stop(self) -> None:
        """Stop tracemalloc if it was started here; drop the baseline snapshot."""
        if self._started:
            tracemalloc.stop()  # only what we started
            self._started = False
        self._snapshot = self._final = None
