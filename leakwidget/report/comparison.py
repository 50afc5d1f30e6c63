"""A comparison in words and tables: its answer in its own colour, how to apply the fix, and one
row per variant — as text (``str(result)``), as HTML (the notebook's display, the dashboard's
pane: :func:`pane_html`) and as a page (``CompareResult.save_html``: :data:`PAGE`).

The headline is always the comparison's answer (:data:`ANSWER_COLOURS`), never one variant's
verdict. The table's columns: variant, verdict, growth over the run with its 95% interval, slope
per iteration, final RSS, attribution, status; numbers right-aligned in tabular figures, so the
columns line up at any width. The chart is :mod:`.compare`'s, whatever picture it draws.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Protocol

from ..engine.units import format_bytes, format_range
from .colours import KIND_COLOURS
from .compare import CHART
from .pages import page
from .render import Drawing

__all__ = ["ANSWER_COLOURS", "HTML", "PAGE", "Comparison", "compare_text", "pane_html"]

# The answer's colour: none of them a verdict's (no red "leak" over a comparison).
ANSWER_COLOURS = {
    "fix": "#00695c",  # a variant is named
    "nothing-to-fix": "#558b2f",  # glibc itself does not grow
    "no-variant-helps": "#4e342e",  # it grows, but not because of the allocator
    "no-answer": "#616161",  # the runs cannot tell (errors, an interruption, too short)
}


class _Answer(Protocol):
    kind: str
    headline: str
    why: Sequence[str]
    horizon: int


class Comparison(Protocol):
    """What is drawn of a comparison (a CompareResult)."""

    answer: _Answer
    notes: Sequence[str]
    worker_logs: Mapping[str, str]

    @property
    def apply_note(self) -> str: ...

    def how_to_apply(self) -> tuple[tuple[str, str], ...]: ...

    def rows(self) -> list[dict[str, Any]]: ...


_HEAD = ("variant", "verdict", "growth", "slope/iter", "final RSS", "attribution", "status")


def _size(v: float | None, signed: bool = False) -> str:
    return "\u2014" if v is None else format_bytes(v, signed=signed)


def _interval(row: Mapping[str, Any]) -> str:
    if row["growth_low"] is None:
        return ""
    return f"95%: {format_range(row['growth_low'], row['growth_high'])}"


def _cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    return (row["variant"], row["verdict"], _size(row["growth"], True), _size(row["slope"], True),
            _size(row["final_rss"]), row["attribution"] or "\u2014", row["status_text"])


# ------------------------------------------------------------------------------ text


def compare_text(result: Comparison) -> str:
    """The answer, why, how to apply it, the table and the notes, as plain text."""
    a = result.answer
    lines = [a.headline, *a.why]
    apply = result.how_to_apply()
    if apply:
        lines += ["", "How to apply it:"]
        lines += [f"  {where}: {command}".replace("\n", "\n      ") for where, command in apply]
        lines.append(f"  {result.apply_note}")
    rows = result.rows()
    table = [(*_HEAD[:2], f"growth over {a.horizon:,} it." if a.horizon else "growth", "95%", *_HEAD[3:])]
    table += [(*c[:3], _interval(r).removeprefix("95%: ") or "\u2014", *c[3:])
              for r, c in ((r, _cells(r)) for r in rows)]
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *text, *(f"Note: {n}" for n in result.notes)])


# ------------------------------------------------------------------------------ HTML

# Cells wrap (a dashboard beside JupyterLab's sidebar is ~460 px wide at 900 px); figures do not.
_CELL = "padding:2px 3px;border-bottom:1px solid #ddd;vertical-align:top;text-align:left"
_NUM = _CELL.replace("text-align:left", "text-align:right") + ";font-variant-numeric:tabular-nums"
_FIGURE = "white-space:nowrap"
# The status column says how a variant ended, with a worker's error message: a long token there
# (a path, a repr) breaks anywhere rather than widen the table past the dashboard. A finished
# variant's status breaks only between words (at 900 px "finished" read "finishe / d"), and
# when every variant finished the column is left out: seven columns did not fit 468 px.
_STATUS = _CELL + ";overflow-wrap:anywhere"


def answer_box(result: Comparison) -> str:
    a = result.answer
    colour = ANSWER_COLOURS.get(a.kind, ANSWER_COLOURS["no-answer"])
    return (f'<div class="leakwidget-answer" data-kind="{escape(a.kind)}" style="background:{colour};'
            'color:white;padding:6px 10px;border-radius:4px;font-weight:bold;font-size:14px;'
            f'line-height:1.4">{escape(a.headline)}</div>')


def table_html(result: Comparison) -> str:
    horizon = result.answer.horizon
    head = ["variant", "verdict", f"growth over {horizon:,} iterations" if horizon else "growth",
            "slope / iteration", "final RSS", "attribution", "status"]
    rows = result.rows()
    status = any(row["status"] != "finished" for row in rows)
    if not status:
        head.pop()
    numeric = {2, 3, 4}
    th = "".join(f'<th style="{_NUM if i in numeric else _CELL};background:#f4f4f4;font-size:11px">{escape(h)}</th>'
                 for i, h in enumerate(head))
    body = []
    for row in rows:
        cells = list(_cells(row))[:len(head)]
        tds = []
        for i, text in enumerate(cells):
            inner = f'<span style="{_FIGURE}">{escape(text)}</span>' if i in numeric else escape(text)
            if i == 0:  # a long name breaks after _ and = rather than widen the table
                inner = re.sub(r"([_=])", r"\1<wbr>", inner)
            if i == 1:
                inner = f'<span style="color:{KIND_COLOURS.get(text, "#333")}">{inner}</span>'
            if i == 2 and _interval(row):
                low_high = format_range(row["growth_low"], row["growth_high"])
                inner += (f'<br><span style="color:#666;font-size:10px">95%: '
                          f'<span style="{_FIGURE}">{escape(low_high)}</span></span>')
            if i == 0 and row["best"]:
                inner = f'{inner} <span title="the fix">\u2714</span>'
            style = (_NUM if i in numeric else _STATUS if head[i] == "status" and row["status"] != "finished"
                     else _CELL)
            tds.append(f'<td style="{style}">{inner}</td>')
        body.append(f'<tr data-variant="{escape(row["variant"])}" data-status="{escape(row["status"])}" '
                    f'data-best="{str(row["best"]).lower()}">{"".join(tds)}</tr>')
    return ('<table class="leakwidget-compare-table" style="border-collapse:collapse;font-size:12px;'
            f'width:100%;margin:6px 0"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def _apply_html(result: Comparison) -> str:
    apply = result.how_to_apply()
    if not apply:
        return ""
    rows = "".join(f'<tr><td style="{_CELL}">{escape(where)}</td>'
                   f'<td style="{_CELL}"><code style="white-space:pre-wrap;overflow-wrap:anywhere">{escape(command)}</code></td></tr>'
                   for where, command in apply)
    return ('<div class="leakwidget-apply"><div style="font-weight:bold;margin:6px 0 2px">How to apply it'
            f'</div><table style="border-collapse:collapse;font-size:13px">{rows}</table>'
            f'<p style="margin:4px 0;color:#555">{escape(result.apply_note)}</p></div>')


def pane_html(result: Comparison) -> str:
    """What the dashboard shows under its headline: why, how to apply it, the table."""
    why = "".join(f'<p style="margin:0 0 4px">{escape(w)}</p>' for w in result.answer.why)
    return (f'<div class="leakwidget-compare" style="font-size:13px;line-height:1.45;overflow-x:auto">'
            f'{why}{_apply_html(result)}{table_html(result)}</div>')


def _chart(result: Comparison) -> str:
    try:
        picture = CHART.render(result)  # type: ignore[arg-type]  # a CompareResult is both
    except Exception:  # the answer and the table must show without the picture
        return ""
    if CHART.mime == "image/svg+xml":
        return f'<div class="chart">{picture}</div>'
    return f'<div class="chart"><img alt="RSS growth of each variant" src="data:{CHART.mime};base64,{picture}"></div>'


def compare_html(result: Comparison) -> str:
    """The notebook's display: the answer, the pane and the chart."""
    return f"<div>{answer_box(result)}{pane_html(result)}{_chart(result)}</div>"


def compare_page(result: Comparison) -> str:
    """The page ``CompareResult.save_html`` writes: self-contained, nothing fetched."""
    when = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    verdicts = "".join(f"<li><b>{escape(r['variant'])}</b>: {escape(r['summary'])}</li>" for r in result.rows())
    logs = "".join(f"<details><summary>{escape(name)}</summary><pre class=\"error\">{escape(text)}</pre></details>"
                   for name, text in result.worker_logs.items() if text.strip())
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in result.notes)
    body = [f"<h1>leakwidget: {escape(result.answer.headline)}</h1>",
            f'<div class="sub">Comparison written {escape(when)}</div>', answer_box(result),
            pane_html(result), _chart(result), notes, f"<h2>Each variant's verdict</h2><ul>{verdicts}</ul>",
            f"<h2>The workers' stderr</h2>{logs}" if logs else ""]
    return page(f"leakwidget: {result.answer.headline}", body)


HTML = Drawing("text/html", compare_html)  # a comparison's display in a notebook
PAGE = Drawing("text/html", compare_page)  # its page, whole (save_html)
