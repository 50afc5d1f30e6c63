"""How a result is drawn: renderers, chosen through one small Protocol (as memray's reporters).

A renderer turns a finished result into a document of one media type. Whoever shows a result
picks the renderers it needs and imports them where it does — nothing is registered anywhere:
a ``WatchResult`` shows its chart (:data:`.chart.CHART`, a PNG) beside its text in a notebook
and writes its page (:data:`.html.PAGE`) in ``save_html``; a ``CompareResult`` shows its
overlaid chart (:data:`.compare.CHART`); the dashboard shows its last result's bundle;
``leakwidget report`` writes the page of a saved result.

Text that is all there is to show also goes as ``text/html``, a ``<pre>`` that wraps on words:
JupyterLab shows ``text/plain`` with ``word-break: break-all``, which cuts "steady" into
"stea" and "dy" at the edge of a narrow notebook (its sanitizer keeps these styles, so the fix
holds in an untrusted notebook too). Beside a picture the text stays plain: a front end shows
one representation, and ``text/html`` would hide the chart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Renderer(Protocol[T_contra]):
    """Draws a result as a document of one media type."""

    @property
    def mime(self) -> str: ...

    def render(self, result: T_contra) -> str: ...


@dataclass(frozen=True)
class Drawing(Generic[T]):
    """A renderer made of a media type and the function that draws."""

    mime: str
    draw: Callable[[T], str]

    def render(self, result: T) -> str:
        return self.draw(result)


def text_bundle(text: str) -> dict[str, str]:
    """Text to show in a notebook: plain, and as HTML whose sentences wrap on words, not inside
    them, while an indented line (a table's row) stays whole and scrolls sideways: wrapped, a
    column's figures fell under the next row's name at 900 px."""
    html = "\n".join(f'<span style="{KEEP_WHOLE}">{escape(line)}</span>' if line[:1].isspace()
                     else escape(line) for line in text.split("\n"))
    return {"text/plain": text, "text/html": f'<pre style="{WRAP_ON_WORDS}">{html}</pre>'}


# width 0, min-width 100%: the block fills its output and adds nothing to the width of the table
# cell JupyterLab puts it in (a whole row would otherwise widen the output past the window).
WRAP_ON_WORDS = ("white-space: pre-wrap; word-break: normal; overflow-wrap: break-word; margin: 0; "
                 "overflow-x: auto; display: block; width: 0; min-width: 100%")
KEEP_WHOLE = "white-space: pre"


def mimebundle(result: Any, renderers: Iterable[Renderer[Any]]) -> dict[str, str]:
    """What a notebook shows of ``result``: its text, and what each renderer draws. A picture
    that cannot be drawn leaves the text alone: the text report must always show, with one
    line saying why when a library the picture needs is missing (matplotlib is optional)."""
    text, pictures = str(result), {}
    for renderer in renderers:
        try:
            pictures[renderer.mime] = renderer.render(result)
        except ImportError as exc:  # an optional dependency: its message says how to get it
            text += f"\n{exc}"
        except Exception:  # the text report is the part that must always show
            pass
    return {"text/plain": text, **pictures} if pictures else text_bundle(text)
