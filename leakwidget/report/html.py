"""The report a watch leaves to share: one self-contained HTML page.

``result.save_html(path)`` (and ``leakwidget run --html``, ``leakwidget report RESULT.json``) write
one file with everything inline — the chart (RSS and step time, drawn by :mod:`.chart` with
matplotlib) as SVG, the styles in a
``<style>`` element, no script, no font, no image fetched — so it opens offline in any browser,
as a mail attachment or a CI artifact. Its sections: the verdict (with rates per iteration,
second and hour, and the time until memory runs out), the charts, the attribution's tables,
the pipeline stages, the configuration (and the watched program, for the command line), and the
environment (versions, the allocator, the machine's memory).

The page is rendered from the result's exported form (``result.to_dict()``, the JSON the command
line saves), so a saved result renders exactly as a live one.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Protocol

import numpy as np

from ..engine.kinds import reading, shown_kind
from ..engine.units import format_bytes, format_duration, rss_travel, trim_line
from ..engine.verdict import Verdict, read_summary
from .chart import projection_text, render_svg
from .colours import KIND_COLOURS
from .figure import ChartUnavailable
from .rates import rates
from .render import Drawing

__all__ = ["PAGE", "Exported", "SavedChild", "SavedRun", "render_html", "render_result_html"]

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:980px;
color:#222;padding:0 16px;line-height:1.45}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;font-size:12px}
.verdict{color:white;padding:10px 14px;border-radius:6px;margin:14px 0}
.verdict .kind{font-weight:bold;text-transform:uppercase;letter-spacing:.04em;font-size:12px}
.verdict .summary{font-size:15px;margin-top:2px}.verdict .more{margin-top:6px;font-size:13px;opacity:.95}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.chart svg{max-width:100%;height:auto;border:1px solid #eee}
.error{background:#fdecea;border:1px solid #f5c2c0;padding:8px 12px;border-radius:4px;white-space:pre-wrap;
font-family:ui-monospace,monospace;font-size:12px}
.note{color:#555;font-size:13px}code{font-size:12px}
"""


@dataclasses.dataclass
class SavedCopy:
    """What the chart reads of a saved child's copy-on-write test."""

    copying: bool


@dataclasses.dataclass
class SavedChild:
    """A child process in a result's exported form, as the chart reads it (report.workers.Child)."""

    number: int
    samples: np.ndarray  # (seconds, private bytes)
    copying: SavedCopy | None  # None: not forked from the watched tree

    @classmethod
    def of(cls, doc: Mapping) -> SavedChild:
        samples = np.asarray(doc.get("samples") or [], dtype=float)
        copy = doc.get("copying")
        return cls(int(doc.get("number") or 0), samples.reshape(-1, 2) if samples.size else np.zeros((0, 2)),
                   None if copy is None else SavedCopy(bool(copy.get("copying"))))


class SavedRun:
    """A result in its exported form, with what the chart reads of a WatchResult:
    ``samples``, ``verdict``, ``children`` and ``column(name)``."""

    def __init__(self, doc: Mapping) -> None:
        self.doc = doc
        saved = doc.get("verdict") or {"kind": "inconclusive"}
        v = {f.name: saved[f.name] for f in dataclasses.fields(Verdict) if f.name in saved}
        v["fit"] = [tuple(p) for p in v.get("fit") or []]
        v["slope_low"] = _number(v.get("slope_low"), float("-inf"))
        v["slope_high"] = _number(v.get("slope_high"), float("inf"))
        self.verdict = Verdict(**v)
        samples = np.asarray(doc.get("samples") or [], dtype=float)
        self.samples = samples.reshape(-1, 2) if samples.size else np.zeros((0, 2))
        self._rows = doc.get("iterations") or []
        self.children = [SavedChild.of(c) for c in doc.get("children") or []]
        # Growth the attribution found the program does not keep (the allocator's, garbage) is
        # not called a leak, nor one whose garbage hides a part unsettled (as on the dashboard
        # and in str(result): WatchResult.reading).
        att = doc.get("attribution") or {}
        self.reading = reading(self.verdict.kind, att.get("kind"), att.get("kept_unsettled"))
        self.retention = self.reading == "retention"
        self.unsettled = self.reading == "unsettled"
        self.summary = read_summary(self.verdict, self.reading, att.get("kept_unsettled"),
                                    att.get("kept_behind"))
        # Forked workers copying what they share are the story (result.copying, saved).
        cow = doc.get("copy_on_write") or {}
        self.copying = bool(cow) and bool(cow.get("explains", True))
        if self.copying and cow.get("summary"):
            self.summary = cow["summary"]

    def column(self, name: str) -> np.ndarray:
        return np.asarray([row[name] for row in self._rows], dtype=float)


class Exported(Protocol):
    """What the page reads of a result: its exported form (a WatchResult's JSON)."""

    def to_json(self) -> str: ...


def render_result_html(result: Exported) -> str:
    """The page of a result (what ``WatchResult.save_html`` writes)."""
    return render_html(json.loads(result.to_json()))


def render_html(doc: Mapping) -> str:
    """The page of a result's exported form (``result.to_dict()`` / the saved JSON)."""
    run = SavedRun(doc)
    label = (doc.get("config") or {}).get("label") or ""
    title = f"leakwidget: {run.verdict.kind}" + (f" \u2014 {label}" if label else "")
    when = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<div class="sub">Report written {escape(when)} by leakwidget '
        f'{escape(str((doc.get("environment") or {}).get("libraries", {}).get("leakwidget", "")))}</div>',
        _verdict_section(run, doc),
        _charts_section(run),
        _attribution_section(doc.get("attribution")),
        _stages_section(doc.get("stages") or [], doc.get("stage_notes") or []),
        _config_section(doc.get("config") or {}, doc.get("program")),
        _environment_section(doc.get("environment")),
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


# ------------------------------------------------------------------------------ sections


def _verdict_section(run: SavedRun, doc: Mapping) -> str:
    v = run.verdict
    kind = shown_kind(v.kind, run.reading, run.copying)
    summary = run.summary
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])
    more = []
    r = rates(v, run.column("index"), run.column("end")) if doc.get("iterations") else None
    if r is not None and v.kind in ("leak", "inconclusive", "plateau"):
        more.append(f"Rate: {r.text()}.")
    proj = projection_text(v)
    if proj and "runs out" not in v.summary:
        more.append(proj)
    rss = run.column("rss")
    count = doc.get("iteration_count", len(rss))
    line = f"{count:,} iterations in {format_duration(float(doc.get('elapsed') or 0))}"
    line += f" (stopped: {doc.get('stopped')})"
    if rss.size:
        line += "; " + rss_travel(doc.get("baseline_rss") or rss[0], rss[0], rss[-1], run.column("peak_rss").max())
    more.append(line + ".")
    out = [
        f'<section class="verdict" data-kind="{escape(kind)}" style="background:{colour}">'
        f'<div class="kind">{escape(kind)}</div>'
        f'<div class="summary">{escape(summary)}</div>'
        + "".join(f'<div class="more">{escape(m)}</div>' for m in more)
        + "</section>"
    ]
    if doc.get("error"):
        where = ("the setup" if doc.get("error_iteration") is None
                 else f"iteration {doc['error_iteration']}")
        out.append(f'<div class="error">Error in {escape(where)}: {escape(str(doc["error"]))}</div>')
    return "\n".join(out)


def _charts_section(run: SavedRun) -> str:
    try:
        chart = render_svg(run)  # reads samples, verdict, column()
    except ChartUnavailable as exc:
        chart = f'<p class="note">{escape(str(exc))}</p>'
    return f'<h2>Memory and step time</h2>\n<div class="chart" id="chart">{chart}</div>'


def _garbage_bytes(att: Mapping) -> float | None:
    """The garbage an iteration left (garbage.py), where the saved form has a number for it."""
    g = att.get("garbage")
    b = g.get("bytes") if isinstance(g, Mapping) else None
    return float(b) if isinstance(b, (int, float)) else None


def _attribution_section(att: Mapping | None) -> str:
    if not att:
        return ('<h2>What grows</h2><p class="note">No attribution: this watch saw the process '
                "only from outside (its memory), or attribution was switched off.</p>")
    out = ["<h2>What grows</h2>", f"<p>{escape(att.get('summary') or att.get('kind', ''))}</p>"]
    if att.get("kind") != "none":
        out.append(_table(["", "per iteration"], [
            ["RSS", format_bytes(att.get("rss_slope") or 0, signed=True)],
            [f"Python objects ({att.get('python_source') or 'none'})",
             format_bytes(att.get("python_slope") or 0, signed=True)],
            ["native (the rest)", format_bytes(att.get("native_slope") or 0, signed=True)],
            *([["malloc's bytes in use", format_bytes(att["in_use_slope"], signed=True)]]
              if att.get("in_use_slope") is not None and att.get("growth_of") != "plateau" else []),
            *([["garbage awaiting the cycle collector", format_bytes(att["garbage"]["bytes"])]]
              if _garbage_bytes(att) is not None and att.get("growth_of") != "plateau" else []),
        ], numeric=(1,)))
        if att.get("reclaimed_bytes") is not None:
            out.append(f'<p class="note">{escape(trim_line(att["reclaimed_bytes"], att.get("growth_bytes")))}</p>')
    out.extend(_attribution_tables(att))
    out.extend(f'<p class="note">Note: {escape(n)}</p>' for n in att.get("notes") or [])
    return "\n".join(out)


def _attribution_tables(att: Mapping) -> list[str]:
    out = []
    if att.get("top_types"):
        out.append("<h3>Growing Python objects</h3>")
        out.append(_table(["type", "count/iteration", "bytes/iteration", "steady"], [
            [t["name"], f"{t['per_iteration']:+.2f}", format_bytes(t["bytes_per_iteration"], signed=True),
             {True: "yes", False: "no", None: "?"}[t.get("steady")]] for t in att["top_types"]
        ], numeric=(1, 2)))
    if att.get("top_sites"):
        out.append("<h3>Growing allocation sites (tracemalloc)</h3>")
        out.append(_table(["site", "bytes/iteration", "blocks/iteration", "source"], [
            [s["site"], format_bytes(s["bytes_per_iteration"], signed=True),
             f"{s['blocks_per_iteration']:+.1f}", s.get("source", "")] for s in att["top_sites"]
        ], numeric=(1, 2)))
    if att.get("lines"):
        out.append("<h3>Lines of the step</h3>")
        out.append(_table(["line", "total", "grew in", "source"], [
            [f"{ln['filename']}:{ln['lineno']}", format_bytes(ln["total_increment"], signed=True),
             f"{ln['grew_share']:.0%}", ln.get("source", "")] for ln in att["lines"]
        ], numeric=(1, 2)))
    return out


def _stages_section(stages: Sequence[Mapping], notes: Iterable[str]) -> str:
    out = ["<h2>Pipeline stages</h2>"]
    if stages:
        out.append(_table(["id", "kind", "state", "parallel", "toggleable", "inputs", "arguments"], [
            [s["id"], s["kind"], s["state"], "yes" if s.get("parallel") else "no",
             "yes" if s.get("toggleable") else "no", ", ".join(s.get("inputs") or []),
             ", ".join(f"{k}={v}" for k, v in (s.get("args") or {}).items())] for s in stages
        ]))
    else:
        out.append('<p class="note">No tf.data stage or @leakwidget.stage function ran in this watch.</p>')
    out.extend(f'<p class="note">{escape(n)}</p>' for n in notes)
    return "\n".join(out)


def _config_section(config: Mapping, program: Mapping | None) -> str:
    rows = [
        ["label", config.get("label") or "\u2014"],
        ["stages off", ", ".join(config.get("off") or []) or "\u2014"],
        ["stages serial", ", ".join(config.get("serial") or []) or "\u2014"],
        ["iterations", _or_dash(config.get("iterations"))],
        ["seconds", _or_dash(config.get("seconds"))],
        ["warm-up", _or_dash(config.get("warmup"), "detected")],
        ["max RSS", format_bytes(config["max_rss"]) if config.get("max_rss") else "\u2014"],
    ]
    out = ["<h2>Configuration</h2>", _table(["option", "value"], rows)]
    if program:
        out.append("<h3>Watched program</h3>")
        out.append(_table(["", ""], [[k.replace("_", " "), _plain(v)] for k, v in program.items()]))
    return "\n".join(out)


def _environment_section(env: Mapping | None) -> str:
    if not env:
        return '<h2>Environment</h2><p class="note">Not recorded in this result.</p>'
    rows = [
        ["Python", f"{env.get('python', '?')} ({env.get('implementation', '')})"],
        ["platform", env.get("platform", "?")],
        ["CPUs", _or_dash(env.get("cpus"))],
        ["machine memory", (f"{format_bytes(env['memory_total'])} total, "
                            f"{format_bytes(env['memory_available'])} available at the end")
         if env.get("memory_total") else "\u2014"],
        ["allocator", env.get("allocator", "?")],
        ["C library", env.get("libc") or "\u2014"],
    ]
    rows += [[k, v] for k, v in (env.get("allocator_variables") or {}).items()]
    rows += [[k, v] for k, v in (env.get("libraries") or {}).items()]
    return "<h2>Environment</h2>\n" + _table(["", ""], rows)


# ------------------------------------------------------------------------------ pieces


def _table(header: list[str], rows: list[list], numeric: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{escape(_plain(c))}</td>' if i in numeric else f"<td>{escape(_plain(c))}</td>"
            for i, c in enumerate(row)
        ) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plain(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v)
    return "\u2014" if v is None else str(v)


def _or_dash(v: object, dash: str = "\u2014") -> str:
    return dash if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def _number(v: object, default: float) -> float:
    return default if v is None else float(v)


PAGE = Drawing("text/html", render_result_html)  # a result's page, whole (save_html)
