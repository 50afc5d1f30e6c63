"""The dashboard's worker lines: each child process's private memory beside the tree's total.

A watch of a process with children samples the tree's total (the run's line on the RSS chart);
the children's readings arrive through ``on_children`` (a :class:`ChildrenReading` about ten
times a second, from any process the watch runs in). :class:`WorkerLines` keeps each child's
private memory in its own :class:`~leakwidget.report.decimate.Buckets` and draws the change of
each since the run began (:func:`~leakwidget.report.workers.run_from`), on the run's own scales, as one bqplot ``Lines`` mark
of up to :data:`~leakwidget.report.workers.MAX_LINES` lines (one message per redraw; rows padded
with NaN, which bqplot leaves undrawn). Which lines, their labels and colours:
:mod:`leakwidget.report.workers`. At the end of a run the lines are redrawn from the result's
own series (``result.children``), with the copy-on-write test's "(copying)".

Bounded: the mark sends at most ``MAX_LINES`` × 2 × ``BUCKETS`` values; a child's buckets are
allocated when it is first seen (at most ``MAX_TRACKED`` of them) and
reused by the next run's children (the engine reads at most ``MAX_MEMBERS`` children a run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import bqplot as bq
import numpy as np

from ..engine.children import ChildResult
from ..engine.members import MAX_MEMBERS, ChildrenReading
from ..report.colours import MIB
from ..report.decimate import Buckets
from ..report.workers import (
    WORKER_COLOURS,
    child_label,
    growth_of,
    label,
    largest,
    not_shown,
    run_from,
)

BUCKETS = 128  # per child: 256 points at most per line
MAX_TRACKED = MAX_MEMBERS  # children given their own buckets (the engine reads no more)


@dataclass
class Tracked:
    """One child as the dashboard keeps it."""

    pid: int
    label: str
    colour: str  # by the order it was found in: it keeps its colour while others come and go
    private: Buckets
    copying: bool = False


class WorkerLines:
    """The children's lines of one run; cleared when the next run starts."""

    def __init__(self, x: bq.LinearScale, y: bq.LinearScale) -> None:
        empty = np.zeros((0, 0), np.float32)
        self.mark = bq.Lines(x=empty, y=empty, scales={"x": x, "y": y}, colors=list(WORKER_COLOURS),
                             stroke_width=1.5)
        self._pool: list[Buckets] = []  # reused by every run
        self.children: dict[int, Tracked] = {}
        self.entries: list[dict] = []  # the legend's, in the order drawn
        self.note = ""
        self.y_range: tuple[float, float] | None = None  # MiB of change after the setup
        self.t_max = 0.0  # the last reading drawn (the one at the run's end comes after its samples)

    def clear(self) -> None:
        self.children.clear()
        self.entries, self.note, self.y_range, self.t_max = [], "", None, 0.0
        if self.mark.x.size:
            with self.mark.hold_sync():
                self.mark.x = self.mark.y = np.zeros((0, 0), np.float32)

    def add(self, reading: ChildrenReading) -> None:
        """A round of readings (the publisher's thread; the caller holds the data lock)."""
        for m in reading.members:
            tracked = self.children.get(m.pid) or self._track(m.pid, label(m.number, m.forked))
            if tracked is not None:
                tracked.private.append(reading.t, float(m.private))

    def finish(self, children: Sequence[ChildResult]) -> None:
        """The run's end: each child's whole series from the result, and its label with the
        copy-on-write test's answer."""
        self.clear()
        for c in children:
            tracked = self._track(c.pid, child_label(c))
            if tracked is None:
                continue
            tracked.copying = bool(c.copying is not None and c.copying.copying)
            for t, v in c.samples:
                tracked.private.append(float(t), float(v))

    def _track(self, pid: int, name: str) -> Tracked | None:
        if len(self.children) >= MAX_TRACKED:
            return None
        n = len(self.children)
        if n == len(self._pool):
            self._pool.append(Buckets(BUCKETS))
        private = self._pool[n]
        private.clear()
        colour = WORKER_COLOURS[n % len(WORKER_COLOURS)]
        self.children[pid] = tracked = Tracked(pid, name, colour, private)
        return tracked

    def draw(self, start: float | None) -> None:
        """The lines of the children that grew most, as change since ``start`` (the end of the
        setup; see ``report.workers.run_from``). (The children are read until the run's last
        iteration has ended and once more then, never during the watch's own end.)"""
        lines = {}
        for pid, c in self.children.items():
            t, v = c.private.envelope()
            if t.size:
                lines[pid] = (t, v)
        growth = {pid: growth_of(t, v, start) for pid, (t, v) in lines.items()}
        shown = largest({pid: g[1] for pid, g in growth.items()})  # none while all are flat
        width = max((lines[p][0].size for p in shown), default=0)
        x = np.full((len(shown), width), np.nan, np.float32)
        y = np.full((len(shown), width), np.nan, np.float32)
        lows, highs = [], []
        for row, pid in enumerate(shown):
            t, v = lines[pid]
            change = (v - growth[pid][0]) / MIB
            x[row, : t.size], y[row, : t.size] = t, change
            after = change[run_from(t, start):]  # the setup's readings do not set the scale
            lows.append(float(after.min()))
            highs.append(float(after.max()))
        colours = [self.children[pid].colour for pid in shown]
        with self.mark.hold_sync():
            self.mark.x, self.mark.y = x, y
            if colours and colours != list(self.mark.colors):
                self.mark.colors = colours
        self.y_range = (min(lows), max(highs)) if shown else None
        self.t_max = max((float(lines[p][0][-1]) for p in shown), default=0.0)
        self.entries = [{"label": self.children[pid].label, "colour": self.children[pid].colour,
                         "copying": self.children[pid].copying} for pid in shown]
        self.note = not_shown(len(lines) - len(shown)) if shown else ""
