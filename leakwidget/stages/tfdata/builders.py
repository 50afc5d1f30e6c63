"""Builders of the stages whose substitute needs no function of the user's: pass-through stages,
batch, recorded-only stages, mixers and TFRecordDataset (map and interleave: maps.py,
interleaves.py).

Each takes the context, the original function, the bound arguments and the call site, and
returns ``(stage, result)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from ..stage import Stage
from .calls import _tag, _upstream
from .context import Site, TfData, call_with


@dataclass(frozen=True)
class PassThrough:
    """prefetch, shuffle, cache: off is the input unchanged."""

    kind: str
    shown_keys: tuple[str, ...]  # the arguments shown with the stage

    def __call__(self, ctx: TfData, func: Any, bound: inspect.BoundArguments,
                 site: Site) -> tuple[Stage, Any]:
        a = bound.arguments
        stage = ctx.record(self.kind, site, {k: a[k] for k in self.shown_keys if k in a},
                           [a["self"]], toggleable=True, parallel=False)
        ds = ctx.passthrough(a["self"]) if stage.state == "off" else func(**a)
        return stage, _tag(ds, stage)


def build_batch(ctx: TfData, func: Any, bound: inspect.BoundArguments,
                site: Site) -> tuple[Stage, Any]:
    """batch: it defines the element structure, so it stays; only its parallelism can go."""
    a = bound.arguments
    npc = a.get("num_parallel_calls")
    shown = {"batch_size": a["batch_size"]}
    if a.get("drop_remainder"):
        shown["drop_remainder"] = True
    if npc is not None:
        shown["num_parallel_calls"] = npc
    stage = ctx.record("batch", site, shown, [a["self"]], toggleable=False,
                       parallel=npc is not None)
    if stage.state == "serial":
        ds = call_with(func, bound, num_parallel_calls=None, deterministic=None)
    else:
        ds = func(**a)
    return stage, _tag(ds, stage)


@dataclass(frozen=True)
class RecordedOnly:
    """padded_batch, repeat, from_generator: shown in the pipeline, never substituted."""

    kind: str
    shown_keys: tuple[str, ...]
    upstream_key: str | None  # the argument holding the input dataset; None for a source

    def __call__(self, ctx: TfData, func: Any, bound: inspect.BoundArguments,
                 site: Site) -> tuple[Stage, Any]:
        a = bound.arguments
        shown = {k: a[k] for k in self.shown_keys if a.get(k) is not None}
        upstream = [a[self.upstream_key]] if self.upstream_key else []
        stage = ctx.record(self.kind, site, shown, upstream, toggleable=False, parallel=False)
        return stage, _tag(func(**a), stage)


@dataclass(frozen=True)
class Mixer:
    """sample_from_datasets, choose_from_datasets: off is the first input only."""

    kind: str
    shown_keys: tuple[str, ...]

    def __call__(self, ctx: TfData, func: Any, bound: inspect.BoundArguments,
                 site: Site) -> tuple[Stage, Any]:
        a = bound.arguments
        datasets = a["datasets"]
        seq = list(datasets) if isinstance(datasets, (list, tuple)) else []
        shown = {"datasets": len(seq)} if seq else {}
        shown.update({k: a[k] for k in self.shown_keys if a.get(k) is not None})
        # a dataset of datasets has no first input to fall back to: it stays on
        stage = ctx.record(self.kind, site, shown, seq, toggleable=bool(seq), parallel=False)
        if stage.state == "off" and seq:
            ds = ctx.passthrough(seq[0])
        else:
            ds = func(**a)
        return stage, _tag(ds, stage)


def build_tfrecord(ctx: TfData, func: Any, bound: inspect.BoundArguments,
                   site: Site) -> tuple[Stage, None]:
    """TFRecordDataset(num_parallel_reads=k) (its ``__init__``): off and serial are one reader."""
    a = bound.arguments
    npr = a.get("num_parallel_reads")
    parallel = npr is not None and not (isinstance(npr, int) and npr == 1)
    shown = {"filenames": a["filenames"]}
    if npr is not None:
        shown["num_parallel_reads"] = npr
    stage = ctx.record("TFRecordDataset", site, shown, [], toggleable=parallel,
                       parallel=parallel)
    if stage.state in ("off", "serial"):
        call_with(func, bound, num_parallel_reads=None)
    else:
        func(**a)
    self_ = a["self"]
    _tag(self_, stage)
    try:  # the filenames dataset may itself come from a recorded stage
        known = {s.id for s in ctx.session.stages}
        ctx.session._add_inputs(stage, _upstream(list(self_._inputs()), known))
    except Exception:
        pass
    return stage, None
