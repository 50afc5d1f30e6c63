"""matplotlib, loaded only when a static chart is drawn, and a figure's two exports: PNG for a
notebook's output (shown untrusted, on GitHub, in nbviewer) and SVG inside the HTML report.

matplotlib is optional (``pip install 'leakwidget[charts]'``): without it :func:`new_figure`
raises :class:`ChartUnavailable`, and whoever shows a result says :data:`NO_CHART` instead of
the chart. pyplot is never imported: a :class:`~matplotlib.figure.Figure` made directly has no
global registry to leak into and changes no notebook's plotting backend.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["NO_CHART", "ChartUnavailable", "new_figure", "png_base64", "svg_inline"]


NO_CHART = "(No chart: it needs matplotlib, pip install 'leakwidget[charts]'.)"
DPI = 100  # a 9.4-inch figure is 940 px wide: a notebook's output column at 1400 px
# The charts' type: small and plain, as on the dashboard.
STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "axes.edgecolor": "#444444",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": "#e6e6e6",
    "legend.frameon": False,
    "legend.fontsize": 10,
    "svg.fonttype": "none",  # text stays text in the page (searchable, sharp, small)
    "svg.hashsalt": "leakwidget",  # the same chart writes the same SVG
}


class ChartUnavailable(ImportError):
    """matplotlib is not installed: the result shows its text and :data:`NO_CHART`."""


@contextmanager
def new_figure(width: float, height: float) -> Iterator[Figure]:
    """An empty figure ``width`` × ``height`` inches (constrained layout), in the charts' style
    while the block draws and exports it."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ChartUnavailable(NO_CHART) from exc
    with matplotlib.rc_context(STYLE):
        yield Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def png_base64(fig: Figure) -> str:
    """The figure (inside :func:`new_figure`'s block) as PNG in base64, what a notebook's
    ``image/png`` holds; no timestamp in it, so the same result draws the same file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def svg_inline(fig: Figure) -> str:
    """The figure (inside :func:`new_figure`'s block) as an ``<svg>`` element to put inside a
    page: no XML prolog, no metadata."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None,
                                              "Type": None}, facecolor="white")
    text = buf.getvalue()
    return text[text.index("<svg"):]
