"""How a reference path reads: in the words of the Python code that holds the objects.

``__main__.cache (dict) → [key] numpy.ndarray``, ``lru_cache of __main__.featurize →
numpy.ndarray``, ``__main__.model (Model) → .outputs dict → [3] numpy.ndarray``: a root, then
each reference as code would write it (an index, a key, an attribute, a slot), then the object.
The machinery between (a closure's cell, an instance's attribute dict, an lru_cache's own table)
is not shown.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Sequence

MAX_INDEX_SCAN = 100_000  # items searched for a list index; beyond, the index is not named
LRU_CACHE = "functools._lru_cache_wrapper"


def type_name(o: object) -> str:
    t = type(o)
    mod = getattr(t, "__module__", None)
    qn = getattr(t, "__qualname__", None) or t.__name__
    return qn if mod in (None, "builtins") else f"{mod}.{qn}"


def function_name(f: types.FunctionType) -> str:
    return f"{f.__module__}.{f.__qualname__}" if f.__module__ else f.__qualname__


def key_of(d: dict, value: object) -> tuple[object, bool] | None:
    """(the key under which ``d`` holds ``value``, whether ``value`` is that key itself)."""
    try:
        for k, v in d.items():
            if v is value:
                return k, False
            if k is value:
                return k, True
    except Exception:  # mutated while we looked
        return None
    return None


def named(prefix: str, d: dict, value: object) -> str:
    """``prefix.name`` for what a namespace (module globals, a class's or function's dict)
    holds under ``name``; ``prefix[key]`` for a key that is not a name."""
    found = key_of(d, value)
    if found is None:
        return f"{prefix}.?"
    key, is_key = found
    if isinstance(key, str) and key.isidentifier() and not is_key:
        return f"{prefix}.{key}"
    return f"{prefix}{_subscript(key, is_key)}"


def _subscript(key: object, is_key: bool) -> str:
    if is_key:
        return "(key)"
    if isinstance(key, weakref.ref):  # (a thread-local's per-thread dict is keyed so)
        return f"[weakref to {type_name(key())}]"
    return f"[{key!r}]" if isinstance(key, str) else f"[{repr(key)[:40]}]"


def _slot_of(parent: object, child: object) -> str | None:
    for cls in type(parent).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                if getattr(parent, name) is child:
                    return name
            except AttributeError:  # an empty slot
                continue
    return None


def edge(parent: object, child: object) -> str:
    """How ``parent`` holds ``child``, in the words of Python code: [3], ['key'], .attr."""
    if isinstance(parent, dict):
        found = key_of(parent, child)
        return "" if found is None else _subscript(*found)
    if isinstance(parent, (list, tuple)):
        for i, item in enumerate(parent[:MAX_INDEX_SCAN]):
            if item is child:
                return f"[{i}]"
        return "[…]"
    if isinstance(parent, types.CellType | types.MethodType):
        return ""
    slot = _slot_of(parent, child)
    if slot is not None:
        return f".{slot}"
    try:
        attrs = vars(parent)
    except TypeError:
        return ""
    if child is attrs:
        return ""
    found = key_of(attrs, child)
    return f".{found[0]}" if found and isinstance(found[0], str) else ""


def _is_attrs(parent: object, child: object) -> bool:
    """Whether ``child`` is ``parent``'s attribute dict (its keys read as attributes)."""
    if not isinstance(child, dict) or isinstance(parent, (dict, list, tuple)):
        return False
    try:
        return vars(parent) is child
    except TypeError:
        return False


def words(nodes: Sequence[object], root: str, item: str = "", holds: str = "") -> str:
    """``__main__.decoded (list) → [41] numpy.ndarray``: the root, then each node of the
    chain (``nodes``, from the root's down to the specimen); ``item``: a grown container's
    item type, appended as what it holds (``holds``: "values" or "keys" of a dict)."""
    first = nodes[0]
    lru = type_name(first) == LRU_CACHE
    text = f"lru_cache of {root}" if lru else f"{root} ({type_name(first)})"
    attrs_of: set[int] = set()  # instance __dict__s: their keys read as attributes
    inside_lru = False
    for k, (parent, child) in enumerate(zip(nodes, nodes[1:], strict=False)):
        if _is_attrs(parent, child):
            attrs_of.add(k + 1)
            continue
        if isinstance(parent, types.CellType) or isinstance(child, types.CellType):
            continue  # a closure inside the path: the cell is the function's own machinery
        if type_name(parent) == LRU_CACHE and isinstance(child, dict):
            inside_lru = True  # the cache's own table: its keys are the call's arguments
            continue
        hop = "" if inside_lru else edge(parent, child)
        inside_lru = False
        if k in attrs_of and hop.startswith("['"):
            hop = "." + hop[2:-2]
        text += f" \u2192 {hop + ' ' if hop else ''}{type_name(child)}"
    if item:
        hop = "" if inside_lru else _holds_words(nodes[-1], holds, len(nodes) - 1 in attrs_of)
        text += f" \u2192 {hop + ' ' if hop else ''}{item}"
    return text


def _holds_words(container: object, holds: str, attrs: bool) -> str:
    """How a grown container holds the items it grows by: ``[key]`` (a dict's values),
    ``(key)`` (its keys), ``.name`` (an object's attributes: the newest one named)."""
    if not isinstance(container, dict):
        return ""
    if holds == "keys":
        return "(key)"
    newest = next(reversed(container.keys()), None) if attrs else None
    return f".{newest}" if isinstance(newest, str) else "[key]"
