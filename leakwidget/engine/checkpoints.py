"""Signals too costly to read every iteration, read at checkpoints instead.

Python's block count (``sys.getallocatedblocks()`` walks pymalloc's arenas: ~10 µs in a bare
interpreter, 50–100 µs once TensorFlow's 300k objects exist) and glibc malloc's bytes in use
(``mallinfo2`` walks every arena's free lists: 2 µs to 2 ms) both grow with the heap. Read every
iteration, they would dominate a 1 ms ``next(it)`` step. So each is read on a time budget: a
fixed allowance (a short run of fast steps reads it at every iteration, so the verdict has
enough readings) plus a share of the run's time (a long run reads it evenly, as often as that
share pays for). Iterations between checkpoints record -1.

The allowance is spread over the run, not spent at the start. Spent at every chance, in a heap
where a reading costs 115 µs, it read iterations 0–42 of a 400-iteration run and then one more:
a Python-object leak whose onset the verdict put past iteration 42 could not be seen in the
block count, and a leak filling freed memory, with RSS flat, was called inconclusive. When the
run's length is known, in iterations or in seconds, the allowance is spent evenly over it
(every iteration if it pays for that); otherwise half of it at every chance (a short run of
fast steps reads every iteration), and the other half at times that grow geometrically, so
that the readings reach far into a run of any length.

A reading's cost is this thread's CPU time: on a machine busy with other work, a pause while
the reading ran is not its cost, and the run gets as many readings as on a quiet one (counted
in wall time, a loaded machine's pauses spent the allowance in the first iterations and left a
Python-object leak hidden behind reused memory with no block count to show it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

SPACING = 1.5  # open-ended, past half the allowance: a reading this many times later than the last


class Checkpoints:
    """``read`` at most ``allowance`` seconds plus ``share`` of the run's time in all."""

    def __init__(self, read: Callable[[], int | None], share: float, allowance: float,
                 iterations: int | None = None, seconds: float | None = None) -> None:
        self._read = read
        self._iterations = iterations  # the run's length, when bounded by a count
        self._seconds = seconds  # ... or by a time
        self._share = share
        self._allowance = allowance
        self._spent = 0.0
        self._cost: float | None = None  # running estimate of one reading's cost
        self._t0: float | None = None  # when the first reading was asked for
        self._last = 0.0  # seconds from the first reading to the latest one
        self._last_index = 0  # the iteration of the latest reading
        self._readable = True
        # read() would refuse for sure before ``closed_until``, and before both ``due_t`` and
        # ``due_index`` (perf_counter times, an iteration): callers on the hot path may skip
        # the call then and record -1 themselves (see :meth:`refuses`).
        self.closed_until = self.due_t = -math.inf
        self.due_index = -1

    def refuses(self, t_end: float, index: int) -> bool:
        """Whether :meth:`read` would surely return -1 now, known without its arithmetic (the
        meter inlines this test)."""
        return t_end < self.closed_until or (t_end < self.due_t and index < self.due_index)

    def read(self, t_end: float, index: int) -> int:
        """The value at the end of iteration ``index``, or -1 when the budget does not allow it
        yet (or it cannot be read)."""
        if not self._readable:
            return -1
        if self._t0 is None:
            self._t0 = t_end
            if self._read() is None:  # this first call also loads what it needs: not counted
                self._readable = False
                self.closed_until = math.inf  # never again: callers may skip every call
                return -1
        else:
            elapsed = t_end - self._t0
            over = self._spent + self._cost - self._share * elapsed  # beyond what the time paid
            if over > 0 and not self._allowance_pays(over, elapsed, index):
                return -1
            self._last, self._last_index = elapsed, index
        t = time.thread_time()
        value = self._read()
        cost = time.thread_time() - t
        self._spent += cost
        est = self._cost
        # One slow walk must not stop the readings for long: its weight in the estimate is
        # capped at four times the estimate so far.
        self._cost = cost if est is None else 0.8 * est + 0.2 * min(cost, 4 * est)
        self._set_due()
        return value if value is not None else -1

    def _set_due(self) -> None:
        """After a reading: when :meth:`read` will refuse the next one for sure (lower bounds;
        past them, read() decides as it always does).

        A reading is refused while the run's time does not pay for it (before ``paid``) and the
        allowance's rule does not allow it: never before ``allowed`` (the allowance could not
        cover what the time has not paid), and in a run of known length not before the even
        spacing of what the allowance can still pay for. That is at most one reading more than
        now until ``horizon``, when the time has paid for one more (times in seconds since the
        first reading)."""
        cost, share, allowance = max(self._cost, 1e-9), self._share, self._allowance
        now = self._last
        paid = (self._spent + cost) / share
        allowed = paid - allowance / share
        horizon = now + cost / share
        over = self._spent + cost - share * now
        most = max((allowance - over) / cost + 2, 1.0)  # readings the rule may spread, until then
        quiet, self.due_index = min(paid, horizon), math.inf
        if self._iterations is not None:
            self.due_index = (most * self._last_index + self._iterations) / (most + 1)
        else:
            if self._seconds is not None:
                rule = (most * now + self._seconds) / (most + 1)
            else:
                rule = min(paid - allowance / 2 / share, SPACING * now)
            quiet = min(quiet, max(allowed, rule))
        self.due_t = self._t0 + quiet
        self.closed_until = self._t0 + allowed

    def _allowance_pays(self, over: float, elapsed: float, index: int) -> bool:
        """Whether the allowance pays for a reading now that would cost ``over`` seconds beyond
        what the run's time has paid for (see the module's docstring)."""
        if over > self._allowance:
            return False
        # What is left of the allowance, spread evenly over what is still to come.
        readings = max((self._allowance - over) / self._cost + 1, 1.0)
        if self._iterations is not None:
            return index - self._last_index >= (self._iterations - index) / readings
        if self._seconds is not None:
            return elapsed - self._last >= (self._seconds - elapsed) / readings
        return over <= self._allowance / 2 or elapsed >= SPACING * self._last
