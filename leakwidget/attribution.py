"""What is growing: Python objects, native memory, or memory the allocator keeps.

The runner attaches a :class:`Tracker` to every watch; at the end it sets
``result.attribution`` to an :class:`Attribution`::

    r = leakwidget.watch(step, iterations=300)
    r.attribution.kind          # "python", "native", "allocator" or "none"
    r.attribution.summary       # one sentence
    print(r.attribution)        # the sentence plus tables
    r.attribution.top_types     # Python types (and containers) that grow, per iteration
    r.attribution.top_sites     # with trace=True: file:line allocation sites that grow
    r.attribution.lines         # with lines=True: growth per line of the step

How it is decided (docs/attribution.md has the details and the ways it can be wrong):

* **RSS slope** — the verdict's slope (bytes per iteration after the warm-up).
* **Python slope** — the larger of two estimates of the bytes held by Python objects:
  the slope of ``sys.getallocatedblocks()`` (recorded by the runner every iteration) times a
  bytes-per-block figure, or — with ``trace=True`` or when tracemalloc is already on — the slope
  of tracemalloc's traced memory; and the *object census*: counts of every gc-tracked type and the
  length of every list/dict/set/deque, taken at a few checkpoints (not every iteration), with sizes
  from ``sys.getsizeof`` / ``nbytes``. The census is what sees a retained NumPy array or ``bytes``
  payload, which lives outside pymalloc's blocks.
* **Native slope** = RSS slope − Python slope.
* **Allocator retention** — when the run grew, glibc's ``malloc_trim(0)`` is called and the RSS
  it hands back is measured. If that is at least half of the growth, the growth was memory that
  had been freed but kept by the allocator: reclaimable, and not the user's code.

The default mode costs almost nothing per iteration (a counter and a comparison). The object
census is taken twice: after the setup, before iteration 0 (what it leaves with the allocator
falls in iteration 0, always warm-up), and at the end, after the verdict — never in the middle of
the RSS series the verdict reads. ``Tracker(census=True)`` adds censuses at iterations 1, 2, 4, 8,
… within a time budget. ``malloc_trim(0)`` is also called once at the start, so memory freed
before the watch is not credited to it.
"""

from __future__ import annotations

import collections
import functools
import gc
import inspect
import itertools
import linecache
import math
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import sampler as _sampler
from .verdict import format_bytes, trend

KINDS = ("python", "native", "allocator", "none")

CENSUS_BUDGET = 0.005  # share of the run's wall time the object census may take (default mode)
CENSUS_ALLOWANCE = 0.010  # seconds the census may always take, so short runs get a middle checkpoint
TRACE_BUDGET = 0.10  # with --trace the user asked for slow; snapshots may take more
MAX_CENSUSES = 8  # kept at once: the first one and the most recent ones (geometric spacing
# means the last seven reach back to 1/128 of the run, past any warm-up)
CONTAINERS_REPORTED = 5  # containers whose length grew the most
TYPES_SIZED = 12  # growing types whose objects are sampled for a size at the end
SAMPLE_PER_TYPE = 16
REFERENTS_SIZED = 64  # per sampled object; more are extrapolated
TOP_N = 10
SMALL_OBJECT = 512  # pymalloc serves requests up to this size; larger ones go to malloc
DEFAULT_BYTES_PER_BLOCK = 64.0  # typical pymalloc block when the census gives no better figure
MIN_GROWTH = 1 << 20  # growth under this, without a leak/plateau verdict, is attributed to nothing
RETENTION_SHARE = 0.5  # malloc_trim returning at least this share of the growth -> "allocator"
SERIES_CAP = 4096  # per-iteration series (traced memory, GPU) thin 2:1 beyond this

_CONTAINER_TYPES = frozenset(
    {list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict}
)
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN = "leakwidget."  # the watcher's own objects are not the user's growth


# ---------------------------------------------------------------------------------------------
# Result types


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
    _blocks: float = field(default=0.0, repr=False)  # pymalloc blocks per object (estimate)
    _block_bytes: float = field(default=0.0, repr=False)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "per_iteration": self.per_iteration,
            "bytes_per_iteration": self.bytes_per_iteration,
            "mean_size": self.mean_size,
            "steady": self.steady,
            "container": self.container,
            "counted": self.counted,
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
class Attribution:
    kind: str = "none"
    python_slope: float = 0.0  # bytes / iteration held by Python objects
    native_slope: float = 0.0  # RSS slope − Python slope
    rss_slope: float = 0.0
    reclaimed_bytes: int | None = None  # RSS that malloc_trim(0) handed back (None: not measured)
    growth_bytes: float = 0.0  # the growth being attributed (trend over the leak, else total)
    python_source: str = ""  # which estimate the Python slope came from
    blocks_slope: float = 0.0  # pymalloc blocks / iteration
    bytes_per_block: float = DEFAULT_BYTES_PER_BLOCK
    traced_slope: float | None = None  # tracemalloc bytes / iteration, when tracing
    census_slope: float | None = None  # object census bytes / iteration
    top_types: list[TypeGrowth] = field(default_factory=list)
    top_sites: list[SiteGrowth] = field(default_factory=list)
    lines: list[LineGrowth] = field(default_factory=list)
    gpu: dict | None = None
    censuses: int = 0
    overhead_seconds: float = 0.0  # time the tracker spent inside the run (census, snapshots)
    finish_seconds: float = 0.0  # time spent at the end (final census, trim, snapshot diff)
    summary: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        def num(v):
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
            "growth_bytes": num(self.growth_bytes),
            "python_source": self.python_source,
            "blocks_slope": num(self.blocks_slope),
            "bytes_per_block": num(self.bytes_per_block),
            "traced_slope": num(self.traced_slope),
            "census_slope": num(self.census_slope),
            "top_types": [t.to_dict() for t in self.top_types],
            "top_sites": [s.to_dict() for s in self.top_sites],
            "lines": [ln.to_dict() for ln in self.lines],
            "gpu": self.gpu,
            "censuses": self.censuses,
            "overhead_seconds": self.overhead_seconds,
            "finish_seconds": self.finish_seconds,
            "summary": self.summary,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        out = [self.summary or f"Attribution: {self.kind}"]
        if self.kind != "none":
            out.append(
                _table(
                    ["", "per iteration"],
                    [
                        ["RSS", format_bytes(self.rss_slope, signed=True)],
                        [f"Python objects ({self.python_source or 'none'})",
                         format_bytes(self.python_slope, signed=True)],
                        ["native (the rest)", format_bytes(self.native_slope, signed=True)],
                    ],
                )
            )
            if self.reclaimed_bytes is not None:
                out.append(f"malloc_trim(0) handed back {format_bytes(self.reclaimed_bytes)} "
                           f"of {format_bytes(max(self.growth_bytes, 0))} growth.")
        if self.top_types and self.kind != "none":  # with no growth, census noise is not news
            out.append("Growing Python objects:")
            out.append(_table(
                ["type", "count/iter", "bytes/iter", "steady"],
                [[t.name, f"{t.per_iteration:+.2f}", format_bytes(t.bytes_per_iteration, signed=True),
                  {True: "yes", False: "no", None: "?"}[t.steady]] for t in self.top_types],
            ))
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
        out.extend(f"Note: {n}" for n in self.notes)
        return "\n".join(out)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython shows the tables, not a dataclass repr
        p.text(str(self))


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  " + "  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Small helpers


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Robust (Theil–Sen) slope of y over x: the verdict's own estimator."""
    if np.asarray(x).size < 2:
        return 0.0
    s = trend(x, y).slope
    return float(s) if math.isfinite(s) else 0.0


class _Series:
    """(iteration, values…) rows; over the cap every other row is dropped, so it stays bounded."""

    def __init__(self, width: int, capacity: int = SERIES_CAP) -> None:
        self.data = np.zeros((capacity, width + 1))
        self.n = 0

    def append(self, index: int, *values: float) -> None:
        if self.n == self.data.shape[0]:
            kept = self.data[: self.n : 2].copy()
            self.n = kept.shape[0]
            self.data[: self.n] = kept
        self.data[self.n, 0] = index
        self.data[self.n, 1:] = values
        self.n += 1

    def array(self) -> np.ndarray:
        return self.data[: self.n]


def _type_name(t: type) -> str:
    mod = getattr(t, "__module__", None)
    qn = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    return qn if mod in (None, "builtins") else f"{mod}.{qn}"


def _payload(o: Any) -> int:
    """Bytes of a buffer an object owns outside its own header (NumPy array, TF tensor)."""
    mod = type(o).__module__ or ""
    try:
        if mod.startswith("numpy"):
            nb = getattr(o, "nbytes", 0)
            return int(nb) if isinstance(nb, (int, np.integer)) else 0
        if mod.startswith("tensorflow") and hasattr(o, "dtype") and hasattr(o, "shape"):
            n = o.shape.num_elements()
            return int(n * o.dtype.size) if n is not None else 0
    except Exception:  # an object whose attributes raise must not break the census
        return 0
    return 0


def _blocks_of(o: Any, size: int) -> tuple[int, int]:
    """(pymalloc blocks, their bytes) an object of this size occupies, roughly.

    Up to 512 bytes an object is one pymalloc block rounded up to 16 bytes; a larger list, dict
    or set keeps its header in a block and its item array in malloc; a larger str/bytes/tuple or
    array payload is one malloc allocation and no block at all.
    """
    if size <= SMALL_OBJECT:
        return 1, 16 * math.ceil(size / 16)
    if isinstance(o, (list, dict, set, collections.deque)):
        head = type(o).__basicsize__
        return 1, 16 * math.ceil(head / 16)
    return 0, 0


def _size(o: Any) -> tuple[int, int, int]:
    """(bytes, pymalloc blocks, bytes in those blocks) of an object and the untracked objects it
    refers to directly (one level deep).

    One level catches the strings and numbers inside a dict or list and the payload of a NumPy
    array; deeper structure is counted through its own (gc-tracked) type.
    """
    try:
        s = max(sys.getsizeof(o), _payload(o))
    except Exception:
        return 0, 0, 0
    nb, bb = _blocks_of(o, s)
    try:
        refs = gc.get_referents(o)
    except Exception:
        return s, nb, bb
    # A big container's items are sampled, not all sized: the census must stay cheap.
    scale = max(1.0, len(refs) / REFERENTS_SIZED)
    rs_sum = nb1 = bb1 = 0
    for r in refs[:REFERENTS_SIZED] if scale > 1 else refs:
        if not gc.is_tracked(r) and not isinstance(r, type):
            try:
                rs = max(sys.getsizeof(r), _payload(r))
            except Exception:
                continue
            rs_sum += rs
            b1, b2 = _blocks_of(r, rs)
            nb1 += b1
            bb1 += b2
    return int(s + rs_sum * scale), int(nb + nb1 * scale), int(bb + bb1 * scale)


def _container_items(o: Any, k: int) -> list:
    """The k most recently added items of a container (keys and values for a dict)."""
    try:
        if isinstance(o, dict):
            out: list = []
            for key, val in itertools.islice(reversed(o.items()), k):
                out.extend((key, val))
            return out
        if isinstance(o, (list, collections.deque)):
            return list(itertools.islice(reversed(o), k))
        return list(itertools.islice(iter(o), k))
    except Exception:  # mutated while we looked, or an exotic subclass
        return []


def trim() -> int | None:
    """Ask the allocator to return free memory to the OS; bytes of RSS handed back, or None."""
    before = _sampler.rss()
    if not _sampler.malloc_trim():
        return None
    return max(0, before - _sampler.rss())


def find_step_code(fn: Any) -> types.CodeType | None:
    """The code object whose lines are the user's step.

    Handles a plain function, a code object, the magic's cell (a function that ``exec``-s the
    compiled cell, found through ``__code__cell__`` or its closure), ``functools.partial`` and
    wrappers that set ``__wrapped__`` (the runner's setup/state closure does).
    """
    seen: set[int] = set()
    chain: list = []
    obj = fn
    while obj is not None and id(obj) not in seen and len(chain) < 20:
        seen.add(id(obj))
        chain.append(obj)
        if isinstance(obj, functools.partial):
            obj = obj.func
        else:
            obj = getattr(obj, "__wrapped__", None)
    for obj in chain:  # the innermost explicit cell code wins over a wrapper's own code
        if isinstance(obj, types.CodeType):
            return obj
        cell = getattr(obj, "__code__cell__", None)
        if isinstance(cell, types.CodeType):
            return cell
    for obj in reversed(chain):
        for c in getattr(obj, "__closure__", None) or ():
            try:
                v = c.cell_contents
            except ValueError:  # empty cell
                continue
            if isinstance(v, types.CodeType):
                return v
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            return code
        call = inspect.getattr_static(type(obj), "__call__", None)
        code = getattr(call, "__code__", None)
        if isinstance(code, types.CodeType) and not isinstance(obj, type):
            return code
    return None


# ---------------------------------------------------------------------------------------------
# Object census (objgraph-style type counts, plus the lengths of the largest containers)


@dataclass
class _Census:
    done: int  # iterations finished when it was taken
    blocks: int
    counts: dict[str, int]
    ids: np.ndarray | None  # ids of every list/dict/set/deque, sorted (numpy: nothing the gc tracks)
    lengths: np.ndarray | None  # their lengths, in the same order
    cost: float

    def length_of(self, ids: np.ndarray) -> np.ndarray:
        """Lengths of these containers at this census; -1 where one did not exist."""
        if self.ids is None or self.ids.size == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ids, ids), 0, self.ids.size - 1)
        return np.where(self.ids[pos] == ids, self.lengths[pos], -1)


def _take_census(done: int) -> _Census:
    t0 = time.perf_counter()
    objs = gc.get_objects()
    try:
        counts: dict[str, int] = {}
        # Type objects are used as keys only while counting; names are kept, so the census never
        # keeps a class (or anything else) of the user's alive.
        for t, c in collections.Counter(map(type, objs)).items():
            k = _type_name(t)
            counts[k] = counts.get(k, 0) + c
        ids, lengths = _container_lengths(objs)
    finally:
        del objs
    return _Census(done, sys.getallocatedblocks(), counts, ids, lengths, time.perf_counter() - t0)


def _container_lengths(objs: list) -> tuple[np.ndarray, np.ndarray]:
    # Every container's length, not only the largest: a leaking list starts out short.
    conts = [o for o in objs if type(o) in _CONTAINER_TYPES]
    ids = np.fromiter(map(id, conts), dtype=np.int64, count=len(conts))
    lengths = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
    del conts
    order = np.argsort(ids)
    return ids[order], lengths[order]


def _growth_from_census(base: _Census, mid: _Census | None, span: int) -> list[TypeGrowth]:
    """Size the types and containers that grew from ``base`` to now (the final census)."""
    objs = gc.get_objects()
    try:
        by_type = collections.Counter(map(type, objs))
        names: dict[type, str] = {t: _type_name(t) for t in by_type}
        now: dict[str, int] = {}
        for t, c in by_type.items():
            now[names[t]] = now.get(names[t], 0) + c
        grown = sorted(
            ((now[k] - base.counts.get(k, 0), k) for k in now
             if now[k] > base.counts.get(k, 0) and not k.startswith(_OWN)),
            reverse=True,
        )[:TYPES_SIZED]
        wanted = {k for _, k in grown}
        want_types = {t for t, k in names.items() if k in wanted}
        samples: dict[str, list] = {k: [] for k in wanted}
        if want_types:
            # gc.get_objects() lists the youngest generation first and the oldest last, where
            # the latest survivors of a collection are appended: the run's new objects sit at both
            # ends, the import-time population in the middle. Sample from both ends.
            half = SAMPLE_PER_TYPE // 2
            for ends in (objs, reversed(objs)):
                taken = dict.fromkeys(wanted, 0)
                for o in ends:
                    t = type(o)
                    if t in want_types:
                        k = names[t]
                        if taken[k] < half:
                            samples[k].append(o)
                            taken[k] += 1
        out: list[TypeGrowth] = []
        by_name: dict[str, TypeGrowth] = {}
        for d, k in grown:
            sizes = [_size(o) for o in samples[k]]
            mean = float(np.mean([s[0] for s in sizes])) if sizes else 0.0
            steady = None
            if mid is not None:
                steady = mid.counts.get(k, 0) > base.counts.get(k, 0) and now[k] > mid.counts.get(k, 0)
            g = TypeGrowth(k, d / span, d / span * mean, mean, steady)
            if sizes:
                g._blocks = float(np.mean([s[1] for s in sizes]))
                g._block_bytes = float(np.mean([s[2] for s in sizes]))
            out.append(g)
            by_name[k] = g
        samples.clear()

        # Containers that existed at the base census and are longer now (the largest growth).
        conts = [o for o in objs if type(o) in _CONTAINER_TYPES]
        ids = np.fromiter(map(id, conts), dtype=np.int64, count=len(conts))
        n_now = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
        n_base = base.length_of(ids)
        n_mid = mid.length_of(ids) if mid is not None and mid.ids is not None else None
        grew_by = np.where(n_base >= 0, n_now - n_base, 0)
        top = [int(i) for i in np.argsort(-grew_by)[:CONTAINERS_REPORTED] if grew_by[i] > 0]
        chosen = [(conts[i], int(n_base[i]), int(n_now[i]), None if n_mid is None else int(n_mid[i])) for i in top]
        del conts
        for o, n0, n1, nm in chosen:
            tname = _type_name(type(o))
            items = _container_items(o, 16)
            item_types = collections.Counter(_type_name(type(i)) for i in items)
            item_name = item_types.most_common(1)[0][0] if item_types else "?"
            if item_name.startswith(_OWN):
                continue  # the watcher's own bookkeeping
            sizes = [_size(i) for i in items]
            per_item = float(np.mean([s[0] for s in sizes])) if sizes else 0.0
            if isinstance(o, dict):
                per_item *= 2  # items holds keys and values
            # Items the gc tracks (dicts, lists, instances) are already counted by type; untracked
            # ones (bytes, str, numbers, ndarrays) are seen only here.
            tracked = any(gc.is_tracked(i) for i in items)
            steady = None
            if nm is not None and nm >= 0:
                steady = n0 < nm < n1
            g = TypeGrowth(
                f"{tname} of {item_name} (len {n1:,})", (n1 - n0) / span,
                (n1 - n0) / span * per_item, per_item, steady, container=True, counted=not tracked,
            )
            if sizes and not tracked:
                g._blocks = float(np.mean([s[1] for s in sizes])) * (2 if isinstance(o, dict) else 1)
                g._block_bytes = float(np.mean([s[2] for s in sizes])) * (2 if isinstance(o, dict) else 1)
            elif sizes and item_name in by_name and not isinstance(o, dict):
                # The newest items of a growing container are the growing objects themselves: a
                # better size for their type than a sample of every object of that type.
                t = by_name[item_name]
                t.mean_size = per_item
                t.bytes_per_iteration = t.per_iteration * per_item
                t._blocks = float(np.mean([s[1] for s in sizes]))
                t._block_bytes = float(np.mean([s[2] for s in sizes]))
            out.append(g)
            del items, sizes
        del chosen, o
    finally:
        del objs
    out.sort(key=lambda g: g.bytes_per_iteration, reverse=True)
    return out


# ---------------------------------------------------------------------------------------------
# --lines: memory_profiler's line tracer, with per-iteration accounting


class _LineMap(dict):
    """Stands in for memory_profiler's CodeMap: same tracer, our accounting.

    memory_profiler's own CodeMap needs the source file on disk (a notebook cell has none) and
    charges a line with "memory now − the highest memory ever seen at the previous line", which
    is wrong after memory falls. Here a line is charged with the RSS change since the previous
    traced event, and each iteration is kept apart so we can say in how many it grew.
    """

    def __init__(self, codes) -> None:
        super().__init__((c, {}) for c in codes)
        self.last: int | None = None
        self.current: dict[tuple[str, int], int] = {}

    def trace(self, code, lineno, prev_lineno) -> None:  # called by LineProfiler's tracer
        mem = _sampler.rss()
        if self.last is not None:
            key = (code.co_filename, lineno)
            self.current[key] = self.current.get(key, 0) + (mem - self.last)
        self.last = mem


class _LineRecorder:
    def __init__(self, code: types.CodeType) -> None:
        try:
            from memory_profiler import LineProfiler
        except ImportError as exc:
            raise RuntimeError(
                "lines=True (--lines) needs memory_profiler: pip install memory_profiler"
            ) from exc
        class _Profiler(LineProfiler):
            # memory_profiler's tracer stays on for every frame the step calls and runs for each
            # of their lines; declining frames that are not the step's makes a step that calls
            # Python code (or has a comprehension) many times cheaper to profile.
            def trace_memory_usage(self, frame, event, arg):
                if event == "call" and frame.f_code not in self.code_map:
                    return None
                return super().trace_memory_usage(frame, event, arg)

        self.code = code
        self.prof = _Profiler()
        # Only the step's own code: a comprehension or a function defined in the cell is charged to
        # the line that runs it, and its inner loop does not pay a memory read per element.
        self.map = _LineMap((code,))
        self.prof.code_map = self.map
        self.total: dict[tuple[str, int], int] = {}
        self.grew: dict[tuple[str, int], int] = {}
        self.ran: dict[tuple[str, int], int] = {}
        self.iterations = 0

    def wrap(self, fn: Callable) -> Callable:
        rec = self

        def profiled(*args, **kwargs):
            rec.map.last = None  # growth between iterations belongs to no line
            rec.map.current = {}
            rec.prof.enable_by_count()
            try:
                return fn(*args, **kwargs)
            finally:
                rec.prof.disable_by_count()
                rec._collect()

        profiled.__wrapped__ = fn  # type: ignore[attr-defined]
        return profiled

    def _collect(self) -> None:
        self.iterations += 1
        for key, inc in self.map.current.items():
            self.total[key] = self.total.get(key, 0) + inc
            self.ran[key] = self.ran.get(key, 0) + 1
            if inc > 0:
                self.grew[key] = self.grew.get(key, 0) + 1

    def result(self) -> list[LineGrowth]:
        out = []
        for (fname, ln), tot in sorted(self.total.items(), key=lambda kv: kv[0][1]):
            ran = self.ran.get((fname, ln), 0)
            out.append(LineGrowth(
                fname, ln, linecache.getline(fname, ln).strip(), int(tot),
                self.grew.get((fname, ln), 0) / ran if ran else 0.0, ran,
            ))
        return out


# ---------------------------------------------------------------------------------------------
# The observer


class Tracker:
    """Watch observer that explains what grows; sets ``result.attribution`` at the end.

    ``trace``: start tracemalloc (unless already on) and report growing allocation sites.
    ``lines``: trace the step line by line (memory_profiler) and report each line's growth.
    ``budget``: share of the run's wall time the object census may take between iterations.
    ``census``: None (default) takes object censuses as the budget allows; True takes one after
    iterations 1, 2, 4, 8, … whatever it costs; False never.
    """

    def __init__(
        self,
        trace: bool = False,
        lines: bool = False,
        *,
        budget: float | None = None,
        census: bool | None = None,
    ) -> None:
        if budget is not None and not (0 <= budget < 1):
            raise ValueError(f"budget must be a share of the run time in [0, 1), not {budget!r}")
        if census not in (None, True, False):
            raise ValueError(f"census must be None, True or False, not {census!r}")
        self.census = census
        self.trace = bool(trace)
        self.lines = bool(lines)
        self.budget = budget if budget is not None else (TRACE_BUDGET if trace else CENSUS_BUDGET)
        self._reset()

    def _reset(self) -> None:
        self._censuses: list[_Census] = []
        self._done = 0
        self._next_census = 1
        self._spent = 0.0
        self._cost_per_block = 60e-9  # seconds of census per pymalloc block, before measuring
        self._census_estimate = 0.0
        self._own_rss = 0  # RSS our own census left behind during the run
        self._t0 = time.perf_counter()
        self._started_tracing = False
        self._tracing = False
        self._traced = _Series(1)
        self._snapshot = None  # (done, tracemalloc.Snapshot) baseline
        self._lines: _LineRecorder | None = None
        self._gpu_device: str | None = None
        self._gpu = _Series(2)
        self._rss_start = 0
        self._notes: list[str] = []
        self._warmup = 0

    # -- Observer protocol -----------------------------------------------------------------
    def on_start(self, watch: Any) -> None:
        self._reset()
        spec = getattr(watch, "spec", None)
        self._warmup = int(getattr(spec, "warmup", None) or 0)
        if self.lines:
            try:
                import memory_profiler  # noqa: F401 - fail before the run, with the fix
            except ImportError as exc:
                raise RuntimeError(
                    "lines=True (--lines) needs memory_profiler: pip install memory_profiler"
                ) from exc
        # Freed memory the allocator kept from before this run would otherwise be credited to it
        # when we trim at the end.
        if trim() is None:
            self._notes.append(
                "This C library has no malloc_trim, so allocator retention could not be measured; "
                "growth is split into Python and native only."
            )
        self._rss_start = _sampler.rss()
        import tracemalloc

        if self.trace and not tracemalloc.is_tracing():
            tracemalloc.start(1)
            self._started_tracing = True
        self._tracing = tracemalloc.is_tracing()
        self._gpu_device = self._find_gpu()
        self._t0 = time.perf_counter()

    def wrap_step(self, watch: Any, fn: Callable) -> Callable:
        # The baseline census, after the setup and before iteration 0: whatever it leaves with
        # the allocator lands in iteration 0, which the verdict always treats as warm-up. A
        # census in the middle of a run would put a step into the very RSS series the verdict
        # reads (measured in a kernel: a flat step looked like a 6 KiB/iteration leak), so the
        # others are taken only at the end, after the verdict, unless census=True asks for them.
        if self.census is not False:
            self._maybe_census(sys.getallocatedblocks(), force=True)
        if not self.lines:
            return fn
        code = find_step_code(fn)
        if code is None:
            self._notes.append("--lines: could not find the step's code; no line report.")
            return fn
        if not callable(fn):
            raise TypeError(
                f"the step must be callable (a function that runs the cell), not {type(fn).__name__}"
            )
        self._lines = _LineRecorder(code)
        return self._lines.wrap(fn)

    def on_iteration(self, watch: Any, record: Any) -> None:
        self._done += 1
        if self._tracing:
            import tracemalloc

            if tracemalloc.is_tracing():
                self._traced.append(record.index, tracemalloc.get_traced_memory()[0])
        if self._gpu_device is not None:
            self._sample_gpu(record.index)
        if self.trace and self._snapshot is None and self._done >= max(1, self._warmup):
            self._maybe_snapshot()
        if self.census is True and self._done >= self._next_census:
            self._maybe_census(int(getattr(record, "blocks", 0) or sys.getallocatedblocks()))

    def on_finish(self, watch: Any, result: Any) -> None:
        t0 = time.perf_counter()
        try:
            att = self._attribute(result)
        finally:
            if self._started_tracing:
                import tracemalloc

                tracemalloc.stop()  # only what we started
                self._started_tracing = False
            self._snapshot = None
        att.overhead_seconds = self._spent
        att.finish_seconds = time.perf_counter() - t0
        result.attribution = att
        self._censuses = []

    # -- per-iteration pieces ----------------------------------------------------------------
    def _maybe_snapshot(self) -> None:
        # With --trace the user asked for thoroughness: the baseline snapshot is taken as soon as
        # the warm-up is over, whatever it costs (the budget governs only the census).
        import tracemalloc

        if tracemalloc.is_tracing():
            now = time.perf_counter()
            self._snapshot = (self._done, tracemalloc.take_snapshot())
            self._spent += time.perf_counter() - now

    def _maybe_census(self, blocks: int, force: bool = False) -> None:
        now = time.perf_counter()
        # A census walks every gc object; its cost follows the heap, which the block count the
        # runner already measured tells us before we pay it (refined by each census taken).
        est = self._cost_per_block * max(blocks, 1)
        self._census_estimate = est
        allowed = max(self.budget * (now - self._t0), CENSUS_ALLOWANCE)
        if not force and (self.census is False or (self.census is None and self._spent + est > allowed)):
            return  # not (yet) affordable; try again at the next iteration
        rss0 = _sampler.rss()
        c = _take_census(self._done)
        # What the census allocated and freed may stay resident in the allocator; a trim at the
        # end would hand it back and make it look like the user's allocator retention.
        self._own_rss += max(0, _sampler.rss() - rss0)
        self._cost_per_block = c.cost / max(c.blocks, 1)
        self._censuses.append(c)
        if len(self._censuses) > MAX_CENSUSES:
            del self._censuses[1]
        self._spent += time.perf_counter() - now
        self._next_census = 2 * self._done

    @staticmethod
    def _find_gpu() -> str | None:
        tf = sys.modules.get("tensorflow")  # never import TensorFlow ourselves
        if tf is None:
            return None
        try:
            gpus = tf.config.list_physical_devices("GPU")
        except Exception:
            return None
        return "GPU:0" if gpus else None

    def _sample_gpu(self, index: int) -> None:
        tf = sys.modules.get("tensorflow")
        try:
            info = tf.config.experimental.get_memory_info(self._gpu_device)
            self._gpu.append(index, info["current"], info["peak"])
            tf.config.experimental.reset_memory_stats(self._gpu_device)  # per-iteration peak
        except Exception as exc:  # e.g. no memory stats on this device
            self._notes.append(f"GPU memory could not be read ({exc}).")
            self._gpu_device = None

    def gpu_series(self) -> np.ndarray:
        """(iteration, current bytes, peak bytes) rows for charting beside RSS."""
        return self._gpu.array().copy()

    # -- the decision ------------------------------------------------------------------------
    def _attribute(self, result: Any) -> Attribution:
        att = Attribution(notes=list(self._notes))
        idx, rss, blocks = (np.asarray(result.column(k), dtype=float) for k in ("index", "rss", "blocks"))
        if self._lines is not None:
            att.lines = self._lines.result()
        if self._gpu.n:
            g = self._gpu.array()
            att.gpu = {
                "device": self._gpu_device or "GPU:0",
                "current": int(g[-1, 1]),
                "peak": int(g[:, 2].max()),
                "slope": _slope(g[:, 0], g[:, 1]),
            }
        if idx.size == 0:
            att.summary = "Nothing to attribute: no iteration finished."
            return att
        v = result.verdict
        first = idx[0]
        warm = int(getattr(v, "warmup", 0) or 0)
        post = idx >= first + warm
        if post.sum() < 2:
            post = np.ones_like(idx, dtype=bool)
        x = idx[post]
        start = first + warm
        if v.kind == "leak" and v.onset is not None:
            start = max(start, float(v.onset))
        span_iters = max(1.0, idx[-1] - start)

        att.rss_slope = float(v.slope) if v.kind == "leak" else _slope(x, rss[post])
        att.blocks_slope = _slope(x, blocks[post])

        # Did it grow enough to attribute? If so, trim first: the final census below allocates
        # and frees memory of its own, which the allocator may keep and a later trim would return.
        if v.kind == "leak":
            growth = att.rss_slope * span_iters
        else:
            # After the warm-up: one-off allocations of the first iterations are not "growth".
            growth = float(rss[-1] - rss[post][0])
        att.growth_bytes = growth
        # A plateau or an undecided run is attributed only when it grew by a megabyte or more.
        grew = (v.kind == "leak" and growth > 0) or (v.kind in ("plateau", "inconclusive") and growth >= MIN_GROWTH)
        if grew:
            att.reclaimed_bytes = trim()

        # Object census: the baseline is the first census after the warm-up.
        types_slope = None
        if self._censuses:
            base = next((c for c in self._censuses if c.done >= warm + 1), self._censuses[0])
            final_done = self._done
            span = final_done - base.done
            if span >= 1:
                mids = [c for c in self._censuses if base.done < c.done < final_done]
                mid = min(mids, key=lambda c: abs(c.done - (base.done + final_done) / 2)) if mids else None
                t = time.perf_counter()
                grown = _growth_from_census(base, mid, span)
                att.censuses = len(self._censuses) + 1
                att.top_types = grown[:TOP_N]
                types_slope = sum(
                    g.bytes_per_iteration for g in grown
                    if g.bytes_per_iteration > 0 and g.steady is not False and g.counted
                )
                att.census_slope = types_slope
                # Bytes per pymalloc block of the objects that grow (not of the whole heap): the
                # figure that turns the per-iteration block count into bytes.
                nblk = sum(g.per_iteration * g._blocks for g in grown if g.counted and g.steady is not False)
                if nblk > 0:
                    att.bytes_per_block = float(
                        sum(g.per_iteration * g._block_bytes for g in grown if g.counted and g.steady is not False)
                        / nblk
                    )
                att.notes.append(
                    f"Object census: {att.censuses} checkpoints (iterations {base.done}\u2013{final_done}), "
                    f"final one {time.perf_counter() - t:.2f} s."
                )
        elif self._done and self.census is False:
            att.notes.append("No object census (census=False).")
        elif self._done:
            att.notes.append(
                f"No object census was taken: with this heap one would cost about "
                f"{self._census_estimate * 1e3:.0f} ms, over the {self.budget:.1%} share of this run's time. "
                f"Large Python objects (NumPy arrays, bytes) are invisible to the block count, so a leak "
                f"of them would look native: run longer, or use --trace."
            )

        blocks_bytes = att.blocks_slope * att.bytes_per_block
        primary, source = blocks_bytes, "allocated blocks"
        if self._traced.n >= 2:
            tr = self._traced.array()
            keep = tr[:, 0] >= start
            if keep.sum() >= 2:
                att.traced_slope = _slope(tr[keep, 0], tr[keep, 1])
                primary, source = att.traced_slope, "tracemalloc"
        if types_slope is not None and types_slope > primary:
            primary, source = types_slope, "object census"
        att.python_slope = float(primary)
        att.python_source = source
        att.native_slope = att.rss_slope - att.python_slope

        if self.trace:
            att.top_sites = self._sites()

        if v.kind == "leak":
            python_growth = att.python_slope * span_iters
        else:
            python_growth = max(att.python_slope, 0.0) * max(1.0, idx[-1] - first)
        if not grew:
            att.kind = "none"
            att.summary = (
                f"Nothing to attribute: memory did not grow ({v.kind}, "
                f"{format_bytes(growth, signed=True)} over the run)."
            )
            return att

        reclaimed = att.reclaimed_bytes or 0
        if self._own_rss and att.reclaimed_bytes is not None:
            reclaimed = max(0, reclaimed - self._own_rss)
            att.notes.append(
                f"The object census itself left {format_bytes(self._own_rss)} with the allocator; "
                f"that much of what malloc_trim returned is not counted."
            )
        if att.reclaimed_bytes is not None and reclaimed >= RETENTION_SHARE * growth:
            att.kind = "allocator"
        elif python_growth >= 0.5 * max(growth - reclaimed, 0.0):
            att.kind = "python"
        else:
            att.kind = "native"
        att.summary = self._summary(att, v, growth, reclaimed, python_growth)
        if att.kind != "allocator" and reclaimed >= 0.2 * growth and growth > 0:
            att.notes.append(
                f"malloc_trim also handed back {format_bytes(reclaimed)} "
                f"({reclaimed / growth:.0%} of the growth): part of it is allocator retention."
            )
        if att.kind == "native" and att.blocks_slope > 0 and python_growth > 0.2 * growth:
            att.notes.append("Python objects grow too, but explain less than half of the growth.")
        if v.kind == "inconclusive":
            att.notes.append("The verdict is inconclusive; the attribution describes the growth so far.")
        return att

    def _summary(self, att: Attribution, v: Any, growth: float, reclaimed: int, python_growth: float) -> str:
        per = "/iteration"
        if att.kind == "allocator":
            return (
                f"Allocator retention, not your code: malloc_trim(0) handed back "
                f"{format_bytes(reclaimed)} of the {format_bytes(growth)} growth, memory that had been "
                f"freed but kept by glibc's arenas. MALLOC_ARENA_MAX=2 (set before Python starts), or "
                f"jemalloc/tcmalloc through LD_PRELOAD, keeps it down."
            )
        top = next((t for t in att.top_types if t.bytes_per_iteration > 0), None)
        if att.kind == "python":
            what = ""
            if top is not None:
                what = f"; most of all {top.name} ({top.per_iteration:+.2g} per iteration, " \
                       f"~{format_bytes(top.bytes_per_iteration)}{per})"
            site = f"; allocated at {att.top_sites[0].site}" if att.top_sites else ""
            return (
                f"Python objects kept alive: about {format_bytes(att.python_slope)}{per} of the "
                f"{format_bytes(att.rss_slope)}{per} growth is held by Python objects{what}{site}."
            )
        return (
            f"Native memory: RSS grows {format_bytes(att.rss_slope)}{per} but Python objects explain only "
            f"{format_bytes(max(att.python_slope, 0))}{per}; the rest is held outside Python's heap "
            f"(a C/C++ extension, TensorFlow's allocator) and malloc_trim returned only "
            f"{format_bytes(reclaimed)}."
        )

    def _sites(self) -> list[SiteGrowth]:
        import tracemalloc

        if self._snapshot is None or not tracemalloc.is_tracing():
            return []
        done0, snap0 = self._snapshot
        span = self._done - done0
        if span < 1:
            return []
        snap1 = tracemalloc.take_snapshot()
        skip = (_PKG_DIR, tracemalloc.__file__, "<frozen importlib", "<unknown>")
        stats = snap1.compare_to(snap0, "lineno")
        out = []
        for st in stats:
            if st.size_diff <= 0:
                continue
            fr = st.traceback[0]
            if fr.filename.startswith(skip):
                continue
            out.append(SiteGrowth(
                f"{fr.filename}:{fr.lineno}", st.size_diff / span, st.count_diff / span,
                int(st.size_diff), linecache.getline(fr.filename, fr.lineno).strip(),
            ))
            if len(out) >= TOP_N:
                break
        return out


AttributionTracker = Tracker

__all__ = [
    "Attribution",
    "AttributionTracker",
    "LineGrowth",
    "SiteGrowth",
    "Tracker",
    "TypeGrowth",
    "find_step_code",
    "trim",
]
