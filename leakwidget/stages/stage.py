"""A recorded pipeline stage, the states it can take, and stage-id lists."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

StageState = Literal["on", "serial", "off"]
STAGE_STATES: tuple[StageState, ...] = get_args(StageState)


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
        """The states this stage can take, in the order a click cycles them: the one place
        the on/serial/off rules live (views show and validate with it)."""
        return tuple(s for s in STAGE_STATES
                     if s == "on" or (s == "serial" and self.parallel) or (s == "off" and self.toggleable))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "site": self.site, "args": dict(self.args),
            "inputs": list(self.inputs), "toggleable": self.toggleable,
            "parallel": self.parallel, "state": self.state, "states": list(self.states),
        }


# --------------------------------------------------------------------------------------------
# The session


def parse_ids(names: str | Iterable[str] | None, what: str) -> tuple[str, ...]:
    """Stage ids or kinds from "map@4,prefetch" or a list; stripped, empty ones dropped, each once."""
    if names is None:
        return ()
    if isinstance(names, str):
        names = names.split(",")
    out = []
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"{what}: stage ids must be strings, got {n!r}")
        n = n.strip()
        if n:
            out.append(n)
    return tuple(dict.fromkeys(out))
