"""Builders of ``interleave`` and ``tf.data.experimental.parallel_interleave``: off is one input
at a time (``flat_map``'s order)."""

from __future__ import annotations

import inspect
from typing import Any

from ..stage import Stage
from .calls import _tag
from .context import Site, TfData, call_with


def build_interleave(ctx: TfData, func: Any, bound: inspect.BoundArguments,
                     site: Site) -> tuple[Stage, Any]:
    """``Dataset.interleave``: off is ``flat_map``, serial ``num_parallel_calls=None``."""
    a = bound.arguments
    npc = a.get("num_parallel_calls")
    shown = {"map_func": a["map_func"]}
    for k in ("cycle_length", "block_length", "num_parallel_calls"):
        if a.get(k) is not None:
            shown[k] = a[k]
    stage = ctx.record("interleave", site, shown, [a["self"]], toggleable=True,
                       parallel=npc is not None)
    if stage.state == "off":
        ds = ctx.fn["flat_map"](a["self"], a["map_func"])
    elif stage.state == "serial":
        ds = call_with(func, bound, num_parallel_calls=None, deterministic=None)
    else:
        ds = func(**a)
    return stage, _tag(ds, stage)


def build_parallel_interleave(ctx: TfData, func: Any, bound: inspect.BoundArguments,
                              site: Site) -> tuple[Stage, None]:
    """tf.data.experimental.parallel_interleave(...) through ``.apply`` (the dataset's
    ``__init__``): cycle_length workers. Off is cycle_length 1 with nothing prefetched; it has
    no serial form that keeps the cycle, so it is on or off."""
    a = bound.arguments
    shown = {"form": "tf.data.experimental.parallel_interleave", "map_func": a["map_func"],
             "cycle_length": a["cycle_length"]}
    for k in ("block_length", "sloppy", "buffer_output_elements", "prefetch_input_elements"):
        if a.get(k) is not None:
            shown[k] = a[k]
    stage = ctx.record("interleave", site, shown, [a["input_dataset"]], toggleable=True,
                       parallel=False)
    if stage.state == "off":
        call_with(func, bound, cycle_length=1, block_length=1, sloppy=False,
                  buffer_output_elements=1, prefetch_input_elements=0)
    else:
        func(**a)
    _tag(a["self"], stage)
    return stage, None
