"""A result in a notebook: its text report and its chart, as two outputs.

A front end shows one MIME type of each output, the richest it can: given a result's
``text/plain`` and ``image/png`` together, JupyterLab, GitHub and nbviewer show the chart alone,
and the report that says what the chart means (the verdict, the attribution, the rates) is
hidden. So in a kernel where the extension is loaded, ``display(result)`` (and a result as a
cell's last value, and ``%%leakwatch --no-widget``) publishes the text first — plain, and as
HTML that wraps between words — then the chart. Elsewhere (a terminal, nbconvert without the
extension) the result's own mimebundle applies.
"""

from __future__ import annotations

from typing import Any

from ..engine.result import WatchResult
from ..report.render import text_bundle

CHART_ALT = "(the chart of this run: shown where images are)"


def show_result(result: WatchResult) -> bool:
    """Publish ``result`` as its text, then its chart (when one can be drawn)."""
    from IPython.display import display

    bundle = result._repr_mimebundle_()
    display(text_bundle(bundle["text/plain"]), raw=True)
    pictures = {mime: data for mime, data in bundle.items() if mime.startswith("image/")}
    if pictures:
        display({**pictures, "text/plain": CHART_ALT}, raw=True)
    return True


def register(ipython: Any) -> None:
    """Show results as text and chart in this shell, if it is a kernel's (a terminal prints
    the text report, as the plain mimebundle does)."""
    if getattr(ipython, "kernel", None) is not None:
        ipython.display_formatter.ipython_display_formatter.for_type(WatchResult, show_result)


def unregister(ipython: Any) -> None:
    ipython.display_formatter.ipython_display_formatter.type_printers.pop(WatchResult, None)
