"""What Python objects hold where the collector does not look: untracked containers, payloads.

The collector tracks only objects that can take part in a reference cycle. A NumPy array, a
``bytes`` or a ``bytearray`` is never tracked, and CPython untracks a dict or a tuple that holds
only such objects: after ``cache[k] = np.ones(16384)`` neither ``cache`` nor its arrays are in
``gc.get_objects()``. They are found through the tracked objects that refer to them: the
referents of every tracked object (``gc.get_referents``, a hundred thousand objects per call),
then the referents of the untracked dicts and tuples found so, a few levels deep. (An untracked
dict holds nothing tracked, so nothing tracked hides below it.)

A *payload* is an untracked object that owns memory of its own beyond a Python header: an
array's data, a buffer. It is sized by what it owns (the array that owns the data, so views
sharing a base count it once; ``bytes`` and ``bytearray`` by their allocation). Objects of
libraries that size their objects whole (pandas: a frame by ``memory_usage``, sizes.py) are not
entered, so no buffer is counted twice; nor is the watcher's own state.
"""

from __future__ import annotations

import array
import gc
import itertools
import mmap
import sys
import types as types_
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from .pointers import addresses, type_addresses

CHUNK = 100_000  # tracked objects whose referents are listed at once (a list of ~400k pointers)
MAX_LEVELS = 4  # untracked containers inside untracked containers (tuples of tuples) this deep
CONTAINERS = (dict, tuple)  # the containers CPython untracks when they hold nothing tracked
_BUFFERS = (bytes, bytearray, array.array, mmap.mmap)
SMALL_OBJECT = 512  # pymalloc serves requests up to this size; larger ones go to malloc
# Libraries whose objects are sized whole (their values with them): the walk does not enter them.
SIZED_WHOLE = frozenset({"pandas"})
_OWN = "leakwidget."  # the watcher's own objects: what they hold is not the user's growth


@dataclass
class Untracked:
    """The untracked objects reachable from the tracked ones, each once (strong references:
    the caller drops this as soon as it has read it)."""

    containers: list = field(default_factory=list)  # untracked dicts and tuples
    payloads: list = field(default_factory=list)  # arrays, bytes, bytearrays, buffers
    dicts: list = field(default_factory=list)  # the containers that are dicts

    def clear(self) -> None:
        self.containers.clear()
        self.payloads.clear()
        self.dicts.clear()


def kinds() -> dict[type, bool]:
    """The types the walk picks up: True for a container to look inside, False for a payload.
    (ndarray's subclasses are looked up each time: memmap, matrix, a user's own.)"""
    out: dict[type, bool] = dict.fromkeys(CONTAINERS, True)
    todo = [np.ndarray]
    while todo:
        t = todo.pop()
        out[t] = False
        todo.extend(t.__subclasses__())
    out.update(dict.fromkeys(_BUFFERS, False))
    return out


def _module_of(t: type) -> str:
    mod = getattr(t, "__module__", None)
    return mod if isinstance(mod, str) else ""  # (a metaclass's is a descriptor)


def sized_whole(t: type) -> bool:
    """Whether objects of this type are sized whole, values and all (a pandas frame)."""
    return _module_of(t).partition(".")[0] in SIZED_WHOLE


class _Lookup:
    """A property of types, read for many objects at once from their types' ids."""

    def __init__(self, flags: dict[type, int]) -> None:
        keys = np.array([id(t) for t in flags], dtype=np.int64)
        order = np.argsort(keys)
        self.keys = keys[order]
        self.values = np.array(list(flags.values()), dtype=np.int8)[order]

    def __call__(self, tps: np.ndarray) -> np.ndarray:
        """Each type's flag; 0 for types not in the table."""
        if not self.keys.size:
            return np.zeros(tps.shape, dtype=np.int8)
        pos = np.searchsorted(self.keys, tps).clip(0, self.keys.size - 1)
        return np.where(self.keys[pos] == tps, self.values[pos], 0)


_WALKED, _NOT_WALKED, _OWN_OBJECT = 0, 1, 2


def _split(objs: list, tps: np.ndarray, types: Iterable[type]) -> tuple[list, list]:
    """(the objects to walk, the watcher's own objects). Not walked: the objects of libraries
    sized whole, the watcher's own, and functions. A function's referents are a quarter of
    a TensorFlow heap's, and what it holds that could grow, its defaults and closure, are
    tracked tuples (a tuple holding a dict stays tracked) walked on their own."""
    flags = {t: _OWN_OBJECT if _module_of(t).startswith(_OWN) else _NOT_WALKED
             for t in types if sized_whole(t) or _module_of(t).startswith(_OWN)}
    flags[types_.FunctionType] = _NOT_WALKED
    kind = _Lookup(flags)(tps)
    return (list(itertools.compress(objs, (kind == _WALKED).tolist())),
            take(objs, kind == _OWN_OBJECT))


def take(refs: list, where: np.ndarray) -> list:
    """The items of ``refs`` at the positions where ``where`` is true."""
    idx = np.flatnonzero(where).tolist()
    if len(idx) < 2:
        return [refs[i] for i in idx]
    return list(itemgetter(*idx)(refs))


_CONTAINER, _PAYLOAD = 1, 2


def _level(chunk: list, kind_of: _Lookup, conts: list, payloads: dict[int, Any]) -> None:
    """The untracked containers (onto ``conts``, repeats and all) and payloads (into
    ``payloads``, by id) that ``chunk`` refers to. Types are read as pointers (pointers.py):
    no Python call per referent."""
    refs = gc.get_referents(*chunk)
    kind = kind_of(type_addresses(refs, addresses(refs)))
    # Containers only when untracked: at the first level most dicts and tuples are tracked
    # (they are the heap), dropped here in C. Payloads are never tracked.
    conts.extend(itertools.filterfalse(gc.is_tracked, take(refs, kind == _CONTAINER)))
    pays = take(refs, kind == _PAYLOAD)
    payloads.update(zip(map(id, pays), pays, strict=True))


def _new(conts: list, seen: np.ndarray) -> tuple[list, np.ndarray]:
    """The containers of ``conts`` not among ``seen`` (sorted ids), each once; and the ids
    seen now. (A million untracked containers cost ~100 ms this way, seconds in a dict.)"""
    ids = addresses(conts)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    first = np.ones(ids.size, dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    if seen.size:
        pos = np.searchsorted(seen, ids).clip(0, seen.size - 1)
        first &= seen[pos] != ids
    picked = np.zeros(ids.size, dtype=bool)
    picked[order[first]] = True
    now = np.concatenate((seen, ids[first]))
    now.sort()
    return take(conts, picked), now


def walk(objs: list, tps: np.ndarray, types: Iterable[type]) -> Untracked:
    """The untracked containers and payloads that ``objs`` (every tracked object; ``tps`` the
    ids of their types, ``types`` the types among them) refer to, directly or through untracked
    containers."""
    table = kinds()
    kind_of = _Lookup({t: _CONTAINER if c else _PAYLOAD for t, c in table.items()})
    level, own = _split(objs, tps, types)
    containers: list = []
    payloads: dict[int, Any] = {}
    seen = np.zeros(0, dtype=np.int64)
    for _ in range(MAX_LEVELS):
        conts: list = []
        for i in range(0, len(level), CHUNK):
            _level(level[i:i + CHUNK], kind_of, conts, payloads)
        level, seen = _new(conts, seen)
        del conts
        if not level:
            break
        containers.extend(level)
    del level
    for i in _own_payloads(own, table):
        payloads.pop(i, None)
    dicts = take(containers, type_addresses(containers, addresses(containers)) == id(dict))
    return Untracked(containers, list(payloads.values()), dicts)


def _own_payloads(own: list, table: dict[type, bool]) -> set[int]:
    """Ids of the payloads the watcher's own objects hold, directly or in their attribute
    dicts (its record tables, the censuses' id arrays), and its modules' tables (the verdict's
    index pairs): not the user's."""
    out: set[int] = set()

    def payloads_in(values: Iterable) -> None:
        for v in values:
            kind = table.get(type(v))
            if kind is False:
                out.add(id(v))
            elif type(v) in (list, tuple):
                out.update(id(x) for x in v if table.get(type(x)) is False)

    for o in own:
        payloads_in(gc.get_referents(o))
        attrs = getattr(o, "__dict__", None)
        if type(attrs) is dict:
            payloads_in(attrs.values())
    for name, module in list(sys.modules.items()):
        if name.startswith(_OWN):
            payloads_in(vars(module).values())
    return out


def payload_size(o: Any) -> tuple[int, int]:
    """(bytes, id of what owns them) of a payload: an array's data is owned by the array at the
    end of its ``base`` chain, and counted once however many views of it are held."""
    try:
        if isinstance(o, np.ndarray):
            root = o
            while isinstance(root.base, np.ndarray):
                root = root.base
            if root.base is None:  # the array owns its data: sys.getsizeof counts it
                return sys.getsizeof(root), id(root)
            # data owned by another object (bytes, mmap, a library's buffer): the array's extent
            return int(root.nbytes), id(root.base)
        if isinstance(o, mmap.mmap):
            return len(o), id(o)
        return sys.getsizeof(o), id(o)
    except (ValueError, TypeError):  # a closed mmap, an exotic subclass
        return 0, id(o)


def summary(payloads: list, name_of: Any) -> tuple[dict[str, tuple[int, int, int]], np.ndarray]:
    """Payloads by type name: (count, bytes, bytes outside Python's heap), each buffer counted
    once; and their ids, sorted (to tell the ones created later)."""
    owners: set[int] = set()
    out: dict[str, tuple[int, int, int]] = {}
    for o in payloads:
        size, owner = payload_size(o)
        if owner in owners:
            size = 0
        owners.add(owner)
        name = name_of(type(o))
        n, b, outside = out.get(name, (0, 0, 0))
        out[name] = (n + 1, b + size, outside + (size if size > SMALL_OBJECT else 0))
    ids = addresses(payloads)
    ids.sort()
    return out, ids
