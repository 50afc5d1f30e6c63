"""What the tf.data patches use of the stage session.

The session installs the patches, so they cannot import its module back (not even for type
hints): this protocol is the part of the session they record stages into.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ..stage import Stage


class SessionLike(Protocol):
    """The entered ``StageSession`` the stages are recorded into."""

    @property
    def stages(self) -> list[Stage]: ...

    def record(self, kind: str, site: tuple[str, int, int] | None = None, *,
               args: dict[str, Any] | None = None, inputs: Iterable[str] = (),
               toggleable: bool = False, parallel: bool = False,
               stage_id: str | None = None) -> Stage: ...

    def _add_inputs(self, st: Stage, ids: Iterable[str]) -> None: ...

    def _adopt_inner(self, st: Stage, inner: list[str]) -> None: ...
