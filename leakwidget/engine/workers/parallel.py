"""Bisection configurations in fresh worker processes or on a Dask cluster, several at a time.

:func:`run_configurations` drives a :class:`~.search.Bisector` whose
``next_configurations(free)`` hands out the configuration the search waits for and those it may
need next; each runs in its own worker (:class:`~.isolate.IsolatedRun`) or as a Dask task
(:class:`~.cluster.DaskRun`), ``jobs`` at a time. The observers see the configurations one after
another (:class:`~.sequence.OneAtATime`), each as its own series. Every way out ends every worker
this started; an interrupt first collects their partial results, and the search ends as the
sequential one does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..interrupts import Interrupts
from ..observer import Guard, Observer, RunControl
from ..search import Bisector, Configuration, Observed
from ..spec import WatchSpec
from ..watch import Pause, YieldToLoop
from .cluster import DaskRun, cluster_threads
from .hub import Hub
from .isolate import IsolatedRun, collect_after_interrupt
from .sequence import OneAtATime


@dataclass
class Prepared:
    """What a configuration runs with."""

    spec: WatchSpec
    guard: Guard  # stops it once its answer is clear; its malloc_slope goes to the search
    attribute: bool = False  # its growth is attributed (the baseline's is)


@dataclass
class _Running:
    config: Configuration
    prepared: Prepared
    run: IsolatedRun | DaskRun

    def report_to(self, bisector: Bisector) -> None:
        """What the run showed, to the search (one place for a worker's result)."""
        bisector.report(self.config, Observed.of(self.run.result, self.prepared.guard.malloc_slope))


def free_cores() -> int:
    """Cores not busy now (at least one): the default number of configurations run at once."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        busy = int(round(os.getloadavg()[0]))
    except OSError:
        busy = 0
    return max(1, cores - busy)


async def run_configurations(
    bisector: Bisector,
    prepare: Callable[[Configuration], Prepared],
    *,
    jobs: int | None = None,
    client: Any = None,
    observers: Sequence[Observer] = (),
    on_configuration: Callable[[Configuration, RunControl], None] | None = None,
    pause: Pause | None = None,
) -> None:
    """Run the search's configurations until it is done, ``jobs`` at a time (default: the free
    cores, or the cluster's threads with a Dask ``client``); each one's result is reported to
    ``bisector`` as it arrives."""
    pause = YieldToLoop() if pause is None else pause
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs!r}")
    jobs = jobs or (cluster_threads(client) if client is not None else free_cores())
    hub = Hub()
    running: list[_Running] = []

    def stop_all(reason: str) -> None:
        for item in running:
            item.run.request_stop(reason)

    seq = OneAtATime(observers, stop_all)
    interrupts = Interrupts()
    interrupts.raise_at_once()
    stopping = False
    try:
        while True:
            for config in bisector.next_configurations(jobs - len(running)):
                prepared = prepare(config)
                if client is not None:
                    run = DaskRun(client, prepared.spec, prepared.guard, hub=hub,
                                  attribute=prepared.attribute, census=False,
                                  yields_to_loop=pause.yields_to_loop)
                else:
                    run = IsolatedRun(prepared.spec, [prepared.guard], hub=hub,
                                      attribute=prepared.attribute, census=False,
                                      yields_to_loop=pause.yields_to_loop)
                run.observers.append(seq.tap(run))
                running.append(_Running(config, prepared, run))
                if on_configuration is not None:
                    on_configuration(config, run)
                run.start()
            if not running:
                break
            hub.wait(0.02)
            for item in [item for item in running if item.run.finished]:
                running.remove(item)
                item.run.close()
                item.report_to(bisector)
            if bisector.done and running and not stopping:
                stopping = True  # runs handed out ahead that the search no longer needs
                stop_all("stopped")
            await pause()
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupts.hold()
        collect_after_interrupt(hub, [item.run for item in running])
    finally:
        interrupts.hold()
        try:
            _close_all(running, bisector)
        finally:
            interrupts.restore()


def _close_all(running: list[_Running], bisector: Bisector) -> None:
    """End what still runs (partial results for the search: an interrupted one ends it)."""
    for item in running:
        item.run.close()
    for item in running:
        try:
            item.report_to(bisector)
        except ValueError:  # the search is over, or had moved on: nothing to tell it
            pass
    running.clear()
