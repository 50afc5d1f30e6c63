"""The sentences a verdict is told in, made from the numbers its hypothesis found."""

from __future__ import annotations

import re
from dataclasses import replace

from ..units import format_bytes, format_duration, format_range
from .constants import MIN_LEAK_GROWTH, MIN_POINTS, STABLE_HORIZON_S
from .model import (
    Creep,
    Doubt,
    Filled,
    Finding,
    Flat,
    Growth,
    HeapInUse,
    Levelling,
    NoData,
    NoFit,
    Noisy,
    NotYetSignificant,
    PythonBlocks,
    Slowing,
    StepThenFlat,
    StillInUse,
    TooFew,
    TooLittle,
    Unexplained,
    Unsteady,
    Verdict,
)


def tell(found: Finding) -> Verdict:
    """The finding's verdict with its words: the summary, and the reason where there is one."""
    summary, reason = _say(found)
    return replace(found.verdict, summary=summary, reason=reason)


def _say(found: Finding) -> tuple[str, str]:
    v, story = found.verdict, found.story
    match story:
        case NoData():
            return "Inconclusive: no iteration finished.", "no data"
        case TooFew(after_warmup):
            return (
                f"Inconclusive after {v.iterations:,} iterations: "
                f"{after_warmup} after the warm-up, at least {MIN_POINTS} are needed."
            ), "too few iterations"
        case PythonBlocks(blocks):
            return (
                f"Leak of Python objects: {blocks.slope:+,.0f} allocator blocks per iteration "
                f"(95%: {blocks.low:,.0f}\u2013{blocks.high:,.0f}; about "
                f"{format_bytes(v.slope)}) since iteration {v.onset}. RSS has not grown yet: the "
                "process is reusing memory it freed earlier, and RSS will follow once that is used up."
            ), "python-blocks"
        case HeapInUse():
            return (
                f"Leak: {format_bytes(v.slope, signed=True)} per iteration in use (memory malloc "
                f"handed out and did not get back; 95%: {format_range(v.slope_low, v.slope_high)}) "
                f"since iteration {v.onset}. RSS has not grown yet: the process is reusing memory "
                "it freed earlier, and RSS will follow once that is used up."
            ), "heap-in-use"
        case Growth():
            return _leak(v), ""
        case Slowing():
            return _slowing_leak(v, story), ""
        case Filled(grown, first, last, still, exhaust) if still:
            return (
                f"Plateau so far: memory grew by {format_bytes(grown)} over iterations "
                f"{int(first)}\u2013{int(last)}, then slowed down but has not stopped: "
                f"{format_bytes(v.slope, signed=True)} per iteration since "
                f"(95%: {format_range(v.slope_low, v.slope_high)}), a slower leak behind a "
                f"buffer that filled, or the end of its filling{_runs_out(*exhaust)}."
            ), "still growing"
        case Filled(grown, first, last, _, _, tail_exhaust, unsure):
            # "Stopped" only when the slope since is not significant, and "not a leak" only
            # when what may go on behind the fill is too little to matter: a small rise that
            # goes on is said, not hidden behind its interval (a cached dataset read each step
            # grew 22 MiB in 16 iterations, then +55.5 KiB an iteration, 95%: 0-115 KiB).
            then = ("then slowed down" if unsure else "then stopped growing" if v.slope_low <= 0
                    else "then slowed down to a fraction of that rate")
            head = (f"Plateau: memory grew by {format_bytes(grown)} over iterations "
                    f"{int(first)}\u2013{int(last)}, {then} "
                    f"({format_bytes(v.slope, signed=True)} per iteration since; "
                    f"95%: {format_range(v.slope_low, v.slope_high)}): a buffer or cache filling up")
            if unsure:
                return (f"{head}; a slower leak behind it, of up to {format_bytes(v.slope_high)} "
                        "per iteration, is not ruled out yet: run longer to tell."), "tail unsure"
            if tail_exhaust[1] is not None and tail_exhaust[1] < STABLE_HORIZON_S:
                return (f"{head}, with a slower growth behind it that goes on"
                        f"{_runs_out(*tail_exhaust)}."), ""
            return f"{head}, not a leak.", ""
        case Levelling(current, since, earlier, exhaust):
            return (
                f"Growth slowing down after {v.iterations:,} iterations: "
                f"{format_bytes(current.slope, signed=True)} per iteration now (since iteration "
                f"{int(since)}; 95%: {format_range(current.low, current.high)}), down from "
                f"{format_bytes(earlier.slope, signed=True)} since iteration {v.onset}. It may "
                f"level off (a cache warming up) or go on at the current rate"
                f"{_runs_out(*exhaust)}."
            ), "slowing"
        case Flat() | StepThenFlat() | Creep():
            return _stable(v, story), ""
        case (Unexplained() | TooLittle() | StillInUse() | Unsteady() | NotYetSignificant() | Noisy()
              | NoFit()):
            reason = _doubt(story)
            return (
                f"Inconclusive after {v.iterations:,} iterations: {reason}; run longer "
                f"(slope {format_bytes(v.slope, signed=True)} per iteration, "
                f"95%: {format_range(v.slope_low, v.slope_high)})."
            ), reason


def _leak(v: Verdict) -> str:
    line = (
        f"Leak: {format_bytes(v.slope, signed=True)} per iteration "
        f"(95%: {format_range(v.slope_low, v.slope_high)}) since iteration {v.onset}"
    )
    if v.exhaust_iterations is not None and (v.exhaust_iterations < 1 or (
            v.exhaust_seconds is not None and v.exhaust_seconds < 1)):
        # At the memory guard's limit (or the machine's) already: not "runs out in about 0 s".
        line += (f"; memory is at the limit it may use ({max(v.exhaust_iterations, 0):,.0f} "
                 "more iterations at this rate)")
    elif v.exhaust_iterations is not None:
        when = (
            f"about {format_duration(v.exhaust_seconds)} ({v.exhaust_iterations:,.0f} iterations)"
            if v.exhaust_seconds is not None
            else f"about {v.exhaust_iterations:,.0f} iterations"
        )
        line += f"; at this rate available memory runs out in {when}"
    return line + "."


def _runs_out(iterations: float | None, seconds: float | None) -> str:
    """'; at that rate available memory runs out in about 2.1 h (310,000 iterations)', or ''."""
    if iterations is None:
        return ""
    when = (f"{format_duration(seconds)} ({iterations:,.0f} iterations)" if seconds is not None
            else f"{iterations:,.0f} iterations")
    return f"; at that rate available memory runs out in about {when}"


def _slowing_leak(v: Verdict, story: Slowing) -> str:
    line = (
        f"Leak, slowing down: {format_bytes(v.slope, signed=True)} per iteration now (since "
        f"iteration {int(story.since)}; 95%: {format_range(v.slope_low, v.slope_high)}), down "
        f"from {format_bytes(story.earlier.slope, signed=True)} since iteration "
        f"{int(story.earlier_onset)}"
    )
    if v.exhaust_iterations is not None:
        line += _runs_out(v.exhaust_iterations, v.exhaust_seconds).replace("that rate",
                                                                           "the current rate")
    return line + "."


def _stable(v: Verdict, story: Flat | StepThenFlat | Creep) -> str:
    warm = f" (iterations 0\u2013{v.warmup - 1})" if v.warmup > 1 else ""
    slope = (
        f"{format_bytes(v.slope, signed=True)} per iteration "
        f"(95%: {format_range(v.slope_low, v.slope_high)})."
    )
    if isinstance(story, Flat):
        return f"Stable: no growth after the warm-up{warm}: {slope}"
    if isinstance(story, Creep):
        return (
            f"Stable: no growth worth calling a leak after the warm-up{warm}: even at its 95% "
            f"upper bound the creep adds {format_bytes(story.most)} over the run, less than a "
            f"leak must add ({format_bytes(MIN_LEAK_GROWTH)}), and would take over a month to use "
            f"the memory available: {slope}"
        )
    return (
        f"Stable: after the warm-up{warm} memory rose once by {format_bytes(story.rise)} "
        f"(iterations {int(story.first)}\u2013{int(story.last)}) and has stayed flat since: "
        f"{slope}"
    )


def _doubt(doubt: Doubt) -> str:
    """Why the verdict is inconclusive, as the clause the summary quotes."""
    match doubt:
        case Unexplained(grown, rises):
            return (
                f"memory grew by {format_bytes(grown)}, in steps worth only {rises:.0f} equal rises, "
                "while nothing in use grew (malloc's bytes in use and Python's objects stayed flat): "
                "the allocator taking more room for the same data, which usually levels off"
            )
        case TooLittle(grown, needed):
            return (
                f"memory grew steadily but only by {format_bytes(grown)}, "
                f"too little to call a leak (at least {format_bytes(needed)}: 1 MiB, or what "
                "one iteration allocates and frees, which the allocator may keep)"
            )
        case StillInUse(since, what, grown, rate, flat):
            rss = (f"RSS has not grown since iteration {int(since)}" if flat else
                   f"RSS levelled off after iteration {int(since)}")
            return (
                f"{rss}, but {what} kept rising at their "
                f"lows, by {format_bytes(grown)} (about {format_bytes(rate, signed=True)} per "
                "iteration): the process is reusing memory it freed earlier, and what it keeps is "
                "still growing, so this is no plateau yet and may be a leak"
            )
        case Unsteady():
            return "memory grew, but not steadily (a jump, or growth that may be levelling off)"
        case NotYetSignificant():
            # Significant at 95% only: it may be noise, so it is not "growing" yet.
            return "memory may be creeping up, but not significantly enough to call it a leak"
        case Noisy(sigma, high):
            return (
                "no significant growth, but the noise ("
                f"{format_bytes(sigma)}) still allows a leak of up to "
                f"{format_bytes(high)} per iteration"
            )
        case NoFit():
            return "the data do not fit a leak, a plateau or a stable level"


RETENTION_PREFIX = "Growing, but not a leak of your code: "
# The verdict's time until memory runs out at RSS's rate (_leak, _runs_out): "at this rate
# available memory runs out in about 21.1 h (1,614,330 iterations)", "... in 9,500 iterations".
RUNS_OUT = re.compile(r"; at (?:this|that|the current) rate available memory runs out in (?:about )?"
                      r"[\d.,]+ [a-z]+(?: \([\d,]+ iterations\))?")


def unsettled_prefix(kept: float) -> str:
    """The first words of an unsettled reading (kinds.reading): garbage, and the most the heap
    may keep past it an iteration, which the run was too short to call."""
    return (f"Growing, mostly garbage awaiting Python's cycle collector; the heap may keep up to "
            f"{format_bytes(kept, signed=True)} an iteration past it, and this run is too short "
            "to call that a leak or not: ")


def exhaust_at(v: Verdict, rate: float) -> tuple[float | None, float | None]:
    """The verdict's (iterations, seconds) until available memory runs out, at ``rate`` bytes
    an iteration instead of its slope (both linear in the rate); (None, None) without them."""
    if v.exhaust_iterations is None or v.slope <= 0 or rate <= 0:
        return None, None
    scale = v.slope / rate
    return (v.exhaust_iterations * scale,
            None if v.exhaust_seconds is None else v.exhaust_seconds * scale)


def behind_summary(v: Verdict, kept: float) -> str:
    """A leak behind much garbage (Attribution.kept_behind): the leak is what the heap keeps past
    the garbage, ``kept`` an iteration; RSS's slope, the garbage's sawtooth on top, is not the
    rate memory runs out at."""
    line = (f"Leak: {format_bytes(kept, signed=True)} per iteration kept past the garbage since "
            f"iteration {v.onset} (RSS: {format_bytes(v.slope, signed=True)} per iteration, 95%: "
            f"{format_range(v.slope_low, v.slope_high)}, most of it garbage awaiting Python's "
            "cycle collector, which its full collections free)")
    iterations, seconds = exhaust_at(v, kept)
    return line + _runs_out(iterations, seconds).replace("that rate", "this rate") + "."


def read_summary(v: Verdict, read: str | None, kept: float | None = None,
                 behind: float | None = None) -> str:
    """A leak verdict's sentence as it reads with its attribution (kinds.reading): the numbers of
    the growth without the word "leak" for memory the program does not keep, or beside garbage
    whose kept part is unsettled; a leak behind garbage at its own rate (``behind``,
    Attribution.kept_behind); else the verdict's own."""
    verdict_summary = v.summary or f"Verdict: {v.kind}"
    if read is None:
        return behind_summary(v, behind) if behind is not None and v.kind == "leak" else verdict_summary
    # "Leak: +X per iteration", "Leak, slowing down: ..." -> "RSS growth: ...", "RSS growth, ...".
    # Without when memory runs out at RSS's rate: memory the allocator keeps, or garbage that
    # Python's full collections free, levels off; an unsettled part is not measured by it.
    numbers = RUNS_OUT.sub("", re.sub(r"^Leak\b", "RSS growth", verdict_summary))
    return (unsettled_prefix(kept) if read == "unsettled" else RETENTION_PREFIX) + numbers
