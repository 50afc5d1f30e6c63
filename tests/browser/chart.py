"""Reading bqplot charts back from the page: the lines' SVG paths and the legend."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"[A-Za-z]|-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")

# Every `path.line` of the bqplot Lines marks inside `figure_selector` (legend swatches are
# paths too, but live under `.g_legend`), plus the legend's labels.
READ_FIGURE_JS = """(figure) => {
    const fig = document.querySelector(figure);
    if (!fig) return null;
    const lines = Array.from(fig.querySelectorAll('svg path.line'))
        .filter(p => !p.closest('.g_legend'))
        .map(p => p.getAttribute('d') || '');
    const legend = Array.from(fig.querySelectorAll('svg .g_legend text.legendtext'))
        .map(t => t.textContent.trim());
    return {lines, legend};
}"""


def parse_path(d: str) -> list[tuple[float, float]]:
    """The vertices of an SVG path made of M/L/H/V commands (what bqplot draws for Lines).

    Raises ValueError on commands a polyline does not use (curves), so a change of
    interpolation in the widget shows up as a clear failure instead of a wrong count.
    """
    points: list[tuple[float, float]] = []
    tokens = _TOKEN.findall(d or "")
    cmd = None
    i = 0
    x = y = 0.0
    while i < len(tokens):
        tok = tokens[i]
        if tok.isalpha():
            cmd = tok
            i += 1
            if cmd in "Zz":
                continue
            if cmd not in "MLHV":
                raise ValueError(f"unexpected SVG path command {cmd!r} in {d[:80]!r}")
            continue
        if cmd in ("M", "L"):
            x, y = float(tokens[i]), float(tokens[i + 1])
            i += 2
        elif cmd == "H":
            x = float(tok)
            i += 1
        elif cmd == "V":
            y = float(tok)
            i += 1
        else:
            raise ValueError(f"path data before any command in {d[:80]!r}")
        points.append((x, y))
    return points


@dataclass
class Line:
    points: list[tuple[float, float]]

    def __len__(self) -> int:
        return len(self.points)

    def rise(self) -> float:
        """How far the line climbs on screen, in pixels: mean height of its last quarter minus
        that of its first quarter (SVG y grows downwards, so a growing value has falling y)."""
        n = len(self.points)
        q = max(1, n // 4)
        first = sum(p[1] for p in self.points[:q]) / q
        last = sum(p[1] for p in self.points[-q:]) / q
        return first - last

    def x_monotone(self) -> bool:
        xs = [p[0] for p in self.points]
        return all(b >= a - 1e-6 for a, b in zip(xs[:-1], xs[1:], strict=True))


def read_figure(page, figure_selector: str) -> tuple[list[Line], list[str]]:
    data = page.evaluate(READ_FIGURE_JS, figure_selector)
    if data is None:
        raise AssertionError(f"no {figure_selector} on the page")
    return [Line(parse_path(d)) for d in data["lines"]], data["legend"]
