"""The static chart of a watch, drawn with matplotlib: what a result shows where no widget runs.

A notebook output (``WatchResult._repr_mimebundle_``: :data:`CHART`, ``image/png``, which
JupyterLab shows in an untrusted notebook and GitHub and nbviewer show too), the HTML report
(:func:`render_svg`, inline SVG) and the course's committed outputs all show this one picture,
with what the live dashboard shows: the verdict's sentence as its heading in the verdict's
colour; RSS against time, the setup and the warm-up shaded, the verdict's trend dashed on the
data (:func:`~leakwidget.report.trend.trend_line`); the step time under it on the same time
axis; the legend outside the data, under the charts. As on the dashboard, the RSS scale is set
by the iterations, not by the setup (memory an earlier cell freed must not squash the run), and
spans at least 1 MiB, so a flat run is drawn flat.

matplotlib loads only when a chart is drawn (:mod:`.figure`); without it a result shows its
text and a one-line hint.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..engine.kinds import shown_kind
from ..engine.units import format_bytes, format_duration
from ..engine.verdict import Verdict
from .colours import KIND_COLOURS, MIB, PALETTE, PHASES
from .decimate import minmax
from .figure import new_figure, png_base64, svg_inline
from .render import Drawing, mimebundle
from .trend import trend_line
from .workers import draw_workers, draws_lines

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CHART", "Drawable", "draw_chart", "projection_text", "record_columns", "render_png",
    "render_svg", "result_mimebundle", "warmup_end_time",
]

SIZE = (9.4, 5.6)  # inches at 100 dpi: 940 × 560 px, shown whole at 1400 px, scaled at 900
MIN_SPAN_MIB = 1.0  # as on the dashboard: noise must not look like growth
_POINTS = 1500  # per line: more than the pixels across
_CHAR_PX = 9.0  # the heading's bold 11-pt characters at 100 dpi, with room for a wider font
_DOTS = 60  # iterations drawn as dots too, up to this many (the dashboard's sparse runs)


class Columns(Protocol):
    """Iteration records by field: a WatchResult, or a view's own RecordLog."""

    def column(self, name: str) -> np.ndarray: ...


class Drawable(Columns, Protocol):
    """What the chart reads of a result: a WatchResult, or a saved one (html.SavedRun)."""

    samples: np.ndarray  # (t, rss) rows
    verdict: Verdict
    reading: str | None  # kinds.reading: growth the program does not keep is not drawn as a leak
    summary: str


def samples_of(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t, rss) from what a result or sampler holds: a pair of arrays, or a (2, n) / (n, 2) array."""
    if isinstance(samples, (tuple, list)) and len(samples) == 2:
        t, v = samples
    else:
        a = np.asarray(samples, dtype=float)
        if a.ndim == 2 and a.shape[0] == 2:
            t, v = a[0], a[1]
        elif a.ndim == 2 and a.shape[1] == 2:
            t, v = a[:, 0], a[:, 1]
        elif a.size == 0:
            return np.empty(0), np.empty(0)
        else:
            raise ValueError(f"samples must be (t, rss) arrays, got shape {a.shape}")
    return np.asarray(t, dtype=float).ravel(), np.asarray(v, dtype=float).ravel()


def record_columns(source: Columns) -> dict[str, np.ndarray]:
    """index / start / end / rss / duration of the iteration records as float arrays of one length."""
    cols = {k: np.asarray(source.column(k), dtype=float) for k in ("index", "start", "end", "rss", "duration")}
    n = min(c.size for c in cols.values())  # a record appended mid-read must not misalign
    return {k: c[:n] for k, c in cols.items()}


def warmup_end_time(verdict: Verdict, index: np.ndarray, end: np.ndarray) -> float | None:
    """Time at which the warm-up iterations end (None when there is no warm-up)."""
    w = verdict.warmup
    if w <= 0 or index.size == 0:
        return None
    inside = end[index < index[0] + w]
    return float(inside.max()) if inside.size else None


def projection_text(verdict: Verdict) -> str:
    """'Out of memory in about 3.2 h (41,000 iterations) at this rate', or '' when not leaking."""
    if verdict.kind != "leak" or verdict.exhaust_iterations is None:
        return ""
    iters, secs = verdict.exhaust_iterations, verdict.exhaust_seconds
    if secs is not None:
        return f"Out of memory in about {format_duration(secs)} ({iters:,.0f} iterations) at this rate."
    return f"Out of memory in about {iters:,.0f} iterations at this rate."


def heading(result: Drawable, width_px: float) -> list[str]:
    """The verdict's sentence (and when memory runs out), wrapped on words to the picture."""
    summary = result.summary or result.verdict.kind.capitalize()
    # Copies of what workers share are bounded by it, as memory the program does not keep
    # (retention, garbage) levels off: no time until memory runs out.
    bounded = ("runs out" in summary or getattr(result, "copying", False)
               or result.reading in ("retention", "unsettled"))
    proj = "" if bounded else projection_text(result.verdict)
    return textwrap.wrap(f"{summary} {proj}".strip(), width=max(30, int(width_px / _CHAR_PX)))[:4]


def draw_chart(fig: Figure, result: Drawable) -> None:
    """Draw ``result`` on an empty figure: heading, RSS with its phases and trend, step time,
    legend. Anything missing is not drawn, so a run that failed at once still has a picture."""
    t, rss = samples_of(result.samples)
    cols = record_columns(result)
    kind = shown_kind(result.verdict.kind, result.reading, getattr(result, "copying", False))
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])
    fig.suptitle("\n".join(heading(result, fig.get_figwidth() * fig.dpi)), x=0.01, ha="left",
                 color=colour, fontsize=11, fontweight="bold")
    memory, steps = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.1))
    start = float(cols["start"][0]) if cols["start"].size else None
    _phases(memory, steps, result.verdict, cols, start)
    # A watch with child processes samples the tree's total; each child's own line beside it.
    children = [c for c in getattr(result, "children", ()) if c.samples.size]
    _memory(memory, t, rss, cols, result.verdict, colour, kind, start,
            "total: this process + its children" if draws_lines(children, start) else "RSS")
    draw_workers(memory, children, start)
    _steps(steps, cols, result.verdict)
    steps.set_xlabel("time since the watch started (s)")
    ends = [float(t[-1])] if t.size else []
    memory.set_xlim(0.0, max([*ends, *(cols["end"][-1:]), 1e-3]))
    if any(ax.get_legend_handles_labels()[0] for ax in (memory, steps)):  # (none: nothing drawn)
        legend = fig.legend(loc="outside lower center", ncols=5)
        legend.set_gid("leakwidget-legend")


def _phases(memory: Axes, steps: Axes, verdict: Verdict, cols: dict[str, np.ndarray],
            start: float | None) -> None:
    if start is None:
        return
    spans = {"setup": (0.0, start)}
    wend = warmup_end_time(verdict, cols["index"], cols["end"])
    if wend is not None:
        spans["warm-up"] = (start, wend)
    for name, (a, b) in spans.items():
        if b > a:
            memory.axvspan(a, b, color=PHASES[name], alpha=0.25, lw=0, label=name, gid=f"leakwidget-{name}")
            steps.axvspan(a, b, color=PHASES[name], alpha=0.25, lw=0)


def _memory(ax: Axes, t: np.ndarray, rss: np.ndarray, cols: dict[str, np.ndarray], verdict: Verdict,
            colour: str, kind: str, start: float | None, name: str) -> None:
    ax.set_ylabel("RSS (MiB)" if name == "RSS" else "memory (MiB)")
    shown = []
    if t.size:
        x, y = minmax(t, rss / MIB, _POINTS)
        ax.plot(x, y, color=PALETTE[0], lw=1.5, label=name, gid="leakwidget-rss")
        shown.append(y[x >= start] if start is not None else y)
    if 0 < cols["end"].size <= _DOTS:
        ax.plot(cols["end"], cols["rss"] / MIB, "o", color=PALETTE[0], ms=3.5, gid="leakwidget-ends")
    tt, ty = trend_line(verdict, cols["index"], cols["rss"], cols["end"])
    if tt.size:
        slope = f", {format_bytes(verdict.slope, signed=True)} per iteration" if verdict.slope else ""
        ax.plot(tt, ty / MIB, ls=(0, (6, 4)), lw=2, color=colour, label=f"trend: {kind}{slope}",
                gid="leakwidget-trend")
        shown.append(ty / MIB)
    values = np.concatenate(shown) if shown else np.zeros(0)
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        if hi - lo < MIN_SPAN_MIB:
            mid = (hi + lo) / 2
            lo, hi = mid - MIN_SPAN_MIB / 2, mid + MIN_SPAN_MIB / 2
        pad = 0.06 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)


def _steps(ax: Axes, cols: dict[str, np.ndarray], verdict: Verdict) -> None:
    ax.set_ylabel("step (ms)")
    end, ms = cols["end"], cols["duration"] * 1000.0
    if not end.size:
        ax.text(0.5, 0.5, "No iteration finished.", transform=ax.transAxes, ha="center", va="center",
                color="#555555")
        ax.set_yticks([])
        return
    x, y = minmax(end, ms, _POINTS)
    ax.plot(x, y, color=PALETTE[0], lw=1.2, gid="leakwidget-duration")
    # A slow first iteration must not squash the rest: the scale is the steps after the warm-up.
    after = ms[cols["index"] >= cols["index"][0] + verdict.warmup]
    top = float((after if after.size else ms).max())
    ax.set_ylim(0.0, max(top * 1.08, 1e-3))


def render_png(result: Drawable) -> str:
    """The chart as a notebook shows it: PNG, base64."""
    with new_figure(*SIZE) as fig:
        draw_chart(fig, result)
        return png_base64(fig)


def render_svg(result: Drawable, width: float = SIZE[0], height: float = SIZE[1]) -> str:
    """The chart as the HTML report holds it: an inline ``<svg>`` element (sizes in inches)."""
    with new_figure(width, height) as fig:
        draw_chart(fig, result)
        return svg_inline(fig)


CHART = Drawing("image/png", render_png)  # a result's picture


def result_mimebundle(result: Drawable) -> dict[str, str]:
    """What a notebook shows of a result (``WatchResult._repr_mimebundle_``, and the dashboard
    after a run): text/plain and the chart; the text alone (and why) if the chart cannot be drawn."""
    return mimebundle(result, [CHART])
