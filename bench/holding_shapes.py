"""Ways Python code holds memory, each a leak of one payload per iteration, and two that do not.

Used by ``tests/test_holding.py`` (each shape must be attributed to Python objects, with a
reference path naming its container) and ``bench/bench_attribution.py --shapes`` (the table of
what each one gets, and after how many iterations). Each shape is written as a user would write
it, at the top level of this module, so its roots are this module's globals::

    step = SHAPES["dict values"].step(PAYLOADS["ndarray"])   # CACHE[len(CACHE)] = payload()

``run(names, payloads, iterations)`` watches them one after another in this process and returns
what each watch said; ``python bench/holding_shapes.py`` prints it as JSON lines (the test runs
it in a fresh process: a leak filling memory an earlier one freed would not move RSS).
"""

from __future__ import annotations

import collections
import functools
import gc
import json
import queue
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KIB = 1024
PAYLOAD_BYTES = 64 * KIB  # kept per iteration
TENSOR_BYTES = 256 * KIB

# ---------------------------------------------------------------------------------------------
# Payloads: what is kept. Each call makes a new one, distinct (a set keeps them all).


def _ndarray(i: int) -> Any:
    return np.full(PAYLOAD_BYTES // 4, i, np.float32)


def _bytearray(i: int) -> Any:
    return bytearray(i.to_bytes(8, "little")) + bytearray(PAYLOAD_BYTES - 8)


def _bytes(i: int) -> Any:
    return i.to_bytes(8, "little") + bytes(PAYLOAD_BYTES - 8)


def _tensor(i: int) -> Any:
    import tensorflow as tf  # noqa: PLC0415 - only the tensor payload needs it

    # 256 KiB: TensorFlow's allocator hands smaller tensors out of regions it grows by steps,
    # and 40 of 64 KiB can all fit in memory it already holds.
    return tf.fill((TENSOR_BYTES // 4,), float(i))


def _frame(i: int) -> Any:
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame({"a": np.full(PAYLOAD_BYTES // 16, i, np.float64),
                         "b": np.full(PAYLOAD_BYTES // 16, i, np.float64)})


# name -> (make, the type name a path ends at)
PAYLOADS: dict[str, tuple[Callable[[int], Any], str]] = {
    "ndarray": (_ndarray, "numpy.ndarray"),
    "bytearray": (_bytearray, "bytearray"),
    "bytes": (_bytes, "bytes"),
    "tensor": (_tensor, "tensorflow.python.framework.ops.EagerTensor"),
    "frame": (_frame, "pandas.DataFrame"),
}

# ---------------------------------------------------------------------------------------------
# The holders, as a user writes them


class Model:
    def __init__(self) -> None:
        self.outputs: dict = {}


class Slotted:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: dict = {}


class Recorder:
    """Keeps each step's output as an attribute of its own: its __dict__ grows."""


class Registry:
    table: dict = {}


class Blob:
    """A payload a WeakValueDictionary can refer to (an ndarray has no room for a weakref)."""

    def __init__(self, data: Any) -> None:
        self.data = data


STORE: list = []
CACHE: dict = {}
SEEN: dict = {}
NESTED: dict = {}
GROUPS: collections.defaultdict = collections.defaultdict(list)
ORDERED: collections.OrderedDict = collections.OrderedDict()
UNIQUE: set = set()
RECENT: collections.deque = collections.deque()
PENDING: queue.Queue = queue.Queue()
MODEL = Model()
SLOTTED = Slotted()
RECORDER = Recorder()
BOUNDED: dict = {}
WEAK: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_RETIRED: list = []  # tensors of the cases run before (see watch_case)
GLOBALS = types.ModuleType("kept_globals")  # a module whose globals grow
sys.modules[GLOBALS.__name__] = GLOBALS


@functools.cache
def featurize(i: int, make: Callable[[int], Any]) -> Any:
    return make(i)


@functools.lru_cache(maxsize=100_000)
def embed(i: int, make: Callable[[int], Any]) -> Any:
    return make(i)


@functools.lru_cache(maxsize=8)
def lookup(i: int, make: Callable[[int], Any]) -> Any:
    return make(i)


def remember(x: Any, memo: dict = {}) -> None:  # noqa: B006 - the leak under test
    memo[len(memo)] = x


def make_closure(make: Callable[[int], Any]) -> Callable[[], None]:
    kept: dict = {}

    def step() -> None:
        kept[len(kept)] = make(len(kept))

    return step


def _counted(keep: Callable[[int, Callable[[int], Any]], None]) -> Callable:
    """A step from ``keep(i, make)``: ``i`` counts the calls."""
    def bind(make: Callable[[int], Any]) -> Callable[[], None]:
        calls = [0]

        def step() -> None:
            keep(calls[0], make)
            calls[0] += 1
        return step
    return bind


@dataclass(frozen=True)
class Shape:
    """A way of holding: the step, for a payload; the words its path must show; its state
    cleared afterwards; whether it leaks at all (the controls do not)."""

    step: Callable[[Callable[[int], Any]], Callable[[], None]]
    words: str  # what the reference path must contain
    payloads: tuple[str, ...]  # the payloads it is run with
    clear: Callable[[], None]
    leaks: bool = True


_HERE = __name__
_ANY = ("ndarray", "bytearray", "tensor", "frame")
SHAPES: dict[str, Shape] = {
    "list": Shape(_counted(lambda i, make: STORE.append(make(i))),
                  f"{_HERE}.STORE (list) \u2192", _ANY, STORE.clear),
    "dict values": Shape(_counted(lambda i, make: CACHE.__setitem__(i, make(i))),
                         f"{_HERE}.CACHE (dict) \u2192 [key]", _ANY, CACHE.clear),
    "dict keys": Shape(_counted(lambda i, make: SEEN.__setitem__(make(i), True)),
                       f"{_HERE}.SEEN (dict) \u2192 (key)", ("bytes",), SEEN.clear),
    "nested dicts": Shape(_counted(lambda i, make: NESTED.__setitem__(i, {"x": make(i)})),
                          f"{_HERE}.NESTED (dict) \u2192", ("ndarray", "tensor"), NESTED.clear),
    "defaultdict": Shape(_counted(lambda i, make: GROUPS[i % 4].append(make(i))),
                         f"{_HERE}.GROUPS (collections.defaultdict) \u2192", ("ndarray",),
                         GROUPS.clear),
    "OrderedDict": Shape(_counted(lambda i, make: ORDERED.__setitem__(i, make(i))),
                         f"{_HERE}.ORDERED (collections.OrderedDict) \u2192", ("bytearray",),
                         ORDERED.clear),
    "set": Shape(_counted(lambda i, make: UNIQUE.add(make(i))),
                 f"{_HERE}.UNIQUE (set) \u2192", ("bytes",), UNIQUE.clear),
    "deque": Shape(_counted(lambda i, make: RECENT.append(make(i))),
                   f"{_HERE}.RECENT (collections.deque) \u2192", ("ndarray", "frame"), RECENT.clear),
    "queue.Queue": Shape(_counted(lambda i, make: PENDING.put(make(i))),
                         f"{_HERE}.PENDING (queue.Queue) \u2192 .queue collections.deque",
                         ("ndarray",), PENDING.queue.clear),
    "functools.cache": Shape(_counted(featurize), f"lru_cache of {_HERE}.featurize \u2192",
                             ("ndarray", "tensor"), featurize.cache_clear),
    "lru_cache": Shape(_counted(embed), f"lru_cache of {_HERE}.embed \u2192", ("bytearray",),
                       embed.cache_clear),
    "__slots__": Shape(_counted(lambda i, make: SLOTTED.items.__setitem__(i, make(i))),
                       f"{_HERE}.SLOTTED ({_HERE}.Slotted) \u2192 .items dict \u2192",
                       ("ndarray",), SLOTTED.items.clear),
    "instance attribute dict": Shape(
        _counted(lambda i, make: MODEL.outputs.__setitem__(i, make(i))),
        f"{_HERE}.MODEL ({_HERE}.Model) \u2192 .outputs dict \u2192", ("ndarray", "tensor"),
        MODEL.outputs.clear),
    "instance attributes": Shape(
        _counted(lambda i, make: setattr(RECORDER, f"out{i}", make(i))),
        f"{_HERE}.RECORDER ({_HERE}.Recorder) \u2192", ("ndarray",), RECORDER.__dict__.clear),
    "class attribute": Shape(_counted(lambda i, make: Registry.table.__setitem__(i, make(i))),
                             f"{_HERE}.Registry.table (dict) \u2192 [key]", ("ndarray", "frame"),
                             Registry.table.clear),
    "closure cell": Shape(make_closure, f"closure cell 'kept' of {_HERE}.make_closure", ("ndarray",),
                          lambda: None),
    "default argument": Shape(_counted(lambda i, make: remember(make(i))),
                              f"default argument 'memo' of {_HERE}.remember (dict) \u2192 [key]",
                              ("ndarray",), remember.__defaults__[0].clear),
    "module globals": Shape(_counted(lambda i, make: setattr(GLOBALS, f"x{i}", make(i))),
                            f"globals of {GLOBALS.__name__} (dict) \u2192", ("ndarray",),
                            lambda: [delattr(GLOBALS, k) for k in list(vars(GLOBALS))
                                     if k.startswith("x")]),
    # Controls: memory that stays bounded.
    "bounded cache": Shape(_counted(lambda i, make: lookup(i % 32, make)), "", ("ndarray",),
                           lookup.cache_clear, leaks=False),
    "capped dict": Shape(_counted(lambda i, make: BOUNDED.__setitem__(i % 16, make(i))), "",
                         ("ndarray",), BOUNDED.clear, leaks=False),
    "WeakValueDictionary": Shape(_counted(lambda i, make: WEAK.__setitem__(i, Blob(make(i)))), "",
                                 ("ndarray",), WEAK.clear, leaks=False),
}


def cases(payloads: tuple[str, ...] = tuple(PAYLOADS)) -> list[tuple[str, str]]:
    """(shape, payload) pairs to run, for the payloads available."""
    return [(name, p) for name, shape in SHAPES.items() for p in shape.payloads if p in payloads]


def watch_case(name: str, payload: str, iterations: int) -> dict:
    """One watch of one shape with one payload: what it said."""
    import leakwidget  # noqa: PLC0415 - the bench and the test import this module first

    shape = SHAPES[name]
    make, kind = PAYLOADS[payload]
    step = shape.step(make)
    try:
        r = leakwidget.watch(step, iterations=iterations, widget=False)
    finally:
        if payload == "tensor":
            # TensorFlow's allocator keeps the memory of tensors freed: the next tensor leak
            # would fill it without moving RSS. Kept, they leave it nothing to reuse.
            _RETIRED.extend(o for o in gc.get_objects() if type(o).__name__ == "EagerTensor")
        shape.clear()
        del step
        gc.collect()
    a = r.attribution
    return {"shape": name, "payload": payload, "kind": kind, "words": shape.words,
            "leaks": shape.leaks, "iterations": iterations, "verdict": r.verdict.kind,
            "attribution": a.kind if a else None, "paths": [p.text for p in a.paths] if a else [],
            "python": a.python_slope if a else 0.0, "rss": a.rss_slope if a else 0.0,
            "buffers": getattr(a, "buffer_slope", None), "elapsed": r.elapsed,
            "census": a.overhead_seconds + a.finish_seconds if a else 0.0,
            "summary": a.summary if a else "", "text": str(a) if a else ""}


def answered(result: dict) -> bool:
    """Whether a leaking shape got the whole answer: a leak, held by Python objects, with a path
    naming its container that ends at the payload's type, and no path ending elsewhere."""
    paths = result["paths"]
    return (result["verdict"] == "leak" and result["attribution"] == "python"
            and any(result["words"] in p for p in paths)
            and all(p.endswith(result["kind"]) for p in paths))


def main() -> None:
    """``holding_shapes.py N [SHAPE/PAYLOAD[@N],...]``: every case (or those named) watched for
    N iterations (or the case's own), one JSON line each."""
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    ready = available()
    if len(sys.argv) > 2:
        named = [spec.partition("@") for spec in sys.argv[2].split(",")]
        todo = [(*case.split("/"), int(n) if n else iterations) for case, _, n in named]
    else:
        todo = [(name, payload, iterations) for name, payload in cases(ready)]
    # The cases that import nothing first, TensorFlow's last: every watch walks the whole heap
    # (its census, its reference paths), and TensorFlow adds 350,000 objects to it. Each library
    # is imported between two watches, not inside the first that needs it.
    todo.sort(key=lambda case: list(LIBRARIES).index(case[1]) if case[1] in LIBRARIES else -1)
    for name, payload, n in todo:
        if payload in ready:
            load(payload)
            print(json.dumps(watch_case(name, payload, n)), flush=True)


LIBRARIES = {"frame": "pandas", "tensor": "tensorflow"}  # payloads that need one, in run order


def available() -> tuple[str, ...]:
    """The payloads whose library is installed (not imported yet: :func:`load`)."""
    from importlib.util import find_spec  # noqa: PLC0415

    return tuple(p for p in PAYLOADS if p not in LIBRARIES or find_spec(LIBRARIES[p]) is not None)


def load(payload: str) -> None:
    """Import the payload's library, if it needs one: before its first watch, not inside it."""
    if payload in LIBRARIES:
        __import__(LIBRARIES[payload])


if __name__ == "__main__":
    main()
