"""How much RSS grew, read from the verdict and the per-iteration records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import RecordLog
from ..verdict import Verdict
from .series import robust_slope

MIN_GROWTH = 1 << 20  # growth under this, without a leak/plateau verdict, is attributed to nothing


@dataclass(frozen=True)
class Growth:
    """The growth to attribute, over the iterations after the warm-up."""

    verdict: str  # the verdict's kind
    rss_slope: float  # bytes / iteration: the verdict's for a leak, else fit after the warm-up
    blocks_slope: float  # pymalloc blocks / iteration after the warm-up
    bytes: float  # the growth being attributed (trend over the leak, else total)
    start: float  # iteration it is measured from: the warm-up's end, or a leak's onset
    span: float  # iterations from ``start`` to the last one (at least 1)
    run: float  # iterations from the first to the last one (at least 1)

    @property
    def grew(self) -> bool:
        """Enough to attribute: a leak that grew, or a plateau or undecided run that grew by a
        megabyte or more."""
        return (self.verdict == "leak" and self.bytes > 0) or (
            self.verdict in ("plateau", "inconclusive") and self.bytes >= MIN_GROWTH
        )


def measure_growth(v: Verdict, log: RecordLog) -> Growth | None:
    """The growth the verdict and the records show; None when no iteration finished."""
    idx, rss, blocks = (np.asarray(log.column(k), dtype=float) for k in ("index", "rss", "blocks"))
    if idx.size == 0:
        return None
    first = idx[0]
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
        v.kind, rss_slope, robust_slope(x, blocks[post]), growth, start, span,
        max(1.0, idx[-1] - first),
    )
