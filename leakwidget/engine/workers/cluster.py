"""Configurations as tasks on a Dask cluster (``pip install 'leakwidget[cluster]'``).

    client = distributed.Client("tcp://scheduler:8786")        # or a LocalCluster's
    leakwidget.bisect(step, setup=make_dataset, client=client)

Each task runs one configuration as an ordinary :class:`Watch` in a Dask worker process — away
from the notebook — with the configuration's guard (which ends it once its answer is clear) and
a thread that ends it early when the parent sets the task's stop :class:`distributed.Event`
(Stop in the dashboard, an interrupt, the search needing it no more). The task returns the
cloudpickled result; :class:`DaskRun` is the task seen from the notebook, its events replayed
from that result when it arrives. Tasks in one worker process run one at a time: a process
watches one thing at once.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np

from ..attribution import Tracker
from ..kinds import StopReason
from ..observer import BaseObserver, Guard, Observer, RunControl
from ..records import IterationRecord, RecordLog
from ..result import WatchResult
from ..spec import WatchSpec
from ..verdict import Verdict
from ..watch import Watch, verdict_of
from .hub import Hub
from .sequence import Elsewhere, replay
from .worker import Job

__all__ = ["ClusterError", "DaskRun", "connect", "run_task"]

_ONE_AT_A_TIME = threading.Lock()  # per worker process
STOP_POLL_SECONDS = 0.25
CONNECT_TIMEOUT = 10.0  # seconds to reach the scheduler and finish Dask's handshake with it


class ClusterError(RuntimeError):
    """Dask is missing, or its scheduler cannot be reached."""


def connect(address: str) -> Any:
    """A ``distributed.Client`` for the scheduler at ``address``."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("running on a Dask cluster needs dask.distributed: "
                           "pip install 'leakwidget[cluster]'") from None
    try:
        _handshake(address, CONNECT_TIMEOUT)
        return Client(address, timeout=CONNECT_TIMEOUT)
    except (TimeoutError, asyncio.TimeoutError):  # (one class from Python 3.11 on)
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address!r}: something listens there but did not "
            f"answer Dask's handshake within {CONNECT_TIMEOUT:g} s (is it a Dask scheduler?)") from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address!r}: {exc}") from None


def _handshake(address: str, seconds: float) -> None:
    """Dask's handshake with ``address``, all of it within ``seconds`` (TimeoutError past them).

    ``Client(timeout=)`` bounds the TCP connection but not the handshake that follows: a server
    that is not a scheduler (an HTTP server) reads it, waits for more, and the client hangs. The
    probe runs on its own event loop in a thread, so it works where a loop already runs (a
    kernel)."""
    from distributed.comm import connect as dask_connect

    async def probe() -> None:
        comm = await asyncio.wait_for(dask_connect(address, timeout=seconds), seconds)
        await comm.close()

    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(probe())
        except BaseException as exc:  # raised in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="leakwidget-dask-handshake", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def cluster_threads(client: Any) -> int:
    """How many tasks the cluster runs at once."""
    return max(1, sum(client.nthreads().values()))


# ---------------------------------------------------------------------------------------------
# In the Dask worker


class _StopWhenSet(BaseObserver):
    """Ends the watch when the parent sets the task's stop event (polled in its own thread)."""

    def __init__(self, event_name: str) -> None:
        self.event_name = event_name
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def on_start(self, run: RunControl) -> None:
        from distributed import Event, get_client

        # The task's client, found here, in the task's thread: Event finds it lazily, and in
        # the polling thread below there is none to find (every wait raised, and the task
        # never heard Stop or an interrupt).
        event = Event(self.event_name, client=get_client())

        def poll() -> None:
            while not self._done.is_set():
                try:
                    if event.wait(timeout=STOP_POLL_SECONDS):
                        run.request_stop("stopped")
                        return
                except Exception:  # the scheduler gone: the task ends with its budget
                    return

        self._thread = threading.Thread(target=poll, name="leakwidget-dask-stop", daemon=True)
        self._thread.start()

    def on_finish(self, result: WatchResult) -> None:
        self._done.set()


@dataclass
class Task:
    """One configuration as a Dask task: the watch as a worker process gets it, and its guard,
    which runs beside it in the Dask worker."""

    job: Job
    guard: Guard


def run_task(payload: bytes, event_name: str) -> bytes:
    """One configuration, in a Dask worker process: (result, guard's malloc slope), pickled."""
    task: Task = pickle.loads(payload)
    job, guard = task.job, task.guard
    with _ONE_AT_A_TIME:
        tracker: Tracker | bool = (Tracker(trace=job.spec.trace, lines=job.spec.lines, census=job.census)
                                   if job.attribute else False)
        result = Watch(job.spec, [guard, _StopWhenSet(event_name)], tracker=tracker).run()
    return cloudpickle.dumps((result, guard.malloc_slope), protocol=pickle.HIGHEST_PROTOCOL)


# ---------------------------------------------------------------------------------------------
# In the notebook


class DaskRun(Elsewhere):
    """A configuration running as a Dask task: a :class:`RunControl` (Stop sets its event) and a
    :class:`~.hub.Remote` whose one message is "done"."""

    def __init__(self, client: Any, spec: WatchSpec, guard: Guard, observers: Sequence[Observer] = (),
                 *, hub: Hub, attribute: bool = False, census: bool | None = None,
                 yields_to_loop: bool = False) -> None:
        self.client = client
        self.spec = spec
        self.guard = guard
        self.observers = list(observers)
        self.hub = hub
        self.attribute, self.census = attribute, census
        self.yields_to_loop = yields_to_loop
        self.result: WatchResult | None = None
        self.event_name = f"leakwidget-stop-{uuid.uuid4().hex}"
        self._future: Any = None
        self._interrupted = False

    @property
    def active(self) -> bool:
        return self._future is not None and self.result is None

    def start(self) -> None:
        task = Task(Job(self.spec, attribute=self.attribute, census=self.census), self.guard)
        payload = cloudpickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
        self._future = self.client.submit(run_task, payload, self.event_name, pure=False,
                                          key=f"leakwidget-{self.spec.label or 'watch'}-{uuid.uuid4().hex[:8]}")
        self._future.add_done_callback(lambda _f: self.hub.put(self, ("done",)))
        self.hub.runs.append(self)
        for ob in self.observers:
            ob.on_start(self)

    def request_stop(self, reason: StopReason = "stopped") -> None:
        if self.result is None and self._future is not None:
            from distributed import Event

            try:
                Event(self.event_name, client=self.client).set()
            except Exception:  # the scheduler is gone: the task ends with its budget
                pass

    def so_far(self) -> tuple[list, np.ndarray, np.ndarray, list[IterationRecord], Verdict]:
        r = self.result
        if r is None:
            return [], np.zeros(0), np.zeros(0), [], Verdict("inconclusive")
        return list(r.stages), r.samples[:, 0], r.samples[:, 1], r.iterations, r.verdict

    def handle(self, message: tuple) -> None:
        if message[0] != "done" or self.result is not None:
            return
        try:
            result, self.guard.malloc_slope = pickle.loads(self._future.result())
            result.spec = self.spec
            if self._interrupted and result.stopped == "stopped":  # the event carries no reason
                result.stopped = "interrupted"
        except Exception as exc:  # the task failed, was cancelled, or its worker died
            result = self._without_result(exc)
        self.result = result
        for ob in self.observers:
            replay(ob, self)
            ob.on_finish(result)

    def check(self) -> None:
        pass

    def interrupt(self) -> None:
        self._interrupted = True
        self.request_stop("interrupted")

    def close(self) -> None:
        if self in self.hub.runs:
            self.hub.runs.remove(self)
        if self.result is None and self._future is not None:
            self.request_stop("interrupted")
            self._future.cancel()
            self.result = WatchResult(spec=self.spec, verdict=verdict_of(RecordLog(4), self.spec, None, 0),
                                      stopped="interrupted")
            for ob in self.observers:
                ob.on_finish(self.result)

    def _without_result(self, exc: Exception) -> WatchResult:
        """The task ended without a result: its worker died (``KilledWorker``: the step crashed
        the process, or it ran out of memory), it was cancelled, or it raised (the worker could
        not import what the step needs). Its iterations stayed in the worker."""
        from distributed import KilledWorker

        stopped: StopReason = ("worker-died" if isinstance(exc, KilledWorker) else
                               "interrupted" if isinstance(exc, CancelledError) else "error")
        return WatchResult(spec=self.spec, verdict=verdict_of(RecordLog(4), self.spec, None, 0),
                           stopped=stopped, error=None if stopped == "interrupted" else exc)
