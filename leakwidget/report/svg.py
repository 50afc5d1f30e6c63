"""A static picture of a watch: inline SVG of RSS against time, with the fit and the verdict.

Where no widget can render (nbviewer, GitHub, ``jupyter nbconvert``, a closed notebook), the
result's ``_repr_mimebundle_`` offers ``image/svg+xml`` from :func:`render_svg`, so the outcome is
still visible. Pure Python + numpy: no matplotlib, no IPython, no widgets.

Also holds the presentation constants the live dashboard shares with the picture (colours by
verdict kind, the series palette), so both look the same.
"""

from __future__ import annotations

import math
import textwrap
from html import escape
from typing import Protocol

import numpy as np

from ..engine.result import WatchResult
from ..engine.units import format_duration
from ..engine.verdict import Verdict
from .decimate import minmax

__all__ = [
    "KIND_COLOURS", "PALETTE", "fit_in_time", "projection_text", "record_columns", "render_svg",
    "result_mimebundle", "warmup_end_time",
]

# Colour of the verdict banner / picture title by kind ("running" while a watch is live).
KIND_COLOURS = {
    "leak": "#c62828",
    "plateau": "#ef6c00",
    "stable": "#2e7d32",
    "inconclusive": "#616161",
    "running": "#1565c0",
}
# One colour per configuration series (Run again, bisection); cycles after ten.
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)
MIB = 1024.0 * 1024.0
_SVG_POINTS = 800  # enough for a 640-px-wide picture; keeps notebooks small


class Columns(Protocol):
    """Iteration records by field: a WatchResult, or a view's own RecordLog."""

    def column(self, name: str) -> np.ndarray: ...


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


def fit_in_time(fit: list[tuple[float, float]], index: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The verdict's fit, (iteration, rss) points, mapped onto the time axis.

    ``index`` / ``end`` are the records' iteration numbers and end times: iteration i ends at
    ``end[index == i]``; fractional iterations are interpolated, iterations outside the
    recorded range are extrapolated at the mean iteration duration.
    """
    pts = [(float(i), float(v)) for i, v in (fit or [])]
    idx = np.asarray(index, dtype=float)
    end = np.asarray(end, dtype=float)
    if not pts or idx.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(idx, kind="stable")
    idx, end = idx[order], end[order]
    fi = np.array([p[0] for p in pts])
    t = np.interp(fi, idx, end)
    if idx.size >= 2:
        per = (end[-1] - end[0]) / max(idx[-1] - idx[0], 1.0)
        t = np.where(fi > idx[-1], end[-1] + (fi - idx[-1]) * per, t)
        t = np.where(fi < idx[0], end[0] - (idx[0] - fi) * per, t)
    return t, np.array([p[1] for p in pts])


def record_columns(source: Columns) -> dict[str, np.ndarray]:
    """index / end / rss / duration of the iteration records as float arrays of one length."""
    cols = {k: np.asarray(source.column(k), dtype=float) for k in ("index", "end", "rss", "duration")}
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


def render_svg(result: WatchResult, width: int = 640, height: int = 300) -> str:
    """Inline SVG of a finished watch: RSS (MiB) against time, warm-up shaded, fit dashed.

    ``result`` is a WatchResult (``.samples``, ``.iterations``, ``.verdict``); anything missing is
    simply not drawn, so a result of a run that failed early still renders.
    """
    t, rss = samples_of(result.samples)
    cols = record_columns(result)
    verdict = result.verdict
    kind = verdict.kind
    summary = verdict.summary
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])

    # The verdict's sentence heads the picture, wrapped to its width (~6.6 px per character).
    proj = projection_text(verdict)
    if "runs out" in summary:  # leak summaries already end with the projection
        proj = ""
    heading = textwrap.wrap(summary or kind.capitalize(), width=max(30, int((width - 20) / 6.6)))[:3]
    left, right, bottom = 62, 14, 38
    top = 14 + 15 * len(heading) + (15 if proj else 0) + 8
    pw, ph = width - left - right, height - top - bottom
    t, y = minmax(t, rss / MIB, _SVG_POINTS) if t.size else (t, rss)
    ft, fy = fit_in_time(verdict.fit, cols["index"], cols["end"])
    fy = fy / MIB
    bt, by = cols["end"], cols["rss"] / MIB
    if bt.size > 200:  # iteration marks beyond 200 would be a smear, not boundaries
        keep = np.unique(np.linspace(0, bt.size - 1, 200).astype(int))
        bt, by = bt[keep], by[keep]

    xs_all = np.concatenate([t, ft, bt]) if (t.size or ft.size or bt.size) else np.array([0.0, 1.0])
    ys_all = np.concatenate([y, fy, by]) if (y.size or fy.size or by.size) else np.array([0.0, 1.0])
    x0, x1 = 0.0, float(max(np.max(xs_all), 1e-3))
    y0, y1 = float(np.min(ys_all)), float(np.max(ys_all))
    pad = max((y1 - y0) * 0.08, 0.5)
    y0, y1 = y0 - pad, y1 + pad

    def sx(v: np.ndarray | float) -> np.ndarray:
        return left + (np.asarray(v, dtype=float) - x0) / (x1 - x0) * pw

    def sy(v: np.ndarray | float) -> np.ndarray:
        return top + ph - (np.asarray(v, dtype=float) - y0) / (y1 - y0) * ph

    def points(xv: np.ndarray, yv: np.ndarray) -> str:
        return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(sx(xv), sy(yv), strict=True))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="leakwidget-static" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>leakwidget: {escape(summary or kind)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    wend = warmup_end_time(verdict, cols["index"], cols["end"])
    if wend is not None and wend > x0:
        out.append(
            f'<rect class="warmup" x="{left}" y="{top}" width="{float(sx(min(wend, x1))) - left:.1f}" '
            f'height="{ph}" fill="#9e9e9e" fill-opacity="0.18"><title>warm-up</title></rect>'
        )
    # Axes and ticks.
    out.append(
        f'<path d="M{left},{top} V{top + ph} H{left + pw}" stroke="#444" fill="none" stroke-width="1"/>'
    )
    for v in _nice_ticks(y0, y1):
        yy = float(sy(v))
        out.append(f'<line x1="{left - 4}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for v in _nice_ticks(x0, x1):
        xx = float(sx(v))
        out.append(f'<line x1="{xx:.1f}" y1="{top + ph}" x2="{xx:.1f}" y2="{top + ph + 4}" stroke="#444"/>')
        out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt(v)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">time (s)</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + ph / 2})">RSS (MiB)</text>'
    )
    if t.size:
        out.append(
            f'<polyline class="rss" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5" '
            f'points="{points(t, y)}"/>'
        )
    if bt.size:
        marks = "".join(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="1.8"/>' for a, b in zip(sx(bt), sy(by), strict=True))
        out.append(f'<g class="iterations" fill="{PALETTE[0]}">{marks}</g>')
    if ft.size:
        out.append(
            f'<polyline class="fit" fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="6 4" points="{points(ft, fy)}"/>'
        )
    spans = "".join(
        f'<tspan x="10" dy="{0 if i == 0 else 15}">{escape(line)}</tspan>' for i, line in enumerate(heading)
    )
    out.append(
        f'<text class="verdict" data-kind="{escape(kind)}" x="10" y="18" font-size="12" '
        f'font-weight="bold" fill="{colour}">{spans}</text>'
    )
    if proj:
        out.append(f'<text x="10" y="{18 + 15 * len(heading)}" fill="{colour}">{escape(proj)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def result_mimebundle(result: WatchResult) -> dict[str, str]:
    """What ``WatchResult._repr_mimebundle_`` returns: text/plain and image/svg+xml.

    A picture that cannot be drawn must not hide the text report, so drawing errors leave the
    bundle with text/plain only.
    """
    bundle = {"text/plain": str(result)}
    try:
        bundle["image/svg+xml"] = render_svg(result)
    except Exception:  # the text report is the part that must always show
        pass
    return bundle
