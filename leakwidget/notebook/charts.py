"""The dashboard's two bqplot charts: RSS against time, and step duration against iteration.

Pure drawing: a :class:`Charts` receives arrays and a verdict and puts them on the marks. Each
run (Run again, a bisection's configuration) is its own :class:`RunSeries`, overlaid in its own
colour; at most ``max_points`` points per series ever reach the front end (min/max
decimation), and every redraw is one message per mark (``hold_sync``).
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack

import bqplot as bq
import ipywidgets as widgets
import numpy as np

from ..engine.units import format_bytes
from ..engine.verdict import Verdict, theil_sen
from ..report.decimate import minmax
from ..report.svg import KIND_COLOURS, MIB, PALETTE, fit_in_time, warmup_end_time

MAX_SERIES = 10  # configurations overlaid at once; the oldest (after the first) make room
MAX_MARKERS = 500  # iteration-end dots drawn at most


@dataclasses.dataclass
class RunSeries:
    """One run drawn on the charts."""

    label: str
    colour: str
    rss: bq.Lines
    duration: bq.Lines
    fit: bq.Lines
    slope: str = ""


def _f32(a: np.ndarray) -> np.ndarray:
    # float32 halves the bytes on the wire; MiB and seconds need nowhere near float64 precision.
    return np.ascontiguousarray(a, dtype=np.float32)


def _empty() -> np.ndarray:
    return np.zeros(0, np.float32)


def duration_trend(index: np.ndarray, duration: np.ndarray, warmup: int) -> tuple[bool, float]:
    """(slowing down?, slope in seconds per iteration) of the step duration after warm-up.

    The verdict's Theil–Sen estimator on at most 100 bucket medians, held to the verdict's
    standard for a leak: significant at 99.9%, growing in both halves of the run (a one-off
    jump — another process starting on the machine — is not a trend), and adding at least half
    the median duration over the run.
    """
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


class Charts:
    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        # RSS against time: one line (+ dashed fit) per run, dots at iteration ends of the
        # current run, warm-up shaded on a fixed 0..1 scale so it spans the plot height.
        self._x, self._y = bq.LinearScale(), bq.LinearScale()
        self._unit = bq.LinearScale(min=0.0, max=1.0)
        self.warmup = bq.Lines(
            x=_empty(), y=np.zeros((2, 0), np.float32),
            scales={"x": self._x, "y": self._unit}, fill="between", colors=["#9e9e9e"],
            fill_colors=["#9e9e9e"], fill_opacities=[0.18], opacities=[0.0, 0.0], labels=["warm-up"],
        )
        self.ends = bq.Scatter(
            x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y},
            default_size=10, colors=[PALETTE[0]], stroke="white", labels=["iteration ends"],
        )
        self.rss_chart = bq.Figure(
            marks=[self.warmup, self.ends],
            axes=[
                bq.Axis(scale=self._x, label="time (s)", grid_lines="none"),
                # d3's default ticks are round numbers; a fixed count or format is not.
                bq.Axis(scale=self._y, label="RSS (MiB)", side="left", label_offset="45px"),
            ],
            title="RSS", legend_location="top-left", animation_duration=0,
            fig_margin={"top": 40, "bottom": 40, "left": 60, "right": 20},
            layout=widgets.Layout(width="100%", height="330px"), _dom_classes=["leakwidget-rss-chart"],
        )
        self._dx, self._dy = bq.LinearScale(), bq.LinearScale(min=0.0)
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
        self.series: list[RunSeries] = []
        self.duration_flagged = False
        # The first run draws into marks that were on the figures from the start: a front end
        # that renders the figure while its marks change can miss the change.
        self._spare: RunSeries | None = self._make_series("", PALETTE[0])
        self._set_marks()

    def _make_series(self, label: str, colour: str) -> RunSeries:
        rss = bq.Lines(
            x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y}, colors=[colour],
            labels=[label], display_legend=bool(label), stroke_width=1.5,
        )
        fit = bq.Lines(
            x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y}, colors=[colour],
            line_style="dashed", stroke_width=2.5, labels=[f"{label} fit"],
        )
        dur = bq.Lines(x=_empty(), y=_empty(), scales={"x": self._dx, "y": self._dy},
                       colors=[colour], labels=[label])
        return RunSeries(label, colour, rss, dur, fit)

    def new_series(self, label: str) -> RunSeries:
        colour = PALETTE[len(self.series) % len(PALETTE)]
        self.ends.colors = [colour]
        spare, self._spare = self._spare, None
        if spare is not None:
            with spare.rss.hold_sync():
                spare.rss.labels, spare.rss.colors, spare.rss.display_legend = [label], [colour], True
            spare.fit.labels, spare.fit.colors = [f"{label} fit"], [colour]
            spare.duration.labels, spare.duration.colors = [label], [colour]
            spare.label, spare.colour = label, colour
            self.series.append(spare)
            return spare
        series = self._make_series(label, colour)
        self.series.append(series)
        if len(self.series) > MAX_SERIES:
            # Keep the first run (the baseline the others are compared with) and the newest.
            dropped = self.series.pop(1)
            for mark in (dropped.rss, dropped.fit, dropped.duration):
                mark.close()
        self._set_marks()
        self.ends.x = self.ends.y = _empty()
        self.warmup.x, self.warmup.y = _empty(), np.zeros((2, 0), np.float32)
        return series

    def _set_marks(self) -> None:
        drawn = self.series + ([self._spare] if self._spare is not None else [])
        marks = [self.warmup]
        for s in drawn:
            marks += [s.rss, s.fit]
        self.rss_chart.marks = [*marks, self.ends]
        self.duration_chart.marks = [s.duration for s in drawn]

    def draw_rss(self, series: RunSeries, t: np.ndarray, rss: np.ndarray) -> None:
        """The RSS line alone (while a long step runs)."""
        x, y = minmax(t, rss / MIB, self.max_points) if t.size else (t, rss)
        with series.rss.hold_sync():
            series.rss.x, series.rss.y = _f32(x), _f32(y)

    def draw_run(self, series: RunSeries, t: np.ndarray, rss: np.ndarray,
                 cols: dict[str, np.ndarray], verdict: Verdict) -> None:
        """Everything of the current run: RSS, iteration ends, durations, fit, warm-up, slope."""
        idx, end, rss_end, dur = cols["index"], cols["end"], cols["rss"], cols["duration"]
        with ExitStack() as hold:
            for w in (series.rss, series.fit, series.duration, self.ends, self.warmup, self.duration_chart):
                hold.enter_context(w.hold_sync())
            self.draw_rss(series, t, rss)
            if idx.size:
                # Iteration ends are markers: a few hundred already read as a band.
                ex, ey = minmax(end, rss_end / MIB, min(self.max_points, MAX_MARKERS))
                self.ends.x, self.ends.y = _f32(ex), _f32(ey)
                dx, dy = minmax(idx, dur * 1000.0, self.max_points)
                series.duration.x, series.duration.y = _f32(dx), _f32(dy)
            ft, fy = fit_in_time(verdict.fit, idx, end)
            series.fit.x, series.fit.y = _f32(ft), _f32(fy / MIB)
            w_end = warmup_end_time(verdict, idx, end)
            if w_end is not None:
                self.warmup.x = np.array([0.0, w_end], np.float32)
                self.warmup.y = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
            slope = f"{format_bytes(verdict.slope, signed=True)}/it" if idx.size and verdict.iterations else ""
            if slope != series.slope:
                series.slope = slope
                series.rss.labels = [f"{series.label}: {slope}" if slope else series.label]
            if idx.size:
                self._flag_duration(*duration_trend(idx, dur, verdict.warmup))

    def _flag_duration(self, flagged: bool, per_iteration: float) -> None:
        if flagged != self.duration_flagged:
            self.duration_flagged = flagged
            if flagged:
                self.duration_chart.add_class("leakwidget-duration-trending")
            else:
                self.duration_chart.remove_class("leakwidget-duration-trending")
        title = "Step duration"
        if flagged:
            title = f"Step duration \u26a0 slowing down: +{per_iteration * 1000:.3g} ms per iteration"
        self.duration_chart.title = title
        # Colour through a style both ways: bqplot keeps a style that is merely removed.
        colour = KIND_COLOURS["leak"] if flagged else "currentColor"
        if self.duration_chart.title_style.get("fill") != colour:
            self.duration_chart.title_style = {"fill": colour}
