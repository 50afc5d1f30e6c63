"""The repeat loop: run a step again and again, measure each iteration, guard the process.

``watch()`` is the synchronous entry point; :class:`Watch` is the machine behind it, also driven
asynchronously by ``Watch.run_async()`` so that a Jupyter kernel can deliver widget clicks between
iterations. Everything that can go wrong — an exception in the step, a KeyboardInterrupt, memory
running out — ends the run with a partial :class:`WatchResult`; every patch is undone and the
sampler thread is joined on every way out.
"""

from __future__ import annotations

import asyncio
import csv
import ctypes
import dataclasses
import gc
import json
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import sampler as _sampler
from .verdict import Verdict, decide, format_bytes

DEFAULT_SECONDS = 60.0  # budget when neither iterations nor seconds is given
MIN_AVAILABLE_FRACTION = 0.10  # stop when available memory falls under this share of the total
RECORD_CAPACITY = 20_000
VERDICT_INTERVAL = 0.5  # seconds between live verdicts, at least
VERDICT_SHARE = 0.01  # and at most this share of the run spent on them
IN_USE_SHARE = 0.01  # at most this share of the run spent reading malloc's bytes in use
IN_USE_EVERY = 8  # ... or every this many iterations, if a reading costs under IN_USE_CHEAP
IN_USE_CHEAP = 100e-6
CONFIDENT_STREAK = 3  # consecutive confident live verdicts before stopping early
MIN_ITERATIONS_FOR_CONFIDENT = 20
MIN_SECONDS_FOR_CONFIDENT = 10.0  # buffers and autotuning settle within seconds: wait them out

STOP_REASONS = ("iterations", "seconds", "confident", "interrupted", "error", "memory-guard", "stopped")

_active_lock = threading.Lock()
_active: Watch | None = None


class MemoryGuardTripped(BaseException):
    """Raised inside the step by the sampler thread when memory is about to run out.

    A BaseException, so that user code's ``except Exception`` cannot swallow it.
    """


def _checkpoint() -> None:
    """A function call: the interpreter checks for pending asynchronous exceptions here."""


class WatchAlreadyRunning(RuntimeError):
    pass


@dataclass
class WatchSpec:
    """Everything needed to run a watch again (the widget's Run again, each bisect configuration)."""

    step: Callable
    setup: Callable | None = None
    iterations: int | None = None
    seconds: float | None = None
    warmup: int | None = None
    max_rss: int | None = None
    off: tuple[str, ...] = ()
    serial: tuple[str, ...] = ()
    trace: bool = False
    lines: bool = False
    label: str = ""

    def __post_init__(self) -> None:
        if not callable(self.step):
            raise TypeError(f"step must be callable, not {type(self.step).__name__}")
        if self.setup is not None and not callable(self.setup):
            raise TypeError(f"setup must be callable or None, not {type(self.setup).__name__}")
        if self.iterations is not None and (not isinstance(self.iterations, int) or self.iterations < 1):
            raise ValueError(f"iterations must be a positive integer, not {self.iterations!r}")
        if self.seconds is not None and not (self.seconds > 0):
            raise ValueError(f"seconds must be positive, not {self.seconds!r}")
        if self.warmup is not None and (not isinstance(self.warmup, int) or self.warmup < 0):
            raise ValueError(f"warmup must be a non-negative integer, not {self.warmup!r}")
        if self.max_rss is not None and (not isinstance(self.max_rss, int) or self.max_rss <= 0):
            raise ValueError(f"max_rss must be a positive number of bytes, not {self.max_rss!r}")
        self.off = _as_ids(self.off, "off")
        self.serial = _as_ids(self.serial, "serial")


def _as_ids(value: str | Iterable[str] | None, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    out = tuple(str(v).strip() for v in value if str(v).strip())
    return out


@dataclass
class IterationRecord:
    index: int
    start: float  # seconds since the watch started
    end: float
    rss: int  # bytes at the end of the iteration
    peak_rss: int  # highest during the iteration
    duration: float
    blocks: int  # sys.getallocatedblocks() at the end
    blocks_delta: int  # its change during the iteration
    # glibc malloc's bytes in use at the end (mallinfo2), or -1 where it was not read: it is
    # read at most IN_USE_SHARE of the run's time, so fast steps have it every few iterations.
    malloc_in_use: int = -1


_FIELDS = [f.name for f in dataclasses.fields(IterationRecord)]


class RecordLog:
    """Per-iteration records in fixed, pre-touched numpy columns.

    Pre-touched so the watcher's own memory does not grow while it measures; when full, every
    other older record is dropped (the iteration index stays true), so any run length fits.
    """

    _dtypes = {
        "index": np.int64,
        "start": np.float64,
        "end": np.float64,
        "rss": np.int64,
        "peak_rss": np.int64,
        "duration": np.float64,
        "blocks": np.int64,
        "blocks_delta": np.int64,
        "malloc_in_use": np.int64,
    }

    def __init__(self, capacity: int = RECORD_CAPACITY) -> None:
        self.capacity = capacity
        self.cols = {k: np.ones(capacity, dtype=t) for k, t in self._dtypes.items()}
        self.n = 0
        self.total = 0

    def append(self, index, start, end, rss, peak_rss, duration, blocks, blocks_delta,
               malloc_in_use=-1) -> None:
        if self.n == self.capacity:
            self._thin()
        i = self.n
        c = self.cols
        c["index"][i] = index
        c["start"][i] = start
        c["end"][i] = end
        c["rss"][i] = rss
        c["peak_rss"][i] = peak_rss
        c["duration"][i] = duration
        c["blocks"][i] = blocks
        c["blocks_delta"][i] = blocks_delta
        c["malloc_in_use"][i] = malloc_in_use
        self.n += 1
        self.total += 1

    def _thin(self) -> None:
        # Keep the newest quarter at full resolution; drop every other record before it.
        keep_tail = self.capacity // 4
        head = self.n - keep_tail
        for col in self.cols.values():
            thinned = col[0:head:2].copy()
            q = thinned.size
            col[:q] = thinned
            col[q : q + keep_tail] = col[head : self.n]
        self.n = q + keep_tail

    def column(self, name: str) -> np.ndarray:
        return self.cols[name][: self.n]

    def records(self) -> list[IterationRecord]:
        cols = [self.column(k).tolist() for k in _FIELDS]
        return [IterationRecord(*row) for row in zip(*cols, strict=False)]

    def __len__(self) -> int:
        return self.n


@dataclass
class WatchResult:
    spec: WatchSpec
    verdict: Verdict
    stopped: str
    error: BaseException | None = None
    error_iteration: int | None = None
    error_traceback: str = ""
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    stages: list = field(default_factory=list)
    stage_notes: list = field(default_factory=list)
    attribution: Any = None
    elapsed: float = 0.0
    baseline_rss: int = 0
    _log: RecordLog | None = field(default=None, repr=False)

    @property
    def iterations(self) -> list[IterationRecord]:
        return self._log.records() if self._log is not None else []

    @property
    def iteration_count(self) -> int:
        return self._log.total if self._log is not None else 0

    def column(self, name: str) -> np.ndarray:
        """One field of the iteration records as a numpy array (cheaper than .iterations)."""
        if self._log is None:
            return np.zeros(0)
        return self._log.column(name).copy()

    # -- export --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        att = self.attribution
        return {
            "verdict": self.verdict.to_dict(),
            "stopped": self.stopped,
            "error": None if self.error is None else repr(self.error),
            "error_iteration": self.error_iteration,
            "iterations": [dataclasses.asdict(r) for r in self.iterations],
            "iteration_count": self.iteration_count,
            "samples": self.samples.tolist(),
            "stages": [s.to_dict() if hasattr(s, "to_dict") else repr(s) for s in self.stages],
            "stage_notes": list(self.stage_notes),
            "attribution": att.to_dict() if hasattr(att, "to_dict") else None,
            "config": {"off": list(self.spec.off), "serial": list(self.spec.serial), "label": self.spec.label},
            "elapsed": self.elapsed,
            "baseline_rss": self.baseline_rss,
        }

    def to_json(self, **kwargs) -> str:
        def default(o):
            if isinstance(o, (np.integer,)):
                return int(o)
            if isinstance(o, (np.floating,)):
                return float(o)
            return repr(o)

        d = self.to_dict()
        v = d["verdict"]
        for k in ("slope_low", "slope_high"):
            if isinstance(v[k], float) and not math.isfinite(v[k]):
                v[k] = None
        return json.dumps(d, default=default, **kwargs)

    def to_csv(self, path) -> None:
        """One row per iteration (the records' fields)."""
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(_FIELDS)
            if self._log is not None:
                cols = [self._log.column(k).tolist() for k in _FIELDS]
                w.writerows(zip(*cols, strict=False))

    # -- display -------------------------------------------------------------------------
    def __str__(self) -> str:
        n = self.iteration_count
        lines = [self.verdict.summary or f"Verdict: {self.verdict.kind}"]
        rss = self.column("rss")
        if rss.size:
            lines.append(
                f"{n:,} iterations in {self.elapsed:.1f} s (stopped: {self.stopped}); "
                f"RSS {format_bytes(self.baseline_rss)} \u2192 {format_bytes(int(rss[-1]))}, "
                f"peak {format_bytes(int(self.column('peak_rss').max()))}."
            )
        else:
            lines.append(f"No iteration finished (stopped: {self.stopped}).")
        if self.error is not None:
            where = ("the setup" if self.error_iteration is None
                     else f"iteration {self.error_iteration}")
            lines.append(f"{type(self.error).__name__} in {where}: {self.error}")
        if self.attribution is not None and getattr(self.attribution, "summary", ""):
            lines.append(str(self.attribution))
        if self.stages:
            lines.append("Stages: " + ", ".join(getattr(s, "id", str(s)) for s in self.stages))
        lines.extend(self.stage_notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<WatchResult {self.verdict.kind} after {self.iteration_count} iterations, stopped: {self.stopped}>"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = {"text/plain": str(self)}
        try:
            from .svg import render_svg
        except ImportError:
            return bundle
        try:
            bundle["image/svg+xml"] = render_svg(self)
        except Exception:  # a picture must never hide the text report
            pass
        return bundle


class _NoStages:
    """Stand-in when the stages package cannot load: records nothing, says why."""

    def __init__(self, why: str) -> None:
        self.stages: list = []
        self.notes = [why] if why else []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _stage_session(spec: WatchSpec):
    try:
        from .stages import session
    except ImportError as exc:
        why = f"Stage toggles are unavailable ({exc})." if (spec.off or spec.serial) else ""
        return _NoStages(why)
    return session(off=spec.off, serial=spec.serial)


def active_watch() -> Watch | None:
    return _active


def _default_observers(spec: WatchSpec) -> list:
    observers = []
    try:
        from .attribution import Tracker
    except ImportError:
        return observers
    observers.append(Tracker(trace=spec.trace, lines=spec.lines))
    return observers


class Watch:
    """One watch: ``start()``, then ``step_once()`` until it returns False, then ``finish()``.

    ``run()`` and ``run_async()`` do exactly that, with cleanup on every way out.
    """

    def __init__(self, spec: WatchSpec, observers: Sequence = (), *, default_observers: bool = True,
                 live_verdict: bool | None = None) -> None:
        self.spec = spec
        self.observers = (_default_observers(spec) if default_observers else []) + list(observers)
        self.log = RecordLog()
        self.sampler: _sampler.Sampler | None = None
        self.verdict = Verdict("inconclusive", summary="Starting\u2026")
        self.stopped: str | None = None
        self.error: BaseException | None = None
        self.error_iteration: int | None = None
        self.error_traceback = ""
        self.state: Any = None
        self.index = 0
        self.baseline_rss = 0
        self._stop_request: str | None = None
        self._stage_session = None
        self._step_fn: Callable | None = None
        self._peak = _sampler.PeakMeter()
        self._switch_interval: float | None = None
        self._t0 = 0.0
        self._next_verdict_t = -math.inf
        self._confident_streak = 0
        self._guard_lock = threading.Lock()
        self._in_step = False
        self._injected = False
        self._blocks: int | None = None
        self._next_in_use_t = -math.inf  # None once malloc_in_use() is known not to work
        self._in_use_cost: float | None = None
        self._in_use_index = 0
        self._main_tid = threading.get_ident()
        self._started = False
        self._finished: WatchResult | None = None
        self._max_rise = 0
        self._headroom = None
        self._total = None
        # A live verdict costs a few ms; compute it only when something looks at it.
        self.live_verdict = (
            live_verdict if live_verdict is not None
            else (spec.iterations is None and spec.seconds is None) or bool(observers)
        )

    # ------------------------------------------------------------------ public bits
    @property
    def records(self) -> list[IterationRecord]:
        return self.log.records()

    @property
    def stages(self) -> list:
        return list(self._stage_session.stages) if self._stage_session is not None else []

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0 if self._started else 0.0

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the loop to stop at the next iteration boundary (safe from any thread)."""
        if self._stop_request is None:
            self._stop_request = reason

    # ------------------------------------------------------------------ guard
    def _guard(self, value: int, available: int | None) -> str | None:
        spec = self.spec
        if spec.max_rss is not None and value >= spec.max_rss:
            return f"RSS reached {format_bytes(value)}, over --max-rss {format_bytes(spec.max_rss)}"
        if available is not None and self._total:
            if available < MIN_AVAILABLE_FRACTION * self._total:
                return (
                    f"available memory fell to {format_bytes(available)} "
                    f"(under {MIN_AVAILABLE_FRACTION:.0%} of {format_bytes(self._total)})"
                )
        return None

    def _on_trip(self, reason: str) -> None:
        # Runs in the sampler thread: interrupt the step now rather than after it allocates more.
        with self._guard_lock:
            if self._stop_request is None:
                self._stop_request = "memory-guard"
                self._guard_reason = reason
            if self._in_step and not self._injected:
                self._injected = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._main_tid), ctypes.py_object(MemoryGuardTripped)
                )

    def _leave_step(self) -> None:
        with self._guard_lock:
            self._in_step = False
            injected = self._injected
        if injected:
            # An exception injected just as the step returned has not fired yet: let it fire
            # here, inside the caller's try, rather than later in someone else's code. (It is
            # never cancelled with SetAsyncExc(tid, NULL): on 3.11 that leaves the eval
            # breaker set and the next traced call — pdb, coverage, --lines — spins forever.)
            _checkpoint()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        global _active
        with _active_lock:
            if _active is not None:
                raise WatchAlreadyRunning(
                    "a leakwidget watch is already running in this process; "
                    "a watch cannot be started inside another (stop the first one, or wait for it)"
                )
            _active = self
        self._started = True
        self._main_tid = threading.get_ident()
        self._guard_reason = ""
        try:
            available, total = _sampler.memory_status()
            self._headroom, self._total = available, total
            self._stage_session = _stage_session(self.spec)
            self._stage_session.__enter__()
            self.baseline_rss = _sampler.rss()
            # The sampler thread needs the GIL 125 times a second; a pure-Python step holds it
            # for up to the switch interval (5 ms) each time. 1 ms keeps sampling on time.
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch_interval, 0.001))
            self.sampler = _sampler.Sampler(guard=self._guard, on_trip=self._on_trip).start()
            self._t0 = self.sampler.t0  # one clock for samples and iteration records
            for ob in self.observers:
                if hasattr(ob, "on_start"):
                    ob.on_start(self)
            step = self.spec.step
            if self.spec.setup is not None:
                with self._guard_lock:
                    self._in_step = True
                try:
                    self.state = self.spec.setup()
                finally:
                    self._leave_step()
                raw = step
                state_ref = self

                def step_fn():  # noqa: ANN202 - tiny closure
                    return raw(state_ref.state)

                step_fn.__wrapped__ = raw  # lets --lines find the user's code
            else:
                step_fn = step
            # Memory freed before the first iteration (an earlier run, an earlier cell, the
            # pipeline the setup replaced) would otherwise be reused silently by a leak, hiding
            # it from RSS for hundreds of iterations: collect and hand it back first.
            gc.collect()
            _sampler.malloc_trim()
            for ob in self.observers:
                if hasattr(ob, "wrap_step"):
                    step_fn = ob.wrap_step(self, step_fn)
            self._step_fn = step_fn
        except KeyboardInterrupt:
            self.stopped = "interrupted"
        except MemoryGuardTripped:
            self.stopped = "memory-guard"
        except BaseException as exc:
            if self._stage_session is None or self.sampler is None:
                self._teardown()
                raise
            self.stopped = "error"
            self._record_error(exc, None)

    def _record_error(self, exc: BaseException, iteration: int | None) -> None:
        self.error = exc
        self.error_iteration = iteration
        self.error_traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def _budget_reason(self) -> str | None:
        spec = self.spec
        if self._stop_request is not None:
            return self._stop_request
        if spec.iterations is not None and self.index >= spec.iterations:
            return "iterations"
        elapsed = time.perf_counter() - self._t0
        if spec.seconds is not None and elapsed >= spec.seconds:
            return "seconds"
        if spec.iterations is None and spec.seconds is None:
            if self._confident_streak >= CONFIDENT_STREAK:
                return "confident"
            if elapsed >= DEFAULT_SECONDS:
                return "seconds"
        # Would one more iteration like the worst so far cross --max-rss? Stop before it.
        if spec.max_rss is not None and self.log.n:
            last = int(self.log.cols["rss"][self.log.n - 1])
            if last + self._max_rise >= spec.max_rss:
                self._guard_reason = (
                    f"the next iteration could take RSS from {format_bytes(last)} over "
                    f"--max-rss {format_bytes(spec.max_rss)}"
                )
                return "memory-guard"
        return None

    def step_once(self) -> bool:
        """Run one iteration; False when the watch should end."""
        if self.stopped is not None:
            return False
        reason = self._budget_reason()
        if reason is not None:
            self.stopped = reason
            return False
        i = self.index
        step = self._step_fn
        try:
            # The block count costs ~100 µs once TensorFlow is loaded: read it once per
            # iteration, the previous end serving as this start.
            blocks0 = self._blocks if self._blocks is not None else sys.getallocatedblocks()
            self._peak.reset()
            rss0 = _sampler.rss()
            t_start = time.perf_counter()
            with self._guard_lock:
                self._in_step = True
            try:
                step()
            finally:
                t_end = time.perf_counter()
                self._leave_step()
            rss1 = _sampler.rss()
            self.sampler.offer(t_end - self._t0, rss1)
            blocks1 = self._blocks = sys.getallocatedblocks()
            peak = self._peak.peak()
            if peak is None:
                peak = self.sampler.buffer.max_since(t_start - self._t0) or rss1
            peak = max(peak, rss1, rss0)
            self._max_rise = max(self._max_rise, peak - rss0)
            in_use = self._read_in_use(t_end)
            self.log.append(
                i, t_start - self._t0, t_end - self._t0, rss1, peak, t_end - t_start,
                blocks1, blocks1 - blocks0, in_use,
            )
            self.index = i + 1
            if self.live_verdict and t_end >= self._next_verdict_t:
                self.verdict = self._decide()
                # At most every VERDICT_INTERVAL, and never more than ~1% of the run's time.
                cost = time.perf_counter() - t_end
                self._next_verdict_t = t_end + max(VERDICT_INTERVAL, cost / VERDICT_SHARE)
                if (self.verdict.confident and self.log.total >= MIN_ITERATIONS_FOR_CONFIDENT
                        and t_end - self._t0 >= MIN_SECONDS_FOR_CONFIDENT):
                    self._confident_streak += 1
                else:
                    self._confident_streak = 0
            if self.observers:
                rec = IterationRecord(
                    i, t_start - self._t0, t_end - self._t0, rss1, peak, t_end - t_start,
                    blocks1, blocks1 - blocks0, in_use,
                )
                for ob in self.observers:
                    if hasattr(ob, "on_iteration"):
                        ob.on_iteration(self, rec)
        except MemoryGuardTripped:
            self.stopped = "memory-guard"
            return False
        except KeyboardInterrupt:
            self.stopped = "interrupted"
            return False
        except Exception as exc:
            self.stopped = "error"
            self._record_error(exc, i)
            return False
        return True

    def _read_in_use(self, t_end: float) -> int:
        """malloc's bytes in use now, or -1 when it is not time yet (or glibc cannot say).

        mallinfo2 walks every arena's free lists (30 µs to 2 ms in a TensorFlow process), so
        it is read at most IN_USE_SHARE of the run's time, spaced by its own measured cost (a
        running estimate, so that one slow walk does not leave a short run without readings),
        or every IN_USE_EVERY iterations when a reading is cheap.
        """
        if self._next_in_use_t is None:
            return -1
        if t_end < self._next_in_use_t:
            # ... but at least every IN_USE_EVERY iterations while a walk is cheap, so that a
            # short run of fast steps has enough readings for the verdict.
            cheap = self._in_use_cost is not None and self._in_use_cost < IN_USE_CHEAP
            if not cheap or self.index - self._in_use_index < IN_USE_EVERY:
                return -1
        self._in_use_index = self.index
        if self._in_use_cost is None and _sampler.malloc_in_use() is None:
            self._next_in_use_t = None  # (this first call also loads the function: not timed)
            return -1
        t = time.perf_counter()
        value = _sampler.malloc_in_use()
        if value is None:
            self._next_in_use_t = None
            return -1
        cost = time.perf_counter() - t
        est = self._in_use_cost
        self._in_use_cost = cost if est is None else 0.8 * est + 0.2 * min(cost, 4 * est)
        self._next_in_use_t = t_end + self._in_use_cost / IN_USE_SHARE
        return value

    def _decide(self) -> Verdict:
        log = self.log
        headroom = self._headroom
        if log.n:
            # Headroom shrinks as the process grows: measure from the latest RSS.
            headroom = max(0, (self._headroom or 0) - max(0, int(log.cols["rss"][log.n - 1]) - self.baseline_rss))
            if self.spec.max_rss is not None:
                headroom = min(headroom, max(0, self.spec.max_rss - int(log.cols["rss"][log.n - 1])))
        return decide(
            log.column("index"), log.column("rss"), durations=log.column("duration"),
            warmup=self.spec.warmup, headroom=headroom, blocks=log.column("blocks"),
            peaks=log.column("peak_rss"), in_use=log.column("malloc_in_use"),
        )

    def _teardown(self) -> None:
        global _active
        try:
            if self.sampler is not None:
                self.sampler.stop()
            if self._switch_interval is not None:
                sys.setswitchinterval(self._switch_interval)
                self._switch_interval = None
            self._peak.close()
        finally:
            try:
                if self._stage_session is not None:
                    self._stage_session.__exit__(None, None, None)
            finally:
                with _active_lock:
                    if _active is self:
                        _active = None

    def finish(self) -> WatchResult:
        if self._finished is not None:
            return self._finished
        stage_list: list = []
        notes: list = []
        try:
            try:
                self._leave_step()
            except MemoryGuardTripped:
                self.stopped = self.stopped or "memory-guard"
            if self._stage_session is not None:
                stage_list = list(self._stage_session.stages)
                notes = list(getattr(self._stage_session, "notes", []))
        finally:
            self._teardown()
        if self.stopped is None:
            self.stopped = self._stop_request or "stopped"
        t, v = self.sampler.series() if self.sampler is not None else (np.zeros(0), np.zeros(0))
        self.verdict = self._decide()
        if self.stopped == "memory-guard" and self._guard_reason:
            notes.append(f"Stopped by the memory guard: {self._guard_reason}.")
        result = WatchResult(
            spec=self.spec,
            verdict=self.verdict,
            stopped=self.stopped,
            error=self.error,
            error_iteration=self.error_iteration,
            error_traceback=self.error_traceback,
            samples=np.column_stack([t, v.astype(np.float64)]) if t.size else np.zeros((0, 2)),
            stages=stage_list,
            stage_notes=notes,
            elapsed=(time.perf_counter() - self._t0) if self._t0 else 0.0,
            baseline_rss=self.baseline_rss,
            _log=self.log,
        )
        for ob in self.observers:
            if hasattr(ob, "on_finish"):
                try:
                    ob.on_finish(self, result)
                except Exception as exc:  # an observer must not lose the result
                    result.stage_notes.append(f"{type(ob).__name__} failed: {exc!r}")
        self._finished = result
        return result

    # ------------------------------------------------------------------ drivers
    def run(self) -> WatchResult:
        try:
            self.start()
            while self.step_once():
                pass
        except KeyboardInterrupt:
            self.stopped = self.stopped or "interrupted"
        finally:
            result = self.finish()
        return result

    async def run_async(self) -> WatchResult:
        """The same loop, yielding to the event loop between iterations (widget clicks)."""
        try:
            self.start()
            last_yield = time.perf_counter()
            while self.step_once():
                await asyncio.sleep(0)
                now = time.perf_counter()
                if now - last_yield > 0.05:
                    # A zero sleep lets ready callbacks run; a short one lets the kernel read
                    # its sockets, so a Stop click is seen within a fraction of a second.
                    await asyncio.sleep(0.001)
                    last_yield = now
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.stopped = self.stopped or "interrupted"
        finally:
            result = self.finish()
        return result


def watch(
    step: Callable,
    setup: Callable | None = None,
    iterations: int | None = None,
    seconds: float | None = None,
    warmup: int | None = None,
    max_rss: int | str | None = None,
    widget: Any = None,
    *,
    off: Iterable[str] | str = (),
    serial: Iterable[str] | str = (),
    trace: bool = False,
    lines: bool = False,
    label: str = "",
    observers: Sequence = (),
) -> WatchResult:
    """Run ``step`` repeatedly while sampling memory, and decide whether it leaks.

    ``setup()`` runs once and its return value is passed to ``step(state)``; without setup,
    ``step()`` takes no argument. Runs until ``iterations`` or ``seconds``; with neither, until
    the verdict is confident or 60 s pass. ``max_rss`` ("2GiB", "500M" or bytes) stops the run
    before the process grows past it. ``widget``: None shows the live dashboard when running in
    a Jupyter kernel with widgets, False never, or pass a dashboard to reuse.
    """
    spec = WatchSpec(
        step=step, setup=setup, iterations=iterations, seconds=seconds, warmup=warmup,
        max_rss=parse_size(max_rss) if max_rss is not None else None,
        off=off, serial=serial, trace=trace, lines=lines, label=label,
    )
    obs = list(observers)
    dash = _resolve_widget(widget)
    if dash is not None:
        obs.append(dash)
    return Watch(spec, obs).run()


def _resolve_widget(widget: Any):
    if widget is False:
        return None
    if widget is None:
        if not _in_widget_kernel():
            return None
        try:
            from .widget import Dashboard
        except ImportError:
            return None
        dash = Dashboard()
        from IPython.display import display

        display(dash)
        return dash
    if widget is True:
        from IPython.display import display

        from .widget import Dashboard

        dash = Dashboard()
        display(dash)
        return dash
    return widget


def _in_widget_kernel() -> bool:
    """True inside a Jupyter kernel (where a front end may render widgets)."""
    if "IPython" not in sys.modules:
        return False
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except Exception:
        return False
    return ip is not None and getattr(ip, "kernel", None) is not None


_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}


def parse_size(value: int | float | str) -> int:
    """'2GiB' → 2147483648, '500M' → 500000000, 1024 → 1024. Raises ValueError when unclear."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"a size must be positive, not {value!r}")
        return int(value)
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"not a size: {value!r} (use a number of bytes or a unit: 500M, 500MiB, 2G, 2GiB)"
        )
    n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if n <= 0:
        raise ValueError(f"a size must be positive, not {value!r}")
    return int(n)
