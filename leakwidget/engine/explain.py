"""Explain native growth: run a watch again with memray's native call stacks on.

What a "Native call stacks" button does when an attribution says "native" without stacks
(``attribution.native_window is None``): the same spec, ``native=True``, as a new run.

    result = await rerun_native(spec, observers, pause)    # on the kernel's loop
    attribution = explain_native(spec)                      # synchronously
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .attribution import Attribution, require_memray
from .observer import Observer
from .result import WatchResult
from .spec import WatchSpec
from .watch import NO_PAUSE, Pause, run_sync
from .workers.isolate import run_watch


def native_spec(spec: WatchSpec) -> WatchSpec:
    """``spec`` with native call stacks on, labelled as such (raises without memray)."""
    require_memray()
    label = f"{spec.label} (native stacks)" if spec.label else "native stacks"
    return dataclasses.replace(spec, native=True, label=label)


async def rerun_native(spec: WatchSpec, observers: Sequence[Observer] = (),
                       pause: Pause | None = None) -> WatchResult:
    """Run ``spec`` again with native=True; its attribution carries ``native_sites``."""
    return await run_watch(native_spec(spec), observers, pause)


def explain_native(spec: WatchSpec) -> Attribution | None:
    """Run ``spec`` again with native=True, synchronously; the new run's attribution."""
    return run_sync(rerun_native(spec, (), NO_PAUSE)).attribution
