"""Reading bqplot charts back from the page: the lines' SVG paths and the legend."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"[A-Za-z]|-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")

# Every solid `path.line` of the bqplot Lines marks inside `figure_selector`: the data, not the
# dashed trend lines nor the invisible outlines of the shaded phases (legend swatches are paths
# too, but live under `.g_legend`), plus bqplot's own legend labels.
READ_FIGURE_JS = """(figure) => {
    const fig = document.querySelector(figure);
    if (!fig) return null;
    const solid = (p) => { const cs = getComputedStyle(p);
        return (cs.strokeDasharray === 'none' || cs.strokeDasharray === '')
            && Number(cs.strokeOpacity) > 0 && Number(cs.opacity) > 0; };
    const lines = Array.from(fig.querySelectorAll('svg path.line'))
        .filter(p => !p.closest('.g_legend') && solid(p))
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


# Where everything of one dashboard is on the page, in CSS pixels: the RSS chart's lines (as
# points along each path, transformed to page coordinates), its plot area, the legend, every
# axis' tick labels, the headline, the pipeline strip and its chips.
GEOMETRY_JS = """(root) => {
    const box = (el) => { const r = el.getBoundingClientRect();
        return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height}; };
    const dash = document.querySelectorAll('.leakwidget-dashboard')[root];
    if (!dash) return null;
    const fig = dash.querySelector('.leakwidget-rss-chart');
    const lines = [];
    for (const p of fig.querySelectorAll('svg path.line')) {
        if (p.closest('.g_legend')) continue;
        const cs = getComputedStyle(p);
        const total = p.getTotalLength ? p.getTotalLength() : 0;
        if (!(total > 0) || cs.display === 'none' || Number(cs.strokeOpacity) === 0
            || Number(cs.opacity) === 0) continue;
        const ctm = p.getScreenCTM();
        const at = (len) => { const q = p.getPointAtLength(len);
            const s = new DOMPoint(q.x, q.y).matrixTransform(ctm); return [s.x, s.y]; };
        const n = Math.min(400, Math.max(2, Math.ceil(total / 2)));
        const points = Array.from({length: n}, (_, i) => at(total * i / (n - 1)));
        lines.push({stroke: cs.stroke, dashed: cs.strokeDasharray !== 'none' && cs.strokeDasharray !== '',
                    points});
    }
    const axes = [];
    for (const f of dash.querySelectorAll('.leakwidget-rss-chart, .leakwidget-duration-chart')) {
        for (const a of f.querySelectorAll('g.axis')) {
            axes.push(Array.from(a.querySelectorAll('.tick text'))
                .filter(t => t.textContent.trim() !== '')
                .map(t => ({text: t.textContent, ...box(t)})));
        }
    }
    const bq = Array.from(fig.querySelectorAll('.g_legend'))
        .filter(g => g.getBoundingClientRect().width > 0 && g.querySelector('text'));
    const headline = dash.querySelector('.leakwidget-headline');
    const strip = dash.querySelector('.leakwidget-pipeline');
    const chips = Array.from(dash.querySelectorAll('[data-stage-id]')).map(c => ({
        id: c.dataset.stageId, group: c.dataset.group, state: c.dataset.state,
        culprit: c.dataset.culprit === 'true', title: c.title,
        scrollWidth: c.scrollWidth, clientWidth: c.clientWidth, ...box(c)}));
    return {
        dashboard: {...box(dash), scrollWidth: dash.scrollWidth, clientWidth: dash.clientWidth},
        plot: box(fig.querySelector('.plotarea_background')),
        figure: box(fig),
        legend: box(dash.querySelector('.leakwidget-legend')),
        legendText: dash.querySelector('.leakwidget-legend').innerText,
        bqLegends: bq.length,
        lines, axes,
        headline: headline && {...box(headline), text: headline.innerText,
                               lineHeight: parseFloat(getComputedStyle(headline).lineHeight)},
        strip: strip && {...box(strip), scrollWidth: strip.scrollWidth, clientWidth: strip.clientWidth},
        chips,
    };
}"""


def read_geometry(page, root: int = -1) -> dict:
    """The geometry of the ``root``-th dashboard on the page (the last by default)."""
    if root < 0:
        root += page.locator(".leakwidget-dashboard").count()
    data = page.evaluate(GEOMETRY_JS, root)
    if data is None:
        raise AssertionError(f"no dashboard number {root} on the page")
    return data


def overlaps(a: dict, b: dict, margin: float = 0.0) -> bool:
    """Do two boxes (left/top/right/bottom) overlap by more than ``margin`` pixels?"""
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > margin
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > margin)


def inside(point: tuple[float, float] | list[float], b: dict) -> bool:
    return b["left"] <= point[0] <= b["right"] and b["top"] <= point[1] <= b["bottom"]


def geometry_problems(g: dict, *, max_headline_lines: int) -> list[str]:
    """Everything the issue asks of the picture, checked on the geometry; [] when all holds."""
    problems = []
    if g["dashboard"]["scrollWidth"] > g["dashboard"]["clientWidth"] + 1:
        problems.append(f"the dashboard overflows its cell: {g['dashboard']}")
    if g["bqLegends"]:
        problems.append("a legend box is drawn inside the plot")
    if overlaps(g["legend"], g["plot"]):
        problems.append(f"the legend {g['legend']} overlaps the plot {g['plot']}")
    for line in g["lines"]:
        hidden = [p for p in line["points"] if inside(p, g["legend"])]
        if hidden:
            problems.append(f"the legend covers {len(hidden)} points of a series ({line['stroke']})")
    for i, ticks in enumerate(g["axes"]):
        for j, a in enumerate(ticks):
            for b in ticks[j + 1:]:
                if overlaps(a, b, margin=0.5):
                    problems.append(f"axis {i}: tick labels {a['text']!r} and {b['text']!r} overlap")
        if len({t["text"] for t in ticks}) != len(ticks):
            problems.append(f"axis {i}: repeated tick labels {[t['text'] for t in ticks]}")
    h = g["headline"]
    if h is not None and h["height"] > (max_headline_lines + 0.5) * h["lineHeight"]:
        problems.append(f"the headline takes {h['height'] / h['lineHeight']:.1f} lines: {h['text']!r}")
    if g["strip"] is not None:
        if g["strip"]["scrollWidth"] > g["strip"]["clientWidth"] + 1:
            problems.append("the pipeline strip scrolls sideways")
        for c in g["chips"]:
            if c["right"] > g["strip"]["right"] + 0.5 or c["left"] < g["strip"]["left"] - 0.5:
                problems.append(f"chip {c['id']} is cut off by the strip's edge")
            if c["scrollWidth"] > c["clientWidth"] + 1:
                problems.append(f"chip {c['id']}'s text is cut off")
    return problems


def trend_and_data_ends(g: dict) -> list[tuple[list[float], list[float]]]:
    """(last point of the data, last point of its trend) for every trend drawn. A trend belongs
    to the run whose line ends nearest to its own end (runs of the same length end at the same
    time, so x alone cannot tell them apart)."""
    data = [ln["points"] for ln in g["lines"] if not ln["dashed"] and len(ln["points"]) > 2]
    pairs = []
    for trend in (ln["points"] for ln in g["lines"] if ln["dashed"]):
        if data:
            end = trend[-1]
            line = min(data, key=lambda pts: (pts[-1][0] - end[0]) ** 2 + (pts[-1][1] - end[1]) ** 2)
            pairs.append((line[-1], end))
    return pairs
