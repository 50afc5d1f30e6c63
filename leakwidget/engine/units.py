"""Sizes and durations as people read and write them: ``parse_size("2GiB")``, ``format_bytes``."""

from __future__ import annotations

import math
import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}


def parse_size(value: int | float | str) -> int:
    """'2GiB' → 2147483648, '500M' → 500000000, 1024 → 1024. Raises ValueError when unclear."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 1:
            raise ValueError(f"a size must be at least 1 byte, not {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"not a size: {value!r} (use a number of bytes or a unit: 500M, 500MiB, 2G, 2GiB)"
        )
    n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if n < 1:
        raise ValueError(f"a size must be at least 1 byte, not {value!r}")
    return int(n)


def format_bytes(n: float, signed: bool = False) -> str:
    """Human size in binary units: 98 KiB, 1.5 MiB; signed=True adds + / − ."""
    sign = ""
    if signed:
        sign = "+" if n >= 0 else "\u2212"
    elif n < 0:
        sign = "\u2212"
    a = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if a < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{_bytes(a)} B"
            return f"{sign}{a:.0f} {unit}" if a >= 100 else f"{sign}{a:.1f} {unit}"
        a /= 1024
    raise AssertionError("unreachable")


def _bytes(a: float) -> str:
    """A count of bytes, a fraction of one under 10 with two significant digits: slopes are
    averages, and "+0 B per iteration (95%: 0–1 B)" beside "creeping up" says nothing true."""
    if a >= 10 or a == 0:
        return f"{a:.0f}"
    decimals = max(1, 1 - math.floor(math.log10(a)))
    return f"{a:.{decimals}f}".rstrip("0").rstrip(".")


def _format_number(v: float, div: int, unit: str) -> str:
    x = v / div
    s = _bytes(abs(x)) if unit == "B" else f"{abs(x):.0f}" if abs(x) >= 100 else f"{abs(x):.1f}"
    return ("\u2212" if x < 0 and s.strip("0.") else "") + s


def format_range(lo: float, hi: float) -> str:
    """'91–104 KiB' with a shared unit."""
    scale = max(abs(lo), abs(hi))
    for unit, div in (("B", 1), ("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3)):
        if scale < 1024 * div or unit == "GiB":
            return f"{_format_number(lo, div, unit)}\u2013{_format_number(hi, div, unit)} {unit}"
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def rss_travel(start: float, first: float, last: float, peak: float) -> str:
    """'RSS 251 MiB at the start, 300 MiB after the first iteration, 310 MiB at the end; peak
    320 MiB': what the process's memory did, each figure named, so the setup's and the first
    iteration's own growth are not read as the run's."""
    return (f"RSS {format_bytes(start)} at the start, {format_bytes(first)} after the first "
            f"iteration, {format_bytes(last)} at the end; peak {format_bytes(peak)}")


def trim_line(reclaimed: float, growth: float) -> str:
    """The line under the attribution's table (text and HTML): what malloc_trim(0) returned
    against the growth; not "20.4 MiB of 9.0 MiB growth" when it returned more (memory freed
    before the run, or by the final clean-up)."""
    growth = max(growth or 0, 0)
    if reclaimed > growth:
        return (f"malloc_trim(0) handed back {format_bytes(reclaimed)}, more than the "
                f"{format_bytes(growth)} the run grew.")
    return f"malloc_trim(0) handed back {format_bytes(reclaimed)} of the {format_bytes(growth)} growth."
