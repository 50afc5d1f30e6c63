"""Where the messages of runs elsewhere meet: one queue, handled in the caller's thread.

Runs in worker processes (:mod:`.isolate`) and tasks on a Dask cluster (:mod:`.cluster`) put
their messages here from their reader threads; the driver of a watch, a comparison or a
bisection calls :meth:`Hub.wait` between its pauses, and each message is handed to its run in
that one thread, so observers (a dashboard) see the events in order and from one thread.
"""

from __future__ import annotations

import queue
import time
from typing import Any, Protocol

CHECK_INTERVAL = 0.2  # seconds between liveness checks of the runs


class Remote(Protocol):
    """A run whose events arrive as messages."""

    def handle(self, message: tuple) -> None:
        """One message, in the order it was put (the caller's thread)."""
        ...

    def check(self) -> None:
        """Notice what sends no message (a process that died without closing its pipe)."""
        ...


class Hub:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Remote, Any]] = queue.SimpleQueue()
        self.runs: list[Remote] = []
        self._next_check = 0.0

    def put(self, run: Remote, message: Any) -> None:
        """From any thread."""
        self._queue.put((run, message))

    def wait(self, timeout: float) -> None:
        """Handle every message that arrives within ``timeout`` seconds (at least the first)."""
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            item = None
        while item is not None:
            run, message = item
            run.handle(message)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                item = None
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            for run in list(self.runs):
                run.check()
