"""A verdict's slope per second and per hour, beside the engine's per iteration.

The verdict's slope is per iteration. Where an iteration is a time window (the command line) or a
training batch (Keras), people think in rates over time; the conversion uses the time the
iterations after the warm-up actually took, from end to end (the gaps between them included, so
it is what the clock on the wall sees).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.units import format_bytes
from ..engine.verdict import Verdict


@dataclass(frozen=True)
class Rates:
    per_iteration: float  # bytes
    per_second: float | None  # None when the iterations' times are unknown
    seconds_per_iteration: float | None

    @property
    def per_hour(self) -> float | None:
        return None if self.per_second is None else self.per_second * 3600.0

    def text(self) -> str:
        """'+98 KiB/iteration, +1.2 MiB/s, +4.3 GiB/h'."""
        parts = [f"{format_bytes(self.per_iteration, signed=True)}/iteration"]
        if self.per_second is not None:
            parts.append(f"{format_bytes(self.per_second, signed=True)}/s")
            parts.append(f"{format_bytes(self.per_hour, signed=True)}/h")
        return ", ".join(parts)


def rates(verdict: Verdict, index: np.ndarray, end: np.ndarray) -> Rates:
    """The verdict's slope per iteration, per second and per hour; ``index`` / ``end`` are the
    iteration records' numbers and end times (seconds)."""
    index = np.asarray(index, dtype=float)
    end = np.asarray(end, dtype=float)
    start = verdict.onset if verdict.onset is not None else verdict.warmup
    keep = index >= start
    if keep.sum() < 2:
        keep = np.ones(index.size, dtype=bool)
    per_iter = None
    if keep.sum() >= 2:
        i, t = index[keep], end[keep]
        if i[-1] > i[0] and t[-1] > t[0]:
            per_iter = float((t[-1] - t[0]) / (i[-1] - i[0]))
    per_second = verdict.slope / per_iter if per_iter else None
    return Rates(float(verdict.slope), per_second, per_iter)
