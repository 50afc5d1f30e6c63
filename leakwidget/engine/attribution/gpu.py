"""GPU memory, read from TensorFlow when it is already imported and sees a GPU."""

from __future__ import annotations

import sys

import numpy as np

from ..records import IterationRecord
from .series import Series, robust_slope


def _find_gpu() -> str | None:
    tf = sys.modules.get("tensorflow")  # never import TensorFlow ourselves
    if tf is None:
        return None
    try:
        gpus = tf.config.list_physical_devices("GPU")
    except Exception:
        return None
    return "GPU:0" if gpus else None


class GpuMemory:
    """(iteration, current, peak) bytes of the first GPU, read after every iteration."""

    def __init__(self) -> None:
        self.device: str | None = None
        self.notes: list[str] = []
        self._series = Series(2)

    def start(self) -> bool:
        """Whether there is a GPU to read each iteration."""
        self.device = _find_gpu()
        return self.device is not None

    def on_iteration(self, record: IterationRecord, done: int) -> None:
        if self.device is None:  # reading it failed once: said in a note, not retried
            return
        try:
            tf = sys.modules.get("tensorflow")
            info = tf.config.experimental.get_memory_info(self.device)
            self._series.append(record.index, info["current"], info["peak"])
            tf.config.experimental.reset_memory_stats(self.device)  # per-iteration peak
        except Exception as exc:  # e.g. no memory stats on this device
            self.notes.append(f"GPU memory could not be read ({exc}).")
            self.device = None

    def array(self) -> np.ndarray:
        """(iteration, current bytes, peak bytes) rows."""
        return self._series.array()

    def result(self) -> dict | None:
        """Current and peak bytes and the slope of the current bytes; None without readings."""
        if not self._series.n:
            return None
        g = self._series.array()
        return {
            "device": self.device or "GPU:0",
            "current": int(g[-1, 1]),
            "peak": int(g[:, 2].max()),
            "slope": robust_slope(g[:, 0], g[:, 1]),
        }
