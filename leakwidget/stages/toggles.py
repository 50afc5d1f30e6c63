"""What a run asks of its stages: :class:`Toggles`, stage id or kind -> on / serial / off.

The one value a toggle travels as. It is parsed once — from ``--off``/``--serial`` or
``watch(off=..., serial=...)`` (:meth:`Toggles.parse`), from the pipeline strip's dict
(:meth:`Toggles.from_strip`), or made by the bisection for each configuration — then carried by
the ``WatchSpec`` and consulted by the ``StageSession`` as each stage is recorded
(:meth:`Toggles.wanted`). What a stage then runs as is the stage's own rule
(:meth:`~.stage.Stage.takes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .stage import STAGE_STATES, Stage, StageState


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


@dataclass(frozen=True)
class Toggles:
    """Stage id or kind -> state, in the order given (a name once). A stage named neither by
    its id nor by its kind is on; named by both, the state farther from on wins."""

    entries: tuple[tuple[str, StageState], ...] = ()

    def __post_init__(self) -> None:
        for name, state in self.entries:
            if not isinstance(name, str) or not name:
                raise TypeError(f"a toggle names a stage id or kind, not {name!r}")
            if state not in STAGE_STATES:
                raise ValueError(f"{name}: a stage is {', '.join(STAGE_STATES)}, not {state!r}")
        if len({name for name, _ in self.entries}) != len(self.entries):
            raise ValueError(f"a stage is named twice in {self.entries!r}")

    # -- made from ------------------------------------------------------------------------------
    @classmethod
    def parse(cls, off: str | Iterable[str] | None = (), serial: str | Iterable[str] | None = ()) -> Toggles:
        """From ``--off`` / ``--serial`` ("map@4,prefetch" or lists of ids and kinds); a name in
        both is off."""
        entries: dict[str, StageState] = dict.fromkeys(parse_ids(off, "off"), "off")
        for name in parse_ids(serial, "serial"):
            entries.setdefault(name, "serial")
        return cls(tuple(entries.items()))

    @classmethod
    def from_strip(cls, states: Mapping[str, str], kinds: Iterable[str] = ()) -> Toggles:
        """The pipeline strip's wishes: ``states`` ({stage id: state}) for every stage it shows,
        and their ``kinds``, on: a kind toggled before gives way to the ids the strip shows
        (the stages it did not record yet are then on)."""
        entries: dict[str, str] = dict.fromkeys(kinds, "on")
        entries.update(states)
        return cls(tuple(entries.items()))  # type: ignore[arg-type]  (checked on creation)

    def updated(self, newer: Toggles) -> Toggles:
        """These toggles with every name ``newer`` gives replaced by its state there (those it
        leaves on dropped: on is what an unnamed stage is)."""
        given = set(newer.names)
        kept = [(n, s) for n, s in self.entries if n not in given]
        return Toggles(tuple((n, s) for n, s in (*kept, *newer.entries) if s != "on"))

    # -- read -----------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.entries)

    @property
    def off(self) -> tuple[str, ...]:
        """The names switched off."""
        return tuple(name for name, state in self.entries if state == "off")

    @property
    def serial(self) -> tuple[str, ...]:
        """The names made serial."""
        return tuple(name for name, state in self.entries if state == "serial")

    def wanted(self, stage_id: str, kind: str) -> StageState:
        """The state asked of a stage with this id and kind (on when neither is named)."""
        asked = [state for name, state in self.entries if name in (stage_id, kind)]
        return max(asked, key=STAGE_STATES.index, default="on")

    def state_for(self, stage: Stage) -> StageState:
        """What ``stage`` runs as under these toggles."""
        return stage.takes(self.wanted(stage.id, stage.kind))

    def __bool__(self) -> bool:
        """Does it ask anything of any stage (something off or serial)?"""
        return bool(self.off or self.serial)

    def __str__(self) -> str:
        """'map@4 off, prefetch serial', or 'as written' when nothing is toggled."""
        parts = [f"{s} off" for s in self.off] + [f"{s} serial" for s in self.serial]
        return ", ".join(parts) if parts else "as written"


AS_WRITTEN = Toggles()  # nothing asked: every stage runs as the code wrote it
