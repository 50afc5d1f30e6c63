"""Several runs at once, one at a time for their observers.

A view (the dashboard) follows one run from ``on_start`` to ``on_finish``. When a comparison or
a bisection runs several watches in parallel, :class:`OneAtATime` shows them to its observers one
after another, in the order they started: the first live, each next one, when its turn comes,
replayed from what it has sent so far (its records, samples, stages, latest verdict) and then
live, or whole if it has already finished. Nothing is interleaved, so each run is still drawn as
its own series, and no run's events are lost.

What a view gets as the run (``on_start``) is a :class:`GroupControl`: Stop stops every run of the
group, not only the one drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ...stages import Stage
from ..kinds import StopReason
from ..members import ChildrenReading
from ..observer import BaseObserver, Observer, RunControl, tell_phase
from ..records import IterationRecord
from ..result import WatchResult
from ..spec import WatchSpec
from ..verdict import Verdict


class Replayable(RunControl, Protocol):
    """A run whose stream so far can be replayed (see :class:`~.isolate.IsolatedRun`)."""

    result: WatchResult | None

    def so_far(self) -> tuple[list[Stage], np.ndarray, np.ndarray, list[IterationRecord], Verdict]:
        """(stages, sample times, sample values, records, latest verdict) received so far."""
        ...


class Elsewhere:
    """What a run in a worker process or a Dask task is to the runs it is shown with: its spec,
    its result once it has one (an :class:`~.isolate.IsolatedRun`, a :class:`~.cluster.DaskRun`)."""

    spec: WatchSpec
    result: WatchResult | None

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def finished(self) -> bool:
        return self.result is not None


def replay(observer: Observer, run: Replayable) -> None:
    """What ``run`` has sent so far, to an observer that starts following it now."""
    stages, t, v, records, verdict = run.so_far()
    if stages:
        observer.on_stages(stages)
    if t.size:
        observer.on_samples(t, v)
    for record in records:
        observer.on_iteration(record)
    if records:
        observer.on_verdict(verdict)


class GroupControl:
    """The run a view is shown, whose Stop stops the whole group."""

    def __init__(self, run: RunControl, stop_all: Callable[[StopReason], None]) -> None:
        self._run = run
        self._stop_all = stop_all

    @property
    def spec(self) -> WatchSpec:
        return self._run.spec

    @property
    def label(self) -> str:
        return self._run.label

    @property
    def yields_to_loop(self) -> bool:
        return self._run.yields_to_loop

    def request_stop(self, reason: StopReason = "stopped") -> None:
        self._stop_all(reason)


class OneAtATime:
    def __init__(self, observers: Sequence[Observer], stop_all: Callable[[StopReason], None]) -> None:
        self.observers = list(observers)
        self._stop_all = stop_all
        self._waiting: list[Replayable] = []
        self._shown: Replayable | None = None

    def tap(self, run: Replayable) -> Observer:
        """The observer to attach to ``run``: it passes the run's events on in its turn."""
        return _Tap(self, run)

    # -- called by the taps -------------------------------------------------------------------
    def started(self, run: Replayable) -> None:
        if self._shown is None:
            self._show(run)
        else:
            self._waiting.append(run)

    def shown(self, run: Replayable) -> bool:
        return run is self._shown

    def finished(self, run: Replayable, result: WatchResult) -> None:
        if run is self._shown:
            for ob in self.observers:
                ob.on_finish(result)
            self._shown = None
            self._next()
        elif run not in self._waiting:
            self._waiting.append(run)  # it finished before it was ever started here

    def _next(self) -> None:
        while self._shown is None and self._waiting:
            run = self._waiting.pop(0)
            self._show(run)
            if run.result is not None:  # already over: shown whole
                self.finished(run, run.result)

    def _show(self, run: Replayable) -> None:
        self._shown = run
        control = GroupControl(run, self._stop_all)
        for ob in self.observers:
            ob.on_start(control)
            replay(ob, run)


class _Tap(BaseObserver):
    def __init__(self, seq: OneAtATime, run: Replayable) -> None:
        self.seq = seq
        self.run = run

    def _live(self) -> list[Observer]:
        return self.seq.observers if self.seq.shown(self.run) else []

    def on_start(self, run: RunControl) -> None:
        self.seq.started(self.run)

    def on_stages(self, stages: Sequence[Stage]) -> None:
        for ob in self._live():
            ob.on_stages(stages)

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None:
        for ob in self._live():
            ob.on_samples(t, rss)

    def on_children(self, reading: ChildrenReading) -> None:
        for ob in self._live():
            ob.on_children(reading)

    def on_iteration(self, record: IterationRecord) -> None:
        for ob in self._live():
            ob.on_iteration(record)

    def on_verdict(self, verdict: Verdict) -> None:
        for ob in self._live():
            ob.on_verdict(verdict)

    def on_phase(self, what: str) -> None:
        tell_phase(self._live(), what)

    def on_finish(self, result: WatchResult) -> None:
        self.seq.finished(self.run, result)
