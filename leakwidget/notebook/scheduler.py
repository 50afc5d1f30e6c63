"""What the dashboard's buttons do: Stop, Run again, Bisect and Try the fix, as tasks on the
kernel's loop.

A click arrives while the current run is between iterations (or after it ended). Run again and
Bisect ask the current run to stop, wait for it to end, then run as an asyncio task that awaits
the loop between iterations, so Stop keeps working during them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

import ipywidgets as widgets

from ..engine.bisect import run_bisection
from ..engine.explain import native_spec
from ..engine.observer import Observer, RunControl
from ..engine.search import BisectResult, Configuration
from ..engine.spec import WatchSpec
from ..engine.watch import Watch, YieldToLoop
from ..engine.workers.compare import CompareResult, run_compare
from ..engine.workers.isolate import run_watch
from .banner import note_html
from .strip import PipelineStrip


class Steered(Observer, Protocol):
    """What the scheduler needs of the view whose buttons it serves (the Dashboard)."""

    run: RunControl | None
    spec: WatchSpec | None
    note: widgets.HTML
    strip: PipelineStrip
    bisect_button: widgets.Button

    def next_spec(self) -> WatchSpec: ...

    def show_bisect(self, result: BisectResult, restore: WatchSpec | None = None) -> None: ...

    def show_compare(self, result: CompareResult) -> None: ...


class BisectStopped(Exception):
    """Raised from on_configuration to end a bisection the user stopped."""


class Scheduler:
    def __init__(self, dashboard: Steered) -> None:
        self.dash = dashboard
        self.task: asyncio.Task | None = None
        self.bisecting = False
        self._halt = False  # Stop during a bisection: no further configuration starts
        self._idle: asyncio.Event | None = None
        self._stopping = False

    def stop(self) -> None:
        run = self.dash.run
        if run is None:
            self._say("Nothing is running.")
            return
        run.request_stop("stopped")
        if self.bisecting:
            self._halt = True
        self._stopping = True
        self._say("Stopping at the end of the current iteration\u2026")

    def finished(self) -> None:
        """The current run ended (called by the dashboard's on_finish)."""
        if self._stopping:
            self._stopping = False
            self._say("")  # it has stopped: the banner says so
        if self._idle is not None:
            self._idle.set()

    def run_again(self) -> None:
        try:
            spec = self.dash.next_spec()
        except RuntimeError as exc:
            self._say(str(exc))
            return
        self.schedule(self._run(spec), "Run again")

    def bisect(self) -> None:
        if self.dash.spec is None:
            self._say("Run a watch first.")
            return
        self.schedule(self._bisect(self.dash.next_spec()), "Bisect")

    def try_fix(self) -> None:
        """The last run's step under glibc, MALLOC_ARENA_MAX=2, jemalloc and tcmalloc, each in a
        fresh worker (an allocator only acts on a process started with it), overlaid here."""
        if self.dash.spec is None:
            self._say("Run a watch first.")
            return
        spec = self.dash.next_spec()
        self._say("Trying the fix: the same watch under each allocator, each in a fresh worker\u2026")
        self.schedule(self._compare(spec), "Try the fix")

    def native_stacks(self) -> None:
        """The last run again with memray's native call stacks on (``--native``), as a new run."""
        if self.dash.spec is None:
            self._say("Run a watch first.")
            return
        try:
            spec = native_spec(self.dash.next_spec())
        except ImportError as exc:  # memray is an optional extra
            self._say(str(exc))
            return
        self.schedule(self._run(spec), "Native call stacks")

    def schedule(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task | None:
        """Run ``coro`` as a task on the kernel's event loop, once the current run has ended.

        A running watch (the cell's, or one started here) is asked to stop first; a running
        bisection ends after its current configuration. Returns the task, or None (with a note
        saying why) when there is no event loop to run it on.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            self._say(f"{what} needs a running event loop (a Jupyter kernel).")
            return None
        previous = self.task if self.task is not None and not self.task.done() else None
        idle = asyncio.Event()
        if self.dash.run is None:
            idle.set()
        else:
            if self.bisecting:
                self._halt = True
            self.dash.run.request_stop("stopped")
        self._idle = idle
        self.task = loop.create_task(self._after_current(coro, what, previous, idle))
        return self.task

    async def _after_current(self, coro: Coroutine[Any, Any, Any], what: str,
                             previous: asyncio.Task | None, idle: asyncio.Event) -> None:
        # Clicks reach us while the current watch is between iterations; let it finish first.
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await idle.wait()
        try:
            await coro
        except Exception as exc:  # a task's exception would otherwise vanish silently
            self._say(f"{what} failed: {type(exc).__name__}: {exc}")

    async def _run(self, spec: WatchSpec) -> None:
        # Where the spec asks to run: an isolated watch runs again in a fresh worker.
        await run_watch(spec, [self.dash], YieldToLoop())
        self.dash.strip.culprits = []

    async def _compare(self, spec: WatchSpec) -> None:
        result = await run_compare(spec, observers=[self.dash], pause=YieldToLoop())
        self.dash.show_compare(result)

    async def _bisect(self, spec: WatchSpec) -> None:
        self.bisecting, self._halt = True, False
        self.dash.strip.disabled = self.dash.bisect_button.disabled = True
        try:
            result = await run_bisection(spec, observers=[self.dash],
                                         on_configuration=self.on_configuration, pause=YieldToLoop())
        except BisectStopped:
            self._say("Bisect stopped before it finished.")
            return
        finally:
            self.bisecting, self._halt = False, False
            self.dash.strip.disabled = self.dash.bisect_button.disabled = False
        # The strip goes back to what the user had, so Run again runs that.
        self.dash.show_bisect(result, restore=spec)

    def on_configuration(self, config: Configuration, watch: Watch) -> None:
        # Each configuration's watch has the dashboard as an observer, so it gets its own
        # series; here the note follows the search, and Stop ends the whole search.
        if self._halt:
            raise BisectStopped()
        self._say(f"Bisecting: running {config.label}\u2026")

    def _say(self, text: str) -> None:
        self.dash.note.value = note_html(text)
