"""A static picture of a comparison: each variant's RSS growth against time, overlaid.

Growth (RSS minus the variant's own baseline) rather than RSS: the allocators start from
different footprints, and the question is which one keeps growing. Drawn with matplotlib
(:mod:`.figure`, loaded only here): :data:`CHART` is the ``image/png`` part of every
``CompareResult``'s display (untrusted notebooks, nbconvert and GitHub show it),
:func:`render_compare_svg` the same picture as inline SVG.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..engine.units import format_bytes
from ..engine.verdict import Verdict
from .colours import KIND_COLOURS, MIB, PALETTE
from .decimate import minmax
from .figure import DPI, new_figure, png_base64, svg_inline
from .render import Drawing

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CHART", "Compared", "draw_compare", "render_compare_png", "render_compare_svg"]


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


def draw_compare(fig: Figure, result: Compared) -> None:
    """Each variant's RSS growth against time on one axes, the summary as the heading, and a
    legend under the data naming each variant with its verdict and growth (in its verdict's
    colour)."""
    fig.suptitle("\n".join(textwrap.wrap(result.summary, int(fig.get_figwidth() * DPI / 8.6))),
                 x=0.01, ha="left", fontsize=11, fontweight="bold")
    ax = fig.subplots()
    ax.set_xlabel("time since the watch started (s)")
    ax.set_ylabel("RSS growth (MiB)")
    ax.axhline(0.0, color="#999999", lw=0.8)
    for i, (variant, r) in enumerate(zip(result.variants, result.results, strict=True)):
        t, rss = (r.samples[:, 0], r.samples[:, 1]) if r.samples.size else (np.zeros(0), np.zeros(0))
        t, y = minmax(t, (rss - r.baseline_rss) / MIB, _POINTS) if t.size else (t, rss)
        grown = result.growth(variant.name)
        words = f"{variant.name}: {r.verdict.kind}" + (
            f", {format_bytes(grown, signed=True)}" if grown is not None else "")
        ax.plot(t, y, color=PALETTE[i % len(PALETTE)], lw=1.6, label=words,
                gid=f"leakwidget-variant-{i}")
    if ax.get_lines()[1:]:
        legend = fig.legend(loc="outside lower center", ncols=2)
        legend.set_gid("leakwidget-legend")
        for text, r in zip(legend.get_texts(), result.results, strict=True):
            text.set_color(KIND_COLOURS.get(r.verdict.kind, "#333333"))
    ax.set_xlim(left=0.0)


def render_compare_png(result: Compared, width: int = 760, height: int = 420) -> str:
    """The comparison's chart as a notebook shows it: PNG, base64 (sizes in pixels)."""
    with new_figure(width / DPI, height / DPI) as fig:
        draw_compare(fig, result)
        return png_base64(fig)


def render_compare_svg(result: Compared, width: int = 640, height: int = 320) -> str:
    """The comparison's chart as an inline ``<svg>`` element (sizes in pixels)."""
    with new_figure(width / DPI, height / DPI) as fig:
        draw_compare(fig, result)
        return svg_inline(fig)


CHART = Drawing("image/png", render_compare_png)  # a comparison's picture
