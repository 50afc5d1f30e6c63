"""Builders of ``map`` (v2 and tf.compat.v1) and ``tf.data.experimental.map_and_batch``.

Off: every element becomes the map's first output. Eagerly, that output is computed once per
watch and stage and reused by every later build of the same stage, so a pipeline rebuilt every
iteration stops building (tracing) the user's function too: building it can be the leak (a
py_function registered for each trace). Inside a graph (a dataset built in a tf.function or an
interleave's function) the first output is taken lazily.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..stage import Stage
from .calls import _executing_eagerly, _tag, _uses_python
from .context import Site, TfData, call_with


def _constant(_element: Any, constant: Any) -> Any:
    """The map function of the off substitute: ``zip(input, first)`` -> first."""
    return constant


def _check_python(ctx: TfData, stage: Stage, ds: Any) -> None:
    """Show ``python=tf.py_function`` on a map whose function calls back into Python."""
    if stage.id not in ctx.py_checked:  # reading the traced graph costs: once per stage
        ctx.py_checked.add(stage.id)
        python = _uses_python(ds)
        if python:
            stage.args["python"] = python


def _first_output(ctx: TfData, stage: Stage, mapped: Callable[[], Any],
                  upstream: Any) -> Any:
    """The map's first output, repeated forever; None if the map's output is empty.

    ``mapped()`` builds the map (serially): called only when the cache cannot answer.
    """
    spec = upstream.element_spec
    hit = ctx.first_outputs.get(stage.id)
    if hit is not None and hit[0] == spec:
        return ctx.fn["repeat"](ctx.dataset.from_tensors(hit[1]))
    ds = mapped()
    _check_python(ctx, stage, ds)
    if _executing_eagerly():
        for first in ctx.fn["take"](ds, 1):
            ctx.first_outputs[stage.id] = (spec, first)
            return ctx.fn["repeat"](ctx.dataset.from_tensors(first))
        return None  # empty: so is the map's output
    return ctx.fn["repeat"](ctx.fn["cache"](ctx.fn["take"](ds, 1)))


@dataclass(frozen=True)
class Map:
    """``Dataset.map``; serial is ``num_parallel_calls=None``."""

    serial_changes: dict[str, Any]  # the arguments that make this map serial
    adapt: Callable[[Any], Any]  # turns a substitute into the caller's dataset type (v1 or v2)

    def __call__(self, ctx: TfData, func: Any, bound: inspect.BoundArguments,
                 site: Site) -> tuple[Stage, Any]:
        a = bound.arguments
        npc = a.get("num_parallel_calls")
        shown = {"map_func": a["map_func"]}
        if npc is not None:
            shown["num_parallel_calls"] = npc
        stage = ctx.record("map", site, shown, [a["self"]], toggleable=True,
                           parallel=npc is not None)
        serial = functools.partial(call_with, func, bound, **self.serial_changes)
        if stage.state == "off":
            first = _first_output(ctx, stage, serial, a["self"])
            if first is None:
                ds = serial()
            else:
                ds = self.adapt(ctx.fn["map"](ctx.zip_((a["self"], first)), _constant))
            return stage, _tag(ds, stage)
        ds = func(**a) if stage.state == "on" else serial()
        _check_python(ctx, stage, ds)
        return stage, _tag(ds, stage)


def build_map_and_batch(ctx: TfData, func: Any, bound: inspect.BoundArguments,
                        site: Site) -> tuple[Stage, None]:
    """tf.data.experimental.map_and_batch(...) through ``.apply`` (the dataset's ``__init__``):
    a map (same states) that batches; serial is ``num_parallel_calls=1``."""
    a = bound.arguments
    upstream = a["input_dataset"]
    npc = a.get("num_parallel_calls")
    shown = {"form": "tf.data.experimental.map_and_batch", "map_func": a["map_func"],
             "batch_size": a["batch_size"], "num_parallel_calls": npc}
    stage = ctx.record("map", site, shown, [upstream], toggleable=True, parallel=True)
    if stage.state == "off":
        mapped = functools.partial(ctx.fn["map"], upstream, a["map_func"])
        first = _first_output(ctx, stage, mapped, upstream)
        if first is None:
            call_with(func, bound, num_parallel_calls=1)
        else:
            call_with(func, bound, input_dataset=ctx.zip_((upstream, first)),
                      num_parallel_calls=1, map_func=_constant)
    else:
        if stage.state == "serial":
            call_with(func, bound, num_parallel_calls=1)
        else:
            func(**a)
        _check_python(ctx, stage, a["self"])
    _tag(a["self"], stage)
    return stage, None
