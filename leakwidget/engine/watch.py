"""The repeat loop: run a step again and again, measure each iteration, guard the process.

One loop, :meth:`Watch.run_async`, awaits a *pause* between iterations: a real one
(:class:`YieldToLoop`) lets a Jupyter kernel deliver widget clicks while the cell runs, and
:data:`NO_PAUSE` completes at once, so :meth:`Watch.run` drives the very same coroutine to its
end without an event loop (:func:`run_sync`). Everything that can go wrong — an exception in the
step, a KeyboardInterrupt, memory running out — ends the run with a partial
:class:`~leakwidget.engine.result.WatchResult`; every patch is undone and every thread joined on
every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from ..stages import Stage, StageSession, session
from . import sampler
from .attribution import Tracker, find_step_code
from .attribution.garbage import Phase
from .budget import DEFAULT_SECONDS, Budget, planned_seconds
from .children import WithChildren, child_results
from .copying import as_attribution, copy_on_write, tree_growth
from .guard import MemoryGuard, MemoryGuardTripped
from .interrupts import Interrupts
from .kinds import StopReason
from .live import LiveVerdicts, judge
from .meter import Meter
from .observer import Observer, tell_phase
from .publisher import Publisher
from .records import RecordLog
from .result import WatchResult
from .sources import THIS_PROCESS, MemorySource
from .spec import WatchSpec
from .units import format_duration
from .verdict import Verdict

FULL_GC_SECONDS_PER_BLOCK = 160e-9  # a full gc.collect(), measured with TensorFlow loaded
VERDICT_INTERVAL = 0.5  # seconds between live verdicts, at least
VERDICT_SHARE = 0.01  # and at most this share of the run spent on them

T = TypeVar("T")

_active_lock = threading.Lock()
_active: Watch | None = None


class WatchAlreadyRunning(RuntimeError):
    pass


def active_watch() -> Watch | None:
    return _active


# ---------------------------------------------------------------------------------------------
# Pauses between iterations, and the synchronous driver


class Pause(Protocol):
    yields_to_loop: bool

    async def __call__(self) -> None: ...


class _NoPause:
    """Completes at once: a coroutine that only awaits this never suspends."""

    yields_to_loop = False

    async def __call__(self) -> None:
        return None


NO_PAUSE = _NoPause()


class YieldToLoop:
    """Hands the event loop 1 ms between iterations every 100 ms: the kernel reads its sockets,
    so a Stop click lands within a fraction of a second.

    Not at every iteration: a click needs a few turns of the kernel's loop (its message passes
    from the shell channel's thread to the handler in steps), which 1 ms gives it; ~800 turns a
    second on a fast step would poll the kernel's sockets for nothing. The 1 ms is the watch's
    largest fixed cost in a kernel after the bookkeeping: every 50 ms it took 2% of the run
    (bench/bench_kernel.py), every 100 ms 1%, for a click that lands 50 ms later at most."""

    yields_to_loop = True
    INTERVAL = 0.1

    def __init__(self) -> None:
        self._last = time.perf_counter()

    async def __call__(self) -> None:
        now = time.perf_counter()
        if now - self._last > self.INTERVAL:
            await asyncio.sleep(0.001)
            self._last = now


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (it awaits only NO_PAUSE) to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a synchronous run awaited something that needs an event loop")


# ---------------------------------------------------------------------------------------------
# The loop


class Watch:
    """One watch of ``spec``: ``await run_async()`` or ``run()``; observers follow it.

    ``tracker``: the attribution tracker (True: the default one for the spec's options; False:
    no attribution). ``live_verdict``: recompute the verdict while running (default: when
    someone observes, or when the run stops on a confident verdict). ``source``: what is
    measured (this process; another process tree is seen only through its RSS, without stage
    toggles, attribution or the guard's interrupt). Code that drives the iterations itself (a
    Keras callback) calls ``start()``, then ``begin_iteration()`` / ``end_iteration()`` around
    each of its steps until the latter returns False, then ``finish()``.
    """

    def __init__(self, spec: WatchSpec, observers: Sequence[Observer] = (), *,
                 tracker: Tracker | bool = True, live_verdict: bool | None = None,
                 source: MemorySource = THIS_PROCESS) -> None:
        self.spec = spec
        self.observers = list(observers)
        self.source = source
        if not source.in_process:
            tracker = False
        if tracker is True:
            tracker = Tracker(trace=spec.trace, lines=spec.lines, native=spec.native)
        self.tracker = tracker or None
        self.log = RecordLog()
        self.verdict = Verdict("inconclusive", summary="Starting\u2026")
        self.stopped: StopReason | None = None
        self.error: BaseException | None = None
        self.error_iteration: int | None = None
        self.error_traceback = ""
        self.index = 0
        self.baseline_rss = 0
        self.yields_to_loop = False
        self.live_verdict = (live_verdict if live_verdict is not None
                             else (spec.iterations is None and spec.seconds is None) or bool(observers))
        self._stop_request: StopReason | None = None
        self._session: StageSession | None = None
        self._sampler: sampler.Sampler | None = None
        self._publisher: Publisher | None = None
        self._guard: MemoryGuard | None = None
        self._meter: Meter | None = None
        self._interrupts = Interrupts()
        self._switch_interval: float | None = None
        self._t0 = 0.0
        self._loop_t0: float | None = None  # when the first iteration began: -t counts from here
        self._measured_t: float | None = None  # when the measured run ended, phases after it began
        self._headroom: int | None = None
        self._next_verdict_t = -math.inf
        self._budget: Budget | None = None
        self._result: WatchResult | None = None
        self._children: WithChildren | None = None  # this process's descendants (in_process)
        self._live: LiveVerdicts | None = None  # the live verdicts' thread, while it runs
        # Set by code that drives the iterations itself (the Keras callback): who that is, as
        # a watch started meanwhile is told, and a check that ends this watch if that code
        # stopped driving it without finishing it (its loop raised), True if it did.
        self.driver = ""
        self.release_if_abandoned: Callable[[], bool] | None = None

    # ------------------------------------------------------------------ what observers see
    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def stages(self) -> list[Stage]:
        return self._session.stages if self._session is not None else []

    @property
    def elapsed(self) -> float:
        """Seconds of the measured run (the tracker's phases after it are not counted)."""
        end = self._measured_t if self._measured_t is not None else time.perf_counter()
        return end - self._t0 if self._t0 else 0.0

    @property
    def looping(self) -> float:
        """Seconds since the first iteration began: what ``-t`` budgets (not a slow setup)."""
        return time.perf_counter() - self._loop_t0 if self._loop_t0 is not None else 0.0

    def request_stop(self, reason: StopReason = "stopped") -> None:
        """Ask the loop to stop at the next iteration boundary (safe from any thread)."""
        if self._stop_request is None:
            self._stop_request = reason

    def aside(self, job: Callable[[], T]) -> T:
        """``job()`` on the watch's own thread (its live verdicts'), waited for: a view's
        redraws, in an arena the step does not allocate from (here without live verdicts)."""
        live = self._live
        return live.call(job) if live is not None else job()

    # ------------------------------------------------------------------ drivers
    def run(self) -> WatchResult:
        return run_sync(self.run_async(NO_PAUSE))

    async def run_async(self, pause: Pause | None = None) -> WatchResult:
        """The loop; ``pause`` is awaited between iterations (default: yield to the loop)."""
        pause = YieldToLoop() if pause is None else pause
        self.yields_to_loop = pause.yields_to_loop
        self.start(drives_loop=True)  # on failure it has cleaned up after itself
        try:
            step = _run_setup(self)
            self._loop_t0 = time.perf_counter()
            await _measured_loop(self, step, pause)
            if self.tracker is not None and self.stopped in ("iterations", "seconds", "confident"):
                await phases_after(self, step, pause)
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.stopped = self.stopped or "interrupted"
        finally:
            result = self.finish()
        return result

    # ------------------------------------------------------------------ lifecycle
    def start(self, drives_loop: bool = False) -> None:
        """Everything before the setup (``drives_loop``: run_async's own loop runs the steps)."""
        _claim(self)
        try:
            self._interrupts.arm()
            self._headroom, total = sampler.memory_status()
            inside = self.source.in_process
            self._guard = MemoryGuard(self.spec.max_rss, total, lambda: self.request_stop("memory-guard"),
                                      interrupt=inside)
            self._budget = Budget(self.spec, self._guard)
            if inside:
                self._session = session(toggles=self.spec.toggles)
                self._session.__enter__()
                # The sampler thread needs the GIL 125 times a second; a pure-Python step holds
                # it for up to the switch interval (5 ms) each time. 1 ms keeps sampling on time.
                self._switch_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._switch_interval, 0.001))
                # Processes the step starts count too: what is sampled is the tree's total.
                self.source = self._children = WithChildren(self.source)
            self.baseline_rss = self.source.rss()
            self._sampler = sampler.Sampler(hz=self.source.hz, read=self.source.rss,
                                            guard=self._guard.check, on_trip=self._guard.trip).start()
            self._t0 = self._sampler.t0  # one clock for samples and iteration records
            if self._children is not None:
                self._children.t0 = self._t0
            self._meter = Meter(self._sampler, self._guard, self._t0, self.source, self.spec)
            if self.live_verdict:
                self._live = LiveVerdicts()
            if self.observers:
                self._publisher = Publisher(self.observers, self._sampler.buffer, lambda: self.stages,
                                            lambda: self._children.latest if self._children else None).start()
            for ob in self.observers:
                ob.on_start(self)
            if self.tracker is not None:
                self.tracker.start(self.spec, defer_tracing=drives_loop)
        except BaseException:
            _teardown(self)
            raise

    def settle(self) -> None:
        """Before the first iteration: hand back memory freed earlier, take the baseline census,
        then let the children's reader and the observers take what their work will take (a
        scan of the processes; ``on_settled``, aside)."""
        if self.source.in_process:
            free = settle_memory(self.spec, self._live, getattr(self.tracker, "baseline_census", None))
            if self.tracker is not None:
                self.tracker.free_at_start = free
                self.tracker.aside = functools.partial(_census_aside, self)
            _rehearse(self, live=False)

    def _stop_on(self, exc: BaseException, iteration: int | None = -1) -> None:
        """The step (or setup) raised: end the run, keeping what it measured."""
        self.stopped = _stop_reason(exc)
        if self.stopped == "error":  # any other exception, SystemExit included: the result keeps it
            self.error, self.error_iteration = exc, (self.index if iteration == -1 else iteration)
            self.error_traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def _within_budget(self) -> bool:
        reason = self._stop_request or self._budget.reason(self.index, self.looping, self._meter.last_rss)
        if reason is not None:
            self.stopped = reason
        return reason is None

    def begin_iteration(self) -> None:
        if self._loop_t0 is None:
            self._loop_t0 = time.perf_counter()
        self._meter.begin()

    def end_iteration(self) -> bool:
        """Record the iteration that just ended; False when the watch should stop."""
        return self._record() and self._within_budget()

    def _record(self) -> bool:
        """Record the iteration that just ended; False when the watch stopped."""
        try:
            record = self._meter.end(self.index)
            if self.tracker is not None and self.tracker.corrects:
                # memray's tracker (native=True) keeps memory of its own: the tracker takes it
                # out of the RSS recorded, which the verdict reads.
                self.tracker.correct(record)
            self.log.append(record)
            self.index += 1
            if self.tracker is not None and self.tracker.hooked:
                self.tracker.on_iteration(record)
                if self._children is not None:  # what a census just kept is not the user's
                    self._children.held_rss, self._children.held_in_use = self.tracker.held
            for ob in self.observers:
                ob.on_iteration(record)
            if self.live_verdict and record.end + self._t0 >= self._next_verdict_t:
                self._update_verdict(record.end + self._t0)
        except BaseException as exc:
            self._stop_on(exc)
            return False
        return self.stopped is None

    def _update_verdict(self, now: float) -> None:
        began = time.thread_time()
        self.verdict = verdict_of(self.log, self.spec, self._headroom, self.baseline_rss, live=self._live)
        # At most every VERDICT_INTERVAL, and never more than ~1% of the run's time, its cost
        # counted in CPU time on the thread that decided it: counted in wall time, a machine
        # busy with other work stretched it tenfold, and a leak watched for 10 s beside CI's
        # load got two live verdicts, both before it was sure.
        cost = self._live.cost if self._live is not None else time.thread_time() - began
        self._next_verdict_t = now + max(VERDICT_INTERVAL, cost / VERDICT_SHARE)
        self._budget.count(self.verdict, self.log.total, now - (self._loop_t0 or now))
        for ob in self.observers:
            ob.on_verdict(self.verdict)

    def finish(self) -> WatchResult:
        """Stop everything, decide, attribute, tell the observers; the result (once)."""
        if self._result is not None:
            return self._result
        self._interrupts.hold()
        try:
            self._result = self._conclude()
        finally:
            self._interrupts.restore()
        return self._result

    def _conclude(self) -> WatchResult:
        try:
            if self._guard is not None:
                try:
                    self._guard.leave_step()
                except MemoryGuardTripped:
                    self.stopped = self.stopped or "memory-guard"
        finally:
            _teardown(self)
        if self.stopped is None:  # a push-driven watch whose code ran to its end
            self.stopped = self._stop_request or "ended"
        self.verdict = verdict_of(self.log, self.spec, self._headroom, self.baseline_rss)
        result = _result_of(self)
        for ob in self.observers:
            try:
                ob.on_finish(result)
            except Exception as exc:  # an observer must not lose the result
                result.stage_notes.append(f"{type(ob).__name__} failed: {exc!r}")
        return result


def _run_setup(watch: Watch) -> Callable[[], object]:
    """Run the setup; the step to call each iteration (state bound, tracker's wrapping)."""
    step = watch.spec.step
    try:
        if watch.spec.setup is not None:
            state = _bracketed(watch.spec.setup, watch._guard, watch._interrupts)

            def step_fn() -> object:
                return step(state)
        else:
            step_fn = step
    except BaseException as exc:
        watch._stop_on(exc, iteration=None)
        return step
    # The watch's own preparation (a full collection, the baseline census, the trim: over a
    # second on a slow host) is interruptible as a step is: left to a kernel's handler, a Ctrl-C
    # in it cancelled nothing until the first step, a 10 s sleep, had run.
    watch._interrupts.enter_step()
    try:
        watch.settle()
    except KeyboardInterrupt as exc:
        watch._stop_on(exc, iteration=None)
        return step
    finally:
        watch._interrupts.leave_step()
    if watch.tracker is not None:
        step_fn = watch.tracker.wrap(step_fn, watch.spec.code or find_step_code(step))
    return step_fn


def _teardown(watch: Watch) -> None:
    """Undo what ``Watch.start`` did, on every way out: stop the sampler, the live verdicts'
    thread, the children's reader and the publisher, restore the switch interval, leave the
    stage session, free the process for another watch."""
    global _active
    try:
        if watch._sampler is not None:
            watch._sampler.stop()
            if watch._meter is not None:
                watch._meter.keep_last()
        if watch._live is not None:
            watch._live.close()
            watch._live = None
        if watch._children is not None:
            watch._children.stop()
        if watch._publisher is not None:
            watch._publisher.stop()
        if watch._switch_interval is not None:
            sys.setswitchinterval(watch._switch_interval)
            watch._switch_interval = None
        if watch._meter is not None:
            watch._meter.close()
    finally:
        try:
            if watch._session is not None:
                watch._session.__exit__(None, None, None)
        finally:
            with _active_lock:
                if _active is watch:
                    _active = None


def _result_of(watch: Watch) -> WatchResult:
    """What a watch that has stopped leaves: its records, samples, stages and notes, its
    verdict, and the attribution of its growth."""
    notes = list(watch._session.notes) if watch._session is not None else []
    guard = watch._guard
    if watch.stopped == "memory-guard" and guard is not None and guard.reason:
        notes.append(f"Stopped by the memory guard: {guard.reason}.")
    t, v = watch._sampler.series() if watch._sampler is not None else (np.zeros(0), np.zeros(0))
    if watch._measured_t is not None:  # the phases' samples are no part of the run drawn
        keep = t <= watch._measured_t - watch._t0
        t, v = t[keep], v[keep]
    members = watch.source.members
    result = WatchResult(
        spec=watch.spec, verdict=watch.verdict, stopped=watch.stopped, error=watch.error,
        error_iteration=watch.error_iteration, error_traceback=watch.error_traceback,
        samples=np.column_stack([t, v.astype(np.float64)]) if t.size else np.zeros((0, 2)),
        stages=watch.stages, stage_notes=notes, elapsed=watch.elapsed,
        baseline_rss=watch.baseline_rss, _log=watch.log,
        children=child_results(members.members.values(), watch.log, watch._t0) if members is not None else [],
    )
    if watch.tracker is not None:
        try:
            result.attribution = watch.tracker.finish(result.verdict, watch.log)
        except Exception as exc:  # the attribution must not lose the result
            result.stage_notes.append(f"Attribution failed: {exc!r}")
        result.device = watch.tracker.device()
    _explain_copies(result)
    return result


def _explain_copies(result: WatchResult) -> None:
    """Forked children copying what they share with this process: the tree's finding, and the
    attribution when the copies are the story of the growth (engine/copying.py)."""
    workers = [c.copying for c in result.children if c.copying is not None]
    growth = tree_growth(result.column("rss"), result.column("end"), [c.samples for c in result.children],
                         warmup=result.verdict.warmup)
    found = copy_on_write(workers, growth, leaking=result.verdict.kind == "leak",
                          stable=result.verdict.kind == "stable")
    result.copy_on_write = found
    if found is not None and found.explains:
        result.attribution = as_attribution(found, result.attribution)


def _rehearse(watch: Watch, live: bool = True) -> None:
    """After a trim: the live verdicts, the children's reader and the observers take what their
    work will take (a scan of the processes; ``on_settled``, aside) before the next iteration."""
    if live and watch._live is not None:
        watch._live.rehearse()
    if watch._children is not None:
        watch._children.rehearse()
    for ob in watch.observers:
        watch.aside(ob.on_settled)


@contextlib.contextmanager
def _census_aside(watch: Watch) -> Iterator[None]:
    """A census during the run (census=True's): the sampler keeps no reading of its temporaries
    (8-23 MiB in a test process's heap, drawn as a spike), and after it what its trim gave back
    is taken again, as after the baseline's (measured with a checkpoint after the first
    iteration: a dashboard's next three redraws took 476 KiB)."""
    began = time.perf_counter()
    watch._sampler.held = True
    try:
        yield
    finally:
        watch._sampler.held = False
    _rehearse(watch)
    if watch._loop_t0 is not None:  # -t counts the step's time, not this (0.2-1 s with TensorFlow)
        watch._loop_t0 += time.perf_counter() - began


async def _measured_loop(watch: Watch, step: Callable[[], object], pause: Pause) -> None:
    """run_async's loop. What runs between two steps is what the user pays on every iteration
    (docs/benchmarks.md, the bookkeeping), and right after a step every call runs cold: so it
    is written out here in one piece, with fewer calls than the begin/end_iteration path takes.
    By default (no observers, no tracker hooks, no correction) the meter's readings go straight
    into the log, without a record object; anything that follows the iterations gets the same
    records through ``Watch._record``."""
    meter, guard, interrupts, log, budget = (watch._meter, watch._guard, watch._interrupts,
                                             watch.log, watch._budget)
    tracker = watch.tracker
    direct = not watch.observers and (tracker is None or not (tracker.hooked or tracker.corrects))
    live, t0, loop_t0, clock = watch.live_verdict, watch._t0, watch._loop_t0, time.perf_counter
    pauses = pause is not NO_PAUSE  # awaiting the no-op costs a coroutine per iteration
    interrupts.install()
    i = watch.index
    while watch.stopped is None:  # a failed setup has stopped it already
        reason = watch._stop_request or budget.reason(i, clock() - loop_t0, meter.last_rss)
        if reason is not None:
            watch.stopped = reason
            return
        # Nothing ran since the last iteration ended: its end RSS is this one's start.
        meter.begin(straight_on=True)
        try:
            guard.enter_step()
            interrupts.stepping = True
            try:
                returned = step()
            finally:
                interrupts.stepping = False
                guard.leave_step()
            if i == 0:
                _refuse_unrun_body(returned)
        except BaseException as exc:
            watch._stop_on(exc)
            return
        if not direct:
            if not watch._record():
                return
            loop_t0 = watch._loop_t0  # (a census=True checkpoint moves it on: -t does not count it)
        else:
            try:
                row = meter.row(i)
                log.append_row(row)
                watch.index = i = i + 1
                if live and row[2] + t0 >= watch._next_verdict_t:
                    watch._update_verdict(row[2] + t0)
            except BaseException as exc:
                watch._stop_on(exc)
                return
            if watch.stopped is not None:
                return
        i = watch.index
        if pauses:
            await pause()


def _stop_reason(exc: BaseException) -> StopReason:
    if isinstance(exc, MemoryGuardTripped):
        return "memory-guard"
    return "interrupted" if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)) else "error"


def _bracketed(fn: Callable[[], T], guard: MemoryGuard, interrupts: Interrupts) -> T:
    """``fn()`` as a step runs: interruptible at once, the memory guard raising inside it."""
    guard.enter_step()
    interrupts.enter_step()
    try:
        return fn()
    finally:
        interrupts.leave_step()
        guard.leave_step()


async def phases_after(watch: Watch, step: Callable[[], object], pause: Pause) -> None:
    """The tracker's phases after the measured run, in turn, until one fails (the watch then
    says how it ended); the run's seconds and samples end where they begin."""
    watch._measured_t = time.perf_counter()
    if watch._publisher is not None:
        watch._publisher.end_samples_at(watch._measured_t - watch._t0)
    kinds: list[str] = []

    def grew() -> bool:
        """Is the measured run's verdict other than "stable"? (Decided once, when a phase
        asks: the phases record nothing, so the final verdict will be the same.)"""
        if not kinds:
            kinds.append(verdict_of(watch.log, watch.spec, watch._headroom, watch.baseline_rss).kind)
        return kinds[0] != "stable"

    for phase in watch.tracker.phases():
        if (failed := await phase_after(watch, phase, step, pause, grew)) is not None:
            watch._stop_on(failed)
            return


async def phase_after(watch: Watch, phase: Phase, step: Callable[[], object],
                      pause: Pause, grew: Callable[[], bool]) -> BaseException | None:
    """A phase after the measured run (the tracker's: garbage.py, trace.py): the step again,
    as many iterations and seconds as the phase plans; the exception that ended it, if one
    did. Nothing is recorded: the verdict reads the measured run."""
    # Seconds of the default budget the measured run left, when the user set no length: a
    # phase still without its answer may take them (garbage.py's extend_phase).
    spare = (max(0.0, DEFAULT_SECONDS - watch.looping)
             if watch.spec.seconds is None and watch.spec.iterations is None else 0.0)
    plan = phase.plan_phase(watch.log, watch.looping, grew, spare)
    if plan is None:
        return None
    least, most, seconds = plan
    # A view says what the run is doing now that its samples and iterations have ended (a phase
    # may take the default budget's spare seconds): before the phase's own first measure.
    what = getattr(phase, "doing", "more iterations")
    most_seconds = seconds + getattr(phase, "extra_seconds", 0.0)
    tell_phase(watch.observers, f"After the run: {what}, for up to {format_duration(most_seconds)} (Stop ends it)")
    deadline = time.perf_counter() + seconds
    phase.begin_phase()
    done = 0
    try:
        while watch._stop_request is None:
            if not (done < most and (done < least or time.perf_counter() < deadline)):
                if (more := phase.extend_phase()) is None:
                    break
                most, deadline = done + more[0], time.perf_counter() + more[1]
                continue
            _bracketed(step, watch._guard, watch._interrupts)
            done += 1
            # The phase's own work (garbage.py's measuring collections) does not take the step's time.
            mark = time.perf_counter()
            answered = phase.on_phase_iteration()
            deadline += time.perf_counter() - mark
            if answered:
                break
            await pause()
    except BaseException as exc:  # the run's result stands; the watch says how the phase ended
        phase.end_phase(exc)
        return exc
    finally:
        watch.tracker.after += done  # the final census counts these iterations' objects too
    phase.end_phase(None)
    return None


def _claim(watch: Watch) -> None:
    """Make ``watch`` the one running in this process (ending first one whose driver has
    abandoned it: a Keras loop that raised)."""
    global _active
    with _active_lock:
        running = _active
        if running is None:
            _active = watch
            return
    # Outside the lock: ending the abandoned watch releases it.
    if running.release_if_abandoned is not None and running.release_if_abandoned():
        return _claim(watch)
    which = f" ({running.driver})" if running.driver else ""
    raise WatchAlreadyRunning(
        f"a leakwidget watch{which} is already running in this process; "
        "a watch cannot be started inside another (stop the first one, or wait for it)"
    )


def _refuse_unrun_body(returned: object) -> None:
    """A first step that returns a coroutine or a generator never ran its body: say so at
    once rather than measure nothing (``async def`` steps, generator functions)."""
    if (inspect.iscoroutine(returned) or inspect.isgenerator(returned)
                       or inspect.isasyncgen(returned)):
        kind = "coroutine" if inspect.iscoroutine(returned) else "generator"
        returned.close()
        raise TypeError(f"the step returned a {kind} without running its body: leakwidget calls "
                        "the step synchronously; pass a plain function (for an async step, run "
                        "the loop inside it: lambda: asyncio.run(step()))")


def settle_memory(spec: WatchSpec, live: LiveVerdicts | None,
                  census: Callable[[], bool] | None = None) -> int | None:
    """Before the first iteration, collect and hand back memory freed earlier (an earlier
    run or cell, the pipeline the setup replaced), which a leak would reuse silently, hidden
    from RSS for hundreds of iterations. A full collection (~160 ns per block: 0.2–0.5 s with
    TensorFlow) only when that is at most 1% of the planned run, else the young generations
    (what the setup dropped); then ``census``, the baseline census, which trims the allocator
    after it and says so (else the trim is made here): its temporaries go back to the system
    with everything else; then, when the watch has ``live`` verdicts, their working memory is
    taken on their thread (1–1.8 MiB: what malloc_trim just gave back; taken again by the first
    live verdicts, it read as a plateau of 1–1.5 MiB on a flat step).

    np.median imports numpy.ma on its first call: it is imported before the census, with or
    without live verdicts, or the end-of-run verdict's import would be the newest objects of
    the run, and named as what keeps a growing type alive.

    Returns the bytes then free inside malloc's heap (``sampler.malloc_free``, None without
    glibc): the trim returned their whole pages to the system, and malloc handing that free
    memory out again touches them anew, RSS climbing with nothing more in use
    (attribution/decide.py's refill rule reads it)."""
    planned = planned_seconds(spec)
    full = planned is None or sys.getallocatedblocks() * FULL_GC_SECONDS_PER_BLOCK <= 0.01 * planned
    gc.collect() if full else gc.collect(1)
    import numpy.ma  # noqa: F401  (see above)

    if census is None or not census():
        sampler.malloc_trim()
    free = sampler.malloc_free()
    if live is not None:
        live.rehearse()
    return free


def verdict_of(log: RecordLog, spec: WatchSpec, available: int | None, baseline_rss: int,
               *, live: LiveVerdicts | None = None) -> Verdict:
    """The verdict on the records so far (decided on the ``live`` verdicts' thread when given);
    the projection uses the memory still available."""
    headroom = available
    if log.n:
        # Headroom shrinks as the process grows: measure from the latest RSS.
        last = int(log.last("rss"))
        headroom = max(0, (available or 0) - max(0, last - baseline_rss))
        if spec.max_rss is not None:
            headroom = min(headroom, max(0, spec.max_rss - last))
    if live is not None:
        return live.verdict(log, headroom, spec.warmup)
    return judge(log, headroom, spec.warmup)
