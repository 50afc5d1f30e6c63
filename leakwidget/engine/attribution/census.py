"""The object census: objgraph-style counts of every gc-tracked type, plus container lengths.

A census is taken after the setup (the baseline), at iterations 1, 2, 4, 8, … with
``census=True``, and once more at the end, after the verdict; the types and containers that grew
between the baseline and the end are sized from a sample of their objects.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import itertools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records import IterationRecord
from ..sampler import malloc_trim, rss
from .paths import Target
from .result import TOP_N, TypeGrowth

MAX_CENSUSES = 8  # kept at once: the first one and the most recent ones (geometric spacing
# means the last seven reach back to 1/128 of the run, past any warm-up)
CONTAINERS_REPORTED = 5  # containers whose length grew the most
TYPES_SIZED = 12  # growing types whose objects are sampled for a size at the end
SAMPLE_PER_TYPE = 16
REFERENTS_SIZED = 64  # per sampled object; more are extrapolated
SPECIMEN_LOOKS = 20_000  # objects of a growing type looked at for ones the run created
SPECIMENS_FROM = 256  # new objects of a growing type the specimens are spread over
SMALL_OBJECT = 512  # pymalloc serves requests up to this size; larger ones go to malloc

_CONTAINER_TYPES = frozenset(
    {list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict}
)
_INT_SIZE = sys.getsizeof(1 << 40)  # a count above the small ints' cache
_OWN = "leakwidget."  # the watcher's own objects are not the user's growth


# ---------------------------------------------------------------------------------------------
# Sizing an object


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


# ---------------------------------------------------------------------------------------------
# Taking a census


@dataclass
class _Census:
    done: int  # iterations finished when it was taken
    blocks: int
    counts: dict[str, int]
    ids: np.ndarray | None  # ids of every list/dict/set/deque, sorted (numpy: nothing the gc tracks)
    lengths: np.ndarray | None  # their lengths, in the same order
    cost: float
    every: np.ndarray | None = None  # the first census only: ids of every gc object, sorted

    def had(self, ids: np.ndarray) -> np.ndarray:
        """Which of these ids existed at this census (the first census keeps them all)."""
        if self.every is None or self.every.size == 0:
            return np.zeros(ids.shape, dtype=bool)
        pos = np.clip(np.searchsorted(self.every, ids), 0, self.every.size - 1)
        return self.every[pos] == ids

    def footprint(self) -> tuple[int, int]:
        """(RSS, bytes malloc has handed out) this census's kept data holds: its arrays, the
        counts' table, and a small int per count (the names are interned: shared, not copied)."""
        arrays = sum(a.nbytes for a in (self.ids, self.lengths, self.every) if a is not None)
        table = sys.getsizeof(self.counts)
        return arrays + table + _INT_SIZE * len(self.counts), arrays + table

    def length_of(self, ids: np.ndarray) -> np.ndarray:
        """Lengths of these containers at this census; -1 where one did not exist."""
        if self.ids is None or self.ids.size == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ids, ids), 0, self.ids.size - 1)
        return np.where(self.ids[pos] == ids, self.lengths[pos], -1)


def _take_census(done: int, every: bool = False) -> _Census:
    """Counts by type and container lengths; with ``every``, the ids of every object too (the
    first census: objects not among them were created during the run).

    The baseline census is a fixed cost of every watch (300k objects once TensorFlow is
    loaded). The ids of every object are read as the pointer array of ``gc.get_objects()``'s
    list (:func:`_addresses`), not made into 300k Python ints: 180 -> 130 ms with TensorFlow
    and Keras loaded, and one array of them fewer. (Counting types in NumPy as well was faster
    still, 80 ms, but its temporaries, several arrays of the heap's size, stayed with the
    allocator once its mmap threshold had risen, and hid a leak's first iterations from RSS.)"""
    t0 = time.perf_counter()
    objs = gc.get_objects()
    all_ids = None
    try:
        if every:
            all_ids = _addresses(objs)  # (a copy: sorted in place)
            all_ids.sort()
        counts: dict[str, int] = {}
        # Type objects are used as keys only while counting; names are kept, so the census never
        # keeps a class (or anything else) of the user's alive.
        for t, c in collections.Counter(map(type, objs)).items():
            k = sys.intern(_type_name(t))
            counts[k] = counts.get(k, 0) + c
        ids, lengths = _container_lengths(objs)
    finally:
        del objs
    return _Census(done, sys.getallocatedblocks(), counts, ids, lengths, time.perf_counter() - t0,
                   all_ids)


def _container_lengths(objs: list) -> tuple[np.ndarray, np.ndarray]:
    # Every container's length, not only the largest: a leaking list starts out short.
    conts = [o for o in objs if type(o) in _CONTAINER_TYPES]
    ids = _addresses(conts)
    lengths = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
    del conts
    order = np.argsort(ids)
    return ids[order], lengths[order]


# A CPython list's items are an array of object pointers, which are the objects' ids: behind
# the list's header (PyVarObject: refcount, type, size; 24 bytes on 64-bit builds).
_LIST_ITEMS_OFFSET = 3 * ctypes.sizeof(ctypes.c_void_p)


def _addresses_by_pointer(items: list) -> np.ndarray:
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    base = ctypes.c_void_p.from_address(id(items) + _LIST_ITEMS_OFFSET).value
    return np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(base)).copy()


def _addresses_by_id(items: list) -> np.ndarray:
    return np.fromiter(map(id, items), dtype=np.int64, count=len(items))


def _pick_addresses() -> Any:
    """The pointer-array reader where it reads what ``id()`` says (CPython with the GIL), checked
    once on a list of known objects; the portable ``id()`` loop elsewhere."""
    if (sys.implementation.name == "cpython" and ctypes.sizeof(ctypes.c_void_p) == 8
            and getattr(sys, "_is_gil_enabled", lambda: True)()):
        probe = [object() for _ in range(64)]
        try:
            if np.array_equal(_addresses_by_pointer(probe), _addresses_by_id(probe)):
                return _addresses_by_pointer
        except (ValueError, OSError):
            pass
    return _addresses_by_id


_addresses = _pick_addresses()


# ---------------------------------------------------------------------------------------------
# What grew since the baseline (the final census)


def _growth_from_census(base: _Census, mid: _Census | None, span: int) -> list[TypeGrowth]:
    """Size the types and containers that grew from ``base`` to now (the final census)."""
    objs = gc.get_objects()
    try:
        out = _grown_types(objs, base, mid, span)
        by_name = {g.name: g for g in out}
        out += _grown_containers(objs, base, mid, span, by_name)
    finally:
        del objs
    out.sort(key=lambda g: g.bytes_per_iteration, reverse=True)
    return out


def _grown_types(objs: list, base: _Census, mid: _Census | None, span: int) -> list[TypeGrowth]:
    """The types whose count grew the most, each sized from a sample of its objects."""
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
    samples = _samples(objs, names, {k for _, k in grown})
    out: list[TypeGrowth] = []
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
    return out


def _samples(objs: list, names: dict[type, str], wanted: set[str]) -> dict[str, list]:
    """Up to SAMPLE_PER_TYPE objects of each wanted type, from both ends of ``objs``."""
    samples: dict[str, list] = {k: [] for k in wanted}
    want_types = {t for t, k in names.items() if k in wanted}
    if not want_types:
        return samples
    # gc.get_objects() lists the youngest generation first and the oldest last, where the
    # latest survivors of a collection are appended: the run's new objects sit at both ends,
    # the import-time population in the middle. Sample from both ends.
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
    return samples


def _grown_containers(
    objs: list, base: _Census, mid: _Census | None, span: int, by_name: dict[str, TypeGrowth]
) -> list[TypeGrowth]:
    """Containers that existed at the base census and are longer now (the largest growth)."""
    conts = [o for o in objs if type(o) in _CONTAINER_TYPES]
    ids = np.fromiter(map(id, conts), dtype=np.int64, count=len(conts))
    n_now = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
    n_base = base.length_of(ids)
    n_mid = mid.length_of(ids) if mid is not None and mid.ids is not None else None
    grew_by = np.where(n_base >= 0, n_now - n_base, 0)
    top = [int(i) for i in np.argsort(-grew_by)[:CONTAINERS_REPORTED] if grew_by[i] > 0]
    chosen = [(conts[i], int(n_base[i]), int(n_now[i]), None if n_mid is None else int(n_mid[i])) for i in top]
    del conts
    out = []
    for o, n0, n1, nm in chosen:
        g = _grown_container(o, n0, n1, nm, span, by_name)
        if g is not None:
            out.append(g)
    return out


def _grown_container(
    o: Any, n0: int, n1: int, nm: int | None, span: int, by_name: dict[str, TypeGrowth]
) -> TypeGrowth | None:
    """A container that grew from n0 to n1 items (nm at the middle census), sized from its
    newest items; None for the watcher's own bookkeeping."""
    tname = _type_name(type(o))
    items = _container_items(o, 16)
    item_types = collections.Counter(_type_name(type(i)) for i in items)
    item_name = item_types.most_common(1)[0][0] if item_types else "?"
    if item_name.startswith(_OWN):
        return None
    sizes = [_size(i) for i in items]
    per_item = float(np.mean([s[0] for s in sizes])) if sizes else 0.0
    pair = 2 if isinstance(o, dict) else 1  # a dict's items are keys and values
    per_item *= pair
    # Items the gc tracks (dicts, lists, instances) are already counted by type; untracked
    # ones (bytes, str, numbers, ndarrays) are seen only here.
    tracked = any(gc.is_tracked(i) for i in items)
    steady = None
    if nm is not None and nm >= 0:
        steady = n0 < nm < n1
    g = TypeGrowth(
        f"{tname} of {item_name} (len {n1:,})", (n1 - n0) / span,
        (n1 - n0) / span * per_item, per_item, steady, container=True, counted=not tracked,
        _id=id(o), _item=item_name,
    )
    if sizes and not tracked:
        g._blocks = float(np.mean([s[1] for s in sizes])) * pair
        g._block_bytes = float(np.mean([s[2] for s in sizes])) * pair
    elif sizes and item_name in by_name and pair == 1:
        # The newest items of a growing container are the growing objects themselves: a
        # better size for their type than a sample of every object of that type.
        t = by_name[item_name]
        t.mean_size = per_item
        t.bytes_per_iteration = t.per_iteration * per_item
        t._blocks = float(np.mean([s[1] for s in sizes]))
        t._block_bytes = float(np.mean([s[2] for s in sizes]))
    return g


# ---------------------------------------------------------------------------------------------
# The collector


@dataclass(frozen=True)
class CensusGrowth:
    """What the censuses say grew, per iteration."""

    top_types: tuple[TypeGrowth, ...]  # the types and containers that grew the most
    slope: float | None  # bytes / iteration of the steady, counted growth (None: no census)
    bytes_per_block: float | None  # of the objects that grow (None: no pymalloc blocks grew)
    checkpoints: int  # censuses taken, the final one included
    note: str = ""  # how many were taken, or why none was
    first: int = 0  # iterations done at the census the growth is counted from
    span: int = 0  # iterations between it and the final census


_NO_CENSUS = CensusGrowth((), None, None, 0)


def _figures(grown: list[TypeGrowth]) -> tuple[float, float | None]:
    """(bytes / iteration, bytes per pymalloc block) of the growth the census counts."""
    counted = [g for g in grown if g.counted and g.steady is not False]
    slope = sum(g.bytes_per_iteration for g in counted if g.bytes_per_iteration > 0)
    # Bytes per pymalloc block of the objects that grow (not of the whole heap): the figure
    # that turns the per-iteration block count into bytes.
    nblk = sum(g.per_iteration * g._blocks for g in counted)
    if nblk <= 0:
        return slope, None
    return slope, float(sum(g.per_iteration * g._block_bytes for g in counted) / nblk)


# Seconds the baseline census may always take, whatever the run's length: enough for the heap of
# a process with TensorFlow and Keras loaded (~1.2M blocks, 0.12-0.3 s measured).
CENSUS_ALLOWANCE = 0.25


class ObjectCensus:
    """Object censuses: the baseline, the checkpoints census=True asks for, and the final one.

    ``mode`` is the Tracker's ``census``: None or True take the baseline after the setup (True
    also takes one after iterations 1, 2, 4, 8, …); False takes none.
    """

    def __init__(self, mode: bool | None, budget: float) -> None:
        self.mode = mode
        self.budget = budget  # quoted when no census could be taken
        self.spent = 0.0  # seconds spent on censuses during the run
        self.own_rss = 0  # RSS our censuses freed during the run that the allocator kept
        # What the checkpoints taken during the run (all but the baseline) keep, and what their
        # temporaries left that the trim could not return: (RSS, malloc in use). census=True
        # takes it out of the records the verdict reads (Tracker.correct).
        self.held: tuple[int, int] = (0, 0)
        self._left = 0  # RSS the checkpoints during the run left behind after their trims
        self.next_at = 1  # iterations done at which census=True takes the next checkpoint
        self._checkpoints: list[_Census] = []
        self._cost_per_block = 100e-9  # seconds of census per pymalloc block, before measuring
        self._estimate = 0.0  # seconds the last census was expected to take

    def skip_final(self) -> CensusGrowth:
        """No final census: nothing grew that it could explain (the censuses taken count)."""
        return CensusGrowth((), None, None, len(self._checkpoints))

    def affordable(self, blocks: int, planned: float | None) -> bool:
        """May the baseline census be taken in a run planned to last ``planned`` seconds? Its
        cost follows the heap (~100 ns a pymalloc block: 0.1–0.3 s once TensorFlow is loaded); it is
        taken when that is within ``budget`` of the planned run, or always when the run's
        length is unknown (only ``iterations`` bound it)."""
        self._estimate = self._cost_per_block * max(blocks, 1)
        return planned is None or self._estimate <= max(self.budget * planned, CENSUS_ALLOWANCE)

    def take(self, blocks: int, done: int) -> None:
        """A census now, after ``done`` iterations, with ``blocks`` pymalloc blocks allocated.

        Its temporaries (a list of every object, sorted arrays of their ids: megabytes in a
        large heap) are handed back to the system at once. Left with the allocator, a leak's
        next iterations would fill them without moving RSS: census=True's checkpoints read a
        400-iteration leak as a plateau of their own temporaries, in 1 of 2 runs with a
        300k-object heap. What a census keeps is accounted (``held``), and so is what the
        trim could not return (pages its temporaries shared with live objects: 0.5 MiB a
        checkpoint in an 800 MB test process, where nine of them made a flat step rise 4.9 MiB).
        (A thread of the user's that allocates during a checkpoint has that much taken out of
        its growth too: census=True is for tests and investigations, not the default.)"""
        now = time.perf_counter()
        # A census walks every gc object; its cost follows the heap, which the block count the
        # runner already measured tells us before we pay it (refined by each census taken).
        self._estimate = self._cost_per_block * max(blocks, 1)
        rss0, kept0 = rss(), self._kept_rss()
        c = _take_census(done, every=not self._checkpoints)
        self._checkpoints.append(c)
        if len(self._checkpoints) > MAX_CENSUSES:
            del self._checkpoints[1]
        malloc_trim()  # the temporaries, and a dropped checkpoint's arrays
        left = max(0, rss() - rss0 - (self._kept_rss() - kept0))
        self.own_rss += left
        if len(self._checkpoints) > 1:  # not the baseline: during the run
            self._left += left
        later = [cp.footprint() for cp in self._checkpoints[1:]]
        self.held = (sum(f[0] for f in later) + self._left, sum(f[1] for f in later))
        self._cost_per_block = c.cost / max(c.blocks, 1)
        self.spent += time.perf_counter() - now
        self.next_at = 2 * done

    def _kept_rss(self) -> int:
        return sum(cp.footprint()[0] for cp in self._checkpoints)

    def on_iteration(self, record: IterationRecord, done: int) -> None:
        """census=True: a checkpoint after iterations 1, 2, 4, 8, …"""
        if done >= self.next_at:
            self.take(record.blocks, done)

    def finish(self, done: int, warmup: int) -> CensusGrowth:
        """The final census against the first one after the warm-up (none without a baseline
        or when no iteration followed it)."""
        if not self._checkpoints:
            return CensusGrowth((), None, None, 0, self._why_none(done))
        base = next((c for c in self._checkpoints if c.done >= warmup + 1), self._checkpoints[0])
        span = done - base.done
        if span < 1:
            return _NO_CENSUS
        mids = [c for c in self._checkpoints if base.done < c.done < done]
        mid = min(mids, key=lambda c: abs(c.done - (base.done + done) / 2)) if mids else None
        t = time.perf_counter()
        grown = _growth_from_census(base, mid, span)
        checkpoints = len(self._checkpoints) + 1
        slope, bytes_per_block = _figures(grown)
        note = (
            f"Object census: {checkpoints} checkpoints (iterations {base.done}\u2013{done}), "
            f"final one {time.perf_counter() - t:.2f} s."
        )
        return CensusGrowth(tuple(grown[:TOP_N]), slope, bytes_per_block, checkpoints, note,
                            base.done, span)

    def _why_none(self, done: int) -> str:
        if not done:
            return ""
        if self.mode is False:
            return "No object census (census=False)."
        return (
            f"No object census was taken: with this heap one would cost about "
            f"{self._estimate * 1e3:.0f} ms, over the {self.budget:.1%} share of this run's time. "
            f"Large Python objects (NumPy arrays, bytes) are invisible to the block count, so a leak "
            f"of them would look native: run longer, or use --trace."
        )

    def specimens(self, rows: list[TypeGrowth], per_row: int) -> list[Target]:
        """Up to ``per_row`` objects of each row created during the run (not alive at the first
        census), evenly spread over the newest SPECIMENS_FROM of them, so that a few objects a
        lazy import made during the run are outvoted by the growth's own (paths.find_paths
        names the root most specimens reach); a container row's specimen is the container."""
        if not self._checkpoints or not rows:
            return []
        first = self._checkpoints[0]
        wanted = {g.name for g in rows if not g.container}
        targets = {g.name: Target(g.name, [], f" \u2192 {g._item}" if g.container else "")
                   for g in rows}
        by_id = {g._id: g.name for g in rows if g.container}
        objs = gc.get_objects()
        try:
            names = {t: _type_name(t) for t in set(map(type, objs))}
            looked = dict.fromkeys(wanted, 0)
            # gc.get_objects() ends with the oldest generation, where the latest survivors of a
            # collection are appended: the newest long-lived objects come last.
            for o in reversed(objs):
                name = by_id.get(id(o)) or names[type(o)]
                if name not in targets or len(targets[name].objects) >= (
                        SPECIMENS_FROM if name in looked else per_row):
                    continue
                if name in looked:
                    if looked[name] >= SPECIMEN_LOOKS:
                        continue
                    looked[name] += 1
                    if first.had(np.array([id(o)], dtype=np.int64))[0]:
                        continue
                targets[name].objects.append(o)
        finally:
            del objs
        for t in targets.values():
            if len(t.objects) > per_row:
                pick = np.linspace(0, len(t.objects) - 1, per_row).round().astype(int)
                t.objects[:] = [t.objects[i] for i in pick]
        return [t for t in targets.values() if t.objects]

    def clear(self) -> None:
        """Drop the checkpoints once the attribution is made."""
        self._checkpoints = []
        self.held = (0, 0)
        self._left = 0
