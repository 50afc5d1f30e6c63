"""The run-control state machine behind the dashboard's buttons, without any widget.

A plain view records what the :class:`Scheduler` tells it; real watches run on a real asyncio
loop, and clicks are made from inside a run, as a user's arrive between iterations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import leakwidget
from leakwidget.engine.observer import BaseObserver, RunControl
from leakwidget.engine.records import IterationRecord
from leakwidget.engine.result import WatchResult
from leakwidget.engine.scheduler import ControlState, Scheduler
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import Watch
from leakwidget.stages import AS_WRITTEN, Toggles

_junk: list = []


@pytest.fixture(autouse=True)
def _junk_let_go():
    """What ``grow`` kept is let go after each test. test_widget.py's, the same, once held
    3.4 GB of bytes and 27 million objects in one worker, and slowed every later watch there,
    whose collections and census walk the heap."""
    yield
    _junk.clear()


@leakwidget.stage
def grow(x: int) -> int:
    # 128 KiB, and 1,024 small Python objects, as test_widget's grow: beside CI's load (run 25)
    # the configuration with grow alone on read RSS flat in this long-lived process ("inconclusive
    # 0 B": the 128 KiB reused memory earlier tests freed), and the bisection named grow and
    # passthrough together. Python's block count sees the objects whatever memory they reuse.
    _junk.append((b"x" * (128 * 1024), [object() for _ in range(1024)]))
    return x


@leakwidget.stage
def passthrough(x: int) -> int:
    return x


class PlainView(BaseObserver):
    """What a dashboard is to the scheduler, minus the widgets. ``script``: (label prefix,
    iteration, action) — run ``action(scheduler)`` once, when such a run ends that iteration."""

    def __init__(self, script: list[tuple[str, int, Callable[[Scheduler], None]]] = ()) -> None:
        self.scheduler = Scheduler(self)
        self.script = list(script)
        self.notes: list[str] = []
        self.states: list[ControlState] = []
        self.finished: list[tuple[str, str]] = []  # label, stopped
        self.results: list[WatchResult] = []
        self.shown: list[tuple[str, Any]] = []

    def say(self, text: str) -> None:
        self.notes.append(text)

    def show_state(self, state: ControlState, was: ControlState) -> None:
        assert was != state
        self.states.append(state)

    def show_bisect(self, result: Any, restore: WatchSpec | None = None) -> None:
        self.shown.append(("bisect", (result, restore)))

    def show_compare(self, result: Any) -> None:
        self.shown.append(("compare", result))

    def on_start(self, run: RunControl) -> None:
        self.scheduler.started(run)

    def on_iteration(self, record: IterationRecord) -> None:
        label = self.scheduler.run.label
        for item in list(self.script):
            prefix, index, action = item
            if label.startswith(prefix) and record.index == index:
                self.script.remove(item)
                action(self.scheduler)

    def on_finish(self, result: WatchResult) -> None:
        self.finished.append((result.spec.label.split(":")[0], result.stopped))
        self.results.append(result)
        self.scheduler.finished(result)


def _until_idle(view: PlainView, click: Callable[[], None]) -> None:
    async def go() -> None:
        click()
        while view.scheduler.task is not None and not view.scheduler.task.done():
            await view.scheduler.task

    asyncio.run(go())


def test_the_buttons_say_why_they_do_nothing_before_a_run() -> None:
    view = PlainView()
    s = view.scheduler
    s.stop()
    s.run_again(AS_WRITTEN)
    s.bisect(AS_WRITTEN)
    s.try_fix(AS_WRITTEN)
    assert view.notes == ["Nothing is running.", "no watch has run in this dashboard yet",
                          "Run a watch first.", "Run a watch first."]
    assert s.state == "idle" and view.states == [] and s.task is None


def test_a_run_is_running_then_idle_and_run_again_applies_the_strips_toggles() -> None:
    view = PlainView()
    first = Watch(WatchSpec(step=lambda: passthrough(grow(1)), iterations=20, label="run 1"), [view]).run()
    assert view.states == ["running", "idle"] and view.scheduler.run is None
    ids = {s.kind: s.id for s in first.stages}
    # The strip's wishes: grow clicked off, passthrough left on.
    wishes = Toggles.from_strip({ids["grow"]: "off", ids["passthrough"]: "on"}, ids)
    view.scheduler.run_again(wishes)  # no event loop here
    assert view.notes[-1] == "Run again needs a running event loop (a Jupyter kernel)."
    _until_idle(view, lambda: view.scheduler.run_again(wishes))
    assert view.finished == [("run 1", "iterations"), ("run 2", "iterations")]
    assert view.scheduler.spec.label == f"run 2: {ids['grow']} off"
    assert {s.kind: s.state for s in view.results[-1].stages} == {"grow": "off", "passthrough": "on"}
    assert view.states == ["running", "idle", "running", "idle"]


def test_stop_makes_a_run_stopping_then_idle_and_a_click_during_a_run_queues_the_next() -> None:
    view = PlainView([("run 2", 3, lambda s: s.run_again(AS_WRITTEN)),
                      ("run 3", 3, lambda s: s.stop())])
    Watch(WatchSpec(step=lambda: None, iterations=5, label="run 1"), [view]).run()

    _until_idle(view, lambda: view.scheduler.run_again(AS_WRITTEN))
    assert view.finished == [("run 1", "iterations"), ("run 2", "stopped"), ("run 3", "stopped")]
    # run 2 was asked to stop by the Run again click, run 3 by Stop (which says so until it has).
    assert view.states == ["running", "idle", "running", "stopping", "idle", "running", "stopping", "idle"]
    assert view.notes[-2:] == ["Stopping at the end of the current iteration\u2026", ""]


@pytest.mark.slow
def test_a_bisection_is_bisecting_until_it_ends_and_stop_ends_the_search() -> None:
    view = PlainView()
    # 150 iterations: a bisection runs as many per configuration, and 60 made the baseline of
    # a long-lived test process (refilling memory earlier tests freed) "inconclusive".
    Watch(WatchSpec(step=lambda: passthrough(grow(1)), iterations=150), [view]).run()
    labels: list[str] = []
    on_configuration = view.scheduler.on_configuration

    def second_stops(config: Any, run: Any) -> None:
        labels.append(config.label)
        if len(labels) == 2:
            view.script.append((config.label, 2, lambda s: s.stop()))
        on_configuration(config, run)

    view.scheduler.on_configuration = second_stops  # type: ignore[method-assign]
    _until_idle(view, lambda: view.scheduler.bisect(AS_WRITTEN))
    assert view.states == ["running", "idle", "bisecting", "idle"]
    assert len(labels) == 3 and view.notes[-1] == "Bisect stopped before it finished.", (
        labels, view.notes, [r.verdict.summary for r in view.results])
    assert view.shown == []  # no answer is shown for a search that was stopped


@pytest.mark.slow
def test_a_bisection_shows_its_answer_and_restores_the_users_configuration() -> None:
    view = PlainView()
    Watch(WatchSpec(step=lambda: passthrough(grow(1)), seconds=1.5), [view]).run()
    passthrough_off = Toggles.parse(off="passthrough")
    _until_idle(view, lambda: view.scheduler.bisect(passthrough_off))
    ((what, (result, restore)),) = view.shown
    assert what == "bisect" and [c.kind for c in result.culprits] == ["grow"], str(result)
    assert view.states[-2:] == ["bisecting", "idle"]
    assert restore is view.scheduler.spec and restore.toggles.off == ("passthrough",)


@pytest.mark.slow
def test_try_the_fix_is_comparing_until_every_variant_has_run() -> None:
    view = PlainView()
    Watch(WatchSpec(step=lambda: None, iterations=5, seconds=1), [view]).run()
    _until_idle(view, lambda: view.scheduler.try_fix(AS_WRITTEN))
    ((what, result),) = view.shown
    # Each variant: at least the iterations the first run needed, within its budget (1 s).
    assert what == "compare" and view.scheduler.ran == 5, str(result)
    assert all(r.iteration_count >= 5 and r.stopped == "seconds" for r in result.results), str(result)
    assert view.states == ["running", "idle", "comparing", "idle"]
    assert len(view.finished) == 1 + len(result.variants)
    # Run again runs the user's watch, not the last variant's.
    assert view.scheduler.spec.allocator is None and view.scheduler.spec.confident_after is None
