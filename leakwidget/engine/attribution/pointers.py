"""Reading a list of objects as arrays: their ids, and their types' ids, without a Python call
for each object.

A census walks every object of the heap (a million of them in a large process) several times;
``map(id, objs)`` or ``map(type, ...)`` cost 40–60 ns an object there. CPython's layout gives the
same answers as plain memory reads: a list's items are an array of object pointers (which are
the objects' ids), and every object starts with its reference count and then its type's
pointer. Each reader is checked once, on objects whose answers are known, against the portable
way, which is used instead wherever the check fails (another implementation, a free-threaded
build whose object header differs).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import numpy as np

_WORD = ctypes.sizeof(ctypes.c_void_p)
# A CPython list's items are an array of object pointers behind the list's header
# (PyVarObject: refcount, type, size; then the items pointer).
_LIST_ITEMS_OFFSET = 3 * _WORD
_TYPE_OFFSET = _WORD  # PyObject: ob_refcnt, then ob_type


class _Words:
    """``words`` 64-bit words of memory from ``address`` on, as NumPy reads them (no copy).

    Not a ctypes array: each new length of ``c_int64 * n`` is a new type, which ctypes keeps in
    a cache for ever; a census per run made the watcher itself leak a few types per run."""

    def __init__(self, address: int, words: int) -> None:
        self.__array_interface__ = {"shape": (words,), "typestr": "<i8",
                                    "data": (address, True), "version": 3}


def _view(address: int, words: int) -> np.ndarray:
    return np.asarray(_Words(address, words))


def addresses_by_pointer(items: list) -> np.ndarray:
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    base = ctypes.c_void_p.from_address(id(items) + _LIST_ITEMS_OFFSET).value
    return _view(base, n).copy()


def addresses_by_id(items: list) -> np.ndarray:
    return np.fromiter(map(id, items), dtype=np.int64, count=len(items))


def type_addresses_by_pointer(ids: np.ndarray) -> np.ndarray:
    """The ids of the types of the live objects whose ids these are (the caller keeps the
    objects alive): each object's type pointer read in one gather, through an array that views
    the address space from its first word up to the highest of them."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    memory = _view(_TYPE_OFFSET, int(ids.max()) // _WORD + 1)
    return memory[ids // _WORD]


def _fast_layout() -> bool:
    return (sys.implementation.name == "cpython" and _WORD == 8
            and getattr(sys, "_is_gil_enabled", lambda: True)())


def _pick() -> tuple[Callable[[list], np.ndarray], Callable[[list, np.ndarray], np.ndarray]]:
    """The pointer readers where they read what ``id()`` and ``type()`` say (checked once on a
    list of known objects); the portable loops elsewhere."""
    portable = (addresses_by_id, lambda items, ids: addresses_by_id(list(map(type, items))))
    if not _fast_layout():
        return portable
    probe = [object(), 1 << 70, "s", b"b", [], {}, (1,), np.zeros(2), 2.5, None, *range(300, 340)]
    try:
        ids = addresses_by_pointer(probe)
        if not np.array_equal(ids, addresses_by_id(probe)):
            return portable
        if not np.array_equal(type_addresses_by_pointer(ids), portable[1](probe, ids)):
            return addresses_by_pointer, portable[1]
    except (ValueError, OSError, MemoryError):
        return portable
    return addresses_by_pointer, lambda items, ids: type_addresses_by_pointer(ids)


# addresses(items): ids of a list's items; type_addresses(items, ids): ids of their types
# (``ids`` the first's answer for the same list, which must stay alive meanwhile).
addresses, type_addresses = _pick()
