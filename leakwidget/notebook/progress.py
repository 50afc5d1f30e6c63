"""A one-line progress report for plain IPython and ``--no-widget`` runs."""

from __future__ import annotations

import sys
from typing import TextIO

from ..engine.observer import BaseObserver, view_interval
from ..engine.records import IterationRecord
from ..engine.result import WatchResult
from ..engine.verdict import Verdict


class ProgressLine(BaseObserver):
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self._kind = "inconclusive"
        self._last = 0.0
        self._shown = False

    def on_verdict(self, verdict: Verdict) -> None:
        self._kind = verdict.kind

    def on_iteration(self, record: IterationRecord) -> None:
        if record.end - self._last < view_interval(0.5, record.end):
            return
        self._last = record.end
        self.stream.write(
            f"\r[leakwatch] {record.index + 1:,} iterations, {record.end:.0f} s, "
            f"RSS {record.rss / 2**20:,.1f} MiB \u2014 {self._kind}".ljust(78)
        )
        self.stream.flush()
        self._shown = True

    def on_finish(self, result: WatchResult) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
