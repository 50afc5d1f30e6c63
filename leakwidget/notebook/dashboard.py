"""The live dashboard: headline and details, controls, RSS and step-duration charts, pipeline strip.

:class:`Dashboard` is an ``ipywidgets.VBox`` and an engine :class:`~leakwidget.engine.observer.
Observer`: it keeps its own bounded copy of what the stream brings (samples and iterations in
fixed buckets, the live verdict, the stages) and touches nothing else of the engine, so it can
follow a watch run anywhere. It redraws by the clock (at most every ``refresh_interval``),
never per iteration.

It must not measure itself: the process it draws is the one it lives in. Its buckets are
allocated once per dashboard and reused by every run; a redraw allocates only arrays of the
number of points drawn (bounded by ``max_points``), never anything that grows with the run;
what the first redraw would import or allocate for the first time is done at construction.

Stop, Run again and Bisect work while a ``%%leakwatch`` cell runs when the kernel can deliver
clicks (ipykernel >= 7 with the async cell rewrite of :mod:`.delivery`); otherwise the note under
the banner says so. What the buttons do is the engine's run-control state machine
(:class:`~leakwidget.engine.scheduler.Scheduler`: idle, running, stopping, bisecting, comparing);
the dashboard is its view. Run again and Bisect run as tasks on the kernel's loop, so Stop keeps
working during them and each configuration is overlaid as its own series.

The DOM contract the browser tests rely on is in docs/widget.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
from IPython import get_ipython

from ..engine.members import ChildrenReading
from ..engine.observer import BaseObserver, RunControl, aside, view_interval
from ..engine.records import IterationRecord
from ..engine.result import WatchResult
from ..engine.scheduler import ControlState, Scheduler
from ..engine.search import BisectResult
from ..engine.spec import WatchSpec
from ..engine.verdict import Verdict
from ..engine.workers.compare import CompareResult
from ..report.chart import result_mimebundle
from ..report.render import text_bundle
from ..stages import Stage
from . import delivery
from .banner import (
    Banner,
    banner_html,
    bisect_banner,
    compare_banner,
    details_html,
    final_banner,
    live_banner,
    note_html,
)
from .charts import Charts, RunData, RunSeries, rehearse_redraws
from .controls import Controls
from .outcome import Outcome
from .strip import PipelineStrip

__all__ = ["Dashboard", "show_dashboard"]

PUBLISHER_DRAWS_AFTER = 1.5  # refresh intervals without a redraw before the sampler's thread draws


def _check(max_points: int, refresh_interval: float) -> None:
    if max_points < 8:
        raise ValueError(f"max_points must be at least 8, got {max_points}")
    if not refresh_interval > 0:
        raise ValueError(f"refresh_interval must be positive, got {refresh_interval}")


class Dashboard(widgets.VBox, BaseObserver):
    """Live view of a watch, and the controls to steer the hunt."""

    def __init__(self, *, max_points: int = 2000, refresh_interval: float = 1.0, **kwargs: Any) -> None:
        _check(max_points, refresh_interval)
        kwargs.setdefault("_dom_classes", ["leakwidget-dashboard"])
        super().__init__(**kwargs)
        self.max_points = int(max_points)
        self.refresh_interval = float(refresh_interval)
        self.banner = widgets.HTML(banner_html(Banner("running", "Waiting for the watch to start\u2026"),
                                               running=True), _dom_classes=["leakwidget-banner"])
        self._details_text = widgets.HTML("", _dom_classes=["leakwidget-details-body"])
        # An accordion keeps its open state while its text changes (a <details> rebuilt by each
        # update would snap shut).
        self.details = widgets.Accordion(children=[self._details_text], titles=("Details",),
                                         selected_index=None, _dom_classes=["leakwidget-details"])
        self.note = widgets.HTML("", _dom_classes=["leakwidget-note"])
        self.charts = Charts(self.max_points)
        self.rss_chart, self.duration_chart = self.charts.rss_chart, self.charts.duration_chart
        self.legend = self.charts.legend
        self.strip = PipelineStrip()
        self.scheduler = Scheduler(self)  # what the buttons do; this is its view
        self.outcome = Outcome()  # the last answer shown (Save report), a comparison's pane
        self.controls = Controls(self.scheduler, self.strip.toggles, self.save_report)
        c = self.controls
        self.stop_button, self.run_again_button, self.bisect_button = c.stop_button, c.run_again_button, c.bisect_button
        self.try_fix_button, self.native_button, self.save_button = c.try_fix_button, c.native_button, c.save_button
        self.children = [self.banner, self.outcome.pane, self.details, self.note, self.controls, self.rss_chart,
                         self.legend, self.duration_chart]
        self.strip.observe(lambda change: _say_wishes(self, change["new"]), names="states")
        self.last_result: WatchResult | None = None
        self.last_bisect: BisectResult | None = None
        self.last_compare: CompareResult | None = None
        self._lock = threading.RLock()  # one redraw at a time
        self._data_lock = threading.Lock()  # the buckets: filled by two threads, read by redraws
        self._current: RunSeries | None = None
        self._run: RunControl | None = None  # the run being drawn (its redraws run aside)
        self._data = RunData(self.max_points // 2)
        self._verdict = Verdict("inconclusive")
        self._stages: list[Stage] = []
        self._last_draw = -np.inf
        self._report: Any = None  # the display handle of the text report under the dashboard
        # Drawn once, off the record, before any run: what a first redraw imports and allocates
        # for the first time must not land inside the run it draws.
        self.charts.rehearse()

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
        back to the chart (a PNG) and the text report. The output shown while a run goes on is not
        updated at its end on purpose: JupyterLab would rebuild the live view to do so."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        if self.last_result is None:
            bundle["text/plain"] = "leakwidget dashboard (live in JupyterLab / Notebook)"
            return bundle
        bundle.update(result_mimebundle(self.last_result))
        return bundle

    def show_report(self, result: WatchResult) -> None:
        """Print the run's answer under the dashboard, for viewers without widgets; later runs
        (Run again, Bisect) replace it in place, so it never describes an older run."""
        from IPython.display import display

        # Short: in JupyterLab it sits under the dashboard, which says all of it already.
        text = report_text(final_banner(result), lines=1)
        if self._report is None:
            self._report = display(text_bundle(text), raw=True, display_id=True)
        else:
            self._report.update(text_bundle(text), raw=True)

    # ------------------------------------------------------------------ the stream
    def on_start(self, run: RunControl) -> None:
        with self._lock:
            self.scheduler.started(run)
            self._run = run
            n = self.scheduler.runs
            label = run.label or (f"run {n}" if n == 1 else f"run {n}: {run.spec.toggles}")
            with self._data_lock:
                self._data.clear()
                self.charts.workers.clear()
            self._current = self.charts.new_series(label)
            self.outcome.hide_pane()
            self._verdict = Verdict("inconclusive")
            self._last_draw = -np.inf
            self.controls.started()
            self._set_banner(Banner("running", f"Running {label}\u2026"), running=True)
            bisecting = "Bisecting: each configuration is drawn as its own run."
            self.say(bisecting if self.scheduler.bisecting else
                     "" if delivery.clicks_delivered(run, get_ipython()) else delivery.NO_DELIVERY_NOTE)

    def on_settled(self) -> None:
        with self._lock:  # on the watch's own thread, where the run's redraws are drawn
            self._guarded(lambda: rehearse_redraws(self.charts, self._current, self._data, self._draw_full))

    def on_stages(self, stages: Sequence[Stage]) -> None:
        with self._lock:
            self._stages = list(stages)
            self._show_stages()

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None:
        with self._data_lock:
            for ti, vi in zip(t.tolist(), rss.tolist(), strict=True):
                self._data.add_sample(ti, vi)
        # Drawn from this thread only while the loop is not drawing (a long step, the setup):
        # otherwise the loop's next redraw shows these samples anyway.
        wait = view_interval(self.refresh_interval, self._data.last_end)
        if time.perf_counter() - self._last_draw < PUBLISHER_DRAWS_AFTER * wait:
            return
        if self._lock.acquire(blocking=False):
            try:
                if self._current is not None:
                    self._guarded(self._draw_rss)
            finally:
                self._lock.release()

    def on_children(self, reading: ChildrenReading) -> None:  # drawn with the run's line
        with self._data_lock:
            self.charts.workers.add(reading)

    def on_iteration(self, record: IterationRecord) -> None:
        with self._data_lock:
            self._data.add_iteration(record.index, record.start, record.end, record.rss, record.duration)
        if time.perf_counter() - self._last_draw >= view_interval(self.refresh_interval, self._data.last_end):
            with self._lock:  # on the watch's own thread: not the step's heap (on_settled)
                aside(self._run, lambda: self._guarded(self._draw_full))

    def on_verdict(self, verdict: Verdict) -> None:
        self._verdict = verdict

    def on_phase(self, what: str) -> None:  # after the run: its phases' iterations are not drawn
        _say_phase(self, what)

    def on_finish(self, result: WatchResult) -> None:
        with self._lock:
            self._verdict = result.verdict
            self._stages = list(result.stages)
            with self._data_lock:  # the children's whole series, and which of them copy
                self.charts.workers.finish(result.children)
            self._guarded(lambda: self._draw_full(result))
            self._show_stages(prune_wishes=True)
            self.last_result = result
            self.outcome.show(result)
            self.controls.finished(result)
            if self._report is not None:
                self._guarded(lambda: self.show_report(result))
            self.scheduler.finished(result)

    # ------------------------------------------------------------------ drawing
    def _guarded(self, draw: Callable[[], None]) -> None:
        # A drawing problem must never end the user's run: it is reported in the note instead.
        try:
            draw()
        except Exception as exc:
            self.say(f"The dashboard could not redraw: {type(exc).__name__}: {exc}")

    def _draw_rss(self) -> None:
        with self._data_lock:
            self.charts.draw_rss(self._current, self._data)
        self._last_draw = time.perf_counter()

    def _draw_full(self, final: WatchResult | None = None) -> None:
        if self._current is None:
            return
        verdict = self._verdict
        if final is None:
            with self._data_lock:
                n, seconds = int(self._data.last_index) + 1, self._data.last_end
            banner = live_banner(self._current.label, n, seconds, verdict)
        else:
            banner = final_banner(final)
        with self._data_lock:
            self.charts.draw_run(self._current, self._data, verdict, banner.kind, final=final is not None)
        self._set_banner(banner, running=final is None, verdict=verdict.kind)
        self._last_draw = time.perf_counter()

    def _set_banner(self, banner: Banner, *, running: bool, verdict: str = "") -> None:
        _set_value(self.banner, banner_html(banner, running=running, verdict=verdict))
        _set_value(self._details_text, details_html(banner.details, banner.log))

    def _show_stages(self, *, prune_wishes: bool = False) -> None:
        self.strip.show(self._stages)
        if self._stages and self.strip not in self.children:
            self.children = [*self.children, self.strip]
        self.controls.offer_bisect(any(s.toggleable for s in self._stages))
        if prune_wishes and self.strip.states:
            # Wishes the run just fulfilled are forgotten.
            done = {(s.id, s.state) for s in self._stages}
            self.strip.states = {k: v for k, v in self.strip.states.items() if (k, v) not in done}

    # ------------------------------------------------------------------ controls
    def say(self, text: str) -> None:
        self.note.value = note_html(text)

    def show_state(self, state: ControlState, was: ControlState) -> None:
        """The scheduler's state changed: the strip and Bisect rest while a search runs; a
        bisection's culprit marks go once another run has ended."""
        self.strip.disabled = self.scheduler.bisecting
        self.controls.offer_bisect(any(s.toggleable for s in self._stages))
        if state == "idle" and was in ("running", "stopping"):
            self.strip.culprits = []

    def show_bisect(self, result: BisectResult, restore: WatchSpec | None = None) -> None:
        """The bisection's answer as the headline, its culprits marked in the strip, and the strip
        back in the user's own configuration (``restore``, the spec the search started from; by
        default the last run's with every stage as written: see ``Scheduler.restore``), so Run
        again runs what the user had.

        Called after the Bisect button's search, and after ``%%leakwatch --bisect``.
        """
        with self._lock:
            base = restore if restore is not None else self.scheduler.restore()
            if base is not None:
                self._stages = [dataclasses.replace(s, state=base.toggles.state_for(s)) for s in self._stages]
            self.strip.show(self._stages, culprits=[c.id for c in result.culprits],
                            **({"states": {}} if base is not None else {}))
            verdict = result.configurations[0].kind if result.configurations else ""
            self._set_banner(bisect_banner(result), running=False, verdict=verdict)
            self.note.value = ""
            self.last_bisect = result
            self.outcome.show(result)

    def show_compare(self, result: CompareResult, restore: WatchSpec | None = None) -> None:
        """A comparison's answer as the headline in its own colour, never the last variant's verdict
        (report.comparison, banner.compare_banner); the buttons and Run again are the user's again."""
        with self._lock:
            self.scheduler.spec = restore or self.scheduler.spec
            self.controls.finished(result.results[result.baseline])
            self._set_banner(compare_banner(result), running=False)
            self.note.value = ""
            self.last_compare = result
            self.outcome.show(result)
            if self._report is not None:  # the text under the dashboard: this answer, not a variant's
                self._report.update({"text/plain": result.summary}, raw=True)

    def save_report(self, path: str | None = None) -> str | None:
        """Save report: the answer shown as one page; the note says its file (see outcome.py)."""
        return self.outcome.save(path, self.say)


def _say_phase(dash: Dashboard, what: str) -> None:
    """A phase after the measured run began (the watch's garbage or traced phase): the banner
    says what the run does meanwhile (drawn aside, as the run's redraws are: not the step's heap)."""
    with dash._lock:
        if dash._current is not None:
            aside(dash._run, lambda: dash._guarded(lambda: dash._set_banner(
                Banner("running", what), running=True, verdict=dash._verdict.kind)))


def _say_wishes(dash: Dashboard, states: dict) -> None:
    """The strip's wishes, in the note: what Run again will run."""
    if states:
        what = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
        when = "after this run" if dash.scheduler.run is not None else "now"
        dash.say(f"Next configuration: {what}. Click Run again to run it ({when}).")


def _set_value(widget: widgets.HTML, value: str) -> None:
    if value != widget.value:  # an unchanged text sends no message
        widget.value = value


def report_text(banner: Banner, *, lines: int | None = None) -> str:
    """The text report: the headline, then the details (their first ``lines``)."""
    return "\n".join([banner.headline, *banner.details[:lines]])


def show_dashboard() -> Dashboard:
    """A new dashboard, displayed in the current cell's output."""
    from IPython.display import display

    dash = Dashboard()
    display(dash)
    return dash
