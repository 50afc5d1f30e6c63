"""Pages of results that are several runs — a bisection's configurations — and the page shell
they share with a comparison's (:mod:`.comparison`): self-contained, the report's style inline,
nothing fetched. A watch's own page is :mod:`.html`'s."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from html import escape
from typing import Any, Protocol

from ..engine.units import format_bytes
from .colours import KIND_COLOURS
from .html import STYLE
from .render import Drawing

__all__ = ["BISECT_PAGE", "Bisected", "page"]


def page(title: str, body: Sequence[str]) -> str:
    """A self-contained page of ``body``'s parts (empty ones left out)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(part for part in body if part) + "\n</body></html>\n")


class Bisected(Protocol):
    """What the page reads of a bisection (a BisectResult)."""

    summary: str
    notes: Sequence[str]

    def to_dict(self) -> dict[str, Any]: ...


def _configuration_row(c: dict[str, Any]) -> str:
    off = ", ".join(c["off"]) + (f" | serial: {', '.join(c['serial'])}" if c["serial"] else "")
    slope = "" if c["slope"] is None else format_bytes(c["slope"], signed=True)
    reproduces = "error" if c["error"] else {True: "yes", False: "no", None: ""}[c["reproduces"]]
    cells = [str(c["index"]), c["label"], off or "\u2014", c["verdict"] or "\u2014", slope,
             f"{c['iterations'] or 0:,}", reproduces]
    return "<tr>" + "".join(f'<td class="num">{escape(x)}</td>' if i in (0, 4, 5) else f"<td>{escape(x)}</td>"
                            for i, x in enumerate(cells)) + "</tr>"


def bisect_page(result: Bisected) -> str:
    """The page ``BisectResult.save_html`` writes: the answer, every configuration run, the notes."""
    doc = result.to_dict()
    kind = "leak" if doc["culprits"] or doc["outside"] else "inconclusive"
    when = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    head = "".join(f"<th>{h}</th>" for h in ("#", "configuration", "off", "verdict", "slope/iter",
                                            "iterations", "reproduces"))
    rows = "".join(_configuration_row(c) for c in doc["configurations"])
    return page(f"leakwidget bisection: {result.summary}", [
        "<h1>leakwidget: a bisection</h1>", f'<div class="sub">Report written {escape(when)}</div>',
        f'<section class="verdict" data-kind="{kind}" style="background:{KIND_COLOURS[kind]}">'
        f'<div class="summary">{escape(result.summary)}</div></section>',
        f"<h2>Configurations</h2><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>",
        "".join(f'<p class="note">{escape(n)}</p>' for n in result.notes),
    ])


BISECT_PAGE = Drawing("text/html", bisect_page)
