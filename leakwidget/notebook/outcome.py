"""What the dashboard's headline last answered — a watch, a bisection or a comparison — the
comparison's pane (why, how to apply the fix, the table), and **Save report** of it.

Save report writes the answer shown as one self-contained page (``save_html`` of the result) in
the kernel's working folder, named after what it is and when, and says the file's name.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from typing import Protocol

import ipywidgets as widgets

from ..engine.result import WatchResult
from ..engine.search import BisectResult
from ..engine.workers.compare import CompareResult
from ..report.comparison import pane_html

__all__ = ["Outcome"]


class Savable(Protocol):
    def save_html(self, path: str) -> None: ...


def report_name(result: Savable, when: _dt.datetime | None = None) -> str:
    """'leakwidget-comparison-20260301-142233.html' (a watch, a bisection, a comparison)."""
    what = {CompareResult: "comparison", BisectResult: "bisection"}.get(type(result), "watch")
    return f"leakwidget-{what}-{(when or _dt.datetime.now()).strftime('%Y%m%d-%H%M%S')}.html"


class Outcome:
    """The last answer shown, and the comparison's pane (hidden unless a comparison is shown)."""

    def __init__(self) -> None:
        # Scrolls rather than spill over the charts should a table be wider than the dashboard.
        self.pane = widgets.HTML("", layout=widgets.Layout(display="none", overflow="auto"),
                                 _dom_classes=["leakwidget-compare-pane"])
        self.shown: WatchResult | BisectResult | CompareResult | None = None

    def show(self, result: WatchResult | BisectResult | CompareResult) -> None:
        self.shown = result
        if isinstance(result, CompareResult):
            self.pane.value = pane_html(result)
            self.pane.layout.display = None
        else:
            self.hide_pane()

    def hide_pane(self) -> None:
        """A new run began: the pane described the comparison before it."""
        self.pane.layout.display = "none"

    def save(self, path: str | None = None, say: Callable[[str], None] = print) -> str | None:
        """Write the shown answer's page to ``path`` (default: a new name in the working folder)
        and ``say`` where; its absolute path, or None (said why) when nothing was saved."""
        if self.shown is None:
            say("Nothing to save yet: run a watch first.")
            return None
        path = os.path.abspath(path or report_name(self.shown))
        # Drawing a comparison's page takes seconds on a busy machine: say it is under way.
        say(f"Saving the report to {os.path.basename(path)}…")
        try:
            self.shown.save_html(path)
        except OSError as exc:
            say(f"The report was not saved: {exc}")
            return None
        say(f"Saved the report: {path}")
        return path
