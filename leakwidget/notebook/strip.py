"""The pipeline strip: the recorded stages, left to right; a click cycles a stage's states.

An anywidget whose front end is ``js/src/pipeline.js`` (one source: an installed wheel carries it
as ``leakwidget/static/pipeline.js``). Which states a stage can take, and why not more, come from
:class:`leakwidget.stages.Stage`; the strip only shows and validates them, and sends the user's
wishes as :class:`~leakwidget.stages.Toggles`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anywidget
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


class PipelineStrip(anywidget.AnyWidget):
    """``states`` holds the user's wishes ({stage id: state}); they apply at the next Run again
    (a running pipeline cannot be rewired). ``culprits`` are the stage ids a bisection blamed."""

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

    def show(self, stages: Sequence[Stage]) -> None:
        self.stages = [stage_dict(s) for s in list(stages)[:MAX_STAGES]]

    @traitlets.validate("states")
    def _valid_states(self, proposal: dict) -> dict:
        # The front end is not trusted to know the rules: drop states a stage cannot take.
        allowed = {s["id"]: s["states"] for s in self.stages}
        return {str(sid): state for sid, state in dict(proposal["value"]).items()
                if state in STAGE_STATES and state in allowed.get(sid, STAGE_STATES)}

    def effective_states(self) -> dict[str, str]:
        """State of every recorded stage: the user's wish, else what the last run recorded."""
        return {s["id"]: self.states.get(s["id"], s["state"]) for s in self.stages}

    def toggles(self) -> Toggles:
        """What the next run asks of the stages shown (see :meth:`Toggles.from_strip`)."""
        return Toggles.from_strip(self.effective_states(), [s["kind"] for s in self.stages])
