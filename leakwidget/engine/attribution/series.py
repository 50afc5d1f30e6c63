"""Per-iteration series the collectors keep (traced memory, GPU memory), and their slope."""

from __future__ import annotations

import math

import numpy as np

from ..verdict import trend

SERIES_CAP = 4096  # rows kept; beyond this every other row is dropped


def robust_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Robust (Theil–Sen) slope of y over x: the verdict's own estimator."""
    if np.asarray(x).size < 2:
        return 0.0
    s = trend(x, y).slope
    return float(s) if math.isfinite(s) else 0.0


class Series:
    """(iteration, values…) rows; over the cap every other row is dropped, so it stays bounded."""

    def __init__(self, width: int, capacity: int = SERIES_CAP) -> None:
        self.data = np.zeros((capacity, width + 1))
        self.n = 0

    def append(self, index: int, *values: float) -> None:
        if self.n == self.data.shape[0]:
            kept = self.data[: self.n : 2].copy()
            self.n = kept.shape[0]
            self.data[: self.n] = kept
        self.data[self.n, 0] = index
        self.data[self.n, 1:] = values
        self.n += 1

    def array(self) -> np.ndarray:
        return self.data[: self.n]
