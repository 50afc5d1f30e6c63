"""A recorded pipeline stage, the states it can take, and stage-id lists.

The on / serial / off rules live here, once: which states a stage can take (:attr:`Stage.states`),
what it runs as when asked for one it cannot take (:meth:`Stage.takes`), and why
(:attr:`Stage.why_fixed`, :data:`WHY_NO_SERIAL`). Sessions, views and the bisection ask the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

StageState = Literal["on", "serial", "off"]
STAGE_STATES: tuple[StageState, ...] = get_args(StageState)  # in click order: on, serial, off

# Why a stage cannot be switched off, by kind: the strip's hover text and the note of a run that
# asked for it say it. Kinds not listed get the "" entry.
WHY_FIXED = {
    "batch": "it makes the batches the rest of the pipeline receives",
    "padded_batch": "it makes the batches the rest of the pipeline receives",
    "repeat": "it sets the number of epochs, how many elements there are",
    "from_generator": "it is the source of the elements",
    "TFRecordDataset": "it is the source; off means one reader, and it has only one",
    "": "it has no neutral substitute: it is a source, or the rest of the pipeline needs its "
        "output as it is",
}
WHY_NO_SERIAL = "it already works on one element at a time, so a click switches it between on and off"


@dataclass
class Stage:
    """One recorded pipeline stage.

    ``toggleable``: it can be switched off (replaced by a neutral substitute).
    ``parallel``: it has parallelism that ``serial`` removes.
    ``state``: what this session did with it: "on", "serial" or "off".
    """

    id: str
    kind: str
    site: str
    args: dict[str, str] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    toggleable: bool = False
    parallel: bool = False
    state: StageState = "on"

    @property
    def states(self) -> tuple[StageState, ...]:
        """The states this stage can take, in the order a click cycles them (views show and
        validate with it): serial only with parallelism, off only with a neutral substitute."""
        return tuple(s for s in STAGE_STATES
                     if s == "on" or (s == "serial" and self.parallel) or (s == "off" and self.toggleable))

    def takes(self, wanted: StageState) -> StageState:
        """What this stage runs as when ``wanted`` is asked of it: the state farthest from on
        that it can take, no farther than asked (off without a substitute is serial if it has
        parallelism, else on; serial without parallelism is on)."""
        rank = STAGE_STATES.index
        return max((s for s in self.states if rank(s) <= rank(wanted)), key=rank)

    @property
    def off_state(self) -> StageState:
        """The state that takes it out of the pipeline as far as it goes (what a bisection
        runs it as when it is not searched as "on"): off, or serial without a substitute."""
        return self.states[-1]

    @property
    def why_fixed(self) -> str:
        """Why it cannot be switched off ("" when it can)."""
        return "" if self.toggleable else WHY_FIXED.get(self.kind, WHY_FIXED[""])

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "site": self.site, "args": dict(self.args),
            "inputs": list(self.inputs), "toggleable": self.toggleable,
            "parallel": self.parallel, "state": self.state, "states": list(self.states),
        }

