"""glibc malloc's bytes in use, read at checkpoints cheap enough for every run."""

from __future__ import annotations

import time

from . import sampler

IN_USE_SHARE = 0.01  # at most this share of the run spent reading malloc's bytes in use
IN_USE_EVERY = 8  # ... or every this many iterations, if a reading costs under IN_USE_CHEAP
IN_USE_CHEAP = 100e-6


class InUseCheckpoints:
    """mallinfo2 walks every arena's free lists (30 µs to 2 ms in a TensorFlow process), so it
    is read at most IN_USE_SHARE of the run's time, spaced by its own measured cost (a running
    estimate, so that one slow walk does not leave a short run without readings), or every
    IN_USE_EVERY iterations when a reading is cheap."""

    def __init__(self) -> None:
        self._next_t: float | None = float("-inf")  # None once mallinfo2 is known not to work
        self._cost: float | None = None
        self._index = 0

    def read(self, t_end: float, index: int) -> int:
        """Bytes in use now, or -1 when it is not time yet (or glibc cannot say)."""
        if self._next_t is None:
            return -1
        if t_end < self._next_t:
            # ... but at least every IN_USE_EVERY iterations while a walk is cheap, so that a
            # short run of fast steps has enough readings for the verdict.
            cheap = self._cost is not None and self._cost < IN_USE_CHEAP
            if not cheap or index - self._index < IN_USE_EVERY:
                return -1
        self._index = index
        if self._cost is None and sampler.malloc_in_use() is None:
            self._next_t = None  # (this first call also loads the function: not timed)
            return -1
        t = time.perf_counter()
        value = sampler.malloc_in_use()
        if value is None:
            self._next_t = None
            return -1
        cost = time.perf_counter() - t
        est = self._cost
        self._cost = cost if est is None else 0.8 * est + 0.2 * min(cost, 4 * est)
        self._next_t = t_end + self._cost / IN_USE_SHARE
        return value
