"""Signals too costly to read every iteration, read at checkpoints instead.

Python's block count (``sys.getallocatedblocks()`` walks pymalloc's arenas: ~10 µs in a bare
interpreter, 50–100 µs once TensorFlow's 300k objects exist) and glibc malloc's bytes in use
(``mallinfo2`` walks every arena's free lists: 2 µs to 2 ms) both grow with the heap. Read every
iteration, they would dominate a 1 ms ``next(it)`` step. So each is read on a time budget: a
fixed allowance (a short run of fast steps reads it at every iteration, so the verdict has
enough readings) plus a share of the run's time (a long run reads it evenly, as often as that
share pays for). Iterations between checkpoints record -1.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Checkpoints:
    """``read`` at most ``allowance`` seconds plus ``share`` of the run's time in all."""

    def __init__(self, read: Callable[[], int | None], share: float, allowance: float) -> None:
        self._read = read
        self._share = share
        self._allowance = allowance
        self._spent = 0.0
        self._cost: float | None = None  # running estimate of one reading's cost
        self._t0: float | None = None  # when the first reading was asked for
        self._readable = True

    def read(self, t_end: float) -> int:
        """The value now, or -1 when the budget does not allow it yet (or it cannot be read)."""
        if not self._readable:
            return -1
        if self._t0 is None:
            self._t0 = t_end
            if self._read() is None:  # this first call also loads what it needs: not counted
                self._readable = False
                return -1
        elif self._spent + self._cost > self._allowance + self._share * (t_end - self._t0):
            return -1
        t = time.perf_counter()
        value = self._read()
        cost = time.perf_counter() - t
        self._spent += cost
        est = self._cost
        # One slow walk must not stop the readings for long: its weight in the estimate is
        # capped at four times the estimate so far.
        self._cost = cost if est is None else 0.8 * est + 0.2 * min(cost, 4 * est)
        return value if value is not None else -1
