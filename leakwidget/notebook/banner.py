"""The verdict banner and the note under it, as HTML."""

from __future__ import annotations

import html

from ..report.svg import KIND_COLOURS


def banner_html(kind: str, summary: str, projection: str, running: bool) -> str:
    colour = KIND_COLOURS.get(kind, KIND_COLOURS["inconclusive"])
    # Verdict summaries start with their kind ("Leak: ..."); only other texts get a heading.
    word = kind.capitalize()
    heading = "" if summary.startswith(word) else f"<b>{html.escape(word)}</b> "
    proj = (f' <span class="leakwidget-projection" style="font-weight:bold">{html.escape(projection)}</span>'
            if projection else "")
    return (
        f'<div class="leakwidget-verdict" data-kind="{html.escape(kind)}" '
        f'data-running="{str(running).lower()}" style="background:{colour};color:white;'
        f'padding:6px 10px;border-radius:4px;font-size:13px;line-height:1.4">'
        f"{heading}"
        f'<span class="leakwidget-summary">{html.escape(summary)}</span>{proj}</div>'
    )


def note_html(text: str) -> str:
    return f'<div style="color:#555;font-size:12px">{html.escape(text)}</div>' if text else ""
