"""Automatic bisection: which pipeline stages, switched on, make memory leak?

    result = leakwidget.bisect(step, setup=make_iterator)
    print(result)              # one row per configuration that ran
    result.culprits            # [Stage(id="map@4", ...)]
    result.summary             # one sentence naming the culprit

How it decides (docs/stages.md says the same for users):

1. **Baseline**: every stage on. No leak, or growth that ``malloc_trim`` hands back while
   glibc's bytes in use do not grow with it (allocator retention) → nothing to bisect. The
   stages to search are the ones this run recorded that can be switched off (or, if they only
   have parallelism, made serial).
2. **All off**: every searched stage off. Still leaking → the leak lies outside the stages (the
   source, the step body, the model); stop.
3. **Delta debugging** over the set of stages that are on: split it in halves and keep a half
   whose being on (everything else off) still reproduces the leak. When a half does not, the
   other half is assumed — and checked only if the search ends on an assumption — so one
   culprit among k stages costs ⌈log2 k⌉ + 2 configurations, +1 when the last split was an
   assumption (see bench/bench_bisect.py; ``all_off_first=False`` saves that one by running
   step 2 last, and only when no configuration came out clean). When neither half reproduces alone, the leak needs
   stages from both: each half is minimised with the other on, so a pair is reported as a pair.

A configuration "reproduces" the leak when its own verdict is ``leak`` **and** its slope is at
least ``slope_ratio`` (default ½) of the baseline's: a stage whose removal only slows the
growth down is not the cause. When the baseline's leak is one of Python objects (the
allocator's block count grows significantly and explains at least a quarter of the RSS slope),
the yardstick is that block slope instead (significant, and whatever RSS's verdict says yet): it
is exact, whereas RSS also carries TensorFlow's own slow creep when a pipeline is rebuilt every
iteration, which no stage toggle removes, and lags objects that reuse memory freed before. Each
configuration runs until its verdict is confident, capped at ``seconds_per_config``; "below
the yardstick" is not concluded while glibc's count of bytes handed out still grows at its rate
(RSS lags a leak that refills memory the previous configuration freed).

The search is one pure object, :class:`Bisector` (``next_configuration()`` /
``report(config, observed)``), driven by :func:`leakwidget.engine.bisect.run_bisection`; what a
configuration's run showed reaches it as one :class:`Observed`, made from the run's
:class:`~.result.WatchResult` by :meth:`Observed.of`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..stages import AS_WRITTEN, Stage, Toggles
from .attribution import Attribution
from .result import WatchResult, write_whole
from .units import format_bytes
from .verdict import BLOCK_BYTES, MIN_POINTS, Verdict, trend

__all__ = ["BisectResult", "Bisector", "Configuration", "Observed", "block_trend", "short_id"]

DEFAULT_SLOPE_RATIO = 0.5
# A plateau is bisected when it rises at least this high: under it, what a pipeline's buffers
# and the allocator's creep add in a few steps is no one stage's doing (min_plateau lowers it).
MIN_PLATEAU = 8 * 2**20


@dataclass(frozen=True)
class Observed:
    """What one configuration's run showed: everything the search reads of it."""

    verdict: Verdict
    stages: tuple[Stage, ...] = ()  # recorded: the baseline's define what is searched
    attribution: Attribution | None = None  # the baseline's, when its growth was explained
    notes: tuple[str, ...] = ()  # the stage session's (the baseline's are the search's)
    stopped: str = ""
    iterations: int = 0
    seconds: float = 0.0
    python_slope: float | None = None  # allocator blocks per iteration (None: not measured)
    python_low: float | None = None  # its 95% lower bound
    malloc_slope: float | None = None  # glibc's bytes in use per iteration (None: not measured)
    error: str = ""  # the step's exception, when it raised (the configuration then counts as not leaking)

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict):
            raise TypeError(f"a run's verdict must be a leakwidget Verdict, not {type(self.verdict).__name__}")
        object.__setattr__(self, "stages", tuple(self.stages))

    @classmethod
    def of(cls, result: WatchResult, malloc_slope: float | None = None) -> Observed:
        """What the search reads of a watch's result (``malloc_slope``: its guard's reading)."""
        python_slope, python_low, _ = block_trend(result.column("index"), result.column("blocks"),
                                                  result.verdict.warmup)
        return cls(
            result.verdict, stages=tuple(result.stages), attribution=result.attribution,
            notes=tuple(result.stage_notes), stopped=result.stopped,
            iterations=result.iteration_count, seconds=result.elapsed,
            python_slope=python_slope, python_low=python_low, malloc_slope=malloc_slope,
            error=f"{type(result.error).__name__}: {result.error}" if result.error is not None else "",
        )


@dataclass
class Configuration:
    """One run of the search: what it asked of the stages, and what the run showed."""

    label: str
    toggles: Toggles = AS_WRITTEN  # the searched stages not left on, off (or serial)
    on: frozenset[str] | None = None  # searched stages left on; None = every stage (baseline)
    observed: Observed | None = None  # once run
    reproduces: bool | None = None
    index: int = 0

    @property
    def verdict(self) -> Verdict | None:
        return self.observed.verdict if self.observed is not None else None

    @property
    def kind(self) -> str:
        return self.verdict.kind if self.verdict is not None else ""

    @property
    def slope(self) -> float | None:
        return self.verdict.slope if self.verdict is not None else None

    @property
    def stopped(self) -> str:
        return self.observed.stopped if self.observed is not None else ""

    @property
    def error(self) -> str:
        return self.observed.error if self.observed is not None else ""

    def to_dict(self) -> dict[str, Any]:
        seen = self.observed if self.observed is not None else Observed(Verdict("inconclusive"))
        return {
            "index": self.index, "label": self.label, "off": list(self.toggles.off),
            "serial": list(self.toggles.serial), "on": sorted(self.on) if self.on is not None else None,
            "verdict": self.kind, "slope": self.slope, "reproduces": self.reproduces,
            "rise": plateau_rise(self.verdict) if self.verdict is not None else None,
            "stopped": seen.stopped, "iterations": seen.iterations, "seconds": seen.seconds,
            "error": seen.error,
        }


@dataclass
class BisectResult:
    culprits: list[Stage] = field(default_factory=list)
    configurations: list[Configuration] = field(default_factory=list)
    outside: bool = False
    leak: bool = False  # did the baseline leak at all
    plateau: bool = False  # the baseline was a plateau: this bisected its rise, not a leak
    summary: str = ""
    notes: list[str] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)  # every stage the baseline recorded

    @property
    def culprit_ids(self) -> list[str]:
        return [s.id for s in self.culprits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "culprits": [s.to_dict() for s in self.culprits],
            "configurations": [c.to_dict() for c in self.configurations],
            "outside": self.outside, "leak": self.leak, "summary": self.summary,
            "notes": list(self.notes),
        }

    def save_html(self, path: str | os.PathLike) -> None:
        """Write the bisection as one self-contained page (its answer, every configuration it
        ran, its notes). The file appears whole or not at all."""
        from ..report.pages import BISECT_PAGE

        write_whole(path, BISECT_PAGE.render(self))

    def __str__(self) -> str:
        rate = "rise" if self.plateau else "slope/iter"
        rows = [("#", "configuration", "off / serial", "verdict", rate, "reproduces")]
        for c in self.configurations:
            toggles = ", ".join(map(short_id, c.toggles.off))
            if c.toggles.serial:
                toggles += " | serial: " + ", ".join(map(short_id, c.toggles.serial))
            if len(toggles) > 60:
                toggles = toggles[:59] + "…"
            slope = "" if c.slope is None else format_bytes(c.slope)
            if self.plateau and c.verdict is not None:
                slope = format_bytes(plateau_rise(c.verdict))
            rep = "error" if c.error else {True: "yes", False: "no", None: ""}[c.reproduces]
            rows.append((str(c.index), c.label, toggles or "-", c.kind or "-", slope, rep))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        out = [self.summary, "", *lines]
        out += [f"Note: {n}" for n in self.notes]
        return "\n".join(out)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's pretty printer
        p.text(str(self))


class _Contradiction(Exception):
    """An assumed 'the other half leaks' turned out false: search again without assuming."""


class _Stop(Exception):
    pass


class _HandsOutAhead:
    """The part of the search that serves a driver running several configurations at once.

    The search notes, before each test, the configurations it may need next that do not depend
    on that test (``_hints``: the other half of the split); ``next_configurations`` hands them
    out ahead (``_inflight``), and their answers, once reported, are used where the sequential
    search would have run (or assumed) them, so the culprits are the same.
    """

    configurations: list[Configuration]
    max_configurations: int | None
    _memo: dict[frozenset[str], bool]
    _pending: Configuration | None
    _pending_out: bool
    _finished: bool
    _hints: list[frozenset[str]]
    _inflight: dict[frozenset[str], Configuration]

    def next_configurations(self, free: int) -> list[Configuration]:
        """Up to ``free`` configurations to start now: the one the search waits for (unless
        already handed out), then ones it may need next independently of it. Report each, in
        any order."""
        out: list[Configuration] = []
        if self._finished or free <= 0:
            return out
        if self._pending is not None and not self._pending_out:
            self._pending_out = True
            out.append(self._pending)
        for on in self._hints:
            if len(out) >= free or self._at_limit():
                break
            if on in self._memo or on in self._inflight or (self._pending is not None and self._pending.on == on):
                continue
            config = self._config_for(on, self._label(on))
            config.index = len(self.configurations)
            self.configurations.append(config)
            self._inflight[on] = config
            out.append(config)
        return out

    def _at_limit(self) -> bool:
        return self.max_configurations is not None and len(self.configurations) >= self.max_configurations

    def _answered_ahead(self, config: Configuration) -> None:
        del self._inflight[config.on]
        config.reproduces = self._reproduces(config.observed) and not config.error
        if config.stopped != "interrupted" and not self._finished:  # a cut-short run is no answer
            self._memo[config.on] = config.reproduces

    def _adopt(self, config: Configuration) -> bool:
        """The search asks for ``config``: if it was handed out ahead, wait for that run."""
        running = self._inflight.pop(config.on, None) if config.on is not None else None
        if running is not None:
            self._pending, self._pending_out = running, True
        return running is not None


class Bisector(_HandsOutAhead):
    """The search, without any running: ask for a configuration, run it, report the verdict.

        b = Bisector()
        while (config := b.next_configuration()) is not None:
            result = run(config.toggles)                  # a Watch, a fake, anything
            b.report(config, Observed.of(result))
        b.result()

    The first configuration is the baseline (everything on); what it showed must carry the
    recorded ``stages``: they define what is searched.

    ``all_off_first`` (default, the documented order): run "every stage off" second, so a leak
    outside the stages is reported after two configurations. False: run it only if no
    configuration of the search came out clean (a clean one implies it), which saves one
    configuration when a culprit exists: ⌈log2 k⌉ + 2 at most for one culprit among k.
    """

    def __init__(self, *, slope_ratio: float = DEFAULT_SLOPE_RATIO,
                 max_configurations: int | None = None, all_off_first: bool = True,
                 min_plateau: float = MIN_PLATEAU) -> None:
        if not 0 < slope_ratio <= 1:
            raise ValueError(f"slope_ratio must be in (0, 1], not {slope_ratio!r}")
        self.slope_ratio = slope_ratio
        self.min_plateau = min_plateau
        self.max_configurations = max_configurations
        self.all_off_first = all_off_first
        self.configurations: list[Configuration] = []
        self.stages: list[Stage] = []
        self.notes: list[str] = []
        self.attribution: Attribution | None = None  # the baseline's, when explained
        self.plateau = False  # the baseline is a plateau: its rise is what is bisected
        self._memo: dict[frozenset[str], bool] = {}
        self._searched: list[str] = []
        self._by_id: dict[str, Stage] = {}
        self._baseline: Configuration | None = None
        self._pending: Configuration | None = None
        self._pending_out = False  # handed out by next_configurations()
        self._hints: list[frozenset[str]] = []
        self._inflight: dict[frozenset[str], Configuration] = {}
        self._finished = False
        self._outcome: tuple[str, list[str]] = ("running", [])
        self._gen = self._search()
        self._advance(None)

    # -- driving ------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._finished

    def next_configuration(self) -> Configuration | None:
        """The configuration to run next, or None when the search is over."""
        return None if self._finished else self._pending

    def report(self, config: Configuration, observed: Observed) -> None:
        """Tell the search what ``config``'s run showed. Of the baseline's, its ``attribution``
        too: growth that ``malloc_trim`` hands back is allocator retention, nothing to bisect,
        unless ``malloc_slope``, glibc's bytes in use per iteration, shows the memory is held."""
        ahead = config.on is not None and self._inflight.get(config.on) is config
        if not ahead and (config is not self._pending or self._finished):
            raise ValueError("report() must answer a configuration next_configuration(s)() gave")
        if not isinstance(observed, Observed):
            raise TypeError(f"report() takes what the run showed (an Observed, with its verdict), "
                            f"not {type(observed).__name__}")
        config.observed = observed
        if ahead:
            self._answered_ahead(config)
            return
        self._answered(config, observed)
        if config is self._baseline:
            self.notes.extend(n for n in observed.notes if n not in self.notes)

    def _answered(self, config: Configuration, observed: Observed) -> None:
        verdict, error = observed.verdict, observed.error
        if config is self._baseline:
            self.stages = list(observed.stages)
            self.attribution = observed.attribution
            # Bisected by its rise too: a plateau, or a rise with what is in use still climbing.
            self.plateau = (verdict.kind == "plateau" or verdict.climbing) and plateau_rise(verdict) >= self.min_plateau
            config.reproduces = ((verdict.kind == "leak" or self.plateau) and not self._retention()
                                 and not error)
        else:
            config.reproduces = self._reproduces(observed) and not error
            self._memo[config.on or frozenset()] = config.reproduces
        if observed.stopped == "interrupted":
            self.notes.append(f"Stopped: configuration {config.index} ({config.label}) was interrupted.")
            self._finish("interrupted", [])
            return
        if error:
            self.notes.append(f"Configuration {config.index} ({config.label}) stopped when "
                              f"{_failure(config)}; counted as not reproducing the leak.")
        self._advance(config.reproduces)

    def result(self) -> BisectResult:
        state, culprit_ids = self._outcome
        base = self._baseline
        culprits = [self._by_id[i] for i in culprit_ids if i in self._by_id]
        res = BisectResult(
            culprits=culprits, configurations=list(self.configurations),
            outside=state == "outside",
            leak=bool(base is not None and base.reproduces and not self.plateau),
            plateau=bool(base is not None and base.reproduces and self.plateau),
            notes=list(self.notes), stages=list(self.stages),
        )
        res.summary = summary_of(self, state, culprits)
        return res

    # -- internals ------------------------------------------------------------------------------
    def _retention(self) -> bool:
        """Did the baseline's growth turn out to be the allocator keeping freed memory?

        The attribution says so when malloc_trim hands back half the growth; but memory freed
        by something else during the run is handed back too. A leak through malloc keeps its
        bytes in use, so when glibc counts them growing at half the RSS rate or more, it is not
        retention whatever the trim returned."""
        base = self._baseline
        if self.attribution is None or self.attribution.kind != "allocator" or base is None:
            return False
        held, v = base.observed.malloc_slope, base.verdict
        # a leak's slope, or a plateau's rate while it rose
        rate = (plateau_rise(v) / max(1.0, v.fit[1][0] - v.fit[0][0])
                if self.plateau and len(v.fit) >= 2 else v.slope)
        return held is None or held < 0.5 * rate

    def python_leak(self) -> bool:
        """Is the baseline's leak one of Python objects (see the module's docstring)?"""
        base = self._baseline.observed if self._baseline is not None else None
        if self.plateau or base is None or base.python_slope is None or not (base.python_low or 0) > 0:
            return False
        return base.python_slope * BLOCK_BYTES >= 0.25 * base.verdict.slope

    def _reproduces(self, observed: Observed) -> bool:
        verdict, base = observed.verdict, self._baseline.observed
        if self.plateau:
            return rises_as_high(verdict, base.verdict, self.slope_ratio)
        if observed.python_slope is not None and self.python_leak():  # whatever RSS says yet
            return (observed.python_low or 0.0) > 0 and observed.python_slope >= self.slope_ratio * base.python_slope
        if verdict.kind != "leak":
            return False
        return verdict.slope >= self.slope_ratio * base.verdict.slope

    def _advance(self, answer: bool | None) -> None:
        try:
            config = self._gen.send(answer) if answer is not None else next(self._gen)
        except StopIteration:
            self._finished = True
            self._pending = None
            return
        if self._adopt(config):
            return
        config.index = len(self.configurations)
        self.configurations.append(config)
        self._pending, self._pending_out = config, False

    def _finish(self, state: str, culprits: list[str]) -> None:
        self._outcome = (state, culprits)
        self._finished = True
        self._pending = None
        self._gen.close()

    def _config_for(self, on: frozenset[str], label: str) -> Configuration:
        """The configuration with the searched stages ``on`` left on, the others out (each in
        its :attr:`~leakwidget.stages.Stage.off_state`)."""
        out = tuple((sid, self._by_id[sid].off_state) for sid in self._searched if sid not in on)
        return Configuration(label=label, toggles=Toggles(out), on=on)

    def _label(self, on: frozenset[str]) -> str:
        """The configuration in words, short enough for a legend: "all off", "decode@5 on, the
        rest off", "decode@5 and 3 more on, the rest off"."""
        if not on:
            return "all off"
        names = [short_id(s) for s in self._searched if s in on]
        rest = ", the rest off" if len(names) < len(self._searched) else ""
        text = f"{' and '.join(names) if len(names) <= 2 else ', '.join(names)} on{rest}"
        return text if len(text) <= 48 or len(names) == 1 else f"{names[0]} and {len(names) - 1} more on{rest}"

    def _test(self, on: frozenset[str]) -> Generator[Configuration, bool, bool]:
        if on in self._memo:
            return self._memo[on]
        if self._at_limit() and on not in self._inflight:
            raise _Stop
        answer = yield self._config_for(on, self._label(on))
        return bool(answer)

    def _search(self) -> Generator[Configuration, bool, None]:
        self._baseline = Configuration(label="baseline (all on)")
        leaked = yield self._baseline
        if not leaked:
            self._outcome = ("no-leak", [])
            return
        for s in self.stages:
            self._by_id.setdefault(s.id, s)
        self._searched = [s.id for s in self.stages if len(s.states) > 1]  # can be switched
        if not self._searched:
            self._outcome = ("no-stages", [])
            return
        every = frozenset(self._searched)
        self._memo[every] = True
        half = math.ceil(len(self._searched) / 2)
        self._hints = [frozenset(self._searched[:half]), frozenset(self._searched[half:])]
        try:
            if self.all_off_first and (yield from self._test(frozenset())):
                self._outcome = ("outside", [])
                return
            try:
                found = yield from self._minimize(self._searched, frozenset(), True, lazy=True)
            except _Contradiction:
                found = yield from self._minimize(self._searched, frozenset(), True, lazy=False)
            # Any configuration that did not leak implies, stages being monotone, that "all
            # off" does not either; only an all-positive search must still run it.
            if False not in self._memo.values() and (yield from self._test(frozenset())):
                self._outcome = ("outside", [])
                return
        except _Stop:
            self.notes.append(f"Stopped after {len(self.configurations)} configurations "
                              "(max_configurations); the culprit is not pinned down.")
            self._outcome = ("unfinished", [])
            return
        self._outcome = ("found", found)

    def _minimize(self, cands: list[str], background: frozenset[str], confirmed: bool,
                  *, lazy: bool) -> Generator[Configuration, bool, list[str]]:
        """Smallest subset X of ``cands`` with leaks(background ∪ X), given
        leaks(background ∪ cands) (tested if ``confirmed``, else assumed) and not
        leaks(background)."""
        if len(cands) == 1:
            if not confirmed and not (yield from self._test(background | set(cands))):
                raise _Contradiction
            return list(cands)
        half = math.ceil(len(cands) / 2)
        first, second = cands[:half], cands[half:]
        self._hints = [background | set(second)]  # independent of the next test: run it alongside
        if (yield from self._test(background | set(first))):
            return (yield from self._minimize(first, background, True, lazy=lazy))
        with_second = background | set(second)
        if lazy and with_second not in self._memo:
            # Assume the other half; checked where the search ends if never confirmed on the way.
            return (yield from self._minimize(second, background, False, lazy=lazy))
        if (yield from self._test(with_second)):
            return (yield from self._minimize(second, background, True, lazy=lazy))
        # Neither half alone: the leak needs stages from both.
        x1 = yield from self._minimize(first, background | set(second), confirmed, lazy=lazy)
        # leaks(background ∪ x1) is false: it is a subset of background ∪ first, which did not leak.
        x2 = yield from self._minimize(second, background | set(x1), True, lazy=lazy)
        return x1 + x2

    def _memo_config(self, on: frozenset[str]) -> Configuration | None:
        if on == frozenset(self._searched):
            return self._baseline
        return next((c for c in self.configurations if c.on == on), None)


def summary_of(b: Bisector, state: str, culprits: list[Stage]) -> str:
    """The search's answer in one sentence (``state``: how it ended)."""
    base = b._baseline.verdict if b._baseline is not None else None
    base_rate = f"{format_bytes(base.slope)}/iteration" if base is not None else ""
    if state == "running":
        return "Bisection has not finished."
    if state == "interrupted":
        return "Bisection was interrupted before it found the culprit."
    if state == "no-leak" and b._retention():
        reclaimed = b.attribution.reclaimed_bytes or 0
        return (f"Nothing to bisect: with every stage on, memory grew ({base_rate}), yet "
                f"malloc_trim(0) handed back {format_bytes(reclaimed)} at the end. "
                "That is the allocator keeping freed memory (allocator retention), not a "
                "stage leaking; MALLOC_ARENA_MAX=2 or jemalloc/tcmalloc (LD_PRELOAD) "
                "curb it.")
    if state == "no-leak" and b._baseline.error:
        return f"Nothing was bisected: with every stage on, {_failure(b._baseline)}."
    if state == "no-leak":
        return (f"Nothing to bisect: with every stage on, the verdict is {base.kind}, not a "
                f"leak{_small_plateau(base, b.min_plateau)}.")
    if b.plateau and state in ("outside", "found", "no-stages"):
        final = b._memo_config(frozenset(s.id for s in culprits)) if culprits else None
        return plateau_summary(state, culprits, b._baseline, b.configurations, final)
    if state == "no-stages":
        return ("The leak cannot be bisected: no stage that can be switched off was recorded "
                "(build the tf.data pipeline inside the watched code or its setup, or mark "
                "functions with @leakwidget.stage).")
    if state == "outside":
        all_off = next((c for c in b.configurations if c.on == frozenset()), None)
        rate = f" ({format_bytes(all_off.slope)}/iteration)" if all_off and all_off.slope else ""
        return ("The leak lies outside the stages (the source, the step body or the model): "
                f"with every stage off, memory still grows{rate}.")
    if state == "unfinished":
        return "Bisection stopped before it pinned down the culprit."
    if not culprits:
        return "Bisection found no culprit."
    where = " and ".join(f"{s.id} ({s.kind} at {_site_words(s.site)})" for s in culprits)
    final = b._memo_config(frozenset(s.id for s in culprits))
    rate = (f" {format_bytes(final.slope)}/iteration"
            if final is not None and final.slope is not None else "")
    if len(culprits) == 1:
        return (f"The leak comes from {where}: on by itself it leaks{rate}, like the whole "
                f"pipeline ({base_rate}); with every stage off, it does not.")
    return (f"The leak needs {where} together: on together they leak{rate}, like the whole "
            f"pipeline ({base_rate}); neither does alone.")


def plateau_summary(state: str, culprits: list[Stage], baseline: Configuration,
                    configurations: list[Configuration], final: Configuration | None) -> str:
    """The words for a bisected plateau: which stages make memory rise that high (or a rise
    whose RSS held while what is in use kept climbing: no plateau yet, maybe a leak)."""
    if baseline.verdict is not None and baseline.verdict.climbing:
        it = "rise"
        said = ("This bisected a rise whose RSS then held while what is in use kept climbing "
                "(no plateau yet, and maybe a leak behind memory being reused): "
                + baseline.verdict.reason + ".")
    else:
        it = "plateau"
        said = "This bisected a plateau (memory that rose, then held: a buffer or cache), not a leak."
    if state == "no-stages":
        return f"The {it} cannot be bisected: no stage that can be switched off was recorded. " + said
    if state == "outside":
        all_off = next((c for c in configurations if c.on == frozenset()), None)
        rise = (f" by {format_bytes(plateau_rise(all_off.verdict))}"
                if all_off is not None and all_off.verdict is not None else "")
        return (f"The {it} lies outside the stages (the source, the step body or the model): "
                f"with every stage off, memory still rises{rise}. " + said)
    if not culprits:
        return f"Bisection found no stage that holds the {it}. " + said
    where = " and ".join(f"{s.id} ({s.kind} at {_site_words(s.site)})" for s in culprits)
    rise = format_bytes(plateau_rise(final.verdict)) if final is not None and final.verdict else "?"
    alone = "on by itself" if len(culprits) == 1 else "on together (neither does alone)"
    return (f"The {it} comes from {where}: {alone} memory rises {rise}, like the whole "
            f"pipeline's {format_bytes(plateau_rise(baseline.verdict))}; with every stage off, "
            "it does not. " + said)


def _failure(config: Configuration) -> str:
    """How a configuration's run failed, as a clause: its step raised, or its worker died."""
    if config.stopped == "worker-died":
        return f"its worker process died ({config.error})"
    return f"the step raised {config.error}"


def _small_plateau(v: Verdict, min_plateau: float) -> str:
    if v.kind != "plateau":
        return ""
    return (f" (a plateau of {format_bytes(plateau_rise(v))}, under the {format_bytes(min_plateau)} "
            "a plateau must rise to be bisected: min_plateau lowers that)")


def rises_as_high(verdict: Verdict, baseline: Verdict, ratio: float) -> bool:
    """Does memory rise at least ``ratio`` as high as the baseline's plateau? (A configuration
    that leaks rises too; one still filling when it stopped is judged by its trend.)"""
    return (verdict.kind in ("plateau", "leak", "inconclusive")
            and plateau_rise(verdict) >= ratio * plateau_rise(baseline))


def plateau_rise(v: Verdict) -> float:
    """How high memory rose in a verdict's fit: a plateau's rise from its onset to its top, a
    leak's or an undecided trend's growth since its onset; 0 for anything else."""
    if v.kind not in ("plateau", "leak", "inconclusive") or len(v.fit) < 2:
        return 0.0
    levels = [y for _, y in v.fit]
    return max(0.0, max(levels) - levels[0])


def block_trend(index: np.ndarray, blocks: np.ndarray, warmup: int) -> tuple[float | None, ...]:
    """(slope, 95% low, 95% high) of the allocator's block count per iteration after the
    warm-up; Nones when there are too few iterations."""
    index, blocks = np.asarray(index, dtype=float), np.asarray(blocks, dtype=float)
    if index.size == 0:
        return None, None, None
    keep = (index >= index[0] + warmup) & (blocks >= 0)  # read at checkpoints only
    if int(keep.sum()) < MIN_POINTS:
        return None, None, None
    tr = trend(index[keep], blocks[keep])
    return tr.slope, tr.low, tr.high


def short_id(stage_id: str) -> str:
    """``map@/long/path/pipeline.py:12`` -> ``map@pipeline.py:12`` for tables and labels."""
    kind, at, site = stage_id.partition("@")
    if not at or "/" not in site and "\\" not in site:
        return stage_id
    return f"{kind}@{site.replace(chr(92), '/').rsplit('/', 1)[-1]}"


def _site_words(site: str) -> str:
    return f"line {site}" if site.isdigit() else site


