"""What grew between two censuses: the rows of the census table, and specimens of each.

Three kinds of rows, each object counted in one of them only:

* a **type** whose count grew (tracked objects, and the dicts and tuples the collector
  untracked), sized from a sample of its objects (sizes.py);
* a **payload** type whose bytes grew (arrays, buffers: held.py), sized exactly;
* a **container** that grew (a list, dict, set, deque, …, tracked or not), sized from its
  newest items; counted only when nothing else counts its items (the strings of a list).
"""

from __future__ import annotations

import collections
import gc
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .held import kinds
from .paths import Target
from .pointers import addresses
from .result import TypeGrowth
from .sizes import container_items, size, type_name
from .survey import CONTAINER_TYPES, Census, Survey

CONTAINERS_REPORTED = 5  # containers whose length grew the most
CONTAINERS_POOL = 40  # the most grown looked at, for ones that are another's new items
ARRIVALS_LOOKED = 1_000_000  # items of grown containers looked at for that
TYPES_SIZED = 12  # growing types whose objects are sampled for a size at the end
SAMPLE_PER_TYPE = 16
SPECIMEN_LOOKS = 20_000  # objects of a growing type looked at for ones the run created
SPECIMENS_FROM = 256  # new objects of a growing type the specimens are spread over
MAX_HOLDERS = 50_000  # untracked containers the path search looks in (new or grown ones)
OWN = "leakwidget."  # the watcher's own objects are not the user's growth


def grown(s: Survey, base: Census, mid: Census | None, span: int) -> list[TypeGrowth]:
    """The rows that grew from ``base`` to the survey ``s`` (the final census), biggest first."""
    apart = kinds()
    chosen = _top_containers(s, base, mid)
    # The types a grown container is filling are sized whatever their count's rank: a frame
    # kept per iteration comes with a dozen small objects that grow as fast.
    fills = {_item_kind(o, container_items(o, 16), apart)[0] for o, *_ in chosen}
    out = _grown_types(s, base, mid, span, apart, fills)
    by_name = {g.name: g for g in out}
    out += _grown_payloads(s, base, mid, span)
    for o, n0, n1, nm in chosen:
        g = _grown_container(o, n0, n1, nm, span, by_name, apart)
        if g is not None:
            out.append(g)
    out.sort(key=lambda g: g.bytes_per_iteration, reverse=True)
    return out


def _steady(b: float, m: float | None, n: float) -> bool | None:
    """Grew in both halves of the run (None: no middle census)."""
    return None if m is None else bool(m > b and n > m)


def _grown_types(s: Survey, base: Census, mid: Census | None, span: int,
                 apart: dict[type, bool], fills: set[str]) -> list[TypeGrowth]:
    """The types whose count grew the most, and those the grown containers hold, each sized
    from a sample of its objects."""
    names: dict[type, str] = {t: type_name(t) for t in s.by_type}
    now = s.counts(names)
    grew = sorted(
        ((now[k] - base.counts.get(k, 0), k) for k in now
         if now[k] > base.counts.get(k, 0) and not k.startswith(OWN)),
        reverse=True,
    )
    grown_ = grew[:TYPES_SIZED] + [(d, k) for d, k in grew[TYPES_SIZED:] if k in fills]
    samples = _samples(s.objs, names, {k for _, k in grown_})
    for d, k in grown_:
        if k in ("dict", "tuple"):
            samples[k] = _with_untracked(samples[k], s, base, k, d)
    out: list[TypeGrowth] = []
    for d, k in grown_:
        sizes = [size(o, apart) for o in samples[k]]
        mean = float(np.mean([x[0] for x in sizes])) if sizes else 0.0
        m = None if mid is None else mid.counts.get(k, 0)
        g = TypeGrowth(k, d / span, d / span * mean, mean, _steady(base.counts.get(k, 0), m, now[k]))
        if sizes:
            g._blocks = float(np.mean([x[1] for x in sizes]))
            g._block_bytes = float(np.mean([x[2] for x in sizes]))
            g._outside = d / span * float(np.mean([x[3] for x in sizes]))
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


def _with_untracked(tracked: list, s: Survey, base: Census, name: str, grew: int) -> list:
    """The sample of the dicts (or tuples) that grew, untracked ones in their share of the
    growth: the collector untracks a dict of atoms, and the tracked ones at either end of the
    list are no sample of those. Measured: each EagerTensor kept came with an empty ``__dict__``
    (untracked, 64 B), sized from the tracked dicts as 10.5 KiB, "most of all dict".

    The share is read from the counts, not from which ids are new: pymalloc hands a new dict
    the block an untracked tuple or dict freed since the first census had (CI: 5,000 empty
    dicts, most at such addresses, sized as the 20 big tracked ones beside them, 226 KiB a
    dict). The ids only choose the specimens, new ones first."""
    kind = dict if name == "dict" else tuple
    pool = [o for o in s.untracked.containers if type(o) is kind]
    more = len(pool) - base.untracked.get(name, 0)
    if more <= 0:
        return tracked
    # As many of each as their shares of the growth, SAMPLE_PER_TYPE in all.
    k = min(len(pool), max(1, round(SAMPLE_PER_TYPE * min(1.0, more / max(grew, 1)))))
    is_new = ~base.had_untracked(addresses(pool))
    new, old = np.flatnonzero(is_new), np.flatnonzero(~is_new)
    # Spread over the new ones; over the others only for what the new ones cannot fill.
    idx = new if new.size >= k else np.concatenate((new, old))
    picked = [pool[i] for i in idx[np.linspace(0, idx.size - 1, k).astype(int)]]
    return tracked[: SAMPLE_PER_TYPE - len(picked)] + picked


def _grown_payloads(s: Survey, base: Census, mid: Census | None, span: int) -> list[TypeGrowth]:
    """The payload types (arrays, buffers) whose bytes grew: counted exactly, not sampled."""
    out = []
    for name, (n, b, outside) in s.payloads.items():
        n0, b0, out0 = base.payloads.get(name, (0, 0, 0))
        if b <= b0 or name.startswith(OWN):
            continue
        added = n - n0
        mean = (b - b0) / added if added > 0 else b / max(n, 1)
        m = None if mid is None else mid.payloads.get(name, (0, 0, 0))[1]
        g = TypeGrowth(name, added / span, (b - b0) / span, mean, _steady(b0, m, b), payload=True)
        # Counted in bytes, not per object: a run can free more small payloads than it keeps
        # big ones (fewer bytes objects, and megabytes more of them outside the heap).
        g._outside = min(max((outside - out0) / span, 0.0), g.bytes_per_iteration)
        out.append(g)
    return out


def _top_containers(s: Survey, base: Census, mid: Census | None) -> list[tuple[Any, int, int, int | None]]:
    """The containers that existed at the base census and grew the most: (container, length
    then, length now, length at the middle census)."""
    conts = s.containers
    ids = np.fromiter(map(id, conts), dtype=np.int64, count=len(conts))
    n_now = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
    n_base = base.length_of(ids)
    n_mid = mid.length_of(ids) if mid is not None and mid.ids is not None else None
    grew_by = np.where((n_base >= 0) & ~np.isin(ids, _own_tables()), n_now - n_base, 0)
    pool = [int(i) for i in np.argsort(-grew_by)[:CONTAINERS_POOL] if grew_by[i] > 0]
    # An id is a place, not an object: a list made during the run can take the place (and the
    # id) of one the base census counted and the run freed, and read as grown by its whole
    # length (a list of 2,000 kept an iteration ranked above the list keeping them, 1 run in 6).
    # One put into another grown container during the run is that container's growth.
    arrived = _arrivals([(conts[i], int(n_base[i])) for i in pool], {id(conts[i]) for i in pool})
    top = [i for i in pool if id(conts[i]) not in arrived][:CONTAINERS_REPORTED]
    return [(conts[i], int(n_base[i]), int(n_now[i]), None if n_mid is None else int(n_mid[i]))
            for i in top]


def _arrivals(grew: list[tuple[Any, int]], among: set[int]) -> set[int]:
    """Which of the ids ``among`` are items put into these containers after the base census: a
    list's or deque's beyond its length then (a deque that pops from the left shifts its old
    items below it; one that grows at the front, ``insert(0, x)``, shifts old items above it,
    and they are taken for new), a dict's keys and values beyond it in insertion order
    (deletions shift new ones below it: missed, never an old one taken for new). Sets have no
    order: none. At most ARRIVALS_LOOKED items are looked at, and none is kept (no set of a
    million ids)."""
    out: set[int] = set()
    looked = 0
    for o, n0 in grew:
        room = ARRIVALS_LOOKED - looked
        if room <= 0:
            break
        try:
            if isinstance(o, dict):
                new = itertools.islice(o.items(), n0, n0 + room // 2)
                ids = itertools.chain.from_iterable((id(k), id(v)) for k, v in new)
            elif isinstance(o, (list, collections.deque)):
                ids = map(id, itertools.islice(o, n0, n0 + room))
            else:
                continue
            out |= among.intersection(ids)
        except RuntimeError:  # mutated while we looked (another thread)
            pass
        looked += max(len(o) - n0, 0)
    return out


def _own_tables() -> np.ndarray:
    """Ids of the containers the watcher's modules keep (a table of the verdict's, filled on
    first use): they are not the user's."""
    out = [id(v) for name, m in list(sys.modules.items()) if name.startswith(OWN)
           for v in vars(m).values() if type(v) in CONTAINER_TYPES]
    return np.array(out, dtype=np.int64)


def _item_kind(o: Any, items: list, apart: dict[type, bool]) -> tuple[str, str]:
    """(the item type the container grows by, how it holds them: "values", "keys" or "")."""
    if not isinstance(o, dict):
        names = collections.Counter(type_name(type(i)) for i in items)
        return (names.most_common(1)[0][0] if names else "?"), ""
    keys, values = items[0::2], items[1::2]
    # A dict grows by its keys when they are what owns memory (a set of bytes kept as keys).
    by_keys = (any(apart.get(type(k)) is False for k in keys)
               and not any(apart.get(type(v)) is False for v in values))
    names = collections.Counter(type_name(type(i)) for i in (keys if by_keys else values))
    return (names.most_common(1)[0][0] if names else "?"), ("keys" if by_keys else "values")


def _grown_container(
    o: Any, n0: int, n1: int, nm: int | None, span: int, by_name: dict[str, TypeGrowth],
    apart: dict[type, bool],
) -> TypeGrowth | None:
    """A container that grew from n0 to n1 items (nm at the middle census), sized from its
    newest items; None for the watcher's own bookkeeping."""
    tname = type_name(type(o))
    items = container_items(o, 16)
    item_name, how = _item_kind(o, items, apart)
    if item_name.startswith(OWN):
        return None
    sizes = [size(i, apart) for i in items]
    per_item = float(np.mean([x[0] for x in sizes])) if sizes else 0.0
    pair = 2 if isinstance(o, dict) else 1  # a dict's items are keys and values
    per_item *= pair
    # Items the gc tracks (dicts, lists, instances), untracked containers and payloads are
    # counted in rows of their own; only the rest (str, numbers) is counted here.
    elsewhere = any(gc.is_tracked(i) or type(i) in apart for i in items)
    steady = None if nm is None or nm < 0 else n0 < nm < n1
    g = TypeGrowth(
        f"{tname} of {item_name} (len {n1:,})", (n1 - n0) / span,
        (n1 - n0) / span * per_item, per_item, steady, container=True, counted=not elsewhere,
        _id=id(o), _item=item_name, _holds=how,
    )
    if sizes and not elsewhere:
        g._blocks = float(np.mean([x[1] for x in sizes])) * pair
        g._block_bytes = float(np.mean([x[2] for x in sizes])) * pair
    elif sizes and item_name in by_name and pair == 1 and not by_name[item_name].payload:
        # The newest items of a growing container are the growing objects themselves: a
        # better size for their type than a sample of every object of that type.
        t = by_name[item_name]
        t.mean_size = per_item
        t.bytes_per_iteration = t.per_iteration * per_item
        t._blocks = float(np.mean([x[1] for x in sizes]))
        t._block_bytes = float(np.mean([x[2] for x in sizes]))
        t._outside = t.per_iteration * float(np.mean([x[3] for x in sizes]))
    return g


# ---------------------------------------------------------------------------------------------
# Specimens: objects of each row the run created, for the path search


@dataclass
class Specimens:
    """What the path search starts from, and the untracked containers it may climb through
    (nothing tracked refers to what they hold: gc.get_referrers cannot see them)."""

    targets: list[Target] = field(default_factory=list)
    holders: list = field(default_factory=list)
    existed: Callable[[object], bool] | None = None  # alive at the first census


def specimens(s: Survey, first: Census, rows: list[TypeGrowth], per_row: int) -> Specimens:
    """Up to ``per_row`` objects of each row created during the run (not alive at the first
    census), evenly spread over the newest SPECIMENS_FROM of them, so that a few objects a
    lazy import made during the run are outvoted by the growth's own (paths.find_paths
    names the root most specimens reach); a container row's specimen is the container."""
    targets = {g.name: Target(g.name, [], g._item, g._holds) for g in rows}
    by_id = {g._id: g.name for g in rows if g.container}
    _tracked_specimens(s, first, rows, targets, by_id)
    for g in rows:
        if g.payload:
            _payload_specimens(s, first, g.name, targets[g.name].objects)
    for c in s.untracked.containers:
        if id(c) in by_id and not targets[by_id[id(c)]].objects:
            targets[by_id[id(c)]].objects.append(c)
    for t in targets.values():
        if len(t.objects) > per_row:
            pick = np.linspace(0, len(t.objects) - 1, per_row).round().astype(int)
            t.objects[:] = [t.objects[i] for i in pick]
    return Specimens([t for t in targets.values() if t.objects], _holders(s, first),
                     lambda o: bool(first.had(np.array([id(o)], dtype=np.int64))[0]))


def _tracked_specimens(s: Survey, first: Census, rows: list[TypeGrowth],
                       targets: dict[str, Target], by_id: dict[int, str]) -> None:
    """New objects of the growing tracked types; the tracked containers that grew."""
    names = {t: type_name(t) for t in s.by_type}
    looked = {g.name: 0 for g in rows if not g.container and not g.payload}
    # gc.get_objects() ends with the oldest generation, where the latest survivors of a
    # collection are appended: the newest long-lived objects come last.
    for o in reversed(s.objs):
        name = by_id.get(id(o)) or names[type(o)]
        target = targets.get(name)
        if target is None:
            continue
        if name in looked:
            if len(target.objects) >= SPECIMENS_FROM or looked[name] >= SPECIMEN_LOOKS:
                continue
            looked[name] += 1
            if first.had(np.array([id(o)], dtype=np.int64))[0]:
                continue
        elif target.objects:  # a container row: the container, once
            continue
        target.objects.append(o)


def _payload_specimens(s: Survey, first: Census, name: str, into: list) -> None:
    """The newest (last found) payloads of this type that were not alive at the first census."""
    of_type = [p for p in s.untracked.payloads if type_name(type(p)) == name]
    ids = np.fromiter(map(id, of_type), dtype=np.int64, count=len(of_type))
    new = np.flatnonzero(~first.had_payload(ids))
    into.extend(of_type[i] for i in new[-SPECIMENS_FROM:])


def _holders(s: Survey, first: Census) -> list:
    """The untracked containers created during the run, or grown since: where new objects may
    be held out of the collector's sight."""
    conts = s.untracked.containers
    ids = np.fromiter(map(id, conts), dtype=np.int64, count=len(conts))
    n_now = np.fromiter(map(len, conts), dtype=np.int64, count=len(conts))
    n_first = first.length_of(ids)
    new = ~first.had_untracked(ids) | ((n_first >= 0) & (n_now > n_first))
    return [conts[i] for i in np.flatnonzero(new)[-MAX_HOLDERS:]]
