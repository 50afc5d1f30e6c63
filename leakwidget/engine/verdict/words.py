"""The sentences a verdict is told in, made from the numbers its hypothesis found."""

from __future__ import annotations

from dataclasses import replace

from ..units import format_bytes, format_duration, format_range
from .constants import MIN_POINTS
from .model import (
    Doubt,
    Filled,
    Finding,
    Flat,
    Growth,
    NoData,
    NoFit,
    Noisy,
    NotYetSignificant,
    PythonBlocks,
    StepThenFlat,
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
                f"Inconclusive after {v.iterations} iterations: "
                f"{after_warmup} after the warm-up, at least {MIN_POINTS} are needed."
            ), "too few iterations"
        case PythonBlocks(blocks):
            return (
                f"Leak of Python objects: {blocks.slope:+,.0f} allocator blocks per iteration "
                f"(95%: {blocks.low:,.0f}\u2013{blocks.high:,.0f}; about "
                f"{format_bytes(v.slope)}) since iteration {v.onset}. RSS has not grown yet: the "
                "process is reusing memory it freed earlier, and RSS will follow once that is used up."
            ), "python-blocks"
        case Growth():
            return _leak(v), ""
        case Filled(grown, first, last):
            return (
                f"Plateau: memory grew by {format_bytes(grown)} over iterations "
                f"{int(first)}\u2013{int(last)}, then stopped growing "
                f"({format_bytes(v.slope, signed=True)} per iteration since; "
                f"95%: {format_range(v.slope_low, v.slope_high)}): a buffer or cache filling up, "
                "not a leak."
            ), ""
        case Flat() | StepThenFlat():
            return _stable(v, story), ""
        case Unexplained() | TooLittle() | Unsteady() | NotYetSignificant() | Noisy() | NoFit():
            reason = _doubt(story)
            return (
                f"Inconclusive after {v.iterations} iterations: {reason}; run longer "
                f"(slope {format_bytes(v.slope, signed=True)} per iteration, "
                f"95%: {format_range(v.slope_low, v.slope_high)})."
            ), reason


def _leak(v: Verdict) -> str:
    line = (
        f"Leak: {format_bytes(v.slope, signed=True)} per iteration "
        f"(95%: {format_range(v.slope_low, v.slope_high)}) since iteration {v.onset}"
    )
    if v.exhaust_iterations is not None:
        when = (
            f"about {format_duration(v.exhaust_seconds)} ({v.exhaust_iterations:,.0f} iterations)"
            if v.exhaust_seconds is not None
            else f"about {v.exhaust_iterations:,.0f} iterations"
        )
        line += f"; at this rate available memory runs out in {when}"
    return line + "."


def _stable(v: Verdict, story: Flat | StepThenFlat) -> str:
    warm = f" (iterations 0\u2013{v.warmup - 1})" if v.warmup > 1 else ""
    slope = (
        f"{format_bytes(v.slope, signed=True)} per iteration "
        f"(95%: {format_range(v.slope_low, v.slope_high)})."
    )
    if isinstance(story, Flat):
        return f"Stable: no growth after the warm-up{warm}: {slope}"
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
        case Unsteady():
            return "memory grew, but not steadily (a jump, or growth that may be levelling off)"
        case NotYetSignificant():
            return "memory is growing, but not yet significantly enough to call it a leak"
        case Noisy(sigma, high):
            return (
                "no significant growth, but the noise ("
                f"{format_bytes(sigma)}) still allows a leak of up to "
                f"{format_bytes(high)} per iteration"
            )
        case NoFit():
            return "the data do not fit a leak, a plateau or a stable level"
