"""The live dashboard: verdict banner, RSS and step-duration charts, controls, pipeline strip.

:class:`Dashboard` is an ``ipywidgets.VBox`` and an engine :class:`~leakwidget.engine.observer.
Observer`: it keeps its own bounded copy of what the stream brings (samples, records, stages,
verdicts) and touches nothing else of the engine, so it can follow a watch run anywhere. It
redraws by the clock (at most every ``refresh_interval``), never per iteration.

Stop, Run again and Bisect work while a ``%%leakwatch`` cell runs when the kernel can deliver
clicks (ipykernel >= 7 with the async cell rewrite of :mod:`.delivery`); otherwise the note under
the banner says so. Run again and Bisect run as tasks on the kernel's loop (:mod:`.scheduler`),
so Stop keeps working during them and each configuration is overlaid as its own series.

The DOM contract the browser test relies on is in docs/widget.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
from IPython import get_ipython

from ..engine.observer import BaseObserver, RunControl
from ..engine.records import IterationRecord, RecordLog
from ..engine.result import WatchResult
from ..engine.sampler import Series
from ..engine.search import BisectResult
from ..engine.spec import WatchSpec
from ..engine.verdict import Verdict
from ..report.svg import projection_text, record_columns, result_mimebundle
from ..stages import Stage
from . import delivery
from .banner import banner_html, note_html
from .charts import Charts, RunSeries
from .scheduler import Scheduler
from .strip import PipelineStrip

__all__ = ["Dashboard", "show_dashboard"]


class Dashboard(widgets.VBox, BaseObserver):
    """Live view of a watch, and the controls to steer the hunt."""

    def __init__(self, *, max_points: int = 2000, refresh_interval: float = 0.4, **kwargs: Any) -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        if not refresh_interval > 0:
            raise ValueError(f"refresh_interval must be positive, got {refresh_interval}")
        kwargs.setdefault("_dom_classes", ["leakwidget-dashboard"])
        super().__init__(**kwargs)
        self.max_points = int(max_points)
        self.refresh_interval = float(refresh_interval)
        self.banner = widgets.HTML(banner_html("running", "Waiting for the watch to start\u2026", "", True),
                                   _dom_classes=["leakwidget-banner"])
        self.note = widgets.HTML("", _dom_classes=["leakwidget-note"])
        self.charts = Charts(self.max_points)
        self.rss_chart, self.duration_chart = self.charts.rss_chart, self.charts.duration_chart
        self.stop_button = widgets.Button(description="Stop", icon="stop", disabled=True,
                                          button_style="danger", _dom_classes=["leakwidget-stop"])
        self.run_again_button = widgets.Button(description="Run again", icon="repeat", disabled=True,
                                               _dom_classes=["leakwidget-run-again"])
        self.bisect_button = widgets.Button(
            description="Bisect", icon="search", disabled=True, layout=widgets.Layout(display="none"),
            tooltip="Find the stage(s) whose being on makes memory grow", _dom_classes=["leakwidget-bisect"],
        )
        self.controls = widgets.HBox([self.stop_button, self.run_again_button, self.bisect_button])
        self.strip = PipelineStrip()
        self.children = [self.banner, self.note, self.rss_chart, self.duration_chart, self.controls]
        self.scheduler = Scheduler(self)
        self.stop_button.on_click(lambda _b: self.scheduler.stop())
        self.run_again_button.on_click(lambda _b: self.scheduler.run_again())
        self.bisect_button.on_click(lambda _b: self.scheduler.bisect())
        self.strip.observe(self._on_states_change, names="states")
        self.last_result: WatchResult | None = None
        self.last_bisect: BisectResult | None = None
        self.run: RunControl | None = None  # the run being shown, while it runs
        self.spec: WatchSpec | None = None  # the last run's spec (Run again starts from it)
        self._lock = threading.RLock()
        self._current: RunSeries | None = None
        self._samples = Series()
        self._log = RecordLog()
        self._verdict = Verdict("inconclusive")
        self._stages: list[Stage] = []
        self._last_full = self._last_rss = -np.inf
        self._runs = 0

    @property
    def series(self) -> list[RunSeries]:
        return self.charts.series

    @property
    def duration_flagged(self) -> bool:
        return self.charts.duration_flagged

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, **kwargs: Any) -> dict | None:
        """The live view, plus a static picture of the last run when displayed after one.

        Front ends with widgets show the live view; others (nbconvert, nbviewer, GitHub) fall
        back to the SVG and the text report. The output shown while a run goes on is not
        updated at its end on purpose: JupyterLab would rebuild the live view to do so.
        """
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        if self.last_result is None:
            bundle["text/plain"] = "leakwidget dashboard (live in JupyterLab / Notebook)"
            return bundle
        bundle.update(result_mimebundle(self.last_result))
        return bundle

    # ------------------------------------------------------------------ the stream
    def on_start(self, run: RunControl) -> None:
        with self._lock:
            self.run, self.spec = run, run.spec
            self._runs += 1
            label = run.label or (f"run {self._runs}" if self._runs == 1
                                  else f"run {self._runs}: {run.spec.toggles}")
            self._current = self.charts.new_series(label)
            self._samples.clear()
            self._log = RecordLog()
            self._verdict = Verdict("inconclusive")
            self._last_full = self._last_rss = -np.inf
            self.stop_button.disabled = False
            self.run_again_button.disabled = False
            self._set_banner("running", f"Running {label}\u2026", "", running=True)
            if self.scheduler.bisecting:
                note = "Bisecting: each configuration is drawn as its own series."
            else:
                note = "" if delivery.clicks_delivered(run, get_ipython()) else delivery.NO_DELIVERY_NOTE
            self.note.value = note_html(note)

    def on_stages(self, stages: Sequence[Stage]) -> None:
        with self._lock:
            self._stages = list(stages)
            self._show_stages()

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None:
        for ti, vi in zip(t.tolist(), rss.tolist(), strict=True):
            self._samples.append(ti, vi)  # a Series has its own lock
        if time.perf_counter() - self._last_rss < self.refresh_interval:
            return
        # Drawn here only while the loop is not drawing (a long step, the setup): otherwise
        # its next full redraw shows these samples anyway.
        if self._lock.acquire(blocking=False):
            try:
                if self._current is not None:
                    self._guarded(self._draw_rss)
            finally:
                self._lock.release()

    def on_iteration(self, record: IterationRecord) -> None:
        with self._lock:
            self._log.append(record)
            if time.perf_counter() - self._last_full >= self.refresh_interval:
                self._guarded(self._draw_full)

    def on_verdict(self, verdict: Verdict) -> None:
        self._verdict = verdict

    def on_finish(self, result: WatchResult) -> None:
        with self._lock:
            self._verdict = result.verdict
            self._stages = list(result.stages)
            self._guarded(lambda: self._draw_full(result))
            self._show_stages(prune_wishes=True)
            self.last_result = result
            self.run = None
            self.stop_button.disabled = True
            self.run_again_button.disabled = False
            self.scheduler.finished()

    # ------------------------------------------------------------------ drawing
    def _guarded(self, draw: Any) -> None:
        # A drawing problem must never end the user's run: it is reported in the note instead.
        try:
            draw()
        except Exception as exc:
            self.note.value = note_html(f"The dashboard could not redraw: {type(exc).__name__}: {exc}")

    def _draw_rss(self) -> None:
        t, v = self._samples.arrays()
        self.charts.draw_rss(self._current, t, v.astype(float))
        self._last_rss = time.perf_counter()

    def _draw_full(self, final: WatchResult | None = None) -> None:
        if self._current is None:
            return
        t, v = self._samples.arrays()
        cols = record_columns(final if final is not None else self._log)
        verdict = self._verdict
        self.charts.draw_run(self._current, t, v.astype(float), cols, verdict)
        if final is None:
            n = int(cols["index"][-1]) + 1 if cols["index"].size else 0
            shown = verdict.kind if verdict.kind in ("leak", "plateau", "stable") else "running"
            text = f"{self._current.label}: iteration {n:,}. {verdict.summary}".strip()
            self._set_banner(shown, text, projection_text(verdict), running=True)
        else:
            self._set_banner(verdict.kind, _final_text(final), projection_text(verdict), running=False)
        self._last_full = self._last_rss = time.perf_counter()

    def _set_banner(self, kind: str, summary: str, projection: str, *, running: bool) -> None:
        # Leak summaries already end with the projection; do not say it twice.
        if "runs out" in summary:
            projection = ""
        value = banner_html(kind, summary, projection, running)
        if value != self.banner.value:
            self.banner.value = value

    def _show_stages(self, *, prune_wishes: bool = False) -> None:
        self.strip.show(self._stages)
        if self._stages and self.strip not in self.children:
            self.children = [*self.children, self.strip]
        toggleable = any(s.toggleable for s in self._stages)
        self.bisect_button.layout.display = None if toggleable else "none"
        self.bisect_button.disabled = not toggleable or self.scheduler.bisecting
        if prune_wishes and self.strip.states:
            # Wishes the run just fulfilled are forgotten.
            done = {(s.id, s.state) for s in self._stages}
            self.strip.states = {k: v for k, v in self.strip.states.items() if (k, v) not in done}

    # ------------------------------------------------------------------ controls
    def _on_states_change(self, change: dict) -> None:
        if not change["new"]:
            return
        what = ", ".join(f"{k} {v}" for k, v in sorted(change["new"].items()))
        when = "after this run" if self.run is not None else "now"
        self.note.value = note_html(f"Next configuration: {what}. Click Run again to run it ({when}).")

    def next_spec(self) -> WatchSpec:
        """The spec of the last run with the strip's on/serial/off wishes applied."""
        if self.spec is None:
            raise RuntimeError("no watch has run in this dashboard yet")
        spec = self.spec
        states = self.strip.effective_states()
        ids_and_kinds = set(states) | {s["kind"] for s in self.strip.stages}
        off = [e for e in spec.off if e not in ids_and_kinds]
        serial = [e for e in spec.serial if e not in ids_and_kinds]
        off += [sid for sid, st in states.items() if st == "off"]
        serial += [sid for sid, st in states.items() if st == "serial"]
        toggled = dataclasses.replace(spec, off=tuple(off), serial=tuple(serial), label="")
        return dataclasses.replace(toggled, label=f"run {self._runs + 1}: {toggled.toggles}")

    def show_bisect(self, result: BisectResult) -> None:
        """Mark the culprits of a bisection in the strip and put its summary in the note.

        Called after the Bisect button's search, and after ``%%leakwatch --bisect``.
        """
        culprits = [c.id for c in result.culprits]
        self.strip.culprits = culprits
        summary = result.summary or (
            f"Bisect blames: {', '.join(culprits)}." if culprits else "Bisect found no single culprit."
        )
        self.note.value = note_html(summary)
        self.last_bisect = result


def _final_text(result: WatchResult) -> str:
    text = result.verdict.summary
    if result.stopped:
        text += f" (stopped: {result.stopped})"
    if result.error is not None:
        text += f" The step raised {type(result.error).__name__}: {result.error}"
    # What is growing (Python objects, native memory, or the allocator keeping freed memory)
    # belongs beside the verdict: "leak" + "allocator" reads very differently.
    att = result.attribution
    if att is not None and att.kind != "none" and att.summary:
        text += f" \u2014 {att.summary}"
    return text


def show_dashboard() -> Dashboard:
    """A new dashboard, displayed in the current cell's output."""
    from IPython.display import display

    dash = Dashboard()
    display(dash)
    return dash
