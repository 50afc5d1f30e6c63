"""One record per iteration, kept in bounded, pre-touched columns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

RECORD_CAPACITY = 20_000


@dataclass(slots=True)
class IterationRecord:
    index: int
    start: float  # seconds since the watch started
    end: float
    rss: int  # bytes at the end of the iteration
    peak_rss: int  # highest during the iteration
    duration: float
    # Python's block count (sys.getallocatedblocks()) and glibc malloc's bytes in use
    # (mallinfo2) at the end, or -1 where not read: both are read at checkpoints only (see
    # engine/checkpoints.py), so fast steps have them every few iterations.
    blocks: int
    blocks_delta: int  # the block count's change since the previous reading (0 where not read)
    malloc_in_use: int = -1

    def values(self) -> tuple[int | float, ...]:
        """The fields in FIELDS order."""
        return (self.index, self.start, self.end, self.rss, self.peak_rss, self.duration,
                self.blocks, self.blocks_delta, self.malloc_in_use)


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(IterationRecord))
_DTYPE = np.dtype([(name, np.float64 if name in ("start", "end", "duration") else np.int64)
                   for name in FIELDS])


class RecordLog:
    """Per-iteration records in one fixed, pre-touched numpy table (a row per iteration).

    Pre-touched so the watcher's own memory does not grow while it measures; one row written
    per iteration (a fraction of a microsecond); when full, every other older record is
    dropped (the iteration index stays true), so any run length fits.
    """

    def __init__(self, capacity: int = RECORD_CAPACITY) -> None:
        self.capacity = capacity
        self._rows = np.ones(capacity, dtype=_DTYPE)
        self.n = 0
        self.total = 0

    def append(self, record: IterationRecord) -> None:
        if self.n == self.capacity:
            self._thin()
        self._rows[self.n] = record.values()
        self.n += 1
        self.total += 1

    def _thin(self) -> None:
        # Keep the newest quarter at full resolution; drop every other record before it.
        keep_tail = self.capacity // 4
        head = self.n - keep_tail
        thinned = self._rows[0:head:2].copy()
        q = thinned.size
        self._rows[:q] = thinned
        self._rows[q : q + keep_tail] = self._rows[head : self.n]
        self.n = q + keep_tail

    def column(self, name: str) -> np.ndarray:
        """A view of one field's column (copy it before keeping it)."""
        return self._rows[name][: self.n]

    def last(self, name: str) -> int | float | None:
        return self._rows[name][self.n - 1].item() if self.n else None

    def records(self) -> list[IterationRecord]:
        cols = [self.column(k).tolist() for k in FIELDS]
        return [IterationRecord(*row) for row in zip(*cols, strict=True)]

    def __len__(self) -> int:
        return self.n
