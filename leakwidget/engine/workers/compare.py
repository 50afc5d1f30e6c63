"""The same watch under several allocators or environments, side by side.

    result = leakwidget.compare(step, setup=make_dataset, seconds=60)
    print(result)           # the answer, how to apply it, one row per variant
    result.best             # the variant named the fix, or None (result.answer says why)
    result["jemalloc"]      # that variant's WatchResult

Each variant is the watch in a fresh worker process (:mod:`.isolate`) with its own environment:
by default glibc's malloc as it is, ``MALLOC_ARENA_MAX=2``, jemalloc and tcmalloc (preloaded).
They run in parallel up to the free cores, each until its own verdict is confident (at least
the iterations asked, at most the budget); the observers see them one after another
(:class:`~.sequence.OneAtATime`), each as its own series. Growth that glibc keeps in its
per-thread arenas shrinks under the others; :mod:`.fix` names a variant only when its growth
interval lies clearly below glibc's, and :mod:`.apply` says how to set it where the user runs.
The workers' stderr is kept in the result (:mod:`.log`), printed only for one that failed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ...report.compare import CHART
from ...report.comparison import HTML, PAGE, compare_text
from ...report.render import mimebundle
from ...stages import Toggles
from ..budget import DEFAULT_SECONDS
from ..kinds import ALLOCATORS, Allocator
from ..observer import Observer
from ..result import WatchResult, json_default, write_whole
from ..spec import WatchSpec
from ..units import parse_size
from ..watch import NO_PAUSE, Pause, YieldToLoop, run_sync
from .apply import BEFORE_PYTHON, how_to_apply
from .fix import Answer, Growth, decide, growth_of, status_of, status_text
from .hub import Hub
from .isolate import IsolatedRun, allocator_library, allocator_package, drive
from .parallel import free_cores
from .sequence import OneAtATime

__all__ = ["DEFAULT_VARIANTS", "CompareResult", "Variant", "compare", "run_compare"]


@dataclass(frozen=True)
class Variant:
    """One way to run the watch: a name, extra environment variables, an allocator."""

    name: str
    env: tuple[tuple[str, str], ...] = ()
    allocator: Allocator = "glibc"

    @classmethod
    def of(cls, value: Variant | str | Mapping[str, Any]) -> Variant:
        """A variant from ``"jemalloc"``, ``"MALLOC_ARENA_MAX=2"``, a dict with name / env /
        allocator, or a Variant."""
        if isinstance(value, Variant):
            return value
        if isinstance(value, str):
            if value in ALLOCATORS:
                return cls(value, allocator=value)
            name, eq, setting = value.partition("=")
            if eq and name.strip():
                return cls(value, env=((name.strip(), setting),))
            raise ValueError(f"a variant is an allocator ({', '.join(ALLOCATORS)}) or NAME=VALUE, "
                             f"not {value!r}")
        if isinstance(value, Mapping):
            env = tuple(dict(value.get("env", {})).items())
            allocator = value.get("allocator", "glibc")
            name = value.get("name") or " ".join([allocator] + [f"{k}={v}" for k, v in env])
            return cls(name, env, allocator)
        raise TypeError(f"a variant is a string, a dict or a Variant, not {type(value).__name__}")


DEFAULT_VARIANTS: tuple[Variant, ...] = (
    Variant("glibc"),
    Variant("MALLOC_ARENA_MAX=2", env=(("MALLOC_ARENA_MAX", "2"),)),
    Variant("jemalloc", allocator="jemalloc"),
    Variant("tcmalloc", allocator="tcmalloc"),
)


@dataclass
class CompareResult:
    """A comparison: each variant's run, and the answer the numbers support (``engine.workers.fix``)."""

    variants: list[Variant]
    results: list[WatchResult]
    notes: list[str] = field(default_factory=list)
    # What each worker wrote to stderr (TensorFlow's log, warnings), kept instead of printed.
    worker_logs: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> WatchResult:
        for v, r in zip(self.variants, self.results, strict=True):
            if v.name == name:
                return r
        raise KeyError(name)

    @cached_property
    def answer(self) -> Answer:
        """Which variant, if any, is the fix, and why (see ``engine.workers.fix``)."""
        return decide([(v.name, r) for v, r in zip(self.variants, self.results, strict=True)],
                      self.baseline)

    @property
    def baseline(self) -> int:
        """glibc as it is (no variables, no preload) is what the others must beat; else the first."""
        return next((i for i, v in enumerate(self.variants) if v.allocator == "glibc" and not v.env), 0)

    @property
    def best(self) -> str | None:
        """The variant named as the fix; None whenever the numbers name none (the answer says why)."""
        return self.answer.best

    @property
    def summary(self) -> str:
        return self.answer.headline

    @property
    def horizon(self) -> int:
        """The iterations every growth is expressed over (glibc's, after its warm-up)."""
        return self.answer.horizon

    def growth_rate(self, name: str) -> Growth | None:
        """The variant's RSS trend after its warm-up, per iteration, with its 95% interval."""
        return self._growths[name]

    @cached_property
    def _growths(self) -> dict[str, Growth | None]:
        return {v.name: growth_of(r) for v, r in zip(self.variants, self.results, strict=True)}

    def growth(self, name: str) -> float | None:
        """The variant's growth over the comparison's horizon, in bytes (None: not measured)."""
        g = self.growth_rate(name)
        return None if g is None or not self.horizon else g.slope * self.horizon

    def how_to_apply(self) -> tuple[tuple[str, str], ...]:
        """(where, command) pairs that apply the fix; empty when no variant is named."""
        if self.best is None:
            return ()
        v = next(v for v in self.variants if v.name == self.best)
        preload = self[v.name].environment.get("allocator_variables", {}).get("LD_PRELOAD")
        library = None if v.allocator == "glibc" else preload or allocator_library(v.allocator)
        return how_to_apply(v.env, v.allocator, library, allocator_package(v.allocator))

    @property
    def apply_note(self) -> str:
        """What every way of applying the fix has in common (empty when none is named)."""
        return BEFORE_PYTHON if self.best is not None else ""

    @property
    def worker_log(self) -> str:
        """Every worker's stderr, each under its variant's name."""
        return "\n".join(f"--- {name} ---\n{text.rstrip()}" for name, text in self.worker_logs.items()
                         if text.strip())

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for v, r in zip(self.variants, self.results, strict=True):
            rss, g = r.column("rss"), self.growth_rate(v.name)
            n = self.horizon
            out.append({
                "variant": v.name, "verdict": "retention" if r.retention else r.verdict.kind,
                "growth": g.slope * n if g and n else None, "growth_low": g.low * n if g and n else None,
                "growth_high": g.high * n if g and n else None, "slope": g.slope if g else None,
                "final_rss": int(rss[-1]) if rss.size else None, "iterations": r.iteration_count,
                "attribution": r.attribution.kind if r.attribution is not None else "",
                "status": status_of(r), "status_text": status_text(r), "best": v.name == self.best,
                "summary": r.summary,
            })
        return out

    def __str__(self) -> str:
        return compare_text(self)

    def __repr__(self) -> str:
        return f"<CompareResult {', '.join(v.name for v in self.variants)}; best: {self.best}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        """The answer and the table (HTML), and the overlaid chart."""
        return mimebundle(self, [HTML, CHART])

    # -- export ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        a = self.answer
        return {
            "answer": {"kind": a.kind, "best": a.best, "headline": a.headline, "why": list(a.why),
                       "also": list(a.also), "horizon": a.horizon,
                       "apply": [list(p) for p in self.how_to_apply()]},
            "variants": [{"name": v.name, "env": dict(v.env), "allocator": v.allocator, **row,
                          "result": r.to_dict()}
                         for v, r, row in zip(self.variants, self.results, self.rows(), strict=True)],
            "notes": list(self.notes), "worker_logs": dict(self.worker_logs),
        }

    def to_json(self, **kwargs: Any) -> str:
        """The comparison as JSON: what to_dict holds, an unknown bound (infinite) as null."""
        return json.dumps(_finite(self.to_dict()), default=json_default, allow_nan=False, **kwargs)

    def save_html(self, path: str | os.PathLike) -> None:
        """Write the comparison as one self-contained page (answer, how to apply it, table,
        chart, each variant's verdict, the workers' logs). The file appears whole or not at all."""
        write_whole(path, PAGE.render(self))


def _finite(o: Any) -> Any:
    """``o`` with every NaN or infinite float replaced by None (a variant that ran too few
    iterations has an interval without bounds)."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, float) and not np.isfinite(o):
        return None
    return o


def variant_spec(spec: WatchSpec, variant: Variant, seconds: float, at_least: int) -> WatchSpec:
    """``spec`` as ``variant`` runs it: isolated, its environment added, labelled with its name,
    and as long as a watch needs to be confident — at least ``at_least`` iterations, at most
    ``seconds`` (never a fixed count: a variant is judged by its own verdict's rule)."""
    return dataclasses.replace(
        spec, isolate=True, env=(*spec.env, *variant.env), allocator=variant.allocator,
        label=variant.name, iterations=None, seconds=seconds, confident_after=at_least,
    )


async def run_compare(spec: WatchSpec, variants: Iterable[Variant | str | Mapping] | None = None, *,
                      observers: Sequence[Observer] = (), pause: Pause | None = None,
                      jobs: int | None = None, seconds: float | None = None,
                      at_least: int | None = None) -> CompareResult:
    """Run ``spec`` under each variant (default: :data:`DEFAULT_VARIANTS`), ``jobs`` at a time
    (default: the free cores). Each runs until its verdict is confident, at least ``at_least``
    iterations (default: the spec's ``iterations``; Try the fix passes what the first run
    needed), at most ``seconds`` (default: the spec's, else a watch's 60 s). Each worker's stderr
    is kept in the result, printed only for a variant that failed. What ``%%leakwatch
    --compare-allocators`` and "Try the fix" await."""
    chosen = [Variant.of(v) for v in (DEFAULT_VARIANTS if variants is None else variants)]
    if not chosen:
        raise ValueError("compare needs at least one variant")
    names = [v.name for v in chosen]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must differ: {names}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs!r}")
    ceiling = seconds or spec.seconds or DEFAULT_SECONDS
    specs = [variant_spec(spec, v, ceiling, max(at_least or 0, spec.iterations or 0)) for v in chosen]
    for s in specs:  # a missing allocator fails before anything runs
        allocator_library(s.allocator)
    pause = YieldToLoop() if pause is None else pause
    hub = Hub()
    runs: list[IsolatedRun] = []
    seq = OneAtATime(observers, lambda reason: [r.request_stop(reason) for r in runs])
    for s in specs:
        run = IsolatedRun(s, hub=hub, yields_to_loop=pause.yields_to_loop, keep_stderr=True)
        run.observers.append(seq.tap(run))
        runs.append(run)
    await drive(hub, runs, pause, jobs or free_cores())
    logs = {r.spec.label: r.stderr.text() if r.stderr is not None else "" for r in runs}
    result = CompareResult(chosen, [r.result for r in runs], worker_logs=logs)
    _print_failed_logs(result)
    return result


def _print_failed_logs(result: CompareResult) -> None:
    """A worker that failed shows what it wrote to stderr, as an isolated watch's would."""
    for row in result.rows():
        log = result.worker_logs.get(row["variant"], "").strip()
        if row["status"] in ("error", "died") and log:
            print(f"[leakwatch] {row['variant']}: {row['status_text']}. Its worker's stderr:\n{log}",
                  file=sys.stderr)


def compare(step: Callable, setup: Callable | None = None, *,
            variants: Iterable[Variant | str | Mapping] | None = None, seconds: float | None = None,
            iterations: int | None = None, jobs: int | None = None,
            max_rss: int | str | None = None, observers: Sequence[Observer] = (),
            off: Iterable[str] | str = (), serial: Iterable[str] | str = (),
            **watch_options: Any) -> CompareResult:
    """Run ``step`` (and ``setup``) under each variant in fresh worker processes and compare
    their memory: by default glibc, ``MALLOC_ARENA_MAX=2``, jemalloc and tcmalloc. A variant is
    an allocator name, ``"NAME=VALUE"``, or a dict with ``name``, ``env`` and ``allocator``.
    Each runs until its verdict is confident: at least ``iterations``, at most ``seconds``
    (default 60). ``result.best`` is the variant the numbers name as the fix, or None."""
    spec = WatchSpec(step=step, setup=setup, iterations=iterations, seconds=seconds,
                     max_rss=parse_size(max_rss) if max_rss is not None else None,
                     toggles=Toggles.parse(off, serial), **watch_options)
    return run_sync(run_compare(spec, variants, observers=observers, pause=NO_PAUSE, jobs=jobs))
