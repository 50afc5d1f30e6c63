"""The memory guard: stop a run before the process runs out of memory.

The sampler thread checks every sample (125 a second) against ``--max-rss`` and the system's
(or cgroup's) available memory; it trips one sample early when RSS, growing as fast as since the
last sample, would cross the limit by the next one. When it trips, the run is asked to stop (a
flag the loop checks at every iteration end, whatever the step does with exceptions) and, while
the step runs, :class:`MemoryGuardTripped` is raised inside it — again every
``REINJECT_INTERVAL`` for as long as the step goes on over the limit, so a bare ``except:`` in
the user's code cannot swallow it for good. Between iterations the loop also refuses to start an
iteration that, growing twice as much as the worst one so far, could cross ``--max-rss``.

What it cannot stop: growth faster than one sample interval can see (a single allocation of
hundreds of MiB lands before any check), and native code that never returns to Python (the
exception is raised when the interpreter next runs Python code).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

from .units import format_bytes

MIN_AVAILABLE_FRACTION = 0.10  # stop when available memory falls under this share of the total
REINJECT_INTERVAL = 0.05  # seconds between interrupts of a step that goes on over the limit
# Headroom kept before --max-rss, in multiples of the worst rise of one iteration so far: a noisy
# step's next rise can exceed every one before it (a Keras batch keeping 4 MiB rose 4-9 MiB).
RISE_MARGIN = 2


class MemoryGuardTripped(BaseException):
    """Raised inside the step by the sampler thread when memory is about to run out.

    A BaseException, so that user code's ``except Exception`` cannot swallow it.
    """


def _checkpoint() -> None:
    """A function call: the interpreter checks for pending asynchronous exceptions here."""


class MemoryGuard:
    def __init__(self, max_rss: int | None, total: int | None, on_trip: Callable[[], None], *,
                 interrupt: bool = True) -> None:
        self.max_rss = max_rss
        self.interrupt = interrupt  # raise inside the step (only a step of this process)
        self.total = total
        self.reason = ""
        self.max_rise = 0  # the largest growth within one iteration so far
        self._on_trip = on_trip
        self._lock = threading.Lock()
        self._main_tid = threading.get_ident()
        self._in_step = False
        self._injected_at: float | None = None  # when the step was last interrupted
        self._last_rss: int | None = None

    # -- in the sampler thread ----------------------------------------------------------------
    def check(self, rss: int, available: int | None) -> str | None:
        rising = max(0, rss - self._last_rss) if self._last_rss is not None else 0
        self._last_rss = rss
        if self.max_rss is not None and rss + rising >= self.max_rss:
            return (f"RSS reached {format_bytes(rss)} and was about to cross --max-rss "
                    f"{format_bytes(self.max_rss)}" if rss < self.max_rss else
                    f"RSS reached {format_bytes(rss)}, over --max-rss {format_bytes(self.max_rss)}")
        if available is not None and self.total and available < MIN_AVAILABLE_FRACTION * self.total:
            return (f"available memory fell to {format_bytes(available)} "
                    f"(under {MIN_AVAILABLE_FRACTION:.0%} of {format_bytes(self.total)})")
        return None

    def trip(self, reason: str) -> None:
        # Interrupt the step now rather than after it allocates more.
        with self._lock:
            if not self.reason:
                self.reason = reason
                self._on_trip()
            now = time.monotonic()
            if self.interrupt and self._in_step and (self._injected_at is None or now - self._injected_at >= REINJECT_INTERVAL):
                self._injected_at = now
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._main_tid), ctypes.py_object(MemoryGuardTripped)
                )

    # -- in the loop's thread -------------------------------------------------------------------
    def enter_step(self) -> None:
        # No lock: trip() acts only once it sees _in_step, and the thread is set before it.
        self._main_tid = threading.get_ident()
        self._in_step = True

    def leave_step(self) -> None:
        with self._lock:
            self._in_step = False
            injected = self._injected_at is not None
        if injected:
            # An exception injected just as the step returned has not fired yet: let it fire
            # here, inside the caller's try, rather than later in someone else's code. (It is
            # never cancelled with SetAsyncExc(tid, NULL): on 3.11 that leaves the eval
            # breaker set and the next traced call — pdb, coverage, --lines — spins forever.)
            _checkpoint()

    def before_iteration(self, last_rss: int) -> str | None:
        """Could one more iteration cross --max-rss (growing up to RISE_MARGIN times the worst
        rise so far)? Then stop before it."""
        if self.max_rss is None or last_rss + RISE_MARGIN * self.max_rise < self.max_rss:
            return None
        self.reason = (f"the next iteration could take RSS from {format_bytes(last_rss)} over "
                       f"--max-rss {format_bytes(self.max_rss)}")
        return self.reason
