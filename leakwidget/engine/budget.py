"""When a watch stops on its own: its budget, a confident verdict, or the memory guard."""

from __future__ import annotations

from .guard import MemoryGuard
from .kinds import StopReason
from .spec import WatchSpec
from .verdict import Verdict

DEFAULT_SECONDS = 60.0  # budget when neither iterations nor seconds is given
CONFIDENT_STREAK = 3  # consecutive confident live verdicts before stopping early
MIN_ITERATIONS_FOR_CONFIDENT = 20
MIN_SECONDS_FOR_CONFIDENT = 10.0  # buffers and autotuning settle within seconds: wait them out


def planned_seconds(spec: WatchSpec) -> float | None:
    """How long the watch is expected to run: its ``seconds``, or the default budget when it
    has neither; None when only ``iterations`` bounds it (the time is unknown)."""
    if spec.seconds is not None:
        return spec.seconds
    return DEFAULT_SECONDS if spec.iterations is None else None


class Budget:
    """``-n`` / ``-t``, or, with neither, a verdict confident three times in a row after 10 s
    (at most 60 s); with ``confident_after``, a confident verdict after at least that many
    iterations, ``-t`` (default 60 s) the ceiling; and never an iteration that would take RSS
    over ``--max-rss``."""

    def __init__(self, spec: WatchSpec, guard: MemoryGuard) -> None:
        self.spec = spec
        self._guard = guard
        self._confident_streak = 0

    def count(self, verdict: Verdict, iterations: int, elapsed: float) -> None:
        """A live verdict was reached after ``iterations`` in ``elapsed`` seconds."""
        if (verdict.confident and iterations >= MIN_ITERATIONS_FOR_CONFIDENT
                and elapsed >= MIN_SECONDS_FOR_CONFIDENT):
            self._confident_streak += 1
        else:
            self._confident_streak = 0

    def reason(self, index: int, elapsed: float, last_rss: int | None) -> StopReason | None:
        """Why the watch should stop before iteration ``index`` (``last_rss``: at the end of
        the one before), or None to go on."""
        spec = self.spec
        if spec.iterations is not None and index >= spec.iterations:
            return "iterations"
        if spec.seconds is not None and elapsed >= spec.seconds:
            return "seconds"
        if spec.iterations is None and (spec.seconds is None or spec.confident_after is not None):
            if self._confident_streak >= CONFIDENT_STREAK and index >= (spec.confident_after or 0):
                return "confident"
            if spec.seconds is None and elapsed >= DEFAULT_SECONDS:
                return "seconds"
        if last_rss is not None and self._guard.before_iteration(last_rss):
            return "memory-guard"
        return None
