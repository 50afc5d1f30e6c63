"""tracemalloc: traced memory each iteration, and with --trace the allocation sites that grow."""

from __future__ import annotations

import linecache
import os
import time
import tracemalloc

import numpy as np

from ..records import IterationRecord
from .result import TOP_N, SiteGrowth
from .series import Series, robust_slope

# The engine's own allocations (the records, the sampler) are the watcher's, not the user's.
_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Tracing:
    """The traced-memory series (whenever tracemalloc is on) and, with --trace, a baseline
    snapshot once the warm-up is over, compared with a final one at the end."""

    def __init__(self) -> None:
        self.spent = 0.0  # seconds spent on snapshots during the run
        self._started = False  # tracemalloc was started here, so it is stopped here
        self._warmup = 1
        self._series = Series(1)
        self._snapshot: tuple[int, tracemalloc.Snapshot] | None = None  # (done, baseline)

    def start(self, trace: bool, warmup: int) -> bool:
        """Start tracemalloc for --trace (unless it is on); whether traced memory is recorded."""
        if trace and not tracemalloc.is_tracing():
            tracemalloc.start(1)
            self._started = True
        self._warmup = max(1, warmup)
        return tracemalloc.is_tracing()

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
        """The allocation sites whose live memory grew since the baseline snapshot, largest first."""
        if self._snapshot is None or not tracemalloc.is_tracing():
            return []
        done0, snap0 = self._snapshot
        span = done - done0
        if span < 1:
            return []
        snap1 = tracemalloc.take_snapshot()
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
        self._snapshot = None
