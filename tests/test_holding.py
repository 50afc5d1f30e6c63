"""Python or native, whatever holds the memory: every way Python code keeps objects (a list, a
dict's values or keys, nested dicts, a defaultdict, an OrderedDict, a set, a deque, a
queue.Queue, functools.cache and lru_cache, __slots__, an instance's attributes, a class
attribute, a closure cell, a default argument, a module's globals), with NumPy arrays,
bytearrays, bytes, TensorFlow tensors and pandas frames as what is kept, is attributed to
Python objects with a reference path that names the container; bounded ones are not leaks.

The shapes are bench/holding_shapes.py's (the bench prints the same table). They run in one
fresh process, one watch after another, as short as the claim allows: 40 iterations of 64 KiB
(256 KiB tensors), where the verdict needs about 20. A fresh process, because a leak filling
memory an earlier test freed does not move RSS; a live run, because the census reads the live
heap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from holding_shapes import PAYLOADS, SHAPES, answered, cases  # noqa: E402

ITERATIONS = 40
# The same leak in a list and in a dict, at the fewest iterations a list leak is answered in.
FAST = 20
RACE = ("list/ndarray", "dict values/ndarray")


@pytest.fixture(scope="module")
def watched() -> dict[tuple[str, str, int], dict]:
    """Every case watched in one fresh process: (shape, payload, iterations) -> what it said."""
    specs = [f"{s}/{p}" for s, p in cases()] + [f"{c}@{FAST}" for c in RACE]
    proc = subprocess.run([sys.executable, str(BENCH / "holding_shapes.py"), str(ITERATIONS),
                           ",".join(specs)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r["shape"], r["payload"], r["iterations"]] = r
    return out


def _got(watched: dict, shape: str, payload: str, iterations: int = ITERATIONS) -> dict:
    r = watched.get((shape, payload, iterations))
    if r is None:  # the child skips a payload whose library it cannot import
        pytest.skip(f"{payload}: {PAYLOADS[payload][1].split('.')[0]} is not installed")
    return r


LEAKS = [c for c in cases() if SHAPES[c[0]].leaks]
CONTROLS = [c for c in cases() if not SHAPES[c[0]].leaks]


def test_the_shapes_cover_every_way_of_holding_and_every_payload():
    assert len({s for s, _ in LEAKS}) >= 12
    assert {p for _, p in LEAKS} == set(PAYLOADS)


@pytest.mark.parametrize(("shape", "payload"), LEAKS, ids=[f"{s}-{p}" for s, p in LEAKS])
def test_a_leak_is_attributed_to_python_objects_with_a_path_naming_its_container(
        watched, shape, payload):
    r = _got(watched, shape, payload)
    assert r["verdict"] == "leak", r["text"]
    assert r["attribution"] == "python", r["text"]
    assert any(r["words"] in p for p in r["paths"]), (r["words"], r["text"])
    # No path through unrelated objects, none that ends at an object of another kind.
    assert all(p.endswith(r["kind"]) for p in r["paths"]), r["text"]
    assert answered(r)
    # What the objects own outside Python's heap (array data, tensor buffers) is said apart.
    assert r["buffers"] is not None and r["buffers"] >= 0.5 * r["python"], r["text"]
    assert "native buffers they own" in r["summary"], r["summary"]


@pytest.mark.parametrize(("shape", "payload"), CONTROLS, ids=[f"{s}-{p}" for s, p in CONTROLS])
def test_memory_that_stays_bounded_is_not_called_a_leak(watched, shape, payload):
    r = _got(watched, shape, payload)
    assert r["verdict"] != "leak", r["text"]
    assert r["paths"] == [], r["text"]


def test_a_dict_leak_is_answered_as_fast_as_a_list_leak(watched):
    (lst, dct) = (_got(watched, *case.split("/"), FAST) for case in RACE)
    assert answered(lst), lst["text"]
    assert answered(dct), dct["text"]
