"""A one-line progress report for plain IPython and ``--no-widget`` runs."""

from __future__ import annotations

import sys
from typing import TextIO

from ..engine.observer import BaseObserver, RunControl, view_interval
from ..engine.records import IterationRecord
from ..engine.result import WatchResult
from ..engine.verdict import Verdict

REHEARSED_LINES = 200  # output messages a kernel's path sends before the baseline (on_start)


class ProgressLine(BaseObserver):
    """``[leakwatch] N iterations, T s, RSS … — verdict`` rewritten in place every half second.

    IPython 9 keeps every write a cell makes to ``sys.stdout`` in its history's outputs
    (``HistoryManager.outputs``, for as long as the kernel lives) by patching the stream's
    ``write`` while the cell runs: 200-250 B a line (50 KiB per 200 lines, never given back),
    read as the watched step's growth. The line is the tool's, so it is written with the stream's
    own ``write``, past that record."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self._kind = "inconclusive"
        self._last = 0.0
        self._shown = False

    def on_start(self, run: RunControl) -> None:
        # At once, on the loop's thread, before the baseline: the user sees the run begin, and
        # the kernel's path for this thread's output is set up before it is measured.
        self._write("\r[leakwatch] starting\u2026".ljust(78))
        self._shown = True
        if type(self.stream).__module__.startswith("ipykernel"):
            # A kernel's path for output messages (its IOPub thread, ZMQ) takes memory over its
            # first messages: with one line before the baseline, a 10 s watch of a calm cell
            # took 12-28 KiB in 4 KiB steps, one every few lines, and one kernel in five said
            # "Inconclusive: memory may be creeping up". After REHEARSED_LINES sent at once (a
            # carriage return each, nothing to see; ~50 ms), 30 lines at 4 a second took
            # nothing (measured in fresh kernels: docs/attribution.md).
            for _ in range(REHEARSED_LINES):
                self._write("\r")

    def on_verdict(self, verdict: Verdict) -> None:
        self._kind = verdict.kind

    def on_iteration(self, record: IterationRecord) -> None:
        if record.end - self._last < view_interval(0.5, record.end):
            return
        self._last = record.end
        self._write(
            f"\r[leakwatch] {record.index + 1:,} iterations, {record.end:.0f} s, "
            f"RSS {record.rss / 2**20:,.1f} MiB \u2014 {self._kind}".ljust(78)
        )
        self._shown = True

    def on_finish(self, result: WatchResult) -> None:
        if self._shown:
            self._write("\n")

    def _write(self, text: str) -> None:
        own = getattr(type(self.stream), "write", None)
        if own is not None:
            own(self.stream, text)
        else:  # a proxy whose class has no write of its own
            self.stream.write(text)
        self.stream.flush()
