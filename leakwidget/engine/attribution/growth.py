"""How much RSS grew, read from the verdict and the per-iteration records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import RecordLog
from ..verdict import Verdict
from ..verdict.growth import is_the_heap
from .series import robust_slope

MIN_GROWTH = 1 << 20  # growth under this, without a leak/plateau verdict, is attributed to nothing
MIN_IN_USE_READINGS = 8  # readings of malloc's bytes in use for their slope to be given


@dataclass(frozen=True)
class Growth:
    """The growth to attribute, over the iterations after the warm-up."""

    verdict: str  # the verdict's kind
    rss_slope: float  # bytes / iteration: the verdict's for a leak, else fit after the warm-up
    blocks_slope: float  # pymalloc blocks / iteration after the warm-up
    bytes: float  # the growth being attributed (trend over the leak, a plateau's rise, else total)
    start: float  # iteration it is measured from: the warm-up's end, a leak's or plateau's onset
    span: float  # iterations from ``start`` to the last one (a plateau: to its top; at least 1)
    run: float  # iterations from the first to the last one (at least 1)
    # glibc malloc's bytes in use / iteration over the same iterations as ``rss_slope`` (None:
    # too few readings, not glibc's heap, or a plateau's rise)
    in_use_slope: float | None = None
    climbing: bool = False  # the verdict's: RSS flat after a rise, what is in use still climbing
    # A leak of Python objects seen in the block count while RSS reuses freed memory: the
    # verdict's slope is then the blocks times the heap's average block, no RSS measured.
    from_blocks: bool = False

    @property
    def grew(self) -> bool:
        """Enough to attribute: a leak that grew, or a plateau or undecided run that grew by a
        megabyte or more."""
        return (self.verdict == "leak" and self.bytes > 0) or (
            self.verdict in ("plateau", "inconclusive") and self.bytes >= MIN_GROWTH
        )


def measure_growth(v: Verdict, log: RecordLog) -> Growth | None:
    """The growth the verdict and the records show; None when no iteration finished."""
    idx, rss, blocks, in_use = (np.asarray(log.column(k), dtype=float)
                                for k in ("index", "rss", "blocks", "malloc_in_use"))
    if idx.size == 0:
        return None
    first = idx[0]
    if v.kind == "plateau" and len(v.fit) >= 2:
        return _plateau_rise(v, idx, blocks)
    post = idx >= first + v.warmup
    if post.sum() < 2:
        post = np.ones_like(idx, dtype=bool)
    x = idx[post]
    start = first + v.warmup
    if v.kind == "leak" and v.onset is not None:
        start = max(start, float(v.onset))
    span = max(1.0, idx[-1] - start)
    rss_slope = float(v.slope) if v.kind == "leak" else robust_slope(x, rss[post])
    if v.kind == "leak":
        growth = rss_slope * span
    else:
        # After the warm-up: one-off allocations of the first iterations are not "growth".
        growth = float(rss[-1] - rss[post][0])
    return Growth(
        v.kind, rss_slope, _blocks_slope(x, blocks[post]), growth, start, span,
        max(1.0, idx[-1] - first), _in_use_slope(idx, rss, in_use, start), v.climbing,
        v.reason == "python-blocks",
    )


def _blocks_slope(x: np.ndarray, blocks: np.ndarray) -> float:
    """The block count's slope over the iterations where it was read (-1: a checkpoint-only
    signal, not read in between)."""
    read = blocks >= 0
    return robust_slope(x[read], blocks[read])


def _in_use_slope(idx: np.ndarray, rss: np.ndarray, in_use: np.ndarray, start: float) -> float | None:
    """malloc's bytes in use per iteration since ``start``, where read (at checkpoints; at least
    MIN_IN_USE_READINGS of them) and glibc serves the heap (verdict.growth.is_the_heap)."""
    read = (in_use >= 0) & (idx >= start)
    if read.sum() < MIN_IN_USE_READINGS or not is_the_heap(in_use[read], rss[idx >= start]):
        return None
    return robust_slope(idx[read], in_use[read])


def _plateau_rise(v: Verdict, idx: np.ndarray, blocks: np.ndarray) -> Growth:
    """A plateau's rise, from its onset to its top (the verdict's fit), is what is attributed:
    what the buffer or cache holds. Its "slopes" are per iteration of the rise, so that the
    shares of it add up as a leak's do; the blocks are what the count rose by since the onset."""
    (start, level0), (top_at, top) = v.fit[0], v.fit[1]
    span = max(1.0, float(top_at) - float(start))
    rise = float(top) - float(level0)
    read = blocks >= 0  # read at checkpoints only
    x, b = idx[read], blocks[read]
    held = 0.0
    if x.size >= 2:
        k = max(1, min(5, x.size // 8))
        before = b[x <= start][-k:] if (x <= start).any() else b[:k]
        held = float(np.median(b[-k:]) - np.median(before))
    return Growth(v.kind, rise / span, held / span, rise, float(start), span,
                  max(1.0, idx[-1] - idx[0]))
