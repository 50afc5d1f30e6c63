"""The words the engine answers in, declared once: verdicts, attributions, stop reasons.

Every module that compares a kind imports it from here (``Literal`` types for the checker, the
tuples for validation and documentation), so a misspelt kind is a type error, not a silent
``False``.
"""

from __future__ import annotations

from typing import Literal, get_args

VerdictKind = Literal["leak", "plateau", "stable", "inconclusive"]
VERDICT_KINDS: tuple[VerdictKind, ...] = get_args(VerdictKind)

# "copy-on-write": forked workers copying what they share with their parent (engine/copying.py).
# "garbage": objects left unreachable in reference cycles, awaiting the cycle collector.
AttributionKind = Literal["python", "native", "allocator", "garbage", "copy-on-write", "none"]
ATTRIBUTION_KINDS: tuple[AttributionKind, ...] = get_args(AttributionKind)
# Growth the program does not keep: memory the allocator holds after it was freed, or garbage
# the collector has yet to free. A leak verdict with one of these reads "Growing, but not a
# leak of your code".
NOT_KEPT: tuple[AttributionKind, ...] = ("allocator", "garbage")
# How a leak verdict reads with its attribution (reading()): as the verdict says (None), memory
# the program does not keep ("retention"), or garbage hiding a kept part too briefly measured to
# call ("unsettled").
Reading = Literal["retention", "unsettled"]


def reading(verdict_kind: str, attribution_kind: str | None,
            kept_unsettled: float | None) -> Reading | None:
    """A leak verdict whose growth the attribution found the program does not keep (NOT_KEPT)
    reads "retention" ("Growing, but not a leak of your code"); under garbage, one whose heap
    kept a part past it that the phase was too short to call a leak or not
    (Attribution.kept_unsettled) reads "unsettled"; anything else reads as its verdict (None)."""
    if verdict_kind != "leak" or attribution_kind not in NOT_KEPT:
        return None
    return "unsettled" if attribution_kind == "garbage" and kept_unsettled is not None else "retention"


def shown_kind(verdict_kind: str, read: Reading | None, copying: bool) -> str:
    """The kind a result is shown as (the dashboard's banner, the chart, the page): "plateau"
    for workers copying what they share (bounded by it: a plateau per worker), "retention",
    "inconclusive" for an unsettled reading (whether a leak is behind the garbage is open), else
    the verdict's."""
    if copying:
        return "plateau"
    return {"retention": "retention", "unsettled": "inconclusive"}.get(read or "", verdict_kind)

# Why a watch ended: its budget ("iterations", "seconds"), a confident verdict, the user
# (an interrupt, or Stop in a view: "stopped"), the step's exception, the memory guard, the
# worker process of an isolated watch ending without a result ("worker-died"), or the watched
# code running to its own end ("ended": a training run that completed, a program that exited).
StopReason = Literal[
    "iterations", "seconds", "confident", "interrupted", "error", "memory-guard", "stopped",
    "worker-died", "ended",
]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)

# The malloc an isolated watch's worker runs with: glibc's own, or one preloaded (LD_PRELOAD).
Allocator = Literal["glibc", "jemalloc", "tcmalloc"]
ALLOCATORS: tuple[Allocator, ...] = get_args(Allocator)
