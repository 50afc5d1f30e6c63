"""The pipeline strip: the recorded stages, left to right; a click cycles a stage's states.

Drawn by an anywidget whose front end is ``js/src/pipeline.js`` (one source: an installed wheel
carries it as ``leakwidget/static/pipeline.js``). Which states a stage can take, and why not
more, come from :class:`leakwidget.stages.Stage`; the strip only shows and validates them, and
sends the user's wishes as :class:`~leakwidget.stages.Toggles`.

What the kernel changes reaches the page in a new view, never as an update of the one shown.
anywidget's front end (0.11) gives a model 2 s to load its module; one that takes longer (a
page starved of CPU beside a busy kernel: twice in the suite at five workers on two cores)
drops every update sent to it afterwards, silently, and keeps what it had at its creation. The
strip then stayed empty while the run it belonged to had recorded every stage. A widget's first
state travels in its ``comm_open``, which is never dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anywidget
import ipywidgets as widgets
import traitlets

from ..stages import STAGE_STATES, WHY_NO_SERIAL, Stage, Toggles
from ..stages.tfdata.pseudo import PSEUDO_STAGES

MAX_STAGES = 200  # a strip wider than this is unreadable anyway

_PACKAGED = Path(__file__).resolve().parent.parent / "static"
_SOURCE = Path(__file__).resolve().parents[2] / "js" / "src"


def js_module(name: str) -> Path:
    """A front-end ES module: the wheel's copy when installed, else the checkout's source."""
    packaged = _PACKAGED / name
    return packaged if packaged.is_file() else _SOURCE / name


def strip_module() -> Path:
    """The strip's ES module."""
    return js_module("pipeline.js")


def stage_dict(stage: Stage) -> dict:
    """A recorded Stage as the JSON dict the strip draws (reprs only: nothing live is synced).

    ``group`` puts TensorFlow's own options (switched through ``tf.data.Options``) apart from
    the stages the user's code built; ``why`` says why a click cannot switch it off, or why it
    has no serial form."""
    d = stage.to_dict()
    d["args"] = {str(k): str(v) for k, v in d["args"].items()}
    d["group"] = "tensorflow" if stage.id in PSEUDO_STAGES else "pipeline"
    if not stage.toggleable:
        d["why"] = f"Cannot be switched off: {stage.why_fixed}."
    elif not stage.parallel:
        d["why"] = f"No serial form: {WHY_NO_SERIAL}."
    else:
        d["why"] = ""
    return d


class StripView(anywidget.AnyWidget):
    """One drawing of the strip, made with the state it shows (:class:`PipelineStrip`)."""

    _esm = strip_module()
    stages = traitlets.List(traitlets.Dict()).tag(sync=True)
    states = traitlets.Dict().tag(sync=True)
    culprits = traitlets.List(traitlets.Unicode()).tag(sync=True)
    disabled = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        # Classes given at construction travel in comm_open, so a front end (or a test reading
        # the kernel's messages) can find the widget from its first message.
        kwargs.setdefault("_dom_classes", ["leakwidget-pipeline"])
        super().__init__(**kwargs)


_DRAWN = ("stages", "states", "culprits", "disabled")


class PipelineStrip(widgets.Box):
    """``states`` holds the user's wishes ({stage id: state}); they apply at the next Run again
    (a running pipeline cannot be rewired). ``culprits`` are the stage ids a bisection blamed.

    The traits live here, in the kernel; the page shows :attr:`view`, a :class:`StripView`
    made anew with them whenever the kernel changes one (see the module's docstring). A click
    in the page changes the view's ``states``, which come back here validated."""

    stages = traitlets.List(traitlets.Dict())
    states = traitlets.Dict()
    culprits = traitlets.List(traitlets.Unicode())
    disabled = traitlets.Bool(False)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("_dom_classes", ["leakwidget-strip"])
        super().__init__(**kwargs)
        self.view: StripView | None = None
        self._lock = threading.RLock()  # the publisher's thread and the kernel's both draw
        self._held = False
        self.observe(self._changed, names=list(_DRAWN))
        self._draw()

    def show(self, stages: Sequence[Stage], **also: Any) -> None:
        """Show ``stages``; ``also``: other traits to change with them, drawn once."""
        self.assign(stages=[stage_dict(s) for s in list(stages)[:MAX_STAGES]], **also)

    def assign(self, **values: Any) -> None:
        """Change several of ``stages``, ``states``, ``culprits`` and ``disabled`` (set in that
        order), drawn once, and only if one changed."""
        with self._lock:
            before = {name: getattr(self, name) for name in _DRAWN}
            self._held = True
            try:
                for name in _DRAWN:
                    if name in values:
                        setattr(self, name, values[name])
            finally:
                self._held = False
            if any(getattr(self, name) != before[name] for name in _DRAWN):
                self._draw()

    @traitlets.validate("states")
    def _valid_states(self, proposal: dict) -> dict:
        # The front end is not trusted to know the rules: drop states a stage cannot take.
        allowed = {s["id"]: s["states"] for s in self.stages}
        return {str(sid): state for sid, state in dict(proposal["value"]).items()
                if state in STAGE_STATES and state in allowed.get(sid, STAGE_STATES)}

    def _changed(self, _change: dict) -> None:
        with self._lock:  # (another thread's assign() holds it until it has drawn)
            if not self._held:
                self._draw()

    def _draw(self) -> None:
        with self._lock:
            old, self.view = self.view, StripView(**{name: getattr(self, name) for name in _DRAWN})
            self.view.observe(self._clicked, names="states")
            self.children = (self.view,)
            if old is not None:
                old.close()

    def _clicked(self, change: dict) -> None:
        """A click in the page: the view shows it already, unless the rules changed it."""
        with self._lock:
            self._held = True
            try:
                self.states = change["new"]
            finally:
                self._held = False
            if self.states != change["new"]:
                self._draw()

    def effective_states(self) -> dict[str, str]:
        """State of every recorded stage: the user's wish, else what the last run recorded."""
        return {s["id"]: self.states.get(s["id"], s["state"]) for s in self.stages}

    def toggles(self) -> Toggles:
        """What the next run asks of the stages shown (see :meth:`Toggles.from_strip`)."""
        return Toggles.from_strip(self.effective_states(), [s["kind"] for s in self.stages])
