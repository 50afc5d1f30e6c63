"""A thread that keeps observers moving while a step runs: new RSS samples, stages, children.

``on_iteration`` is not called during a long step (or the setup); the publisher sends the
samples taken since its last batch, the stages recorded so far and the child processes' latest
reading (when there is a new one) every ``PUBLISH_INTERVAL``, and once more when the run ends,
so a view's RSS line never stalls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..stages import Stage
from .members import ChildrenReading
from .observer import PUBLISH_INTERVAL, Observer
from .sampler import Series


class Publisher:
    def __init__(self, observers: Sequence[Observer], series: Series,
                 stages: Callable[[], list[Stage]],
                 children: Callable[[], ChildrenReading | None] = lambda: None,
                 interval: float = PUBLISH_INTERVAL) -> None:
        self._observers = list(observers)
        self._series = series
        self._stages = stages
        self._children = children
        self._sent_children: ChildrenReading | None = None
        self._interval = interval
        self._sent_t = -1.0
        self._until = float("inf")  # samples after this time are not sent (end_samples_at)
        self._sent_stages: tuple[tuple[str, str], ...] = ()
        self._lock = threading.Lock()  # one batch at a time: the final flush and the thread's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="leakwidget-publisher", daemon=True)

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            t, v = self._series.since(self._sent_t)
            if t.size and t[-1] > self._until:
                keep = t <= self._until
                t, v = t[keep], v[keep]
            if t.size:
                self._sent_t = float(t[-1])
                for ob in self._observers:
                    ob.on_samples(t, v)
            stages = self._stages()
            key = tuple((s.id, s.state) for s in stages)
            if key != self._sent_stages:
                self._sent_stages = key
                for ob in self._observers:
                    ob.on_stages(stages)
            reading = self._children()
            if reading is not None and reading is not self._sent_children:
                self._sent_children = reading
                for ob in self._observers:
                    ob.on_children(reading)

    def end_samples_at(self, t: float) -> None:
        """The run drawn ends at ``t`` (the sampler's clock): what the phases after the measured
        run sample is no part of it, as it is not of the result's samples."""
        with self._lock:
            self._until = t

    def stop(self) -> None:
        """End the thread, then send what is left (from the caller's thread)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()
