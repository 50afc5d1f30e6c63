"""Running a bisection: each configuration of the search (:mod:`.search`) as a watch.

    result = leakwidget.bisect(step, setup=make_iterator)
    print(result)              # one row per configuration that ran
    result.culprits            # [Stage(id="map@4", ...)]

:func:`run_bisection` is the one implementation: it takes a :class:`WatchSpec`, derives each
configuration's (:func:`config_spec`) and awaits its watch; :func:`bisect` drives it to the
end without an event loop, the dashboard's Bisect button on the kernel's loop.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .attribution import Tracker
from .observer import BaseObserver, Observer, RunControl
from .records import IterationRecord, RecordLog
from .result import WatchResult
from .search import (
    DEFAULT_SLOPE_RATIO,
    MIN_PLATEAU,
    Bisector,
    BisectResult,
    Configuration,
    Observed,
    block_trend,
    plateau_rise,
)
from .spec import WatchSpec
from .units import parse_size
from .verdict import Verdict
from .watch import NO_PAUSE, Pause, Watch, run_sync
from .workers.parallel import Prepared, run_configurations

__all__ = ["ConfigGuard", "bisect", "run_bisection"]

DEFAULT_SECONDS_PER_CONFIG = 30.0
# A plateau's configuration that has not risen half as high after this many times the baseline's
# iterations and seconds to its top does not reproduce it (a buffer that fills later with a stage
# off fills in as many elements, at most a few times slower).
PLATEAU_WAIT = 3.0
# The baseline, unsure at its time, runs on until its verdict is confident, at most this many
# times as long (a 40 KiB/iteration leak on a loaded machine was "inconclusive" at 4 s).
BASELINE_PATIENCE = 3.0
_CHOSEN_PER_CONFIGURATION = {"off", "serial", "toggles", "label", "step", "setup", "seconds"}


class ConfigGuard(BaseObserver):
    """Ends a configuration as soon as its answer is known.

    * at ``seconds`` (the per-configuration cap), keeping the watch's stop-when-confident,
      which a WatchSpec offers only when no ``seconds`` is given; with ``patience`` above 1,
      a run whose latest verdict is not yet confident goes on until it is, at most
      ``patience`` × ``seconds`` (the baseline: every other configuration is measured against
      it, and one called "inconclusive, run longer" ended the search with no answer);
    * once two successive live verdicts put the slope's 95% upper bound below ``threshold``
      (``slope_ratio`` × the baseline's slope): this configuration cannot reproduce the leak,
      whatever its final kind (a confident "plateau" or "stable" can take many seconds more);
    * once three successive live verdicts are confident leaks whose 95% lower bound is above
      ``threshold``, after ``settle`` seconds: it reproduces the leak. The baseline already
      waited for buffers and autotuning to settle; its slope is the yardstick here.

    For a Python-object leak (``python_threshold``, blocks per iteration) the allocator's block
    count is the yardstick instead. When a plateau is bisected (``plateau``), the baseline's rise
    is: two successive live verdicts rising at least as high reproduce it; two that, well past
    the time and the iterations the baseline took to reach its top, have not risen half as
    high do not (a confident "stable" takes a dozen seconds more). It reads only the stream
    every observer gets.
    """

    def __init__(self, seconds: float, threshold: float | None = None, *,
                 python_threshold: float | None = None, min_iterations: int = 30,
                 settle: float = 3.0, plateau: PlateauYardstick | None = None,
                 patience: float = 1.0) -> None:
        self.seconds = seconds
        self.patience = patience
        self._settled = False  # the latest live verdict was confident
        self.threshold = threshold
        self.python_threshold = python_threshold
        self.plateau = plateau
        self.min_iterations = min_iterations
        self.settle = settle
        self.malloc_slope: float | None = None  # bytes in use per iteration, after the run
        self._run: RunControl | None = None
        self._log = RecordLog()
        self._in_use0: tuple[int, int] | None = None  # first (iteration, malloc's bytes in use)
        self._in_use: tuple[int, int] | None = None  # latest
        self._elapsed = 0.0
        self._below = 0
        self._above = 0

    def on_start(self, run: RunControl) -> None:
        self._run = run

    def on_iteration(self, record: IterationRecord) -> None:
        self._log.append(record)
        self._elapsed = record.end
        if record.malloc_in_use >= 0:
            reading = (record.index, record.malloc_in_use)
            self._in_use = reading
            if self._in_use0 is None:
                self._in_use0 = reading
        if record.end >= self.seconds * (1.0 if self._settled else self.patience):
            self._run.request_stop("seconds")

    def on_verdict(self, verdict: Verdict) -> None:
        self._settled = verdict.confident
        if self.plateau is not None:
            self._judge_plateau(verdict)
            return
        if self.threshold is None:
            return
        measured = (verdict.iterations >= self.min_iterations
                    and verdict.reason not in ("too few iterations", "no data"))
        if not measured:
            self._below = self._above = 0
            return
        if self.python_threshold is not None:
            _, low, high = block_trend(self._log.column("index"), self._log.column("blocks"), verdict.warmup)
            if low is None:
                return
            self._below = self._below + 1 if high < self.python_threshold else 0
            leaking = verdict.kind == "leak" and verdict.confident and low >= self.python_threshold
        else:
            below = verdict.slope_high < self.threshold and not self._malloc_keeps_up()
            self._below = self._below + 1 if below else 0
            leaking = (verdict.kind == "leak" and verdict.confident
                       and verdict.slope_low >= self.threshold)
        self._above = self._above + 1 if leaking else 0
        if self._below >= 2 or (self._above >= 3 and self._elapsed >= self.settle):
            self._run.request_stop("confident")

    def _judge_plateau(self, verdict: Verdict) -> None:
        p, rise = self.plateau, plateau_rise(verdict)
        reached = verdict.kind in ("plateau", "leak", "inconclusive") and rise >= p.rise
        waited = (verdict.iterations >= max(self.min_iterations, PLATEAU_WAIT * p.iterations)
                  and self._elapsed >= PLATEAU_WAIT * p.seconds + self.settle)
        self._above = self._above + 1 if reached else 0
        self._below = self._below + 1 if waited and rise < 0.5 * p.rise else 0
        if self._above >= 2 or self._below >= 2:
            self._run.request_stop("confident")

    def on_finish(self, result: WatchResult) -> None:
        self.malloc_slope = self._in_use_rate()

    def _malloc_keeps_up(self) -> bool:
        """Has malloc handed out memory at the threshold rate since the start, whatever RSS
        says? Then RSS is only lagging: the leak is refilling memory an earlier configuration
        freed (measured: for the first quarter of a 20 s run, at half the true rate), and "not
        reproducing" would be a wrong early call."""
        rate = self._in_use_rate()
        return rate is not None and rate >= self.threshold

    def _in_use_rate(self) -> float | None:
        """glibc's bytes in use per iteration between the first and the latest reading."""
        if self._in_use0 is None or self._in_use is None or self._in_use[0] <= self._in_use0[0]:
            return None
        return (self._in_use[1] - self._in_use0[1]) / (self._in_use[0] - self._in_use0[0])


class PlateauYardstick(NamedTuple):
    """What a configuration of a plateau's bisection is measured against: the rise that
    reproduces the baseline's plateau, and the iterations and seconds the baseline took to
    reach its top."""

    rise: float
    iterations: float
    seconds: float

    @classmethod
    def of(cls, base: Configuration, ratio: float) -> PlateauYardstick:
        fit, seen = base.verdict.fit, base.observed
        top = max(fit, key=lambda p: p[1])[0] if fit else 0.0
        per_iteration = seen.seconds / max(seen.iterations, 1)  # the setup included: longer
        return cls(ratio * plateau_rise(base.verdict), top, top * per_iteration)


def _guard_for(bisector: Bisector, config: Configuration, seconds: float) -> ConfigGuard:
    base = bisector.configurations[0]
    if config is base:
        return ConfigGuard(seconds, patience=BASELINE_PATIENCE)
    if bisector.plateau:
        return ConfigGuard(seconds, plateau=PlateauYardstick.of(base, bisector.slope_ratio))
    return ConfigGuard(
        seconds, bisector.slope_ratio * base.verdict.slope,
        python_threshold=(bisector.slope_ratio * base.observed.python_slope
                          if bisector.python_leak() else None),
        # a leak that starts late in the baseline must get the chance to start here too
        min_iterations=max(30, (base.verdict.onset or 0) + 20),
    )


def config_spec(spec: WatchSpec, config: Configuration) -> WatchSpec:
    """``spec`` as ``config`` runs it: its toggles, its label, until its guard stops it."""
    return dataclasses.replace(spec, seconds=None, toggles=config.toggles, label=config.label)


async def run_bisection(
    spec: WatchSpec,
    *,
    seconds_per_config: float | None = None,
    slope_ratio: float = DEFAULT_SLOPE_RATIO,
    max_configurations: int | None = None,
    all_off_first: bool = True,
    min_plateau: float = MIN_PLATEAU,
    observers: Sequence[Observer] = (),
    on_configuration: Callable[[Configuration, RunControl], None] | None = None,
    pause: Pause | None = None,
    jobs: int | None = None,
    client: Any = None,
) -> BisectResult:
    """Find the smallest set of stages whose being on makes ``spec`` leak.

    Each configuration is ``spec`` with other stages off (:func:`config_spec`), run until
    its verdict is clear, at most ``seconds_per_config`` (default: ``spec.seconds``, else 30 s;
    the baseline, while its verdict is unsure, up to three times as long), or exactly ``spec.iterations`` if given. ``on_configuration(config, run)`` is called
    before each run; ``observers`` follow every run; ``pause`` is awaited between iterations.

    With ``jobs``, or an isolated ``spec``, each configuration runs in its own fresh worker
    process, ``jobs`` at a time (default: the free cores); with ``client`` (a
    ``dask.distributed.Client``), as tasks on that cluster (:mod:`.parallel`).

    A baseline whose verdict is a plateau rising at least ``min_plateau`` bytes (8 MiB) is
    bisected too: the stages whose being on makes memory rise at least ``slope_ratio`` as high.
    """
    seconds = seconds_per_config or spec.seconds or DEFAULT_SECONDS_PER_CONFIG
    if not seconds > 0:
        raise ValueError(f"seconds_per_config must be positive, not {seconds!r}")
    bisector = Bisector(slope_ratio=slope_ratio, max_configurations=max_configurations,
                        all_off_first=all_off_first, min_plateau=min_plateau)
    if jobs is not None or client is not None or spec.isolate:
        def prepare(config: Configuration) -> Prepared:
            return Prepared(config_spec(spec, config), _guard_for(bisector, config, seconds),
                            attribute=config.index == 0)

        await run_configurations(bisector, prepare, jobs=jobs, client=client, observers=observers,
                                 on_configuration=on_configuration, pause=pause)
        return bisector.result()
    while (config := bisector.next_configuration()) is not None:
        guard = _guard_for(bisector, config, seconds)
        run_spec = config_spec(spec, config)
        # The baseline's growth is attributed (malloc_trim tells allocator retention from a
        # leak), without the object census: in a large heap its own allocations blur a short
        # baseline (measured: a 60-iteration leak called inconclusive). The search's
        # configurations only need their verdicts.
        tracker: Tracker | bool = (Tracker(trace=spec.trace, lines=spec.lines, census=False)
                                   if config.index == 0 else False)
        watch = Watch(run_spec, [guard, *observers], tracker=tracker)
        if on_configuration is not None:
            on_configuration(config, watch)
        result = await watch.run_async(pause)
        bisector.report(config, Observed.of(result, guard.malloc_slope))
        gc.collect()  # what the previous configuration freed should not count against the next
    return bisector.result()


def bisect(
    step: Callable,
    setup: Callable | None = None,
    *,
    iterations: int | None = None,
    seconds_per_config: float | None = None,
    max_rss: int | str | None = None,
    observers: Sequence[Observer] = (),
    on_configuration: Callable[[Configuration, RunControl], None] | None = None,
    slope_ratio: float = DEFAULT_SLOPE_RATIO,
    max_configurations: int | None = None,
    all_off_first: bool = True,
    min_plateau: float = MIN_PLATEAU,
    jobs: int | None = None,
    client: Any = None,
    **watch_options: Any,
) -> BisectResult:
    """Find the smallest set of stages whose being on makes ``step`` leak.

    ``step``/``setup`` as for :func:`leakwidget.watch`; the pipeline must be built inside them
    so each configuration can rebuild it with other stages off. Each configuration runs until
    its verdict is confident, at most ``seconds_per_config`` (default 30 s; the baseline,
    while its verdict is unsure, up to three times as long), or exactly
    ``iterations`` if given. ``on_configuration(config, watch)`` is called before each run
    (``config.verdict`` is filled in after it); ``observers`` are attached to every run.
    Other keyword arguments (``warmup``, ``trace``, ``lines``, ``isolate``, ``env``,
    ``allocator``) go to every watch. ``jobs=N``: each configuration in its own fresh worker
    process, N at a time; ``client``: as tasks on that Dask cluster. A plateau of at least
    ``min_plateau`` bytes (8 MiB) is bisected as well: the stages that make it rise that high.
    """
    chosen = sorted(set(watch_options) & _CHOSEN_PER_CONFIGURATION)
    if chosen:
        raise TypeError(f"bisect() chooses {', '.join(chosen)} itself for every configuration; "
                        "use seconds_per_config to cap each run")
    if seconds_per_config is not None and not seconds_per_config > 0:
        raise ValueError(f"seconds_per_config must be positive, not {seconds_per_config!r}")
    try:
        spec = WatchSpec(step=step, setup=setup, iterations=iterations,
                         max_rss=parse_size(max_rss) if max_rss is not None else None, **watch_options)
    except TypeError as exc:
        raise TypeError(f"bisect(): {exc}") from None
    return run_sync(run_bisection(
        spec, seconds_per_config=seconds_per_config, slope_ratio=slope_ratio,
        max_configurations=max_configurations, all_off_first=all_off_first,
        min_plateau=min_plateau, observers=observers,
        on_configuration=on_configuration, pause=NO_PAUSE, jobs=jobs, client=client,
    ))
