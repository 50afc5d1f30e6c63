"""Which variant of a comparison, if any, is the fix — named only when the numbers show it.

**Each variant's growth, with a 95% interval.** RSS at the end of each iteration after the
variant's warm-up (the verdict's own), against the iteration: the verdict's robust trend
(:func:`~leakwidget.engine.verdict.batches`: batch medians long enough that their residuals are
nearly independent, then Theil–Sen with Sen's interval widened for the autocorrelation that is
left). Memory series are sticky and move in steps, so neither a difference of two readings nor an
interval that treats iterations as independent is honest; this one is the verdict's. The slope
and its interval, times the number of iterations glibc's run measured (the *horizon*), are each
variant's growth "over the run" — one length for all, since the variants ran for different
numbers of iterations.

**The rule** (:func:`decide`), in order:

1. The baseline (glibc as it is) must have run: if it raised, died, was interrupted or stopped,
   or ran too few iterations to measure, there is no answer.
2. If glibc itself does not grow — its verdict is stable, its interval reaches zero (a plateau
   or a creep within noise), or it grew less than :data:`MIN_DIFFERENCE` — there is no allocator
   retention: nothing to fix.
3. A variant is named better only when it finished (a variant that raised, died, was
   interrupted or stopped is shown as such, never named), the upper end of its interval lies
   below the lower end of glibc's, and its growth is at least :data:`MIN_DIFFERENCE` less and
   at most half of glibc's (:data:`MIN_SHARE`: a variant that keeps 1% of the growth away is
   lower, but it is not what stops the growth). The best is the one whose growth is surely the
   least: the lowest upper end of an interval (a point estimate below zero with a wide interval
   is noise, not a better allocator); the others are named as also better.
4. Otherwise no variant helps: the growth is not the allocator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..result import WatchResult
from ..units import format_bytes, format_range
from ..verdict import MIN_POINTS, batches

__all__ = ["MIN_DIFFERENCE", "Answer", "AnswerKind", "Growth", "VariantStatus", "decide", "growth_of", "ranked",
           "status_of"]

MIN_DIFFERENCE = 1024 * 1024  # a variant must keep at least this much less over the run
MIN_SHARE = 0.5  # ... and at least this share of glibc's growth: 1% less is not the fix

AnswerKind = Literal["fix", "nothing-to-fix", "no-variant-helps", "no-answer"]
# How a variant's run ended, as the comparison reads it: only "finished" and "memory-guard"
# runs are compared (the memory guard stopped one that grew: its numbers stand).
VariantStatus = Literal["finished", "memory-guard", "error", "died", "interrupted", "stopped"]
COMPARED: tuple[VariantStatus, ...] = ("finished", "memory-guard")


@dataclass(frozen=True)
class Growth:
    """A variant's RSS trend after its warm-up: bytes per iteration, its 95% interval, and the
    iterations it was measured over."""

    slope: float
    low: float
    high: float
    measured: int

    def over(self, iterations: int) -> tuple[float, float, float]:
        """(growth, low, high) in bytes over ``iterations``."""
        return self.slope * iterations, self.low * iterations, self.high * iterations


def growth_of(result: WatchResult) -> Growth | None:
    """The trend of a variant's RSS after its warm-up (None: too few iterations to measure)."""
    index, rss = result.column("index"), result.column("rss")
    if index.size == 0:
        return None
    keep = index >= index[0] + result.verdict.warmup
    x, y = index[keep].astype(float), rss[keep].astype(float)
    if x.size < MIN_POINTS:
        return None
    _bx, _by, trend, _m = batches(x, y)
    if not (np.isfinite(trend.low) and np.isfinite(trend.high)):
        return None
    return Growth(trend.slope, trend.low, trend.high, int(x.size))


def status_of(result: WatchResult) -> VariantStatus:
    stopped = result.stopped
    if stopped == "worker-died":
        return "died"
    if result.error is not None or stopped == "error":
        return "error"
    if stopped in ("interrupted", "stopped", "memory-guard"):
        return stopped
    return "finished"


def status_text(result: WatchResult) -> str:
    """'finished (time up)', 'raised ValueError in iteration 3', 'worker died', ..."""
    status = status_of(result)
    if status == "error":
        where = f" in iteration {result.error_iteration}" if result.error_iteration is not None else ""
        return f"raised {type(result.error).__name__}{where}: {result.error}"
    if status == "died":
        return "its worker process died"
    words = {"interrupted": "interrupted", "stopped": "stopped before it finished",
             "memory-guard": "stopped by the memory guard"}
    why = {"seconds": "time up", "iterations": "all iterations", "confident": "sure early"}
    return words.get(status, f"finished ({why.get(result.stopped, result.stopped)})")


@dataclass(frozen=True)
class Answer:
    """What the comparison says: its kind, the variant named (None unless kind is "fix"), the
    headline, why (the numbers behind it), and the other variants that are also better."""

    kind: AnswerKind
    best: str | None
    headline: str
    why: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    horizon: int = 0  # iterations every growth is expressed over


def growth_text(g: Growth, horizon: int) -> str:
    """'+2.1 MiB (95%: 1.5–2.8 MiB)'."""
    est, lo, hi = g.over(horizon)
    return f"{format_bytes(est, signed=True)} (95%: {format_range(lo, hi)})"


def decide(named: Sequence[tuple[str, WatchResult]], baseline: int = 0) -> Answer:
    """The comparison's answer (see the module's docstring); ``named[baseline]`` is glibc."""
    if not named:
        return Answer("no-answer", None, "No answer: no variant ran")
    base_name, base = named[baseline]
    if all(status_of(r) in ("interrupted", "stopped") for _n, r in named):
        return Answer("no-answer", None, "No answer: the comparison was interrupted before it finished",
                      ("No variant is named from runs that did not finish.",))
    if status_of(base) not in COMPARED:
        return Answer("no-answer", None, f"No answer: {base_name}, the baseline, {status_text(base)}",
                      ("Without the baseline's run there is nothing to compare the others against.",))
    g = growth_of(base)
    if g is None:
        return Answer("no-answer", None, f"No answer: {base_name} ran too few iterations to measure "
                      f"its growth ({base.iteration_count:,})", ("Run longer (-t SECONDS).",))
    horizon = g.measured
    est, lo, _hi = g.over(horizon)
    if base.verdict.kind == "stable" or lo <= 0 or est < MIN_DIFFERENCE:
        return Answer("nothing-to-fix", None, "No allocator retention: nothing to fix",
                      (_flat(base_name, base, g, horizon),), horizon=horizon)
    better, why_not = _better(named, baseline, g, horizon)
    if not better:
        return Answer("no-variant-helps", None, "No variant helps: the growth is not the allocator's",
                      (f"{base_name} grew {growth_text(g, horizon)} over {horizon:,} iterations; no "
                       f"variant's interval lies below it by {format_bytes(MIN_DIFFERENCE)} and half "
                       "the growth.",
                       *why_not), horizon=horizon)
    (best, bg), *others = ranked(better)
    why = [f"{best}'s 95% interval lies below {base_name}'s: {growth_text(bg, horizon)} against "
           f"{growth_text(g, horizon)}, {format_bytes((g.slope - bg.slope) * horizon)} less over "
           f"{horizon:,} iterations."]
    if any(o.slope < bg.slope for _n, o in others):
        why.append(f"{best} is named first because its growth is surely the least (the lowest upper "
                   "end of an interval); a lower estimate with a wider interval is not shown to be lower.")
    if bg.over(horizon)[1] > 0:
        why.append(f"{best} still grows: what is left is not the allocator's to keep.")
    why += [f"{n} grew less than {base_name} too: {growth_text(o, horizon)}." for n, o in others]
    return Answer("fix", best, f"Fix: {best} keeps memory down ({format_bytes(bg.slope * horizon, signed=True)} "
                  f"against {format_bytes(est, signed=True)} with {base_name})",
                  tuple(why + why_not), tuple(n for n, _o in others), horizon)


def _flat(name: str, result: WatchResult, g: Growth, horizon: int) -> str:
    if result.verdict.kind == "stable":
        return f"{name}'s own run is stable: {growth_text(g, horizon)} over {horizon:,} iterations."
    if g.over(horizon)[1] <= 0:
        return (f"{name}'s growth is within the noise: {growth_text(g, horizon)} over {horizon:,} "
                "iterations, an interval that reaches zero.")
    return (f"{name} grew only {growth_text(g, horizon)} over {horizon:,} iterations, less than "
            f"{format_bytes(MIN_DIFFERENCE)}.")


def ranked(better: Sequence[tuple[str, Growth]]) -> list[tuple[str, Growth]]:
    """The variants that qualify, surest first: by the upper end of their interval (the most
    each can be said to grow), then by their estimate."""
    return sorted(better, key=lambda item: (item[1].high, item[1].slope))


def _better(named: Sequence[tuple[str, WatchResult]], baseline: int, g: Growth,
            horizon: int) -> tuple[list[tuple[str, Growth]], list[str]]:
    """The variants clearly below the baseline, and why each other one is not named."""
    better, why_not = [], []
    for i, (name, result) in enumerate(named):
        if i == baseline:
            continue
        if status_of(result) not in COMPARED:
            why_not.append(f"{name} {status_text(result)}: not compared.")
            continue
        v = growth_of(result)
        if v is None:
            why_not.append(f"{name} ran too few iterations to measure ({result.iteration_count:,}).")
        elif v.low > g.high:
            why_not.append(f"{name}: {growth_text(v, horizon)}, an interval above {named[baseline][0]}'s: "
                           "it grew more.")
        elif v.high >= g.low:
            why_not.append(f"{name}: {growth_text(v, horizon)}, an interval that overlaps {named[baseline][0]}'s.")
        elif (g.slope - v.slope) * horizon < MIN_DIFFERENCE:
            why_not.append(f"{name}: {growth_text(v, horizon)}, less than {format_bytes(MIN_DIFFERENCE)} "
                           "below it.")
        elif g.slope - v.slope < MIN_SHARE * g.slope:
            share = (g.slope - v.slope) / g.slope
            why_not.append(f"{name}: {growth_text(v, horizon)}, only {share:.0%} less: it would not stop "
                           "the growth.")
        else:
            better.append((name, v))
    return better, why_not
