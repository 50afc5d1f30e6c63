"""The same watch under several allocators or environments, side by side.

    result = leakwidget.compare(step, setup=make_dataset, seconds=30)
    print(result)           # one row per variant: verdict, slope, growth, final RSS
    result["jemalloc"]      # that variant's WatchResult

Each variant is the watch in a fresh worker process (:mod:`.isolate`) with its own environment:
by default glibc's malloc as it is, ``MALLOC_ARENA_MAX=2``, jemalloc and tcmalloc (preloaded).
They run in parallel up to the free cores; the observers see them one after another
(:class:`~.sequence.OneAtATime`), each as its own series. Growth that glibc keeps in its
per-thread arenas (attribution "allocator") shrinks or vanishes under the others: this shows
whether the fix works for *this* code, before anyone changes a deployment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...report.compare import CHART
from ...report.render import mimebundle
from ...stages import Toggles
from ..kinds import ALLOCATORS, Allocator
from ..observer import Observer
from ..result import WatchResult
from ..spec import WatchSpec
from ..units import format_bytes, parse_size
from ..watch import NO_PAUSE, Pause, YieldToLoop, run_sync
from .hub import Hub
from .isolate import IsolatedRun, allocator_library, drive
from .parallel import free_cores
from .sequence import OneAtATime

__all__ = ["DEFAULT_VARIANTS", "CompareResult", "Variant", "compare", "run_compare"]

DEFAULT_SECONDS = 30.0


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
    variants: list[Variant]
    results: list[WatchResult]
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> WatchResult:
        for v, r in zip(self.variants, self.results, strict=True):
            if v.name == name:
                return r
        raise KeyError(name)

    def growth(self, name: str) -> int | None:
        """RSS growth over the last 90% of the run's iterations, in bytes (None: no iteration
        ended). Buffers that fill in the first iterations (a shuffle buffer fills in the first)
        grow every variant alike: they are not what differs. Each end is the median of a
        twentieth of the run's rows: a single reading at either end (a batch held at the last
        iteration, a busy moment of the machine) must not choose the best variant."""
        rss = self[name].column("rss")
        if not rss.size:
            return None
        w, start = max(1, rss.size // 20), rss.size // 10
        return int(np.median(rss[-w:])) - int(np.median(rss[start:start + w]))

    @property
    def best(self) -> str | None:
        """The variant whose memory grew least."""
        grown = [(g, v.name) for v in self.variants if (g := self.growth(v.name)) is not None]
        return min(grown)[1] if grown else None

    @property
    def summary(self) -> str:
        best, first = self.best, self.variants[0].name if self.variants else None
        if best is None:
            return "No variant finished an iteration."
        text = f"{best} grew least: {format_bytes(self.growth(best), signed=True)}"
        if first is not None and best != first:
            text += f", against {format_bytes(self.growth(first), signed=True)} with {first}"
        return text + "."

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for v, r in zip(self.variants, self.results, strict=True):
            rss = r.column("rss")
            att = r.attribution.kind if r.attribution is not None else ""
            out.append({"variant": v.name, "verdict": r.verdict.kind, "slope": r.verdict.slope,
                        "growth": self.growth(v.name), "final_rss": int(rss[-1]) if rss.size else None,
                        "iterations": r.iteration_count, "stopped": r.stopped, "attribution": att})
        return out

    def __str__(self) -> str:
        head = ("variant", "verdict", "slope/iter", "growth", "final RSS", "iterations", "attribution")
        table = [head]
        for row in self.rows():
            def size(v: float | None, signed: bool = False) -> str:
                return "-" if v is None else format_bytes(v, signed=signed)
            table.append((row["variant"], row["verdict"], size(row["slope"], True),
                          size(row["growth"], True), size(row["final_rss"]), f"{row['iterations']:,}",
                          row["attribution"] or "-"))
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([self.summary, "", *lines, *(f"Note: {n}" for n in self.notes)])

    def __repr__(self) -> str:
        return f"<CompareResult {', '.join(v.name for v in self.variants)}; best: {self.best}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        """The table and the overlaid chart."""
        return mimebundle(self, [CHART])


def variant_spec(spec: WatchSpec, variant: Variant, seconds: float | None) -> WatchSpec:
    """``spec`` as ``variant`` runs it: isolated, its environment added, labelled with its name."""
    return dataclasses.replace(
        spec, isolate=True, env=(*spec.env, *variant.env), allocator=variant.allocator,
        label=variant.name, seconds=seconds,
    )


async def run_compare(spec: WatchSpec, variants: Iterable[Variant | str | Mapping] | None = None, *,
                      observers: Sequence[Observer] = (), pause: Pause | None = None,
                      jobs: int | None = None, seconds: float | None = None) -> CompareResult:
    """Run ``spec`` under each variant (default: :data:`DEFAULT_VARIANTS`), ``jobs`` at a time
    (default: the free cores), each for ``seconds`` (default: the spec's, else 30 s unless it
    counts iterations). What ``%%leakwatch --compare-allocators`` and "Try the fix" await."""
    chosen = [Variant.of(v) for v in (DEFAULT_VARIANTS if variants is None else variants)]
    if not chosen:
        raise ValueError("compare needs at least one variant")
    names = [v.name for v in chosen]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must differ: {names}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs!r}")
    seconds = seconds or spec.seconds or (None if spec.iterations else DEFAULT_SECONDS)
    specs = [variant_spec(spec, v, seconds) for v in chosen]
    for s in specs:  # a missing allocator fails before anything runs
        allocator_library(s.allocator)
    pause = YieldToLoop() if pause is None else pause
    hub = Hub()
    runs: list[IsolatedRun] = []
    seq = OneAtATime(observers, lambda reason: [r.request_stop(reason) for r in runs])
    for s in specs:
        run = IsolatedRun(s, hub=hub, yields_to_loop=pause.yields_to_loop)
        run.observers.append(seq.tap(run))
        runs.append(run)
    await drive(hub, runs, pause, jobs or free_cores())
    return CompareResult(chosen, [r.result for r in runs])


def compare(step: Callable, setup: Callable | None = None, *,
            variants: Iterable[Variant | str | Mapping] | None = None, seconds: float | None = None,
            iterations: int | None = None, jobs: int | None = None,
            max_rss: int | str | None = None, observers: Sequence[Observer] = (),
            off: Iterable[str] | str = (), serial: Iterable[str] | str = (),
            **watch_options: Any) -> CompareResult:
    """Run ``step`` (and ``setup``) under each variant in fresh worker processes and compare
    their memory: by default glibc, ``MALLOC_ARENA_MAX=2``, jemalloc and tcmalloc. A variant is
    an allocator name, ``"NAME=VALUE"``, or a dict with ``name``, ``env`` and ``allocator``."""
    spec = WatchSpec(step=step, setup=setup, iterations=iterations, seconds=seconds,
                     max_rss=parse_size(max_rss) if max_rss is not None else None,
                     toggles=Toggles.parse(off, serial), **watch_options)
    return run_sync(run_compare(spec, variants, observers=observers, pause=NO_PAUSE, jobs=jobs))
