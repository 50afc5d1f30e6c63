"""What a view of a watch receives: one typed stream of events, and one handle to steer the run.

The engine never knows who watches. A dashboard, a progress line, a bisection's per-configuration
guard, or a pipe to another process all implement :class:`Observer`; the run they watch is a
:class:`RunControl`. Nothing else of the engine is visible to them, so the same view can follow a
watch in this process or one streamed from elsewhere.

When each event arrives, and from which thread:

==============  =======================================================  ==================
event           when                                                     thread
==============  =======================================================  ==================
on_start        before the setup                                         the loop's
on_settled      after the clean-up before iteration 0 (in this process)  the run's own
on_stages       when the recorded pipeline stages change                 the publisher's
on_samples      new RSS samples, every ``PUBLISH_INTERVAL`` (and at end)  the publisher's
on_children     a new reading of the child processes' memory              the publisher's
on_iteration    after each iteration                                     the loop's
on_verdict      after each live verdict (at most every 0.5 s)            the loop's
on_finish       once, with the result (attribution already set)          the loop's
==============  =======================================================  ==================

A watch in this process has a thread of its own (``Watch.aside``: its live verdicts are
decided there, in an allocator arena the step does not use); an observer runs work there with
:func:`aside`. Observers run in the order given; an observer that raises in ``on_finish`` does not lose the
result (its error becomes a note).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ..stages import Stage
from .kinds import StopReason
from .members import ChildrenReading
from .records import IterationRecord
from .result import WatchResult
from .spec import WatchSpec
from .verdict import Verdict

T = TypeVar("T")

PUBLISH_INTERVAL = 0.1  # seconds between sample batches sent to observers
# A view of a long run is refreshed less often: every 1/VIEW_UPDATES_PER_ELAPSED of the time it has
# run, at most every SLOWEST_VIEW_UPDATE seconds. In a kernel each update is a dozen messages, and
# the kernel keeps some of what sending them allocated: a flat 1 ms step watched for 10 minutes
# with the dashboard grew 1.6 MiB at 2.5 redraws a second and 1/150 (~500 redraws), 0.87 MiB at
# one a second and 1/60 (~200 redraws), the same day, one soak each.
VIEW_UPDATES_PER_ELAPSED = 60.0
SLOWEST_VIEW_UPDATE = 5.0


def view_interval(minimum: float, elapsed: float) -> float:
    """Seconds between a view's updates ``elapsed`` seconds into a run."""
    return max(minimum, min(SLOWEST_VIEW_UPDATE, elapsed / VIEW_UPDATES_PER_ELAPSED))


class RunControl(Protocol):
    """The run an observer follows: what it runs, and how to stop it."""

    @property
    def spec(self) -> WatchSpec: ...

    @property
    def label(self) -> str: ...

    @property
    def yields_to_loop(self) -> bool:
        """True when the run awaits between iterations, so an event loop (a Jupyter kernel)
        can deliver clicks while it runs."""
        ...

    def request_stop(self, reason: StopReason = "stopped") -> None:
        """Stop at the next iteration boundary; safe from any thread."""
        ...


def aside(run: RunControl | None, job: Callable[[], T]) -> T:
    """``job()`` on the thread of its own a run in this process has (a :class:`~leakwidget.
    engine.watch.Watch`'s ``aside``: its allocator arena is not the step's), waited for; here
    for a run that has none (one replayed from elsewhere measures another process)."""
    call = getattr(run, "aside", None)
    return call(job) if call is not None else job()


def tell_phase(observers: Sequence[Observer], what: str) -> None:
    """``on_phase(what)`` to each observer that has it: an optional event (the watch's phases
    after the measured run, whose iterations are not drawn; relayed from workers), which
    observers written against the protocol's other events need not have."""
    for ob in observers:
        if (tell := getattr(ob, "on_phase", None)) is not None:
            tell(what)


class Observer(Protocol):
    def on_start(self, run: RunControl) -> None: ...

    def on_settled(self) -> None:
        """On the run's own thread, after the clean-up before iteration 0 and before the
        baseline: take now the memory this observer's updates will take (a view's redraws),
        so that it is not measured as the step's."""
        ...

    def on_stages(self, stages: Sequence[Stage]) -> None: ...

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None: ...

    def on_children(self, reading: ChildrenReading) -> None: ...

    def on_iteration(self, record: IterationRecord) -> None: ...

    def on_verdict(self, verdict: Verdict) -> None: ...

    def on_finish(self, result: WatchResult) -> None: ...


class Guard(Observer, Protocol):
    """An observer that ends a run once its answer is clear (a bisection's configuration,
    ``engine/bisect.py``'s ConfigGuard), and knows afterwards glibc's bytes in use per iteration
    (``malloc_slope``; None: not measured). It runs where the watch runs: in a Dask task too."""

    malloc_slope: float | None


class BaseObserver:
    """Every event ignored: subclass it and override what you need."""

    def on_start(self, run: RunControl) -> None:
        pass

    def on_settled(self) -> None:
        pass

    def on_stages(self, stages: Sequence[Stage]) -> None:
        pass

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None:
        pass

    def on_children(self, reading: ChildrenReading) -> None:
        pass

    def on_iteration(self, record: IterationRecord) -> None:
        pass

    def on_verdict(self, verdict: Verdict) -> None:
        pass

    def on_phase(self, what: str) -> None:
        """A phase after the measured run began (tell_phase): ``what`` it does, for how long."""

    def on_finish(self, result: WatchResult) -> None:
        pass
