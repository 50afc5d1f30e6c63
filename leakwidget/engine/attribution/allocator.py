"""Allocator retention: the RSS glibc's ``malloc_trim(0)`` hands back, memory freed but kept."""

from __future__ import annotations

from ..sampler import malloc_trim, rss


def trim() -> int | None:
    """Ask the allocator to return free memory to the OS; bytes of RSS handed back, or None."""
    before = rss()
    if not malloc_trim():
        return None
    return max(0, before - rss())


class Retention:
    """Trims before the run and, when it grew, after it: what the second trim returns was kept."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def start(self) -> None:
        # Freed memory the allocator kept from before this run would otherwise be credited to it
        # when we trim at the end.
        if trim() is None:
            self.notes.append(
                "This C library has no malloc_trim, so allocator retention could not be measured; "
                "growth is split into Python and native only."
            )

    @staticmethod
    def reclaim(grew: bool) -> int | None:
        """At the end: bytes handed back (None: not measured, nothing grew or no malloc_trim)."""
        # Only a run that grew is trimmed: the bytes matter only next to a growth.
        return trim() if grew else None
