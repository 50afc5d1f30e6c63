"""The object census: when censuses are taken, what they keep, and what grew between them.

A census is taken after the setup (the baseline), at iterations 1, 2, 4, 8, … with
``census=True``, and once more at the end, after the verdict. Each counts every gc-tracked
object by type, the untracked dicts and tuples and the payloads (arrays, buffers) the tracked
ones hold, and the length of every container (survey.py); the rows that grew between the
baseline (or the first checkpoint after the warm-up) and the end are sized (grown.py).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from ..records import IterationRecord
from ..sampler import malloc_trim, rss
from .grown import Specimens, grown, specimens
from .result import TOP_N, TypeGrowth
from .survey import Census, Survey, no_huge_pages, survey, take_census

MAX_CENSUSES = 8  # kept at once: the first one and the most recent ones (geometric spacing
# means the last seven reach back to 1/128 of the run, past any warm-up)


# ---------------------------------------------------------------------------------------------
# The collector


@dataclass(frozen=True)
class CensusGrowth:
    """What the censuses say grew, per iteration."""

    top_types: tuple[TypeGrowth, ...]  # the types and containers that grew the most
    slope: float | None  # bytes / iteration of the steady, counted growth (None: no census)
    bytes_per_block: float | None  # of the objects that grow (None: no pymalloc blocks grew)
    checkpoints: int  # censuses taken, the final one included
    note: str = ""  # how many were taken, or why none was
    first: int = 0  # iterations done at the census the growth is counted from
    span: int = 0  # iterations between it and the final census
    outside: float | None = None  # bytes / iteration of it outside Python's heap (buffers)


_NO_CENSUS = CensusGrowth((), None, None, 0)


def _figures(grown: list[TypeGrowth]) -> tuple[float, float | None, float]:
    """(bytes / iteration, bytes per pymalloc block, bytes / iteration outside Python's heap)
    of the growth the census counts."""
    counted = [g for g in grown if g.counted and g.steady is not False and g.bytes_per_iteration > 0]
    slope = sum(g.bytes_per_iteration for g in counted)
    outside = sum(max(g._outside, 0.0) for g in counted)
    # Bytes per pymalloc block of the objects that grow (not of the whole heap): the figure
    # that turns the per-iteration block count into bytes.
    nblk = sum(g.per_iteration * g._blocks for g in counted)
    if nblk <= 0:
        return slope, None, outside
    return slope, float(sum(g.per_iteration * g._block_bytes for g in counted) / nblk), outside


# Seconds the baseline census may always take, whatever the run's length: enough for the heap of
# a process with TensorFlow and Keras loaded (~1.2M blocks, 0.12-0.3 s measured).
CENSUS_ALLOWANCE = 0.25


class ObjectCensus:
    """Object censuses: the baseline, the checkpoints census=True asks for, and the final one.

    ``mode`` is the Tracker's ``census``: None or True take the baseline after the setup (True
    also takes one after iterations 1, 2, 4, 8, …); False takes none.
    """

    def __init__(self, mode: bool | None, budget: float) -> None:
        self.mode = mode
        self.budget = budget  # quoted when no census could be taken
        self.spent = 0.0  # CPU seconds spent on censuses during the run (a busy machine does not make them dearer)
        self.own_rss = 0  # RSS our censuses freed during the run that the allocator kept
        # What the checkpoints taken during the run (all but the baseline) keep, and what their
        # temporaries left that the trim could not return: (RSS, malloc in use). census=True
        # takes it out of the records the verdict reads (Tracker.correct).
        self.held: tuple[int, int] = (0, 0)
        self._left = 0  # RSS the checkpoints during the run left behind after their trims
        self.next_at = 1  # iterations done at which census=True takes the next checkpoint
        self._checkpoints: list[Census] = []
        # Seconds of census per pymalloc block, before one is measured: 130-145 ns measured with
        # TensorFlow's heap (0.16 s) and in a heap of a million objects (0.59 s), arrays and
        # untracked dicts walked (docs/attribution.md).
        self._cost_per_block = 150e-9
        self._estimate = 0.0  # seconds the last census was expected to take
        self._final: Survey | None = None  # the final census's survey, until the paths are found

    def skip_final(self) -> CensusGrowth:
        """No final census: nothing grew that it could explain (the censuses taken count)."""
        return CensusGrowth((), None, None, len(self._checkpoints))

    def affordable(self, blocks: int, planned: float | None) -> bool:
        """May the baseline census be taken in a run planned to last ``planned`` seconds? Its
        cost follows the heap (~150 ns a pymalloc block: 0.15–0.3 s once TensorFlow is loaded); it is
        taken when that is within ``budget`` of the planned run, or always when the run's
        length is unknown (only ``iterations`` bound it)."""
        self._estimate = self._cost_per_block * max(blocks, 1)
        return planned is None or self._estimate <= max(self.budget * planned, CENSUS_ALLOWANCE)

    def take(self, blocks: int, done: int) -> None:
        """A census now, after ``done`` iterations, with ``blocks`` pymalloc blocks allocated.

        Its temporaries (a list of every object, sorted arrays of their ids: megabytes in a
        large heap) are handed back to the system at once. Left with the allocator, a leak's
        next iterations would fill them without moving RSS: census=True's checkpoints read a
        400-iteration leak as a plateau of their own temporaries, in 1 of 2 runs with a
        300k-object heap. What a census keeps is accounted (``held``), and so is what the
        trim could not return (pages its temporaries shared with live objects: 0.5 MiB a
        checkpoint in an 800 MB test process, where nine of them made a flat step rise 4.9 MiB).
        (A thread of the user's that allocates during a checkpoint has that much taken out of
        its growth too: census=True is for tests and investigations, not the default.)"""
        now = time.thread_time()
        # A census walks every gc object; its cost follows the heap, which the block count the
        # runner already measured tells us before we pay it (refined by each census taken).
        self._estimate = self._cost_per_block * max(blocks, 1)
        rss0, kept0 = rss(), self._kept_rss()
        c = take_census(done, every=not self._checkpoints)
        self._checkpoints.append(c)
        if len(self._checkpoints) > MAX_CENSUSES:
            del self._checkpoints[1]
        malloc_trim()  # the temporaries, and a dropped checkpoint's arrays
        left = max(0, rss() - rss0 - (self._kept_rss() - kept0))
        self.own_rss += left
        if len(self._checkpoints) > 1:  # not the baseline: during the run
            self._left += left
        later = [cp.footprint() for cp in self._checkpoints[1:]]
        self.held = (sum(f[0] for f in later) + self._left, sum(f[1] for f in later))
        self._cost_per_block = c.cost / max(c.blocks, 1)
        self.spent += time.thread_time() - now
        self.next_at = 2 * done

    def _kept_rss(self) -> int:
        return sum(cp.footprint()[0] for cp in self._checkpoints)

    def due(self, record: IterationRecord, done: int) -> int | None:
        """census=True: the block count when a checkpoint is due now (after iterations 1, 2, 4,
        8, …), else None."""
        if done < self.next_at:
            return None
        return record.blocks if record.blocks >= 0 else sys.getallocatedblocks()

    def finish(self, done: int, warmup: int) -> CensusGrowth:
        """The final census against the first one after the warm-up (none without a baseline
        or when no iteration followed it)."""
        if not self._checkpoints:
            return CensusGrowth((), None, None, 0, self._why_none(done))
        base = next((c for c in self._checkpoints if c.done >= warmup + 1), self._checkpoints[0])
        span = done - base.done
        if span < 1:
            return _NO_CENSUS
        mids = [c for c in self._checkpoints if base.done < c.done < done]
        mid = min(mids, key=lambda c: abs(c.done - (base.done + done) / 2)) if mids else None
        t = time.perf_counter()
        with no_huge_pages():  # (its temporaries would be there for the next watch's leak)
            self._final = survey()
            rows = grown(self._final, base, mid, span)
        checkpoints = len(self._checkpoints) + 1
        slope, bytes_per_block, outside = _figures(rows)
        note = (
            f"Object census: {checkpoints} checkpoints (iterations {base.done}\u2013{done}), "
            f"final one {time.perf_counter() - t:.2f} s."
        )
        return CensusGrowth(tuple(rows[:TOP_N]), slope, bytes_per_block, checkpoints, note,
                            base.done, span, outside)

    def _why_none(self, done: int) -> str:
        if not done:
            return ""
        if self.mode is False:
            return "No object census (census=False)."
        return (
            f"No object census was taken: with this heap one would cost about "
            f"{self._estimate * 1e3:.0f} ms, over the {self.budget:.1%} share of this run's time. "
            f"Large Python objects (NumPy arrays, bytes) are invisible to the block count, so a leak "
            f"of them would look native: run longer, or use --trace."
        )

    def specimens(self, rows: list[TypeGrowth], per_row: int) -> Specimens:
        """Objects of each row the run created, for the path search (grown.specimens), from
        the final census, which is dropped then: the search must not see its lists."""
        final, self._final = self._final, None
        if final is None or not self._checkpoints or not rows:
            return Specimens()
        try:
            with no_huge_pages():
                return specimens(final, self._checkpoints[0], rows, per_row)
        finally:
            final.clear()

    def clear(self) -> None:
        """Drop the checkpoints once the attribution is made."""
        if self._final is not None:
            self._final.clear()
            self._final = None
        self._checkpoints = []
        self.held = (0, 0)
        self._left = 0
