"""A static picture of a watch: inline SVG of RSS against time, with the fit and the verdict.

Where no widget can render (nbviewer, GitHub, ``jupyter nbconvert``, a closed notebook), the
result's ``_repr_mimebundle_`` offers ``image/svg+xml`` from :data:`CHART`, so the outcome is still
visible. Pure Python + numpy: no matplotlib, no IPython, no widgets.

Also holds the presentation constants the live dashboard shares with the picture (colours by
verdict kind, the series palette), so both look the same.
"""

from __future__ import annotations

import math
import textwrap
from html import escape
from typing import Protocol

import numpy as np

from ..engine.units import format_duration
from ..engine.verdict import Verdict
from .decimate import minmax
from .render import Drawing, mimebundle
from .trend import trend_line

__all__ = [
    "CHART", "KIND_COLOURS", "PALETTE", "Drawable", "projection_text", "record_columns", "render_svg",
    "result_mimebundle", "warmup_end_time",
]

# Colour of the verdict banner / picture title by kind ("running" while a watch is live).
KIND_COLOURS = {
    "leak": "#c62828",
    "retention": "#6a1b9a",  # growing, but memory the allocator keeps: not a red "leak"
    "plateau": "#ef6c00",
    "stable": "#2e7d32",
    "inconclusive": "#616161",
    "running": "#1565c0",
}
# One colour per configuration series (Run again, bisection); cycles after ten. No red and no
# orange: those say "leak" and "plateau" (a trend line, a banner), never "the second run".
PALETTE = (
    "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939",
)
MIB = 1024.0 * 1024.0
_SVG_POINTS = 800  # enough for a 640-px-wide picture; keeps notebooks small


class Columns(Protocol):
    """Iteration records by field: a WatchResult, or a view's own RecordLog."""

    def column(self, name: str) -> np.ndarray: ...


class Drawable(Columns, Protocol):
    """What the chart reads of a result: a WatchResult, or a saved one (html.SavedRun)."""

    samples: np.ndarray  # (t, rss) rows
    verdict: Verdict
    retention: bool  # growth the allocator keeps: not drawn as a leak
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


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks = []
    v = start
    while v <= hi + 1e-9 * step and len(ticks) < 20:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.3g}"


class _Frame:
    """The picture's plot area and its data-to-pixel mapping."""

    def __init__(self, left: float, top: float, pw: float, ph: float, xr: tuple[float, float],
                 yr: tuple[float, float]) -> None:
        self.left, self.top, self.pw, self.ph = left, top, pw, ph
        (self.x0, self.x1), (self.y0, self.y1) = xr, yr

    def sx(self, v: np.ndarray | float) -> np.ndarray:
        return self.left + (np.asarray(v, dtype=float) - self.x0) / (self.x1 - self.x0) * self.pw

    def sy(self, v: np.ndarray | float) -> np.ndarray:
        return self.top + self.ph - (np.asarray(v, dtype=float) - self.y0) / (self.y1 - self.y0) * self.ph

    def points(self, xv: np.ndarray, yv: np.ndarray) -> str:
        return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(self.sx(xv), self.sy(yv), strict=True))

    def axes(self, height: int) -> list[str]:
        left, top, pw, ph = self.left, self.top, self.pw, self.ph
        out = [f'<path d="M{left},{top} V{top + ph} H{left + pw}" stroke="#444" fill="none" stroke-width="1"/>']
        for v in _nice_ticks(self.y0, self.y1):
            yy = float(self.sy(v))
            out.append(f'<line x1="{left - 4}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#e0e0e0"/>')
            out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        for v in _nice_ticks(self.x0, self.x1):
            xx = float(self.sx(v))
            out.append(f'<line x1="{xx:.1f}" y1="{top + ph}" x2="{xx:.1f}" y2="{top + ph + 4}" stroke="#444"/>')
            out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt(v)}</text>')
        out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">time (s)</text>')
        out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 14 {top + ph / 2})">RSS (MiB)</text>')
        return out

    def band(self, cls: str, a: float, b: float, colour: str) -> list[str]:
        """A shaded phase of the run, labelled when it is wide enough for its name."""
        xa, xb = float(self.sx(max(a, self.x0))), float(self.sx(min(b, self.x1)))
        if xb - xa < 0.5:
            return []
        out = [f'<rect class="{cls}" x="{xa:.1f}" y="{self.top}" width="{xb - xa:.1f}" height="{self.ph}" '
               f'fill="{colour}" fill-opacity="0.25"><title>{cls}</title></rect>']
        if xb - xa >= 7 * len(cls) + 6:
            out.append(f'<text x="{(xa + xb) / 2:.1f}" y="{self.top + 12}" text-anchor="middle" '
                       f'fill="#455a64">{cls}</text>')
        return out


def render_svg(result: Drawable, width: int = 640, height: int = 300) -> str:
    """Inline SVG of a finished watch: RSS (MiB) against time, setup and warm-up shaded, the
    verdict's trend dashed on the data from its onset to the last iteration.

    ``result`` is a WatchResult (``.samples``, ``.iterations``, ``.verdict``); anything missing is
    simply not drawn, so a result of a run that failed early still renders. The scale is set by
    the iterations, not by the setup (memory an earlier cell freed must not squash the run).
    """
    t, rss = samples_of(result.samples)
    cols = record_columns(result)
    verdict = result.verdict
    kind, summary = ("retention" if result.retention else verdict.kind), result.summary
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])
    # The verdict's sentence heads the picture, wrapped to its width (~6.6 px per character).
    proj = "" if "runs out" in summary else projection_text(verdict)
    heading = textwrap.wrap(summary or kind.capitalize(), width=max(30, int((width - 20) / 6.6)))[:3]
    top = 14 + 15 * len(heading) + (15 if proj else 0) + 8
    t, y = minmax(t, rss / MIB, _SVG_POINTS) if t.size else (t, rss)
    ft, fy = trend_line(verdict, cols["index"], cols["rss"], cols["end"])
    fy = fy / MIB
    start = float(cols["start"][0]) if cols["start"].size else None
    after = t >= start if start is not None else np.ones(t.size, bool)
    ys = np.concatenate([y[after], fy]) if (after.any() or fy.size) else np.array([0.0, 1.0])
    y0, y1 = float(np.min(ys)), float(np.max(ys))
    pad = max((y1 - y0) * 0.08, 0.5)
    x1 = float(max(np.max(np.concatenate([t, ft])) if (t.size or ft.size) else 1.0, 1e-3))
    f = _Frame(62, top, width - 62 - 14, height - top - 38, (0.0, x1), (y0 - pad, y1 + pad))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="leakwidget-static" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>leakwidget: {escape(summary or kind)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<clipPath id="leakwidget-plot"><rect x="{f.left}" y="{f.top}" width="{f.pw}" height="{f.ph}"/></clipPath>',
    ]
    if start is not None:
        out += f.band("setup", 0.0, start, "#90a4ae")
        wend = warmup_end_time(verdict, cols["index"], cols["end"])
        if wend is not None:
            out += f.band("warm-up", start, wend, "#bdbdbd")
    out += f.axes(height)
    if t.size:
        out.append(f'<polyline class="rss" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5" '
                   f'clip-path="url(#leakwidget-plot)" points="{f.points(t, y)}"/>')
    if ft.size:
        out.append(f'<polyline class="fit" fill="none" stroke="{colour}" stroke-width="2" '
                   f'stroke-dasharray="6 4" points="{f.points(ft, fy)}"/>')
    spans = "".join(
        f'<tspan x="10" dy="{0 if i == 0 else 15}">{escape(line)}</tspan>' for i, line in enumerate(heading)
    )
    out.append(f'<text class="verdict" data-kind="{escape(kind)}" x="10" y="18" font-size="12" '
               f'font-weight="bold" fill="{colour}">{spans}</text>')
    if proj:
        out.append(f'<text x="10" y="{18 + 15 * len(heading)}" fill="{colour}">{escape(proj)}</text>')
    out.append("</svg>")
    return "\n".join(out)


CHART = Drawing("image/svg+xml", render_svg)  # a result's picture


def result_mimebundle(result: Drawable) -> dict[str, str]:
    """What a notebook shows of a result (``WatchResult._repr_mimebundle_``, and the dashboard
    after a run): text/plain and the chart; text/plain alone if the chart cannot be drawn."""
    return mimebundle(result, [CHART])
