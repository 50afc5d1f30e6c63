"""How big an object is, for the census: what it takes in Python's heap, and what it owns outside.

Each object of the census is counted once, in one row: a tracked object by its type, an
untracked container (a dict or tuple the collector dropped) by its type too, a payload (an
array, a buffer: held.py) by its real size. So an object's size here is its own, plus the small
untracked objects it refers to that nothing else counts (the strings and numbers in a list or a
dict); the payloads and untracked containers it refers to are counted in their own rows.
"""

from __future__ import annotations

import collections
import gc
import itertools
import math
import sys
from typing import Any

from .held import sized_whole

REFERENTS_SIZED = 64  # per sampled object; more are extrapolated
SMALL_OBJECT = 512  # pymalloc serves requests up to this size; larger ones go to malloc
WHOLE_DEEP_CELLS = 100_000  # a pandas object with more values is sized without its strings' sizes


def type_name(t: type) -> str:
    mod = getattr(t, "__module__", None)
    qn = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    return qn if not isinstance(mod, str) or mod == "builtins" else f"{mod}.{qn}"


def _tensor_bytes(o: Any) -> int:
    n = o.shape.num_elements()
    return int(n * o.dtype.size) if n is not None else 0


def _whole_bytes(o: Any) -> int:
    """A pandas object (frame, series, index) with its values: ``memory_usage(deep=True)``,
    which also sizes every string of an object column, unless it has too many values for that
    to be cheap."""
    usage = getattr(o, "memory_usage", None)
    if usage is None:
        return 0
    deep = int(getattr(o, "size", 0) or 0) <= WHOLE_DEEP_CELLS
    total = usage(deep=deep)
    return int(total.sum() if hasattr(total, "sum") else total) + object.__sizeof__(o)


def buffer_bytes(o: Any) -> int:
    """Bytes a tracked object owns outside Python's heap (a TF tensor's buffer, a pandas
    object's values); 0 for most objects."""
    mod = type(o).__module__ or ""
    try:
        if mod.startswith("tensorflow") and hasattr(o, "dtype") and hasattr(o, "shape"):
            return _tensor_bytes(o)
        if sized_whole(type(o)):
            return _whole_bytes(o)
    except Exception:  # an object whose attributes raise must not break the census
        return 0
    return 0


def blocks_of(o: Any, size: int) -> tuple[int, int]:
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


def own_size(o: Any) -> tuple[int, int]:
    """(bytes, of which outside Python's heap) of one object by itself."""
    buffer = buffer_bytes(o)
    if buffer:  # (sys.getsizeof of a pandas object would size its values deep, whatever it costs)
        return object.__sizeof__(o) + buffer, buffer
    size = sys.getsizeof(o)
    return size, 0


def size(o: Any, counted_apart: dict[type, bool]) -> tuple[int, int, int, int]:
    """(bytes, pymalloc blocks, bytes in those blocks, bytes outside Python's heap) of an object
    and of the small untracked objects it refers to directly (one level deep), which nothing
    else counts; ``counted_apart`` are the types counted in rows of their own (payloads and
    untracked containers, held.py), left out here.

    A big container's items are sampled, not all sized: the census must stay cheap.
    """
    try:
        s, outside = own_size(o)
    except Exception:
        return 0, 0, 0, 0
    nb, bb = blocks_of(o, s)
    try:
        refs = gc.get_referents(o)
    except Exception:
        return s, nb, bb, outside
    scale = max(1.0, len(refs) / REFERENTS_SIZED)
    rs_sum = nb1 = bb1 = 0
    for r in itertools.islice(refs, REFERENTS_SIZED):
        if gc.is_tracked(r) or isinstance(r, type) or type(r) in counted_apart:
            continue
        try:
            rs = sys.getsizeof(r)
        except Exception:
            continue
        rs_sum += rs
        b1, b2 = blocks_of(r, rs)
        nb1 += b1
        bb1 += b2
    return int(s + rs_sum * scale), int(nb + nb1 * scale), int(bb + bb1 * scale), outside


def container_items(o: Any, k: int) -> list:
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
