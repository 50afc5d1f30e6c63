"""What the attribution reports: the kind of growth, its slopes, and the tables behind them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..kinds import AttributionKind
from ..units import format_bytes, trim_line

TOP_N = 10  # rows of each table (growing types, growing allocation sites)
DEFAULT_BYTES_PER_BLOCK = 64.0  # typical pymalloc block when the census gives no better figure


@dataclass
class TypeGrowth:
    """A Python type whose live count grows, or a container whose length grows."""

    name: str  # "dict", "mymodule.Record", or "list of bytes (len 1,200)" for a container
    per_iteration: float  # objects (or container items) added per iteration
    bytes_per_iteration: float  # estimated from sampled sizes
    mean_size: float  # bytes per object (one level deep)
    steady: bool | None = None  # grew in both halves of the run (None: one interval only)
    container: bool = False  # a container whose length grows (not a type count)
    counted: bool = True  # part of the census estimate (False: its items are counted by type)
    payload: bool = False  # objects the collector does not track (arrays, buffers), sized exactly
    _blocks: float = field(default=0.0, repr=False)  # pymalloc blocks per object (estimate)
    _block_bytes: float = field(default=0.0, repr=False)
    _outside: float = field(default=0.0, repr=False)  # bytes / iteration of it outside Python's heap
    _id: int = field(default=0, repr=False)  # a container row's id(), to find it again
    _item: str = field(default="", repr=False)  # a container row's item type
    _holds: str = field(default="", repr=False)  # a dict row's items: "values" or "keys"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "per_iteration": self.per_iteration,
            "bytes_per_iteration": self.bytes_per_iteration,
            "mean_size": self.mean_size,
            "steady": self.steady,
            "container": self.container,
            "counted": self.counted,
            "payload": self.payload,
        }


@dataclass
class SiteGrowth:
    """A tracemalloc allocation site (file:line) whose live memory grows."""

    site: str
    bytes_per_iteration: float
    blocks_per_iteration: float
    total_bytes: int  # growth between the two snapshots
    source: str = ""

    def to_dict(self) -> dict:
        return {
            "site": self.site,
            "bytes_per_iteration": self.bytes_per_iteration,
            "blocks_per_iteration": self.blocks_per_iteration,
            "total_bytes": self.total_bytes,
            "source": self.source,
        }


@dataclass
class LineGrowth:
    """One line of the step: RSS growth while it ran, summed over iterations."""

    filename: str
    lineno: int
    source: str
    total_increment: int  # bytes, summed over all profiled iterations
    grew_share: float  # share of iterations in which this line grew RSS
    iterations: int  # iterations in which the line ran

    @property
    def site(self) -> str:
        return f"{self.filename}:{self.lineno}"

    def to_dict(self) -> dict:
        return {
            "filename": self.filename,
            "lineno": self.lineno,
            "source": self.source,
            "total_increment": self.total_increment,
            "grew_share": self.grew_share,
            "iterations": self.iterations,
        }


@dataclass
class NativeSite:
    """A call stack whose allocations, made in the traced window, were still alive at its end."""

    where: str  # the innermost frame that is not allocator plumbing, and the nearest Python frame
    frames: tuple[str, ...]  # innermost first, C/C++ and Python frames
    bytes_per_iteration: float
    allocations_per_iteration: float
    total_bytes: int  # over the window

    def to_dict(self) -> dict:
        return {
            "where": self.where,
            "frames": list(self.frames),
            "bytes_per_iteration": self.bytes_per_iteration,
            "allocations_per_iteration": self.allocations_per_iteration,
            "total_bytes": self.total_bytes,
        }


@dataclass
class RefPath:
    """What keeps objects of a growing type alive: a reference path from a root."""

    target: str  # the growing row (TypeGrowth.name) whose objects the path reaches
    root: str  # "__main__.decoded", "closure cell 'cache' of mod.f", "mod.Holder.items", …
    text: str  # "__main__.decoded (list) → numpy.ndarray"
    length: int  # objects on the path

    def to_dict(self) -> dict:
        return {"target": self.target, "root": self.root, "text": self.text, "length": self.length}


# Where the Python share was read: the only estimate (blocks x an average block size) and the
# two measured ones.
FROM_BLOCKS, FROM_TRACEMALLOC, FROM_CENSUS = "allocated blocks", "tracemalloc", "object census"
BUFFER_SHARE = 0.1  # native buffers Python objects own are named from this share of their growth


@dataclass
class Attribution:
    kind: AttributionKind = "none"
    python_slope: float = 0.0  # bytes / iteration held by Python objects
    native_slope: float = 0.0  # RSS slope − Python slope
    rss_slope: float = 0.0
    reclaimed_bytes: int | None = None  # RSS malloc_trim(0) handed back, less what our census left (None: not measured)
    in_use_slope: float | None = None  # glibc malloc's bytes in use / iteration (None: not read)
    growth_bytes: float = 0.0  # the growth being attributed (trend over the leak, else total)
    python_source: str = ""  # which estimate the Python slope came from (FROM_*)
    blocks_slope: float = 0.0  # pymalloc blocks / iteration
    bytes_per_block: float = DEFAULT_BYTES_PER_BLOCK
    traced_slope: float | None = None  # tracemalloc bytes / iteration, when tracing
    census_slope: float | None = None  # object census bytes / iteration
    buffer_slope: float | None = None  # of python_slope, bytes / iteration in native buffers
    top_types: list[TypeGrowth] = field(default_factory=list)
    top_sites: list[SiteGrowth] = field(default_factory=list)
    lines: list[LineGrowth] = field(default_factory=list)
    gpu: dict | None = None
    # garbage.py's phase: what an iteration leaves to the cycle collector (objects, bytes, types
    # per iteration; the oldest generation's size; None: no phase ran)
    garbage: dict | None = None
    # Under "garbage": the most bytes / iteration the heap may keep past it (95%), where the phase
    # was too short to rule out or call a slower leak (decide.py's _kept_unsettled); else None
    kept_unsettled: float | None = None
    # Not "garbage": the bytes / iteration the heap kept past much garbage when that is the leak
    # (decide.py's _kept_grows): the leak's own rate, under RSS's, which the garbage's sawtooth
    # inflates; else None
    kept_behind: float | None = None
    # bytes free in malloc's heap once the watch trimmed it before iteration 0 (None: not read)
    free_at_start: int | None = None
    # kind "allocator" because RSS climbed back into that free memory, nothing more in use
    # (decide.py's _refills), not because malloc_trim handed the growth back at the end
    refilling: bool = False
    native_sites: list[NativeSite] = field(default_factory=list)  # native=True: biggest first
    native_window: tuple[int, int] | None = None  # iterations memray traced (first, last)
    paths: list[RefPath] = field(default_factory=list)  # what keeps the growing types alive
    growth_of: str = ""  # what was attributed: "leak", "plateau" (its rise), "growth", or ""
    censuses: int = 0
    overhead_seconds: float = 0.0  # time the tracker spent inside the run (census, snapshots)
    finish_seconds: float = 0.0  # time spent at the end (final census, trim, snapshot diff)
    summary: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def names_buffers(self) -> bool:
        """Whether native buffers the Python objects own are a share of them worth naming (a
        census's +0.016 B/iteration of them is noise, not a finding)."""
        return self.buffer_slope is not None and self.buffer_slope >= BUFFER_SHARE * self.python_slope > 0

    def to_dict(self) -> dict:
        def num(v: float | None) -> float | None:
            if v is None:
                return None
            v = float(v)
            return v if math.isfinite(v) else None

        return {
            "kind": self.kind,
            "python_slope": num(self.python_slope),
            "native_slope": num(self.native_slope),
            "rss_slope": num(self.rss_slope),
            "reclaimed_bytes": self.reclaimed_bytes,
            "in_use_slope": num(self.in_use_slope),
            "growth_bytes": num(self.growth_bytes),
            "python_source": self.python_source,
            "blocks_slope": num(self.blocks_slope),
            "bytes_per_block": num(self.bytes_per_block),
            "traced_slope": num(self.traced_slope),
            "census_slope": num(self.census_slope),
            "buffer_slope": num(self.buffer_slope),
            "top_types": [t.to_dict() for t in self.top_types],
            "top_sites": [s.to_dict() for s in self.top_sites],
            "lines": [ln.to_dict() for ln in self.lines],
            "gpu": self.gpu,
            "garbage": self.garbage,
            "kept_unsettled": num(self.kept_unsettled),
            "kept_behind": num(self.kept_behind),
            "free_at_start": self.free_at_start,
            "refilling": self.refilling,
            "native_sites": [n.to_dict() for n in self.native_sites],
            "native_window": list(self.native_window) if self.native_window else None,
            "paths": [p.to_dict() for p in self.paths],
            "growth_of": self.growth_of,
            "censuses": self.censuses,
            "overhead_seconds": self.overhead_seconds,
            "finish_seconds": self.finish_seconds,
            "summary": self.summary,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        out = [self.summary or f"Attribution: {self.kind}"]
        if self.kind not in ("none", "copy-on-write"):  # (copies: this process's heap is not the story)
            out.extend(self._split())
        if self.top_types and self.kind != "none":  # with no growth, census noise is not news
            out.append("Growing Python objects:")
            out.append(_table(
                ["type", "count/iter", "bytes/iter", "steady"],
                [[t.name, f"{t.per_iteration:+.2f}", format_bytes(t.bytes_per_iteration, signed=True),
                  {True: "yes", False: "no", None: "?"}[t.steady]] for t in self.top_types],
            ))
        if self.paths:
            out.append("What keeps them alive (reference paths from a root):")
            out.extend(f"  {p.text}" for p in self.paths)
        out.extend(self._native_table())
        out.extend(self._evidence_tables())
        out.extend(f"Note: {n}" for n in self.notes)
        return "\n".join(out)

    def _split(self) -> list[str]:
        """The RSS slope split into Python and native, and what malloc_trim handed back."""
        per = "per iteration of the rise" if self.growth_of == "plateau" else "per iteration"
        out = [_table(
            ["", per],
            [
                ["RSS", format_bytes(self.rss_slope, signed=True)],
                [f"Python objects ({self.python_source or 'none'})",
                 format_bytes(self.python_slope, signed=True)],
                *([["  of which native buffers they own", format_bytes(self.buffer_slope, signed=True)]]
                  if self.names_buffers else []),
                ["native (the rest)", format_bytes(self.native_slope, signed=True)],
                *([["malloc's bytes in use", format_bytes(self.in_use_slope, signed=True)]]
                  if self.in_use_slope is not None and self.growth_of != "plateau" else []),
                *([["garbage awaiting the cycle collector", format_bytes(self.garbage["bytes"])]]
                  if self.garbage is not None and self.growth_of != "plateau" else []),
            ],
        )]
        if self.reclaimed_bytes is not None:
            out.append(trim_line(self.reclaimed_bytes, self.growth_bytes))
        return out

    def _native_table(self) -> list[str]:
        """native=True: the call stacks of memory allocated in the window and not freed."""
        if not self.native_sites or self.native_window is None:
            return []
        first, last = self.native_window
        out = [f"Native call stacks of memory allocated and not freed in iterations "
               f"{first}\u2013{last} (memray):"]
        out.append(_table(
            ["bytes/iter", "allocs/iter", "where"],
            [[format_bytes(n.bytes_per_iteration), f"{n.allocations_per_iteration:.2g}",
              n.where[:110]] for n in self.native_sites],
        ))
        top = self.native_sites[0]
        out.append("  Biggest stack, innermost first:")
        out.extend(f"    {f[:110]}" for f in top.frames[:12])
        return out

    def _evidence_tables(self) -> list[str]:
        """What --trace, --lines and a GPU add: allocation sites, lines of the step, GPU memory."""
        out = []
        if self.top_sites:
            out.append("Growing allocation sites (tracemalloc):")
            out.append(_table(
                ["site", "bytes/iter", "blocks/iter", "source"],
                [[s.site, format_bytes(s.bytes_per_iteration, signed=True),
                  f"{s.blocks_per_iteration:+.1f}", s.source[:50]] for s in self.top_sites],
            ))
        if self.lines:
            out.append("Lines of the step (RSS growth while each line ran):")
            out.append(_table(
                ["line", "total", "grew in", "source"],
                [[str(ln.lineno), format_bytes(ln.total_increment, signed=True),
                  f"{ln.grew_share:.0%}", ln.source[:60]] for ln in self.lines],
            ))
        if self.gpu:
            out.append(
                f"GPU {self.gpu['device']}: current {format_bytes(self.gpu['current'])}, "
                f"{format_bytes(self.gpu['slope'], signed=True)}/iteration, "
                f"peak {format_bytes(self.gpu['peak'])}."
            )
        return out

    def _repr_pretty_(self, p, cycle) -> None:  # IPython shows the tables, not a dataclass repr
        p.text(str(self))


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  " + "  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)
