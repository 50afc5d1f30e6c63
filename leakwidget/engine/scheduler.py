"""What a dashboard's buttons do — Stop, Run again, Bisect, Try the fix, Native call stacks — as
one run-control state machine, with no widget in it.

    idle ──run starts──▶ running ──Stop──▶ stopping ──run ends──▶ idle
      │                     └───────────run ends───────────────▶ idle
      ├──Bisect──▶ bisecting ──search ends (Stop: after this configuration)──▶ idle
      └──Try the fix──▶ comparing ──every variant ends──▶ idle

A click arrives while the current run is between iterations (or after it ended). Run again,
Bisect, Try the fix and Native call stacks ask the current run to stop, wait for it to end, then
run as an asyncio task that awaits the loop between iterations, so Stop keeps working during
them. The :class:`Scheduler` keeps the state, the run being shown and the last run's spec (what
Run again starts from, with the pipeline strip's :class:`~leakwidget.stages.Toggles` applied);
its view (:class:`View`, the dashboard) is told what to show and follows every run it starts
as an observer. Tested without widgets: tests/test_scheduler.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any, Literal, Protocol

from ..stages import AS_WRITTEN, Toggles
from .bisect import run_bisection
from .explain import native_spec
from .observer import Observer, RunControl
from .result import WatchResult
from .search import BisectResult, Configuration
from .spec import WatchSpec
from .watch import YieldToLoop
from .workers.compare import CompareResult, run_compare
from .workers.isolate import run_watch

ControlState = Literal["idle", "running", "stopping", "bisecting", "comparing"]


class View(Observer, Protocol):
    """What the scheduler needs of the view whose buttons it serves (the Dashboard)."""

    def say(self, text: str) -> None:
        """Show ``text`` as the note under the headline ("" clears it)."""
        ...

    def show_state(self, state: ControlState, was: ControlState) -> None:
        """The state changed from ``was``: enable what works in it."""
        ...

    def show_bisect(self, result: BisectResult, restore: WatchSpec | None = None) -> None: ...

    def show_compare(self, result: CompareResult) -> None: ...


class BisectStopped(Exception):
    """Raised from on_configuration to end a bisection the user stopped."""


class Scheduler:
    """The run-control state machine behind one view (see the module's docstring)."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.state: ControlState = "idle"
        self.run: RunControl | None = None  # the run being shown, while it runs
        self.spec: WatchSpec | None = None  # the last run's spec (Run again starts from it)
        self.ran = 0  # iterations the last run of the user's needed (Try the fix runs at least as many)
        self.runs = 0  # runs shown so far (they are numbered by it)
        self.task: asyncio.Task | None = None
        self._halt = False  # Stop during a search: no further configuration starts
        self._stop_asked = False  # Stop was clicked: its note goes when the run ends
        self._idle: asyncio.Event | None = None

    def _enter(self, state: ControlState) -> None:
        if state != self.state:
            was, self.state = self.state, state
            self.view.show_state(state, was)

    @property
    def bisecting(self) -> bool:
        return self.state == "bisecting"

    # -- what runs tell it (the view's on_start / on_finish) -------------------------------------
    def started(self, run: RunControl) -> None:
        """A run began: the cell's, or one started here (a search's runs keep its state)."""
        self.run, self.spec = run, run.spec
        self.runs += 1
        if self.state in ("idle", "stopping"):
            self._enter("running")

    def finished(self, result: WatchResult | None = None) -> None:
        """The run being shown ended (``result``: how it ended)."""
        self.run = None
        if result is not None and self.state in ("running", "stopping"):
            self.ran = result.iteration_count
        if self._stop_asked:
            self._stop_asked = False
            self.view.say("")  # it has stopped: the banner says so
        if self.state in ("running", "stopping"):
            self._enter("idle")
        if self._idle is not None:
            self._idle.set()

    # -- the buttons ------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.run is None:
            self.view.say("Nothing is running.")
            return
        self.run.request_stop("stopped")
        if self.state in ("bisecting", "comparing"):
            self._halt = True
        else:
            self._enter("stopping")
        self._stop_asked = True
        self.view.say("Stopping at the end of the current iteration\u2026")

    def next_spec(self, toggles: Toggles) -> WatchSpec:
        """The spec of the last run with ``toggles`` (the strip's wishes) applied, labelled as
        the next run."""
        if self.spec is None:
            raise RuntimeError("no watch has run in this dashboard yet")
        toggled = self.spec.toggles.updated(toggles)
        return dataclasses.replace(self.spec, toggles=toggled, label=f"run {self.runs + 1}: {toggled}")

    def run_again(self, toggles: Toggles) -> None:
        try:
            spec = self.next_spec(toggles)
        except RuntimeError as exc:
            self.view.say(str(exc))
            return
        self.schedule(self._run(spec), "Run again")

    def bisect(self, toggles: Toggles) -> None:
        if self.spec is None:
            self.view.say("Run a watch first.")
            return
        self.schedule(self._bisect(self.next_spec(toggles)), "Bisect")

    def try_fix(self, toggles: Toggles) -> None:
        """The last run's step under glibc, MALLOC_ARENA_MAX=2, jemalloc and tcmalloc, each in a
        fresh worker (an allocator only acts on a process started with it), overlaid here; each
        until its verdict is confident, at least as many iterations as the last run needed,
        within the last run's budget (or a watch's 60 s)."""
        if self.spec is None:
            self.view.say("Run a watch first.")
            return
        spec = self.next_spec(toggles)
        self.view.say("Trying the fix: the same watch under each allocator, each in a fresh worker\u2026")
        self.schedule(self._compare(spec), "Try the fix")

    def native_stacks(self, toggles: Toggles) -> None:
        """The last run again with memray's native call stacks on (``--native``), as a new run."""
        if self.spec is None:
            self.view.say("Run a watch first.")
            return
        try:
            spec = native_spec(self.next_spec(toggles))
        except ImportError as exc:  # memray is an optional extra
            self.view.say(str(exc))
            return
        self.schedule(self._run(spec), "Native call stacks")

    def restore(self, spec: WatchSpec | None = None) -> WatchSpec | None:
        """After a bisection, what Run again starts from: ``spec`` (the user's configuration
        the search started from), by default the last run's with every stage as written."""
        if spec is None and self.spec is not None:
            spec = dataclasses.replace(self.spec, toggles=AS_WRITTEN, label="")
        self.spec = spec
        return spec

    # -- tasks ------------------------------------------------------------------------------------
    def schedule(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task | None:
        """Run ``coro`` as a task on the running event loop (the kernel's), once the current
        run has ended.

        A running watch (the cell's, or one started here) is asked to stop first; a running
        search ends after its current configuration. Returns the task, or None (with a note
        saying why) when there is no event loop to run it on.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            self.view.say(f"{what} needs a running event loop (a Jupyter kernel).")
            return None
        previous = self.task if self.task is not None and not self.task.done() else None
        idle = asyncio.Event()
        if self.run is None:
            idle.set()
        else:
            if self.state in ("bisecting", "comparing"):
                self._halt = True
            else:
                self._enter("stopping")
            self.run.request_stop("stopped")
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
            self.view.say(f"{what} failed: {type(exc).__name__}: {exc}")

    async def _run(self, spec: WatchSpec) -> None:
        # Where the spec asks to run: an isolated watch runs again in a fresh worker.
        await run_watch(spec, [self.view], YieldToLoop())

    async def _compare(self, spec: WatchSpec) -> None:
        self._halt = False
        self._enter("comparing")
        try:
            result = await run_compare(spec, observers=[self.view], pause=YieldToLoop(), at_least=self.ran)
        finally:
            self._halt = False
            self.spec = spec  # Run again runs the user's watch, not the last variant's
            self._enter("idle")
        self.view.show_compare(result)

    async def _bisect(self, spec: WatchSpec) -> None:
        self._halt = False
        self._enter("bisecting")
        try:
            result = await run_bisection(spec, observers=[self.view],
                                         on_configuration=self.on_configuration, pause=YieldToLoop())
        except BisectStopped:
            self.view.say("Bisect stopped before it finished.")
            return
        finally:
            self._halt = False
            self._enter("idle")
        # The strip goes back to what the user had, so Run again runs that.
        self.view.show_bisect(result, restore=self.restore(spec))

    def on_configuration(self, config: Configuration, run: RunControl) -> None:
        # Each configuration's watch has the view as an observer, so it gets its own series;
        # here the note follows the search, and Stop ends the whole search.
        if self._halt:
            raise BisectStopped()
        self.view.say(f"Bisecting: running {config.label}\u2026")
