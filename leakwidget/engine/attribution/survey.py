"""One census: a survey of the heap, and what a census keeps of it.

A survey is every gc-tracked object counted by type, the untracked dicts and tuples and the
payloads (arrays, buffers) the tracked ones hold (held.py), and every container's length. What
a census keeps is names, counts and sorted arrays of ids: never a reference to the user's
objects. The final census keeps its survey, objects and all, until the paths are found.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .held import Untracked, summary, take, walk
from .pointers import addresses, type_addresses
from .sizes import type_name

CONTAINER_TYPES = frozenset(
    {list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict}
)
_CONTAINER_TYPE_IDS = np.array(sorted(map(id, CONTAINER_TYPES)), dtype=np.int64)
_INT_SIZE = sys.getsizeof(1 << 40)  # a count above the small ints' cache


def _sorted_in(table: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """Which of ``ids`` are in ``table`` (sorted ids)."""
    if table is None or table.size == 0:
        return np.zeros(ids.shape, dtype=bool)
    pos = np.clip(np.searchsorted(table, ids), 0, table.size - 1)
    return table[pos] == ids


@dataclass(slots=True)  # (slots: what it keeps is not in a dict the census would walk)
class Census:
    done: int  # iterations finished when it was taken
    blocks: int
    counts: dict[str, int]  # tracked objects and untracked dicts/tuples, by type name
    ids: np.ndarray | None  # ids of every container (untracked dicts too), sorted
    lengths: np.ndarray | None  # their lengths, in the same order
    cost: float
    payloads: dict[str, tuple[int, int, int]]  # by type name: (count, bytes, outside the heap)
    payload_ids: np.ndarray  # sorted
    untracked_ids: np.ndarray  # of the untracked containers, sorted
    untracked: dict[str, int]  # how many of the counts' dicts and tuples are untracked
    every: np.ndarray | None = None  # the first census only: ids of every gc object, sorted

    def had(self, ids: np.ndarray) -> np.ndarray:
        """Which of these ids existed at this census (the first census keeps them all)."""
        return _sorted_in(self.every, ids)

    def had_payload(self, ids: np.ndarray) -> np.ndarray:
        return _sorted_in(self.payload_ids, ids)

    def had_untracked(self, ids: np.ndarray) -> np.ndarray:
        return _sorted_in(self.untracked_ids, ids)

    def footprint(self) -> tuple[int, int]:
        """(RSS, bytes malloc has handed out) this census's kept data holds: its arrays, the
        counts' table, and a small int per count (the names are interned: shared, not copied)."""
        arrays = sum(a.nbytes for a in (self.ids, self.lengths, self.every, self.payload_ids,
                                        self.untracked_ids) if a is not None)
        table = sys.getsizeof(self.counts) + sys.getsizeof(self.payloads)
        n = len(self.counts) + 3 * len(self.payloads)
        return arrays + table + _INT_SIZE * n, arrays + table

    def length_of(self, ids: np.ndarray) -> np.ndarray:
        """Lengths of these containers at this census; -1 where one did not exist."""
        if self.ids is None or self.ids.size == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ids, ids), 0, self.ids.size - 1)
        return np.where(self.ids[pos] == ids, self.lengths[pos], -1)


@dataclass
class Survey:
    """One look at the heap, objects and all: what a census is made of. The final census keeps
    it until the paths are found (strong references: :meth:`clear` drops them)."""

    objs: list  # every tracked object
    ids: np.ndarray  # their ids, in the same order
    by_type: collections.Counter  # tracked objects by type
    untracked: Untracked  # the untracked containers and payloads they hold
    payloads: dict[str, tuple[int, int, int]]  # by type name: (count, bytes, outside the heap)
    payload_ids: np.ndarray  # sorted
    containers: list  # the tracked containers (CONTAINER_TYPES), then the untracked dicts

    def __post_init__(self) -> None:
        self.containers.extend(self.untracked.dicts)

    def counts(self, names: dict[type, str]) -> dict[str, int]:
        """Objects by type name: the tracked ones and the untracked containers."""
        out: dict[str, int] = {}
        for t, c in self.by_type.items():
            k = names.get(t) or sys.intern(type_name(t))
            out[k] = out.get(k, 0) + c
        dicts = len(self.untracked.dicts)
        out["dict"] = out.get("dict", 0) + dicts
        out["tuple"] = out.get("tuple", 0) + len(self.untracked.containers) - dicts
        return out

    def clear(self) -> None:
        self.objs = []
        self.containers = []
        self.untracked.clear()


def survey() -> Survey:
    """Every tracked object, and what they hold out of the collector's sight.

    The ids of every object are read as the pointer array of ``gc.get_objects()``'s list
    (pointers.py), not made into 300k Python ints: 180 -> 130 ms with TensorFlow and Keras
    loaded, and one array of them fewer. (Counting types in NumPy as well was faster still,
    80 ms, but its temporaries, several arrays of the heap's size, stayed with the allocator
    once its mmap threshold had risen, and hid a leak's first iterations from RSS.)"""
    # No collection while it runs: its temporaries would set one off, a whole second of it in a
    # heap of a million objects, and the objects it lists must stay what they are.
    enabled = gc.isenabled()
    gc.disable()
    try:
        objs = gc.get_objects()
        ids = addresses(objs)
        tps = type_addresses(objs, ids)
        # Type objects are used as keys only while the survey lives; a census keeps names, so it
        # never keeps a class (or anything else) of the user's alive.
        by_type = collections.Counter(map(type, objs))
        untracked = walk(objs, tps, by_type.keys())
        payloads, payload_ids = summary(untracked.payloads, type_name)
        containers = take(objs, np.isin(tps, _CONTAINER_TYPE_IDS))
        return Survey(objs, ids, by_type, untracked, payloads, payload_ids, containers)
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def no_huge_pages() -> Iterator[None]:
    """NumPy's advice to back its arrays of 4 MiB or more with huge pages, off meanwhile.

    A census's temporaries are such arrays (the ids and types of a million objects), taken from
    the heap once the mmap threshold has risen, and freed at once. The heap ranges they leave
    keep the advice, and a leak filling them later moves RSS by 2 MiB at a time: in a heap of a
    million objects, a 64 KiB-an-iteration leak read as a plateau or inconclusive in 6 runs of 6
    (2 MiB steps, then 31 flat iterations), and a leak in 6 of 6 with the advice off. (Where
    NumPy has no such switch, nothing is changed.)"""
    try:
        from numpy._core import multiarray  # noqa: PLC0415 - NumPy 2
    except ImportError:  # NumPy 1
        from numpy.core import multiarray  # noqa: PLC0415
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    was = switch(False) if switch is not None else None
    try:
        yield
    finally:
        if switch is not None:
            switch(was)


def take_census(done: int, every: bool = False) -> Census:
    """A census now: counts by type, container lengths, payloads; with ``every``, the ids of
    every object too (the first census: objects not among them were created during the run)."""
    with no_huge_pages():
        return _take_census(done, every)


def _take_census(done: int, every: bool) -> Census:
    t0 = time.thread_time()
    s = survey()
    try:
        all_ids = np.sort(s.ids) if every else None
        names = {t: sys.intern(type_name(t)) for t in s.by_type}
        ids, lengths = _container_lengths(s)
        untracked_ids = addresses(s.untracked.containers)
        untracked_ids.sort()
        dicts = len(s.untracked.dicts)
        untracked = {"dict": dicts, "tuple": len(s.untracked.containers) - dicts}
        return Census(done, sys.getallocatedblocks(), s.counts(names), ids, lengths,
                       time.thread_time() - t0, s.payloads, s.payload_ids, untracked_ids,
                       untracked, all_ids)
    finally:
        s.clear()


def _container_lengths(s: Survey) -> tuple[np.ndarray, np.ndarray]:
    # Every container's length, not only the largest: a leaking list starts out short.
    ids = addresses(s.containers)
    lengths = np.fromiter(map(len, s.containers), dtype=np.int64, count=len(s.containers))
    order = np.argsort(ids)
    return ids[order], lengths[order]
