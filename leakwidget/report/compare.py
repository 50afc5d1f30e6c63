"""A static picture of a comparison: each variant's RSS growth against time, overlaid.

Growth (RSS minus the variant's own baseline) rather than RSS: the allocators start from
different footprints, and the question is which one keeps growing. :data:`CHART` is the
``image/svg+xml`` part of every ``CompareResult``'s display (nbconvert and GitHub show it).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Protocol

import numpy as np

from ..engine.units import format_bytes
from ..engine.verdict import Verdict
from .decimate import minmax
from .render import Drawing
from .svg import KIND_COLOURS, MIB, PALETTE, _fmt, _nice_ticks

__all__ = ["CHART", "Compared", "render_compare_svg"]


class _Named(Protocol):
    name: str


class _Run(Protocol):
    samples: np.ndarray  # (t, rss) rows
    baseline_rss: int
    verdict: Verdict


class Compared(Protocol):
    """What the chart reads of a comparison (a CompareResult)."""

    variants: Sequence[_Named]
    results: Sequence[_Run]
    summary: str

    def growth(self, name: str) -> float | None: ...

_POINTS = 600  # per variant


def render_compare_svg(result: Compared, width: int = 640, height: int = 320) -> str:
    curves = []
    for i, (variant, r) in enumerate(zip(result.variants, result.results, strict=True)):
        t, rss = (r.samples[:, 0], r.samples[:, 1]) if r.samples.size else (np.zeros(0), np.zeros(0))
        t, y = minmax(t, (rss - r.baseline_rss) / MIB, _POINTS) if t.size else (t, rss)
        curves.append((variant.name, r, t, y, PALETTE[i % len(PALETTE)]))
    left, right, top, bottom = 62, 14, 34, 38 + 16 * len(curves)
    pw, ph = width - left - right, height - top - bottom
    ys = [c[3] for c in curves if c[3].size]
    xs = [c[2] for c in curves if c[2].size]
    x1 = max((float(x.max()) for x in xs), default=1.0) or 1.0
    y0 = min([0.0, *(float(y.min()) for y in ys)])
    y1 = max([1.0, *(float(y.max()) for y in ys)])
    pad = (y1 - y0) * 0.06
    y0, y1 = y0 - pad, y1 + pad

    def sx(v: np.ndarray | float) -> np.ndarray:
        return left + np.asarray(v, dtype=float) / x1 * pw

    def sy(v: np.ndarray | float) -> np.ndarray:
        return top + ph - (np.asarray(v, dtype=float) - y0) / (y1 - y0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="leakwidget-compare" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>leakwidget: {escape(result.summary)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="18" font-size="12" font-weight="bold">{escape(result.summary)}</text>',
        f'<path d="M{left},{top} V{top + ph} H{left + pw}" stroke="#444" fill="none"/>',
    ]
    for v in _nice_ticks(y0, y1):
        yy = float(sy(v))
        out.append(f'<line x1="{left - 4}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for v in _nice_ticks(0.0, x1):
        xx = float(sx(v))
        out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt(v)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 32}" text-anchor="middle">time (s)</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">RSS growth (MiB)</text>')
    for k, (name, r, t, y, colour) in enumerate(curves):
        if t.size:
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(sx(t), sy(y), strict=True))
            out.append(f'<polyline class="variant" data-variant="{escape(name)}" fill="none" '
                       f'stroke="{colour}" stroke-width="1.6" points="{pts}"/>')
        ly = top + ph + 48 + 16 * k
        grown = result.growth(name)
        words = f"{name}: {r.verdict.kind}" + (f", {format_bytes(grown, signed=True)}" if grown is not None else "")
        out.append(f'<rect x="{left}" y="{ly - 9}" width="14" height="4" fill="{colour}"/>')
        out.append(f'<text x="{left + 20}" y="{ly - 4}" '
                   f'fill="{KIND_COLOURS.get(r.verdict.kind, "#333")}">{escape(words)}</text>')
    out.append("</svg>")
    return "\n".join(out)


CHART = Drawing("image/svg+xml", render_compare_svg)  # a comparison's picture
