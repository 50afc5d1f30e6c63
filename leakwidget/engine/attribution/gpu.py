"""GPU memory, read from TensorFlow when it is already imported and sees a GPU.

Device memory is a second series beside RSS, with its own verdict (``result.device``): a leak
of tensors kept on the GPU does not show in the process's RSS at all.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..records import IterationRecord
from ..units import format_bytes
from ..verdict import Verdict, decide
from .series import Series, robust_slope


def _tf_config() -> Any | None:
    """``tf.config`` of an already imported TensorFlow (we never import it ourselves)."""
    tf = sys.modules.get("tensorflow")
    return None if tf is None else getattr(tf, "config", None)


@dataclass
class DeviceMemory:
    """GPU memory over the run: its own verdict, or why it was not measured."""

    measured: bool
    device: str | None = None  # "GPU:0"
    verdict: Verdict | None = None  # decide() on the device's bytes in use after each iteration
    current: int | None = None  # bytes in use after the last iteration
    peak: int | None = None  # the highest per-iteration peak
    note: str = ""  # why it was not measured, or what went wrong
    series: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)), repr=False)

    def to_dict(self) -> dict:
        return {
            "measured": self.measured, "device": self.device,
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
            "current": self.current, "peak": self.peak, "note": self.note,
        }

    def __str__(self) -> str:
        if not self.measured or self.verdict is None:
            return f"GPU memory: not measured: {self.note}"
        return (f"{self.device} memory (current {format_bytes(self.current or 0)}, peak "
                f"{format_bytes(self.peak or 0)}): {self.verdict.summary}")


class GpuMemory:
    """(iteration, current, peak) bytes of the first GPU, read after every iteration.

    ``config``: a ``tf.config``-like object to read from (default: the imported TensorFlow's).
    """

    def __init__(self, config: Any | None = None) -> None:
        self._given = config
        self._config: Any | None = None
        self.device: str | None = None
        self.notes: list[str] = []
        self.why_not = ""
        self._series = Series(2)

    def clear(self) -> None:
        """Forget an earlier run's readings (a Tracker is reused by Run again)."""
        self._config = None
        self.device = None
        self.notes = []
        self.why_not = ""
        self._series = Series(2)

    def start(self) -> bool:
        """Whether there is a GPU to read each iteration."""
        self._config = self._given if self._given is not None else _tf_config()
        self.device = None
        if self._config is None:
            self.why_not = "TensorFlow is not imported, so there is no GPU to read."
            return False
        try:
            gpus = self._config.list_physical_devices("GPU")
        except Exception as exc:
            self.why_not = f"TensorFlow could not list its GPUs ({exc})."
            return False
        if not gpus:
            self.why_not = "no GPU (TensorFlow sees none)."
            return False
        self.device = "GPU:0"
        return True

    def on_iteration(self, record: IterationRecord, done: int) -> None:
        if self.device is None:  # reading it failed once: said in a note, not retried
            return
        try:
            info = self._config.experimental.get_memory_info(self.device)
            self._series.append(record.index, info["current"], info["peak"])
            self._config.experimental.reset_memory_stats(self.device)  # per-iteration peak
        except Exception as exc:  # e.g. no memory stats on this device
            self.notes.append(f"GPU memory could not be read ({exc}).")
            self.why_not = f"GPU memory could not be read ({exc})."
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

    def device_memory(self, warmup: int | None) -> DeviceMemory:
        """The device series with its own verdict, or why it was not measured."""
        if not self._series.n:
            return DeviceMemory(False, note=self.why_not or "no iteration finished.")
        g = self._series.array().copy()
        verdict = decide(g[:, 0], g[:, 1], warmup=warmup, peaks=g[:, 2])
        return DeviceMemory(True, self.device or "GPU:0", verdict, int(g[-1, 1]),
                            int(g[:, 2].max()), self.why_not, g)
