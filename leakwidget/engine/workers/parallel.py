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
from typing import Any

from ..interrupts import Interrupts
from ..observer import Observer, RunControl
from ..result import WatchResult
from ..search import Bisector, Configuration
from ..spec import WatchSpec
from ..watch import Pause, YieldToLoop
from .cluster import DaskRun, cluster_threads
from .hub import Hub
from .isolate import IsolatedRun, collect_after_interrupt
from .sequence import OneAtATime

# What a configuration runs with: its spec, its guard (an observer that stops it once its answer
# is clear), and whether its growth is attributed (the baseline's is).
Prepared = tuple[WatchSpec, Any, bool]


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
    report: Callable[[Configuration, WatchResult, Any], None],
    *,
    jobs: int | None = None,
    client: Any = None,
    observers: Sequence[Observer] = (),
    on_configuration: Callable[[Configuration, RunControl], None] | None = None,
    pause: Pause | None = None,
) -> None:
    """Run the search's configurations until it is done, ``jobs`` at a time (default: the free
    cores, or the cluster's threads with a Dask ``client``)."""
    pause = YieldToLoop() if pause is None else pause
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs!r}")
    jobs = jobs or (cluster_threads(client) if client is not None else free_cores())
    hub = Hub()
    running: list[tuple[Configuration, IsolatedRun | DaskRun, Any]] = []

    def stop_all(reason: str) -> None:
        for _config, run, _guard in running:
            run.request_stop(reason)

    seq = OneAtATime(observers, stop_all)
    interrupts = Interrupts()
    interrupts.raise_at_once()
    stopping = False
    try:
        while True:
            for config in bisector.next_configurations(jobs - len(running)):
                run_spec, guard, baseline = prepare(config)
                if client is not None:
                    run = DaskRun(client, run_spec, guard, hub=hub, attribute=baseline, census=False,
                                  yields_to_loop=pause.yields_to_loop)
                else:
                    run = IsolatedRun(run_spec, [guard], hub=hub, attribute=baseline, census=False,
                                      yields_to_loop=pause.yields_to_loop)
                run.observers.append(seq.tap(run))
                running.append((config, run, guard))
                if on_configuration is not None:
                    on_configuration(config, run)
                run.start()
            if not running:
                break
            hub.wait(0.02)
            for item in [item for item in running if item[1].finished]:
                running.remove(item)
                item[1].close()
                report(item[0], item[1].result, item[2])
            if bisector.done and running and not stopping:
                stopping = True  # runs handed out ahead that the search no longer needs
                stop_all("stopped")
            await pause()
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupts.hold()
        collect_after_interrupt(hub, [run for _c, run, _g in running])
    finally:
        interrupts.hold()
        try:
            _close_all(running, report)
        finally:
            interrupts.restore()


def _close_all(running: list, report: Callable[[Configuration, WatchResult, Any], None]) -> None:
    """End what still runs (partial results for the search: an interrupted one ends it)."""
    for _config, run, _guard in running:
        run.close()
    for config, run, guard in running:
        try:
            report(config, run.result, guard)
        except ValueError:  # the search is over, or had moved on: nothing to tell it
            pass
    running.clear()
