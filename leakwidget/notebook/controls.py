"""The dashboard's row of buttons: Stop, Run again, Bisect, Try the fix, Native call stacks, Save
report.

A click goes to the engine's run-control state machine
(:class:`~leakwidget.engine.scheduler.Scheduler`), with the pipeline strip's wishes where the
next run takes them; which buttons are offered, and live, follows that state and the last
result. Save report is the view's own (it changes no run): it saves the answer shown. The DOM
classes are the contract the browser tests rely on (docs/widget.md).
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets

from ..engine.result import WatchResult
from ..engine.scheduler import Scheduler
from ..stages import Toggles


def _button(description: str, icon: str, name: str, tooltip: str = "", *, offered: bool = True,
            style: str = "") -> widgets.Button:
    """A button, disabled until a run makes it useful; one not ``offered`` is hidden too. As wide
    as its label (ipywidgets' fixed 148 px cut "Native call stacks" to "Native call sta…")."""
    return widgets.Button(description=description, icon=icon, disabled=True, button_style=style,
                          **({"tooltip": tooltip} if tooltip else {}),
                          layout=widgets.Layout(display=None if offered else "none", width="auto",
                                                min_width="148px"),
                          _dom_classes=[f"leakwidget-{name}"])


def _offer(button: widgets.Button, offered: bool) -> None:
    button.layout.display = None if offered else "none"
    button.disabled = not offered


class Controls(widgets.HBox):
    """The buttons, in a row that wraps (with room for more)."""

    def __init__(self, scheduler: Scheduler, wishes: Callable[[], Toggles], save: Callable[[], object]) -> None:
        self.stop_button = _button("Stop", "stop", "stop", style="danger")
        self.run_again_button = _button("Run again", "repeat", "run-again", "Run the step again, with "
                                        "the pipeline strip's on / serial / off choices")
        self.bisect_button = _button("Bisect", "search", "bisect", "Find the stage(s) whose being on "
                                     "makes memory grow", offered=False)
        # Offered when the growth is memory the allocator keeps: the same watch under other
        # allocators, side by side (an allocator only acts on a process started with it).
        self.try_fix_button = _button(
            "Try the fix", "flask", "try-fix", "Run the step under glibc, MALLOC_ARENA_MAX=2, jemalloc "
            "and tcmalloc, each in a fresh worker, and compare their growth", offered=False)
        # Offered when the growth is native memory seen without its call stacks: the same watch
        # again with memray tracing a window of iterations (--native).
        self.native_button = _button(
            "Native call stacks", "sitemap", "native", "Run the step again with memray tracing a window "
            "of iterations, to see the C/C++ and Python call stacks of the memory allocated and not "
            "freed", offered=False)
        # The answer shown (a watch's, a bisection's, a comparison's) as one self-contained page.
        self.save_button = _button("Save report", "download", "save", "Save the answer shown as one "
                                   "self-contained HTML page in the notebook's folder")
        super().__init__([self.stop_button, self.run_again_button, self.bisect_button, self.try_fix_button,
                          self.native_button, self.save_button], layout=widgets.Layout(flex_flow="row wrap"),
                         _dom_classes=["leakwidget-controls"])
        self.scheduler = scheduler
        self.stop_button.on_click(lambda _b: scheduler.stop())
        self.run_again_button.on_click(lambda _b: scheduler.run_again(wishes()))
        self.bisect_button.on_click(lambda _b: scheduler.bisect(wishes()))
        self.try_fix_button.on_click(lambda _b: scheduler.try_fix(wishes()))
        self.native_button.on_click(lambda _b: scheduler.native_stacks(wishes()))
        self.save_button.on_click(lambda _b: save())

    def started(self) -> None:
        self.stop_button.disabled = False
        self.run_again_button.disabled = False

    def finished(self, result: WatchResult) -> None:
        """A run ended: what its attribution calls for is offered (not in a bisection's midst)."""
        att, idle = result.attribution, not self.scheduler.bisecting
        _offer(self.try_fix_button, idle and att is not None and att.kind == "allocator")
        _offer(self.native_button, idle and att is not None and att.kind == "native"
               and att.native_window is None)
        self.stop_button.disabled = True
        self.run_again_button.disabled = False
        self.save_button.disabled = False

    def offer_bisect(self, toggleable: bool) -> None:
        """Bisect is offered when a stage can be switched off, and rests while a search runs."""
        self.bisect_button.layout.display = None if toggleable else "none"
        self.bisect_button.disabled = not toggleable or self.scheduler.bisecting
