"""--lines: memory_profiler's line tracer on the step, with per-iteration accounting."""

from __future__ import annotations

import functools
import inspect
import linecache
import time
import types
from collections.abc import Callable, Iterable
from typing import Any

from ..sampler import rss
from .result import LineGrowth

# --lines may make the step this many times slower; beyond, it traces only some iterations.
LINES_COST_RATIO = 1.8
_NEEDS_MEMORY_PROFILER = "lines=True (--lines) needs memory_profiler: pip install memory_profiler"


def require_memory_profiler() -> None:
    """Fail before the run, with the fix, when --lines cannot work."""
    try:
        import memory_profiler  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(_NEEDS_MEMORY_PROFILER) from exc


def find_step_code(fn: Any) -> types.CodeType | None:
    """The code object whose lines are the user's step.

    Handles a plain function, a code object, a function that ``exec``-s compiled code held in
    its closure, ``functools.partial``, wrappers that set ``__wrapped__`` and callable objects.
    """
    seen: set[int] = set()
    chain: list = []
    obj = fn
    while obj is not None and id(obj) not in seen and len(chain) < 20:
        seen.add(id(obj))
        chain.append(obj)
        if isinstance(obj, functools.partial):
            obj = obj.func
        else:
            obj = getattr(obj, "__wrapped__", None)
    for obj in chain:  # an explicit code object wins over a wrapper's own code
        if isinstance(obj, types.CodeType):
            return obj
    for obj in reversed(chain):
        for c in getattr(obj, "__closure__", None) or ():
            try:
                v = c.cell_contents
            except ValueError:  # empty cell
                continue
            if isinstance(v, types.CodeType):
                return v
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            return code
        call = inspect.getattr_static(type(obj), "__call__", None)
        code = getattr(call, "__code__", None)
        if isinstance(code, types.CodeType) and not isinstance(obj, type):
            return code
    return None


class _LineMap(dict):
    """Stands in for memory_profiler's CodeMap: same tracer, our accounting.

    memory_profiler's own CodeMap needs the source file on disk (a notebook cell has none) and
    charges a line with "memory now − the highest memory ever seen at the previous line", which
    is wrong after memory falls. Here a line is charged with the RSS change since the previous
    traced event, and each iteration is kept apart so we can say in how many it grew.
    """

    def __init__(self, codes: Iterable[types.CodeType]) -> None:
        super().__init__((c, {}) for c in codes)
        self.last: int | None = None
        self.current: dict[tuple[str, int], int] = {}

    def trace(self, code: types.CodeType, lineno: int, prev_lineno: int) -> None:
        # called by LineProfiler's tracer
        mem = rss()
        if self.last is not None:
            key = (code.co_filename, lineno)
            self.current[key] = self.current.get(key, 0) + (mem - self.last)
        self.last = mem


def _profiler_class() -> type:
    try:
        from memory_profiler import LineProfiler
    except ImportError as exc:
        raise RuntimeError(_NEEDS_MEMORY_PROFILER) from exc

    class _Profiler(LineProfiler):
        # memory_profiler's tracer stays on for every frame the step calls and runs for each
        # of their lines; declining frames that are not the step's makes a step that calls
        # Python code (or has a comprehension) many times cheaper to profile.
        def trace_memory_usage(self, frame, event, arg):
            if event == "call" and frame.f_code not in self.code_map:
                return None
            return super().trace_memory_usage(frame, event, arg)

    return _Profiler


class _LineRecorder:
    """Traces the step's lines in as many iterations as keep the step's time under
    LINES_COST_RATIO times its untraced time (measured as it runs): the first iteration, then
    whenever the time spent so far leaves room for one more traced call. A step whose lines are
    cheap to trace is traced every iteration; a loop-heavy one every few."""

    def __init__(self, code: types.CodeType) -> None:
        self.prof = _profiler_class()()
        # Only the step's own code: a comprehension or a function defined in the cell is charged to
        # the line that runs it, and its inner loop does not pay a memory read per element.
        self.map = _LineMap((code,))
        self.prof.code_map = self.map
        self.total: dict[tuple[str, int], int] = {}
        self.grew: dict[tuple[str, int], int] = {}
        self.ran: dict[tuple[str, int], int] = {}
        self.traced = self.plain = 0  # iterations run each way
        self.traced_s = self.plain_s = 0.0  # and the seconds they took

    def due(self) -> bool:
        """Whether the next call is traced."""
        if self.traced == 0 or self.plain == 0:
            return self.traced == 0
        per_plain = self.plain_s / self.plain
        projected = self.traced_s + self.plain_s + self.traced_s / self.traced
        return projected <= LINES_COST_RATIO * (self.traced + self.plain + 1) * per_plain

    def wrap(self, fn: Callable) -> Callable:
        rec = self

        def profiled(*args, **kwargs):
            t0 = time.perf_counter()
            if not rec.due():
                try:
                    return fn(*args, **kwargs)
                finally:
                    rec.plain += 1
                    rec.plain_s += time.perf_counter() - t0
            rec.map.last = None  # growth between iterations belongs to no line
            rec.map.current = {}
            rec.prof.enable_by_count()
            try:
                return fn(*args, **kwargs)
            finally:
                rec.prof.disable_by_count()
                rec._collect()
                rec.traced += 1
                rec.traced_s += time.perf_counter() - t0

        profiled.__wrapped__ = fn  # type: ignore[attr-defined]
        return profiled

    def _collect(self) -> None:
        for key, inc in self.map.current.items():
            self.total[key] = self.total.get(key, 0) + inc
            self.ran[key] = self.ran.get(key, 0) + 1
            if inc > 0:
                self.grew[key] = self.grew.get(key, 0) + 1

    def result(self) -> list[LineGrowth]:
        out = []
        for (fname, ln), tot in sorted(self.total.items(), key=lambda kv: kv[0][1]):
            ran = self.ran.get((fname, ln), 0)
            out.append(LineGrowth(
                fname, ln, linecache.getline(fname, ln).strip(), int(tot),
                self.grew.get((fname, ln), 0) / ran if ran else 0.0, ran,
            ))
        return out


class LineReport:
    """With lines=True: the step traced line by line, each line's RSS growth per iteration."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self._recorder: _LineRecorder | None = None

    def wrap(self, fn: Callable, code: types.CodeType | None) -> Callable:
        """The step to call: fn, traced through the lines of code."""
        if code is None:
            self.notes.append("--lines: could not find the step's code; no line report.")
            return fn
        if not callable(fn):
            raise TypeError(
                f"the step must be callable (a function that runs the cell), not {type(fn).__name__}"
            )
        self._recorder = _LineRecorder(code)
        return self._recorder.wrap(fn)

    def result(self) -> list[LineGrowth]:
        return self._recorder.result() if self._recorder is not None else []

    def sampling_note(self) -> str:
        """What was traced, when not every iteration was."""
        rec = self._recorder
        if rec is None or rec.plain == 0:
            return ""
        return (f"--lines traced {rec.traced:,} of {rec.traced + rec.plain:,} iterations, to keep "
                f"the step under {LINES_COST_RATIO:g}\u00d7 its untraced time: the increments are "
                "summed over those, and the share is of those.")
