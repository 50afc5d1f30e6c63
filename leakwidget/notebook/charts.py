"""The dashboard's charts: memory and step duration against time, and their legend.

Pure drawing: :class:`Charts` receives a run's data (:class:`RunData`, bounded buckets the
dashboard fills from the stream) and a verdict and puts them on bqplot marks. Every run (Run
again, each configuration of a bisection) is its own :class:`RunSeries`, overlaid in its own
colour as RSS *change since its own start*, so slopes compare whatever each run started from.

What the picture promises, and how:

- Red means a leak: runs are drawn in colours that are neither red nor orange; each run's
  dashed trend line takes its verdict's colour (red: leak, orange: plateau, green: stable).
- The trend sits on the data: :func:`leakwidget.report.trend.trend_line` draws the verdict's
  fit from the onset to the last iteration, at the data's level, in time.
- Nothing covers the data: the legend is a widget under the plot (:class:`ChartLegend`), which
  also reports the charts' width in pixels; tick values are chosen for that width, so labels
  never run together, and iterations are whole numbers.
- The y-range is this run's own: the setup phase (memory an earlier cell freed, a buffer being
  built) is shaded and labelled but does not set the scale; a flat run is drawn flat (the
  scale spans at least 1 MiB). Every run keeps its setup's shade (each configuration of a
  bisection has its own setup); the warm-up is shaded for the current run.
- The step duration shares the memory chart's time axis, so both charts span the same
  seconds and a moment lines up on both: configurations that run at very different speeds
  (one of 70,000 fast iterations beside leaking ones of 5,000) overlay in the time they ran.
- Bounded: each series sends at most twice as many points as there are buckets (at most
  ``max_points``), every redraw is one message per mark (``hold_sync``), and a redraw allocates
  only arrays of that size, whatever the run's length.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from contextlib import ExitStack

import anywidget
import bqplot as bq
import ipywidgets as widgets
import numpy as np
import traitlets

from ..engine.units import format_bytes
from ..engine.verdict import Verdict, theil_sen
from ..report.colours import KIND_COLOURS, MIB, PALETTE, PHASES
from ..report.decimate import Buckets
from ..report.trend import trend_line
from .strip import js_module
from .worker_lines import WorkerLines

REHEARSED_REDRAWS = 3  # before the baseline; the kernel sends them while the next are made
MAX_SERIES = 10  # runs overlaid at once; the oldest (after the first) make room
RSS_HEIGHT, DURATION_HEIGHT = 300, 150  # px
RSS_MARGIN = {"top": 16, "bottom": 42, "left": 66, "right": 20}
DURATION_MARGIN = {"top": 30, "bottom": 42, "left": 66, "right": 20}
DEFAULT_WIDTH = 900  # px, until the front end has reported the charts' width
MIN_SPAN_MIB = 1.0  # the RSS scale spans at least this: noise must not look like growth
MARKER_GAP = 8  # px between iteration-end dots at least; denser runs get none
# Tick labels at 11 px: width per character, height; the room kept between two labels.
CHAR_PX, LABEL_HEIGHT = 7.0, 12.0
GAP_ACROSS, GAP_UPRIGHT = 36.0, 16.0


def _f32(a: np.ndarray) -> np.ndarray:
    # float32 halves the bytes on the wire; MiB and seconds need nowhere near float64 precision.
    return np.ascontiguousarray(a, dtype=np.float32)


def _empty() -> np.ndarray:
    return np.zeros(0, np.float32)


def nice_ticks(lo: float, hi: float, pixels: float, label_px: Callable[[str], float], *,
               gap: float = GAP_ACROSS, integer: bool = False) -> tuple[np.ndarray, str]:
    """(tick values, d3 format) for an axis of ``pixels`` from ``lo`` to ``hi``: the densest
    1-2-5 step whose labels keep ``gap`` pixels apart (``label_px``: a label's extent along the
    axis). ``integer``: no fractional ticks (iterations)."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0 and pixels > 0):
        return np.zeros(0), ",.0f"
    step = 10.0 ** math.floor(math.log10(span / 1000.0))
    for _ in range(40):
        for m in (1.0, 2.0, 5.0):
            s = m * step
            if integer and s < 1:
                continue
            room = s / span * pixels
            if room < gap + CHAR_PX:
                continue  # too dense for any label: no need to build the ticks
            decimals = max(0, -math.floor(math.log10(s) + 1e-9))
            fmt = f",.{decimals}f"
            first = math.ceil(lo / s - 1e-9)
            ticks = (first + np.arange(int(math.floor(hi / s + 1e-9)) - first + 1)) * s
            widest = max((label_px(format(v, fmt)) for v in ticks), default=0.0)
            if room >= widest + gap:
                return ticks, fmt
        step *= 10
    return np.array([lo, hi]), ",.0f"


def _across(text: str) -> float:
    return CHAR_PX * len(text)


def _upright(_text: str) -> float:
    return LABEL_HEIGHT


def duration_trend(index: np.ndarray, duration: np.ndarray, warmup: int) -> tuple[bool, float]:
    """(slowing down?, slope in seconds per iteration) of the step duration after warm-up.

    The verdict's Theil–Sen estimator on at most 100 bucket medians, held to the verdict's
    standard for a leak: significant at 99.9%, growing in both halves of the run (a one-off
    jump — another process starting on the machine — is not a trend), and adding at least half
    the median duration over the run.
    """
    # A slice of the ascending index, not a mask: see trend_line on numpy's small buffers.
    a = int(np.searchsorted(index, index[0] + warmup, side="left")) if index.size else 0
    x, y = index[a:].astype(float), duration[a:].astype(float)
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


class ChartLegend(anywidget.AnyWidget):
    """The RSS chart's legend, under the plot; its front end reports the charts' width."""

    _esm = js_module("legend.js")
    entries = traitlets.List(traitlets.Dict()).tag(sync=True)
    phases = traitlets.List(traitlets.Dict()).tag(sync=True)
    workers = traitlets.List(traitlets.Dict()).tag(sync=True)  # each child's line: label, colour, copying
    workers_note = traitlets.Unicode("").tag(sync=True)  # how many children's lines are not drawn
    width = traitlets.Int(0).tag(sync=True)

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("_dom_classes", ["leakwidget-legend"])
        super().__init__(**kwargs)


class RunData:
    """One run as the charts need it, in buckets allocated once and reused for every run.

    ``samples``: (time, RSS) from the sampler; ``iterations``: (index, duration) with the end
    time and RSS of each iteration as means. ``start`` is when iteration 0 began (the end of
    the setup), ``baseline`` the RSS then: the chart shows the change from it.
    """

    def __init__(self, buckets: int) -> None:
        self.samples = Buckets(buckets)
        self.iterations = Buckets(buckets, extras=2)
        self.durations = Buckets(buckets)  # (end time, duration): drawn on the time axis
        self.clear()

    def clear(self) -> None:
        self.samples.clear()
        self.iterations.clear()
        self.durations.clear()
        self.start: float | None = None
        self.baseline: float | None = None
        self.first_rss: float | None = None
        self.last_index = -1.0
        self.last_end = 0.0

    def add_sample(self, t: float, rss: float) -> None:
        if self.first_rss is None:
            self.first_rss = rss
        if self.baseline is None and self.start is not None and t >= self.start:
            self.baseline = rss  # the first sample of iteration 0: after the setup's clean-up
        self.samples.append(t, rss)

    def add_iteration(self, index: int, start: float, end: float, rss: float, duration: float) -> None:
        if self.start is None:
            self.start = start
            # The samples of iteration 0 may have come before its record did.
            self.baseline = self.samples.first_at(start)
        self.iterations.append(float(index), duration, end, float(rss))
        self.durations.append(end, duration)
        self.last_index, self.last_end = float(index), end

    def base(self) -> float:
        """The RSS the chart counts from (before iteration 0 has a sample: the run's first)."""
        if self.baseline is not None:
            return self.baseline
        return self.first_rss if self.first_rss is not None else 0.0


def made_up(buckets: int, *, spread: bool = False) -> RunData:
    """A made-up run whose ``buckets`` buckets are all full (every one but the open one holding
    two points: the largest envelope a redraw sends). ``spread``: points apart in time and
    memory; else all at the start, at the baseline (drawn, nothing shows)."""
    data = RunData(buckets)
    step = 0.01 if spread else 0.0
    for i in range(2 * buckets - 1):
        data.add_sample(i * step, 1.0e8 + i * spread)
        data.add_iteration(i, i * step, i * step + step, 1.0e8 + i * spread, 0.01)
    return data


@dataclasses.dataclass
class RunSeries:
    """One run drawn on the charts, and what the shared axes need of it."""

    label: str
    colour: str
    rss: bq.Lines
    trend: bq.Lines
    duration: bq.Lines
    setup: bq.Lines  # the shade of this run's setup, kept when later runs are drawn
    slope: str = ""
    kind: str = "running"
    t_max: float = 0.0
    y_range: tuple[float, float] | None = None  # MiB after the setup, trend included
    ms_max: float = 0.0

    @property
    def marks(self) -> tuple[bq.Lines, ...]:
        return self.rss, self.trend, self.duration, self.setup


class Charts:
    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self.legend = ChartLegend()
        self.legend.observe(lambda _c: self._draw_axes(), names="width")
        self._x, self._y, self._unit = bq.LinearScale(min=0.0, max=1.0), bq.LinearScale(), \
            bq.LinearScale(min=0.0, max=1.0)
        self.warmup_band = self._band(PHASES["warm-up"])
        self.band_labels = bq.Label(x=_empty(), y=_empty(), text=[], scales={"x": self._x, "y": self._unit},
                                    colors=["#455a64"], default_size=11, align="middle", y_offset=14,
                                    font_weight="normal")
        self.ends = bq.Scatter(x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y},
                               default_size=14, colors=[PALETTE[0]], stroke=None)
        self._x_axis = bq.Axis(scale=self._x, label="time since the run started (s)", grid_lines="none",
                               label_offset="34px",
                               tick_format=",.0f", tick_values=np.array([0.0]))
        self._y_axis = bq.Axis(scale=self._y, label="RSS change (MiB)", side="left", label_offset="48px",
                               grid_color="#eeeeee", tick_format=",.1f", tick_values=np.array([0.0]))
        self.rss_chart = bq.Figure(
            marks=[], axes=[self._x_axis, self._y_axis], animation_duration=0, padding_y=0.0,
            fig_margin=RSS_MARGIN, display_toolbar=False, legend_location="top-left",
            layout=widgets.Layout(width="auto", height=f"{RSS_HEIGHT}px"), _dom_classes=["leakwidget-rss-chart"],
        )
        self._dy = bq.LinearScale(min=0.0, max=1.0)
        self._dx_axis = bq.Axis(scale=self._x, label="time since the run started (s)", grid_lines="none",
                                tick_format=",.0f", label_offset="34px", tick_values=np.array([0.0]))
        self._dy_axis = bq.Axis(scale=self._dy, label="step (ms)", side="left", label_offset="48px",
                                grid_color="#eeeeee", tick_format=",.0f", tick_values=np.array([0.0]))
        self.duration_chart = bq.Figure(
            marks=[], axes=[self._dx_axis, self._dy_axis], title="Step duration", animation_duration=0,
            padding_y=0.0, fig_margin=DURATION_MARGIN, display_toolbar=False,
            title_style={"font-size": "13px"},
            layout=widgets.Layout(width="auto", height=f"{DURATION_HEIGHT}px"),
            _dom_classes=["leakwidget-duration-chart"],
        )
        self.series: list[RunSeries] = []
        self.workers = WorkerLines(self._x, self._y)  # the current run's children, when it has some
        self.duration_flagged = False
        # The first run draws into marks that were on the figures from the start: a front end
        # that renders the figure while its marks change can miss the change.
        self._spare: RunSeries | None = self._make_series("", PALETTE[0])
        self._set_marks()
        self._draw_axes()

    # ------------------------------------------------------------------ marks
    def _band(self, colour: str, opacity: float = 0.25) -> bq.Lines:
        return bq.Lines(x=_empty(), y=np.zeros((2, 0), np.float32), scales={"x": self._x, "y": self._unit},
                        fill="between", colors=[colour], fill_colors=[colour], fill_opacities=[opacity],
                        opacities=[0.0, 0.0])

    def _make_series(self, label: str, colour: str) -> RunSeries:
        rss = bq.Lines(x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y}, colors=[colour],
                       labels=[label], stroke_width=2)
        trend = bq.Lines(x=_empty(), y=_empty(), scales={"x": self._x, "y": self._y},
                         colors=[KIND_COLOURS["running"]], line_style="dashed", stroke_width=2)
        dur = bq.Lines(x=_empty(), y=_empty(), scales={"x": self._x, "y": self._dy}, colors=[colour],
                       labels=[label], stroke_width=1.5)
        # Lighter than the current run's phases: the setups of several runs overlap from 0 s.
        return RunSeries(label, colour, rss, trend, dur, self._band(PHASES["setup"], 0.18))

    def new_series(self, label: str) -> RunSeries:
        colour = PALETTE[len(self.series) % len(PALETTE)]
        self.ends.colors = [colour]
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.rss.labels = spare.duration.labels = [label]
            spare.rss.colors = spare.duration.colors = [colour]
            spare.label, spare.colour = label, colour
            self.series.append(spare)
            self._draw_legend()
            return spare
        series = self._make_series(label, colour)
        self.series.append(series)
        if len(self.series) > MAX_SERIES:
            # Keep the first run (the baseline the others are compared with) and the newest.
            for mark in self.series.pop(1).marks:
                mark.close()
        self._set_marks()
        self.ends.x = self.ends.y = _empty()
        self.warmup_band.x, self.warmup_band.y = _empty(), np.zeros((2, 0), np.float32)
        self._draw_legend()
        return series

    def _set_marks(self) -> None:
        drawn = self.series + ([self._spare] if self._spare is not None else [])
        marks: list[bq.Mark] = [*(s.setup for s in drawn), self.warmup_band, self.band_labels, self.workers.mark]
        marks += [s.rss for s in drawn] + [s.trend for s in drawn]
        self.rss_chart.marks = [*marks, self.ends]
        self.duration_chart.marks = [s.duration for s in drawn]

    # ------------------------------------------------------------------ geometry
    @property
    def width(self) -> int:
        """The charts' width in pixels, as the front end reported it."""
        return self.legend.width or DEFAULT_WIDTH

    def plot_width(self) -> float:
        return max(100.0, self.width - RSS_MARGIN["left"] - RSS_MARGIN["right"])

    # ------------------------------------------------------------------ drawing
    def rehearse(self) -> None:
        """Compute a redraw of a small made-up run without drawing it: the first computation
        imports what numpy loads lazily (numpy.ma, for np.median: ~5 MiB) and sizes the
        allocator's bins, and that must happen before a run, not inside the first one measured."""
        data = made_up(8, spread=True)
        verdict = Verdict("leak", slope=1.0, onset=4, iterations=15, fit=[(4.0, 1.0e8 + 4), (14.0, 1.0e8 + 14)])
        idx, dur, end, rss, _n = data.iterations.means()
        data.samples.envelope()
        data.durations.envelope()
        trend_line(verdict, idx, rss, end, last=(data.last_index, data.last_end))
        duration_trend(idx, dur, 0)
        nice_ticks(0.0, 1.0, self.plot_width(), _across)

    def draw_rss(self, series: RunSeries, data: RunData, *, final: bool = False) -> None:
        """The RSS line alone (while a long step runs). ``final``: the run has ended, and the
        samples after its last iteration (the watch's own final verdict and clean-up) go."""
        t, v = data.samples.envelope()
        if final and data.last_index >= 0:
            keep = t <= data.last_end + 0.01
            t, v = t[keep], v[keep]
        base = data.base()
        with series.rss.hold_sync():
            series.rss.x, series.rss.y = _f32(t), _f32((v - base) / MIB)
        # The axis reaches the last iteration's end too (its trend and step time end there).
        series.t_max = max(float(t[-1]) if t.size else 0.0, data.last_end if data.last_index >= 0 else 0.0)
        rng = data.samples.y_range(data.start if data.start is not None else -np.inf)
        if rng is not None:
            series.y_range = ((rng[0] - base) / MIB, (rng[1] - base) / MIB)
        if self.workers.children:
            self.workers.draw(data.start)
            series.t_max = max(series.t_max, self.workers.t_max)
            self._draw_legend()
        self._draw_axes()

    def draw_run(self, series: RunSeries, data: RunData, verdict: Verdict, kind: str, *,
                 final: bool = False) -> None:
        """Everything of the current run: RSS, trend, iteration ends, durations, phases, legend.

        ``kind`` is what the banner shows (a verdict kind, "retention" or "running")."""
        marks = (*series.marks, self.ends, self.band_labels, self.warmup_band, self.duration_chart)
        with ExitStack() as hold:
            for w in marks:
                hold.enter_context(w.hold_sync())
            self.draw_rss(series, data, final=final)
            idx, dur, end, rss, _n = data.iterations.means()
            base = data.base()
            tt, ty = trend_line(verdict, idx, rss, end, last=(data.last_index, data.last_end))
            series.trend.x, series.trend.y = _f32(tt), _f32((ty - base) / MIB)
            series.trend.colors = [KIND_COLOURS.get(kind, KIND_COLOURS["running"])]
            if ty.size and series.y_range is not None:
                lo, hi = float(ty.min() - base) / MIB, float(ty.max() - base) / MIB
                series.y_range = (min(series.y_range[0], lo), max(series.y_range[1], hi))
            self._draw_durations(series, data, verdict, idx, end)
            self._draw_ends(data, idx, end, rss, base)
            self._draw_phases(series, data, verdict, idx, end)
            series.kind = kind
            # A slope in the legend only once it means something: a verdict, or the run's end.
            decided = verdict.iterations and (final or kind in ("leak", "retention", "plateau", "stable"))
            series.slope = f"{format_bytes(verdict.slope, signed=True)}/it" if decided else ""
            self._draw_axes()
            self._draw_legend()

    def _draw_durations(self, series: RunSeries, data: RunData, verdict: Verdict, idx: np.ndarray,
                        end: np.ndarray) -> None:
        x, y = data.durations.envelope()  # (end time, duration): the memory chart's time axis
        series.duration.x, series.duration.y = _f32(x), _f32(y * 1000.0)
        # A slow first iteration must not squash the rest (x ascends: a slice, not a mask).
        warm = float(np.interp(verdict.warmup - 1, idx, end)) if verdict.warmup > 0 and idx.size else -np.inf
        after = int(np.searchsorted(x, warm, side="right"))
        ms = y[after:] if after < x.size else y
        series.ms_max = float(ms.max()) * 1000.0 if ms.size else 0.0
        _idx, dur, *_ = data.iterations.means()
        if idx.size:
            self._flag_duration(*duration_trend(idx, dur, verdict.warmup))

    def _draw_ends(self, data: RunData, idx: np.ndarray, end: np.ndarray, rss: np.ndarray, base: float) -> None:
        # Iteration ends are dots only while they stand apart; a denser run is a line.
        t_max = max((s.t_max for s in self.series), default=0.0)
        sparse = data.iterations.width == 1 and idx.size >= 2 and t_max > 0 and \
            float(np.min(np.diff(end))) / t_max * self.plot_width() >= MARKER_GAP
        if sparse or idx.size == 1:
            self.ends.x, self.ends.y = _f32(end), _f32((rss - base) / MIB)
        elif self.ends.x.size:
            self.ends.x = self.ends.y = _empty()

    def _draw_phases(self, series: RunSeries, data: RunData, verdict: Verdict, idx: np.ndarray,
                     end: np.ndarray) -> None:
        """The run's setup and warm-up shaded, each labelled where its band is wide enough."""
        spans = {}
        if data.start is not None and data.start > 0:
            spans["setup"] = (0.0, data.start)
        if verdict.warmup > 0 and idx.size and data.start is not None:
            spans["warm-up"] = (data.start, float(np.interp(verdict.warmup - 1, idx, end)))
        t_max = max(max((s.t_max for s in self.series), default=0.0), 1e-3)
        xs, texts = [], []
        for name, band in (("setup", series.setup), ("warm-up", self.warmup_band)):
            a, b = spans.get(name, (0.0, 0.0))
            if b <= a:
                band.x, band.y = _empty(), np.zeros((2, 0), np.float32)
                continue
            band.x = np.array([a, b], np.float32)
            band.y = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
            if (b - a) / t_max * self.plot_width() >= _across(name) + 6:
                xs.append((a + b) / 2)
                texts.append(name)
        if texts != list(self.band_labels.text):
            self.band_labels.x, self.band_labels.y = np.array(xs, np.float32), np.ones(len(xs), np.float32)
            self.band_labels.text = texts

    def _draw_axes(self) -> None:
        """Scales from the drawn data of every run; tick values chosen for the pixels there are."""
        t_max, lo, hi, ms = _extents(self.series, self.workers.y_range)
        # With children, the run's line is the tree's total and the others their private memory.
        label = "memory change (MiB)" if self.workers.entries else "RSS change (MiB)"
        if self._y_axis.label != label:
            self._y_axis.label = label
        scales = ((self._x, 0.0, t_max), (self._y, lo, hi), (self._dy, 0.0, ms))
        for scale, a, b in scales:
            if (scale.min, scale.max) != (a, b):
                with scale.hold_sync():
                    scale.min, scale.max = float(a), float(b)
        plot_w = self.plot_width()
        rss_h = RSS_HEIGHT - RSS_MARGIN["top"] - RSS_MARGIN["bottom"]
        dur_h = DURATION_HEIGHT - DURATION_MARGIN["top"] - DURATION_MARGIN["bottom"]
        time_ticks = nice_ticks(0.0, t_max, plot_w, _across)
        _set_ticks(self._x_axis, *time_ticks)
        _set_ticks(self._y_axis, *nice_ticks(lo, hi, rss_h, _upright, gap=GAP_UPRIGHT))
        _set_ticks(self._dx_axis, *time_ticks)
        _set_ticks(self._dy_axis, *nice_ticks(0.0, ms, dur_h, _upright, gap=GAP_UPRIGHT))

    def _draw_legend(self) -> None:
        current = self.series[-1] if self.series else None
        entries = [{"label": s.label, "colour": s.colour, "kind": s.kind, "slope": s.slope,
                    "current": s is current and len(self.series) > 1} for s in self.series]
        shaded = {"setup": any(s.setup.x.size for s in self.series), "warm-up": bool(self.warmup_band.x.size)}
        phases = [{"label": name, "colour": PHASES[name]} for name, shown in shaded.items() if shown]
        workers, note = self.workers.entries, self.workers.note
        if (entries, phases, workers, note) != (self.legend.entries, self.legend.phases, self.legend.workers,
                                                self.legend.workers_note):
            with self.legend.hold_sync():
                self.legend.entries, self.legend.phases = entries, phases
                self.legend.workers, self.legend.workers_note = workers, note

    def _flag_duration(self, flagged: bool, per_iteration: float) -> None:
        _show_slowing(self.duration_chart, flagged != self.duration_flagged, flagged, per_iteration)
        self.duration_flagged = flagged


def rehearse_redraws(charts: Charts, series: RunSeries | None, data: RunData, redraw: Callable[[], None]) -> None:
    """The largest redraw ``data``'s buckets allow, drawn for real into ``series`` (its points all
    at the run's start, at the baseline), then the run's own state over it (``redraw``),
    REHEARSED_REDRAWS times: on the watch's own thread after its clean-up before iteration 0
    (Dashboard.on_settled), so that what a run's redraws take there (arrays, traitlet updates,
    their messages and the kernel's sending of them: 270-470 KiB over 10 s as the points drawn
    grew to max_points, on the step's heap) is taken before the baseline."""
    if series is None:
        return
    made = made_up(data.samples.capacity)
    for _ in range(REHEARSED_REDRAWS):
        charts.draw_run(series, made, Verdict("inconclusive"), "running")
        series.t_max, series.y_range = 0.0, None
        redraw()


def _extents(series: list[RunSeries], workers: tuple[float, float] | None = None) -> tuple[float, float, float, float]:
    """What the axes span over the runs drawn (and the children's lines, ``workers``): (seconds,
    RSS change low and high in MiB with a margin, step ms); an RSS span of at least
    MIN_SPAN_MIB, so flat is flat."""
    shown = [s for s in series if s.t_max > 0]
    ranges = [s.y_range for s in shown if s.y_range is not None] + ([workers] if workers else [])
    lo = min((r[0] for r in ranges), default=0.0)
    hi = max((r[1] for r in ranges), default=MIN_SPAN_MIB)
    if hi - lo < MIN_SPAN_MIB:
        mid = (hi + lo) / 2
        lo, hi = mid - MIN_SPAN_MIB / 2, mid + MIN_SPAN_MIB / 2
    pad = 0.06 * (hi - lo)
    return (max(max((s.t_max for s in shown), default=0.0), 1.0), lo - pad, hi + pad,
            max(max((s.ms_max for s in shown), default=0.0) * 1.08, 1.0))


def _show_slowing(chart: bq.Figure, changed: bool, flagged: bool, per_iteration: float) -> None:
    """The step-duration chart's title and class: slowing down (``flagged``) or not."""
    if changed:
        if flagged:
            chart.add_class("leakwidget-duration-trending")
        else:
            chart.remove_class("leakwidget-duration-trending")
    title = "Step duration"
    if flagged:
        title = f"Step duration \u26a0 slowing down: +{per_iteration * 1000:.3g} ms per iteration"
    if chart.title != title:
        chart.title = title
    # Colour through a style both ways: bqplot keeps a style that is merely removed.
    colour = KIND_COLOURS["leak"] if flagged else "currentColor"
    if chart.title_style.get("fill") != colour:
        chart.title_style = {"font-size": "13px", "fill": colour}


def _set_ticks(axis: bq.Axis, ticks: np.ndarray, fmt: str) -> None:
    old = axis.tick_values
    if old is None or len(old) != len(ticks) or not np.array_equal(old, ticks) or axis.tick_format != fmt:
        with axis.hold_sync():
            axis.tick_values, axis.tick_format = ticks.astype(float), fmt
