"""The words the engine answers in, declared once: verdicts, attributions, stop reasons.

Every module that compares a kind imports it from here (``Literal`` types for the checker, the
tuples for validation and documentation), so a misspelt kind is a type error, not a silent
``False``.
"""

from __future__ import annotations

from typing import Literal, get_args

VerdictKind = Literal["leak", "plateau", "stable", "inconclusive"]
VERDICT_KINDS: tuple[VerdictKind, ...] = get_args(VerdictKind)

AttributionKind = Literal["python", "native", "allocator", "none"]
ATTRIBUTION_KINDS: tuple[AttributionKind, ...] = get_args(AttributionKind)

# Why a watch ended: its budget ("iterations", "seconds"), a confident verdict, the user
# (an interrupt, or Stop in a view: "stopped"), the step's exception, or the memory guard.
StopReason = Literal[
    "iterations", "seconds", "confident", "interrupted", "error", "memory-guard", "stopped",
]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)
