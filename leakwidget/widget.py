"""The live dashboard: RSS and step-duration charts, verdict banner, controls, pipeline strip.

:class:`Dashboard` is an ``ipywidgets.VBox`` and a runner observer (see docs/design.md). The
runner calls ``on_start`` / ``on_iteration`` / ``on_finish``; the dashboard redraws at most
every ``refresh_interval`` seconds (by time, never per iteration), sends at most ``max_points``
points per series (min/max decimation), and batches each redraw with ``hold_sync``. A small
thread keeps the RSS line moving while a single long step runs (on_iteration is not called
then); it stops when the watch finishes.

Stop, Run again and Bisect work while a ``%%leakwatch`` cell runs when the kernel can deliver
clicks (ipykernel >= 7 with the async cell rewrite of :mod:`leakwidget.live`); otherwise the
note under the banner says so. Run again and Bisect run as asyncio tasks on the kernel's loop,
so Stop keeps working during them and each configuration is overlaid as its own series.

The DOM contract the browser test relies on is in docs/widget.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import inspect
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anywidget
import bqplot as bq
import ipywidgets as widgets
import numpy as np
import traitlets

from . import live
from .decimate import minmax
from .svg import (
    KIND_COLOURS,
    MIB,
    PALETTE,
    fit_in_time,
    projection_text,
    record_columns,
    warmup_end_time,
)

__all__ = ["Dashboard", "PipelineStrip", "stage_dict"]

STATIC = Path(__file__).parent / "static"
MAX_SERIES = 10  # configurations overlaid at once; the oldest (after the first) make room
MAX_STAGES = 200
MAX_MARKERS = 500  # iteration-end dots drawn at most  # a strip wider than this is unreadable anyway
STATES = ("on", "serial", "off")


# ---------------------------------------------------------------------------------------------
# Pipeline strip (anywidget; the front end is js/src/pipeline.js, built to static/pipeline.js)


def stage_dict(stage: Any) -> dict:
    """A recorded Stage as the JSON dict the strip draws (reprs only: nothing live is synced)."""
    args = getattr(stage, "args", None) or {}
    return {
        "id": str(stage.id),
        "kind": str(getattr(stage, "kind", "") or ""),
        "site": str(getattr(stage, "site", "") or ""),
        "args": {str(k): str(v) for k, v in dict(args).items()},
        "inputs": [str(i) for i in (getattr(stage, "inputs", None) or ())],
        "toggleable": bool(getattr(stage, "toggleable", False)),
        "parallel": bool(getattr(stage, "parallel", False)),
        "state": str(getattr(stage, "state", "on") or "on"),
    }


class PipelineStrip(anywidget.AnyWidget):
    """The recorded stages, left to right; a click cycles a stage on -> serial -> off.

    ``states`` holds the user's wishes ({stage id: state}); they apply at the next Run again
    (a running pipeline cannot be rewired). ``culprits`` are the stage ids a bisection blamed.
    """

    _esm = STATIC / "pipeline.js"
    stages = traitlets.List(traitlets.Dict()).tag(sync=True)
    states = traitlets.Dict().tag(sync=True)
    culprits = traitlets.List(traitlets.Unicode()).tag(sync=True)
    disabled = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        # Classes given at construction travel in comm_open, so a front end (or a test reading
        # the kernel's messages) can find the widget from its first message.
        kwargs.setdefault("_dom_classes", ["leakwidget-pipeline"])
        super().__init__(**kwargs)

    @traitlets.validate("states")
    def _valid_states(self, proposal: dict) -> dict:
        # The front end is not trusted to know the rules: drop states a stage cannot take.
        by_id = {s["id"]: s for s in self.stages}
        clean = {}
        for sid, state in dict(proposal["value"]).items():
            if state not in STATES:
                continue
            stage = by_id.get(sid)
            if stage is not None:
                if not stage["toggleable"] and state != stage["state"]:
                    continue
                if state == "serial" and not stage["parallel"]:
                    continue
            clean[str(sid)] = state
        return clean

    def effective_states(self) -> dict[str, str]:
        """State of every recorded stage: the user's wish, else what the last run recorded."""
        return {s["id"]: self.states.get(s["id"], s["state"]) for s in self.stages}


# ---------------------------------------------------------------------------------------------
# Helpers


def _duration_trend(index: np.ndarray, duration: np.ndarray, warmup: int) -> tuple[bool, float]:
    """(slowing down?, slope in seconds per iteration) of the step duration after warm-up.

    The verdict's Theil–Sen estimator on at most 100 bucket medians, held to the verdict's
    standard for a leak: significant at 99.9%, growing in both halves of the run (a one-off
    jump — another process starting on the machine — is not a trend), and adding at least half
    the median duration over the run.
    """
    from .verdict import theil_sen

    keep = index >= (index[0] + warmup) if index.size else np.zeros(0, bool)
    x, y = index[keep].astype(float), duration[keep].astype(float)
    if x.size < 16:
        return False, 0.0
    if x.size > 100:
        parts = np.array_split(np.arange(x.size), 100)
        x = np.array([np.median(x[p]) for p in parts])
        y = np.array([np.median(y[p]) for p in parts])
    trend = theil_sen(x, y)
    half = x.size // 2
    first, second = theil_sen(x[:half], y[:half]), theil_sen(x[half:], y[half:])
    span = float(x[-1] - x[0])
    median = float(np.median(y))
    flagged = (
        trend.low_decide > 0
        and first.slope > 0.3 * trend.slope
        and second.slope > 0.3 * trend.slope
        and trend.slope * span > 0.5 * max(median, 1e-9)
    )
    return bool(flagged), float(trend.slope)


def _slope_text(verdict: Any) -> str:
    if verdict is None or getattr(verdict, "iterations", 1) == 0:
        return ""
    from .verdict import format_bytes

    return f"{format_bytes(getattr(verdict, 'slope', 0.0), signed=True)}/it"


def _describe_config(spec: Any) -> str:
    parts = [f"{s} off" for s in getattr(spec, "off", ())] + [f"{s} serial" for s in getattr(spec, "serial", ())]
    return ", ".join(parts) if parts else "as written"


@dataclasses.dataclass
class _Series:
    """One configuration run drawn on the charts."""

    label: str
    colour: str
    rss: bq.Lines
    duration: bq.Lines
    fit: bq.Lines
    slope: str = ""


def _f32(a: np.ndarray) -> np.ndarray:
    # float32 halves the bytes on the wire; MiB and seconds need nowhere near float64 precision.
    return np.ascontiguousarray(a, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# The dashboard


class Dashboard(widgets.VBox):
    """Live view of a watch, and the controls to steer the hunt. Also a runner observer."""

    def __init__(self, *, max_points: int = 2000, refresh_interval: float = 0.4, **kwargs: Any) -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        if not refresh_interval > 0:
            raise ValueError(f"refresh_interval must be positive, got {refresh_interval}")
        kwargs.setdefault("_dom_classes", ["leakwidget-dashboard"])
        super().__init__(**kwargs)
        self.max_points = int(max_points)
        self.refresh_interval = float(refresh_interval)

        self.banner = widgets.HTML(
            _banner_html("running", "Waiting for the watch to start\u2026", "", True),
            _dom_classes=["leakwidget-banner"],
        )
        self.note = widgets.HTML("", _dom_classes=["leakwidget-note"])

        # RSS against time: one line (+ dashed fit) per configuration, dots at iteration ends
        # of the current run, warm-up shaded on a fixed 0..1 scale so it spans the plot height.
        self._x = bq.LinearScale()
        self._y = bq.LinearScale()
        self._unit = bq.LinearScale(min=0.0, max=1.0)
        self._warmup = bq.Lines(
            x=np.zeros(0, np.float32), y=np.zeros((2, 0), np.float32),
            scales={"x": self._x, "y": self._unit}, fill="between", colors=["#9e9e9e"],
            fill_colors=["#9e9e9e"], fill_opacities=[0.18], opacities=[0.0, 0.0], labels=["warm-up"],
        )
        self._ends = bq.Scatter(
            x=np.zeros(0, np.float32), y=np.zeros(0, np.float32), scales={"x": self._x, "y": self._y},
            default_size=10, colors=[PALETTE[0]], stroke="white", labels=["iteration ends"],
        )
        self.rss_chart = bq.Figure(
            marks=[self._warmup, self._ends],
            axes=[
                bq.Axis(scale=self._x, label="time (s)", grid_lines="none"),
                # d3's default ticks are round numbers; a fixed count or format is not.
                bq.Axis(scale=self._y, label="RSS (MiB)", side="left", label_offset="45px"),
            ],
            title="RSS", legend_location="top-left", animation_duration=0,
            fig_margin={"top": 40, "bottom": 40, "left": 60, "right": 20},
            layout=widgets.Layout(width="100%", height="330px"), _dom_classes=["leakwidget-rss-chart"],
        )

        self._dx = bq.LinearScale()
        self._dy = bq.LinearScale(min=0.0)
        self.duration_chart = bq.Figure(
            marks=[],
            axes=[
                bq.Axis(scale=self._dx, label="iteration", grid_lines="none"),
                bq.Axis(scale=self._dy, label="step (ms)", side="left", label_offset="45px"),
            ],
            title="Step duration", animation_duration=0, padding_y=0.0,
            fig_margin={"top": 30, "bottom": 40, "left": 60, "right": 20},
            layout=widgets.Layout(width="100%", height="170px"),
            _dom_classes=["leakwidget-duration-chart"],
        )

        self.stop_button = widgets.Button(
            description="Stop", icon="stop", disabled=True, button_style="danger",
            _dom_classes=["leakwidget-stop"],
        )
        self.run_again_button = widgets.Button(
            description="Run again", icon="repeat", disabled=True, _dom_classes=["leakwidget-run-again"]
        )
        self.bisect_button = widgets.Button(
            description="Bisect", icon="search", disabled=True, layout=widgets.Layout(display="none"),
            tooltip="Find the stage(s) whose being on makes memory grow",
            _dom_classes=["leakwidget-bisect"],
        )
        self.stop_button.on_click(self._on_stop_click)
        self.run_again_button.on_click(self._on_run_again_click)
        self.bisect_button.on_click(self._on_bisect_click)
        self.controls = widgets.HBox([self.stop_button, self.run_again_button, self.bisect_button])

        self.strip = PipelineStrip()
        self.strip.observe(self._on_states_change, names="states")

        self.children = [self.banner, self.note, self.rss_chart, self.duration_chart, self.controls]

        self.series: list[_Series] = []
        self._spare: _Series | None = self._make_series("", PALETTE[0], (self._x, self._y, self._dx, self._dy))
        self._set_marks()
        self.last_result: Any = None
        self.last_bisect: Any = None
        self.duration_flagged = False
        self._lock = threading.RLock()
        self._watch: Any = None
        self._current: _Series | None = None
        self._spec: Any = None
        self._last_full = -np.inf
        self._last_rss = -np.inf
        self._stage_key: tuple = ()
        self._pump_stop: threading.Event | None = None
        self._pump: threading.Thread | None = None
        self._task: asyncio.Task | None = None
        self._idle: asyncio.Event | None = None
        self._runs = 0
        self._bisecting = False
        self._halt = False
        self._stopping_note = ""

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
        result = self.last_result
        if result is None:
            bundle["text/plain"] = "leakwidget dashboard (live in JupyterLab / Notebook)"
            return bundle
        from .svg import result_mimebundle

        static = result_mimebundle(result)
        bundle["text/plain"] = static["text/plain"]
        if "image/svg+xml" in static:
            bundle["image/svg+xml"] = static["image/svg+xml"]
        return bundle

    # ------------------------------------------------------------------ observer protocol
    def on_start(self, watch: Any) -> None:
        self._stop_pump()  # outside the lock: the old pump may be waiting for it
        with self._lock:
            self._watch = watch
            self._spec = watch.spec
            self._runs += 1
            label = getattr(watch.spec, "label", "") or (
                f"run {self._runs}" if self._runs == 1 else f"run {self._runs}: {_describe_config(watch.spec)}"
            )
            self._current = self._new_series(label)
            self._last_full = self._last_rss = -np.inf
            self.duration_flagged = False
            self.stop_button.disabled = False
            self.run_again_button.disabled = False
            self._set_banner("running", f"Running {label}\u2026", "", running=True)
            note = "" if live.clicks_delivered() else live.NO_DELIVERY_NOTE
            if self._bisecting:
                note = "Bisecting: each configuration is drawn as its own series."
            self.note.value = _note_html(note)
        self._start_pump(watch)

    def on_iteration(self, watch: Any, record: Any) -> None:
        now = time.perf_counter()
        if now - self._last_full < self.refresh_interval:
            return
        with self._lock:
            if watch is self._watch:
                self._refresh_safe(watch, full=True)

    def on_finish(self, watch: Any, result: Any) -> None:
        self._stop_pump()
        with self._lock:
            if watch is not self._watch:
                return
            self._refresh_safe(watch, full=True, final=result)
            self._update_stages_safe(watch, prune_wishes=True)
            self.last_result = result
            self._watch = None
            self.stop_button.disabled = True
            self.run_again_button.disabled = False
            if self.note.value == self._stopping_note:
                self.note.value = ""  # it has stopped: the banner says so
            if self._idle is not None:
                self._idle.set()

    # ------------------------------------------------------------------ drawing
    @staticmethod
    def _make_series(label: str, colour: str, scales: tuple) -> _Series:
        x, y, dx, dy = scales
        empty = np.zeros(0, np.float32)
        rss = bq.Lines(
            x=empty, y=empty, scales={"x": x, "y": y}, colors=[colour], labels=[label],
            display_legend=bool(label), stroke_width=1.5,
        )
        fit = bq.Lines(
            x=empty, y=empty, scales={"x": x, "y": y}, colors=[colour], line_style="dashed",
            stroke_width=2.5, labels=[f"{label} fit"],
        )
        dur = bq.Lines(x=empty, y=empty, scales={"x": dx, "y": dy}, colors=[colour], labels=[label])
        return _Series(label, colour, rss, dur, fit)

    def _new_series(self, label: str) -> _Series:
        colour = PALETTE[(self._runs - 1) % len(PALETTE)]
        spare, self._spare = self._spare, None
        if spare is not None:
            # The first run draws into marks that were on the figures from the start: a
            # front end that renders the figure while its marks change can miss the change.
            with spare.rss.hold_sync():
                spare.rss.labels, spare.rss.colors, spare.rss.display_legend = [label], [colour], True
            spare.fit.labels, spare.fit.colors = [f"{label} fit"], [colour]
            spare.duration.labels, spare.duration.colors = [label], [colour]
            spare.label, spare.colour = label, colour
            self.series.append(spare)
            self._ends.colors = [colour]
            return spare
        series = self._make_series(label, colour, (self._x, self._y, self._dx, self._dy))
        self.series.append(series)
        if len(self.series) > MAX_SERIES:
            # Keep the first run (the baseline the others are compared with) and the newest.
            dropped = self.series.pop(1)
            for mark in (dropped.rss, dropped.fit, dropped.duration):
                mark.close()
        self._set_marks()
        self._ends.colors = [colour]
        self._ends.x = self._ends.y = np.zeros(0, np.float32)
        self._warmup.x, self._warmup.y = np.zeros(0, np.float32), np.zeros((2, 0), np.float32)
        return series

    def _set_marks(self) -> None:
        drawn = self.series + ([self._spare] if self._spare is not None else [])
        marks = [self._warmup]
        for s in drawn:
            marks += [s.rss, s.fit]
        self.rss_chart.marks = [*marks, self._ends]
        self.duration_chart.marks = [s.duration for s in drawn]

    def _refresh_safe(self, watch: Any, *, full: bool, final: Any = None) -> None:
        # The runner treats an observer's exception as the step's: a drawing problem must
        # never end the user's run, so it is reported in the note instead.
        try:
            self._refresh(watch, full=full, final=final)
        except Exception as exc:
            self.note.value = _note_html(f"The dashboard could not redraw: {type(exc).__name__}: {exc}")

    def _refresh(self, watch: Any, *, full: bool, final: Any = None) -> None:
        """Push the latest data to the front end (caller holds the lock)."""
        series = self._current
        if series is None or watch.sampler is None:
            return
        now = time.perf_counter()
        t, v = watch.sampler.series()
        x, y = minmax(t, np.asarray(v, dtype=float) / MIB, self.max_points) if t.size else (t, v)
        if not full:
            with series.rss.hold_sync():
                series.rss.x, series.rss.y = _f32(x), _f32(y)
            self._last_rss = now
            return
        verdict = getattr(final, "verdict", None) or watch.verdict
        cols = record_columns(watch)
        idx, end, rss_end, dur = cols["index"], cols["end"], cols["rss"], cols["duration"]
        with ExitStack() as hold:
            for w in (series.rss, series.fit, series.duration, self._ends, self._warmup, self.duration_chart):
                hold.enter_context(w.hold_sync())
            series.rss.x, series.rss.y = _f32(x), _f32(y)
            if idx.size:
                # Iteration ends are markers: a few hundred already read as a band.
                ex, ey = minmax(end, rss_end / MIB, min(self.max_points, MAX_MARKERS))
                self._ends.x, self._ends.y = _f32(ex), _f32(ey)
                dx, dy = minmax(idx, dur * 1000.0, self.max_points)
                series.duration.x, series.duration.y = _f32(dx), _f32(dy)
            fit = getattr(verdict, "fit", None) or []
            ft, fy = fit_in_time(fit, idx, end)
            series.fit.x, series.fit.y = _f32(ft), _f32(fy / MIB)
            warm = int(getattr(verdict, "warmup", 0) or 0)
            w_end = warmup_end_time(verdict, idx, end)
            if w_end is not None:
                self._warmup.x = np.array([0.0, w_end], np.float32)
                self._warmup.y = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
            slope = _slope_text(verdict) if idx.size else ""
            if slope != series.slope:
                series.slope = slope
                series.rss.labels = [f"{series.label}: {slope}" if slope else series.label]
            if idx.size:
                flagged, per_it = _duration_trend(idx, dur, warm)
                if flagged != self.duration_flagged:
                    self.duration_flagged = flagged
                    if flagged:
                        self.duration_chart.add_class("leakwidget-duration-trending")
                    else:
                        self.duration_chart.remove_class("leakwidget-duration-trending")
                title = "Step duration"
                if flagged:
                    title = f"Step duration \u26a0 slowing down: +{per_it * 1000:.3g} ms per iteration"
                self.duration_chart.title = title
                # Colour through a style both ways: bqplot keeps a style that is merely removed.
                colour = KIND_COLOURS["leak"] if flagged else "currentColor"
                if self.duration_chart.title_style.get("fill") != colour:
                    self.duration_chart.title_style = {"fill": colour}
        kind = getattr(verdict, "kind", "inconclusive")
        summary = getattr(verdict, "summary", "") or ""
        if final is None:
            n = int(idx[-1]) + 1 if idx.size else 0
            shown = kind if kind in ("leak", "plateau", "stable") else "running"
            text = f"{series.label}: iteration {n:,}. {summary}".strip()
            self._set_banner(shown, text, projection_text(verdict), running=True)
        else:
            stopped = getattr(final, "stopped", "")
            extra = f" (stopped: {stopped})" if stopped else ""
            err = getattr(final, "error", None)
            if err is not None:
                extra += f" The step raised {type(err).__name__}: {err}"
            # What is growing (Python objects, native memory, or the allocator keeping freed
            # memory) belongs beside the verdict: "leak" + "allocator" reads very differently.
            att = getattr(final, "attribution", None)
            att_text = getattr(att, "summary", "") if getattr(att, "kind", "none") != "none" else ""
            if att_text:
                extra += f" — {att_text}"
            self._set_banner(kind, f"{summary}{extra}", projection_text(verdict), running=False)
        self._last_full = self._last_rss = now

    def _set_banner(self, kind: str, summary: str, projection: str, *, running: bool) -> None:
        # Leak summaries already end with the projection; do not say it twice.
        if "runs out" in summary:
            projection = ""
        value = _banner_html(kind, summary, projection, running)
        if value != self.banner.value:
            self.banner.value = value

    def _update_stages(self, watch: Any, *, prune_wishes: bool = False) -> None:
        stages = [stage_dict(s) for s in list(watch.stages)[:MAX_STAGES]]
        key = tuple((s["id"], s["state"]) for s in stages)
        if key != self._stage_key:
            self._stage_key = key
            self.strip.stages = stages
            if stages and self.strip not in self.children:
                self.children = [*self.children, self.strip]
            toggleable = any(s["toggleable"] for s in stages)
            self.bisect_button.layout.display = None if toggleable else "none"
            self.bisect_button.disabled = not toggleable or self._bisecting
        if prune_wishes and self.strip.states:
            # Wishes the run just fulfilled are forgotten (main thread only: the front end
            # writes `states` on the main thread too).
            self.strip.states = {k: v for k, v in self.strip.states.items() if (k, v) not in key}

    # ------------------------------------------------------------------ the live thread
    def _start_pump(self, watch: Any) -> None:
        stop = threading.Event()
        self._pump_stop = stop
        self._update_stages_safe(watch)

        def pump() -> None:
            # on_iteration is not called during a long step; keep the RSS line (and the strip,
            # which fills during setup) moving anyway. Sends go through ipykernel's IOPub thread.
            while not stop.wait(self.refresh_interval):
                with self._lock:
                    if stop.is_set() or watch is not self._watch:
                        return
                    if time.perf_counter() - self._last_rss >= self.refresh_interval:
                        self._refresh_safe(watch, full=False)
                    self._update_stages_safe(watch)

        self._pump = threading.Thread(target=pump, name="leakwidget-dashboard", daemon=True)
        self._pump.start()

    def _stop_pump(self) -> None:
        if self._pump_stop is not None:
            self._pump_stop.set()
        pump, self._pump = self._pump, None
        if pump is not None and pump is not threading.current_thread():
            pump.join(timeout=2)

    def _update_stages_safe(self, watch: Any, *, prune_wishes: bool = False) -> None:
        try:
            self._update_stages(watch, prune_wishes=prune_wishes)
        except Exception as exc:  # a stage that cannot be described must not stop the watch
            self.note.value = _note_html(f"Cannot draw the pipeline: {exc!r}")

    # ------------------------------------------------------------------ controls
    def _on_stop_click(self, _button: Any = None) -> None:
        watch = self._watch
        if watch is None:
            self.note.value = _note_html("Nothing is running.")
            return
        watch.request_stop("stopped")
        if self._bisecting:
            self._halt = True  # no further configuration starts (see _on_bisect_configuration)
        self.note.value = self._stopping_note = _note_html("Stopping at the end of the current iteration\u2026")

    def _on_states_change(self, change: dict) -> None:
        if not change["new"]:
            return
        what = ", ".join(f"{k} {v}" for k, v in sorted(change["new"].items()))
        when = "after this run" if self._watch is not None else "now"
        self.note.value = _note_html(f"Next configuration: {what}. Click Run again to run it ({when}).")

    def next_spec(self) -> Any:
        """The WatchSpec of the last run with the strip's on/serial/off wishes applied."""
        if self._spec is None:
            raise RuntimeError("no watch has run in this dashboard yet")
        spec = self._spec
        states = self.strip.effective_states()
        ids_and_kinds = set(states) | {s["kind"] for s in self.strip.stages}
        off = [e for e in spec.off if e not in ids_and_kinds]
        serial = [e for e in spec.serial if e not in ids_and_kinds]
        off += [sid for sid, st in states.items() if st == "off"]
        serial += [sid for sid, st in states.items() if st == "serial"]
        label = f"run {self._runs + 1}: " + (", ".join([f"{s} off" for s in off] + [f"{s} serial" for s in serial]) or "as written")
        return dataclasses.replace(spec, off=tuple(off), serial=tuple(serial), label=label)

    def _on_run_again_click(self, _button: Any = None) -> None:
        try:
            spec = self.next_spec()
        except RuntimeError as exc:
            self.note.value = _note_html(str(exc))
            return
        self.schedule(self._run_spec(spec), "Run again")

    def _on_bisect_click(self, _button: Any = None) -> None:
        try:
            from .bisect import bisect_async
        except ImportError:
            self.note.value = _note_html("Bisect is not available in this version of leakwidget.")
            return
        if self._spec is None:
            self.note.value = _note_html("Run a watch first.")
            return
        self.schedule(self._run_bisect(bisect_async, self.next_spec()), "Bisect")

    def schedule(self, coro: Any, what: str) -> asyncio.Task | None:
        """Run ``coro`` as a task on the kernel's event loop, once the current run has ended.

        A running watch (the cell's, or one started here) is asked to stop first; a running
        bisection ends after its current configuration. Returns the task, or None (with a note
        saying why) when there is no event loop to run it on.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            self.note.value = _note_html(f"{what} needs a running event loop (a Jupyter kernel).")
            return None
        previous = self._task if self._task is not None and not self._task.done() else None
        if self._watch is not None:
            if self._bisecting:
                self._halt = True
            self._watch.request_stop("stopped")
        idle = asyncio.Event()
        if self._watch is None:
            idle.set()
        self._idle = idle
        self._task = loop.create_task(self._after_current(coro, what, previous, idle))
        return self._task

    async def _after_current(self, coro: Any, what: str, previous: Any, idle: asyncio.Event) -> None:
        # Clicks reach us while the current watch is between iterations; let it finish first.
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await idle.wait()
        token = live.ASYNC_DELIVERY.set(True)
        try:
            await coro
        except Exception as exc:  # a task's exception would otherwise vanish silently
            self.note.value = _note_html(f"{what} failed: {type(exc).__name__}: {exc}")
        finally:
            live.ASYNC_DELIVERY.reset(token)

    async def _run_spec(self, spec: Any) -> Any:
        from .runner import Watch

        result = await Watch(spec, [self]).run_async()
        self.strip.culprits = []
        return result

    async def _run_bisect(self, bisect_async: Any, spec: Any) -> Any:
        params = inspect.signature(bisect_async).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs: dict[str, Any] = {"observers": [self]}
        if "on_configuration" in params:
            kwargs["on_configuration"] = self._on_bisect_configuration
        # The search runs each configuration under its own budget; pass on the spec's guards.
        wanted = {"setup": spec.setup, "iterations": spec.iterations, "max_rss": spec.max_rss,
                  "seconds_per_config": spec.seconds}
        for name, value in wanted.items():
            if name in params and value is not None:
                kwargs[name] = value
        if spec.warmup is not None and ("warmup" in params or takes_any):
            kwargs["warmup"] = spec.warmup
        self._bisecting = True
        self._halt = False
        self.strip.disabled = True
        self.bisect_button.disabled = True
        try:
            result = await bisect_async(spec.step, **kwargs)
        except _BisectStopped:
            self.note.value = _note_html("Bisect stopped before it finished.")
            return None
        finally:
            self._bisecting = False
            self._halt = False
            self.strip.disabled = False
            self.bisect_button.disabled = False
        self.show_bisect(result)
        return result

    def show_bisect(self, result: Any) -> None:
        """Colour the culprits of a bisection in the strip and put its summary in the note.

        Called after the Bisect button's search; call it too after ``%%leakwatch --bisect``
        ran with this dashboard as an observer.
        """
        culprits = [str(getattr(c, "id", c)) for c in (getattr(result, "culprits", None) or [])]
        self.strip.culprits = culprits
        summary = getattr(result, "summary", "") or (
            f"Bisect blames: {', '.join(culprits)}." if culprits else "Bisect found no single culprit."
        )
        self.note.value = _note_html(str(summary))
        self.last_bisect = result

    def _on_bisect_configuration(self, config: Any = None, *_: Any) -> None:
        # Each configuration's watch has this dashboard as an observer, so it gets its own
        # series; here the note follows the search, and Stop ends the whole search.
        if self._halt:
            raise _BisectStopped()
        label = getattr(config, "label", None) or "next configuration"
        self.note.value = _note_html(f"Bisecting: running {label}\u2026")


class _BisectStopped(Exception):
    """Raised from on_configuration to end a bisection the user stopped."""


def _banner_html(kind: str, summary: str, projection: str, running: bool) -> str:
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])
    # Verdict summaries start with their kind ("Leak: ..."); only other texts get a heading.
    word = kind.capitalize()
    heading = "" if summary.startswith(word) else f"<b>{html.escape(word)}</b> "
    proj = (
        f' <span class="leakwidget-projection" style="font-weight:bold">{html.escape(projection)}</span>'
        if projection
        else ""
    )
    return (
        f'<div class="leakwidget-verdict" data-kind="{html.escape(kind)}" '
        f'data-running="{str(running).lower()}" style="background:{colour};color:white;'
        f'padding:6px 10px;border-radius:4px;font-size:13px;line-height:1.4">'
        f"{heading}"
        f'<span class="leakwidget-summary">{html.escape(summary)}</span>{proj}</div>'
    )


def _note_html(text: str) -> str:
    return f'<div style="color:#555;font-size:12px">{html.escape(text)}</div>' if text else ""
