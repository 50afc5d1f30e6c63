"""Native call stacks: memray traces a window of iterations after the warm-up.

With ``native=True`` memray's tracker (native traces on) is entered once the warm-up is over and
left a few iterations later; the allocations made inside that window and still alive at its end
are grouped by call stack (C/C++ and Python frames together) and divided by the window's
iterations. Only the window is traced: memray hooks every allocation of every thread while it
is on, which is what makes it costly (docs/attribution.md has the numbers).
"""

from __future__ import annotations

import collections
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

from ..records import IterationRecord
from ..sampler import rss
from ..spec import WatchSpec
from .result import TOP_N, NativeSite

START_SECONDS = 1.0  # the window opens this long after the start (buffers, autotuning settle) …
START_ITERATIONS = 3  # … and never before this many iterations
WINDOW_ITERATIONS = 50  # the window closes after this many iterations …
WINDOW_SECONDS = 2.0  # … or this long, whichever comes first …
MIN_WINDOW = 2  # … but never before this many
PREWARM_SECONDS = 0.03  # several ticks of the 125 Hz sampler
FRAMES_KEPT = 16  # frames of each stack reported, innermost first

_NEEDS_MEMRAY = (
    "native call stacks need memray (Linux and macOS): pip install 'leakwidget[native]' "
    "(or pip install memray)"
)
# Frames of the runner itself (everything outside the step) and of CPython's own evaluation
# loop say nothing about where the step allocated.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE_DIR = os.path.dirname(_OWN_DIR)  # leakwidget/: the magic's and the stages' wrappers
_INTERPRETER = ("Python/", "Objects/", "Modules/", "Include/", "./Include/", "Parser/")
# Frames that only hand memory out (allocators, arenas, containers growing): "where" names the
# first frame below them, the code that asked for the memory.
_PLUMBING = ("operator new", "mmap", "PyMem_", "_PyMem_", "std::", "absl::", "Eigen::",
             "tensorflow::Tensor::Tensor", "google::protobuf::")
_PLUMBING_WORDS = ("alloc", "arena", "memalign")
MAX_RESOLVED = 100  # records whose stacks are symbolised (the biggest): symbolising is the cost


def require_memray() -> None:
    """Fail before the run, with the fix, when native=True cannot work."""
    try:
        import memray  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(_NEEDS_MEMRAY) from exc


@dataclass(frozen=True)
class NativeWindow:
    """What the window saw: the sites, and the iterations it traced."""

    sites: tuple[NativeSite, ...]
    first: int  # first iteration traced
    last: int  # last iteration traced


class NativeStacks:
    """Opens memray's tracker after the warm-up, closes it a few iterations later, and reads
    the allocations made in between and still alive at its end."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.spent = 0.0  # seconds spent entering and leaving memray's tracker during the run
        self.own_rss = 0  # RSS that entering and leaving memray's tracker added (not the step's)
        self.enabled = False  # start() was called: native=True
        self._tracker = None  # memray.Tracker while the window is open
        self._dir: str | None = None
        self._start_at = START_ITERATIONS
        self._close_at: int | None = None  # with a known iteration count
        self._iterations: int | None = None
        self._first: int | None = None  # iteration index that opened the window
        self._last: int | None = None
        self._opened_done = 0
        self._opened_t = 0.0
        self._window: NativeWindow | None = None
        self._prev: int | None = None  # the previous iteration's corrected RSS
        self._diffs: collections.deque[int] = collections.deque(maxlen=9)  # before the window

    def start(self, spec: WatchSpec) -> None:
        """Before the setup: check memray is there, and pay its one-time cost now."""
        require_memray()
        self.enabled = True
        self._prewarm()
        self._start_at = max(START_ITERATIONS, spec.warmup or 0)
        self._iterations = spec.iterations
        if spec.iterations is not None:
            # A run of known length: trace its middle half at most.
            self._start_at = max(self._start_at, spec.iterations // 4)
            self._close_at = max(self._start_at + MIN_WINDOW, (3 * spec.iterations) // 4)

    def _prewarm(self) -> None:
        """memray's first tracker leaves ~2 MiB of its own state resident for good (measured;
        later ones ~20 KiB): a step in the very RSS series the verdict reads, and a stable step
        called a plateau. Paid here, before the setup and the first RSS reading."""
        import memray

        t0 = time.perf_counter()
        folder = tempfile.mkdtemp(prefix="leakwidget-native-")
        try:
            with memray.Tracker(os.path.join(folder, "warm.bin"), native_traces=True,
                                follow_fork=False, file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS):
                # Long enough for the sampler thread to allocate under the tracker once: memray
                # sets up each thread's state on its first traced allocation.
                time.sleep(PREWARM_SECONDS)
        except Exception as exc:  # e.g. another memray tracker is already active
            self.notes.append(f"Native call stacks were not recorded: memray could not start ({exc}).")
            self._first = -1  # never open the window
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.spent += time.perf_counter() - t0

    def correct(self, record: IterationRecord) -> None:
        """Take memray's own resident memory out of this record's RSS.

        Entering the tracker is measured around it. The first traced iteration also pays for
        memray's first look at the thread's stack and the libraries it unwinds through; that
        part is its RSS change beyond the median change of the iterations before the window.
        """
        raw = record.rss - self.own_rss
        if self._prev is not None:
            change = raw - self._prev
            if record.index == self._first and self._tracker is not None and self._diffs:
                extra = change - int(statistics.median(self._diffs))
                if extra > 0:
                    self.own_rss += extra
                    raw -= extra
            elif self._first is None:
                self._diffs.append(change)
        record.peak_rss -= record.rss - raw
        record.rss = raw
        self._prev = raw

    def on_iteration(self, record: IterationRecord, done: int) -> None:
        if self._tracker is None and self._first is None:
            room = self._iterations is None or done + MIN_WINDOW <= self._iterations
            if done >= self._start_at and room and (record.end >= START_SECONDS or self._close_at is not None):
                self._open(done, record)
            return
        if self._tracker is None:
            return
        n = done - self._opened_done
        long_enough = n >= WINDOW_ITERATIONS or record.end - self._opened_t >= WINDOW_SECONDS
        if n >= MIN_WINDOW and (long_enough or (self._close_at is not None and done >= self._close_at)):
            self._last = record.index
            self._close()

    def _open(self, done: int, record: IterationRecord) -> None:
        import memray

        t0 = time.perf_counter()
        self._dir = tempfile.mkdtemp(prefix="leakwidget-native-")
        try:
            tracker = memray.Tracker(
                os.path.join(self._dir, "window.bin"), native_traces=True, follow_fork=False,
                file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS,
            )
            # Entering maps every loaded library's segments and patches their symbol tables:
            # ~1 MiB resident in a watch (measured), which must not count as the step's growth.
            before = rss()
            tracker.__enter__()
            self.own_rss += rss() - before
        except Exception as exc:  # e.g. another memray tracker is already active
            self.notes.append(f"Native call stacks were not recorded: memray could not start ({exc}).")
            self._first = -1  # do not try again
            self._cleanup()
            return
        self._tracker = tracker
        self._first = record.index + 1
        self._opened_done = done
        self._opened_t = record.end
        self.spent += time.perf_counter() - t0

    def _close(self) -> None:
        t0 = time.perf_counter()
        tracker, self._tracker = self._tracker, None
        before = rss()
        try:
            tracker.__exit__(None, None, None)
        finally:
            self.own_rss += rss() - before
            self.spent += time.perf_counter() - t0

    def finish(self, last_index: int | None) -> NativeWindow | None:
        """Close the window if the run ended inside it, read what it recorded, clean up."""
        if not self.enabled:
            return None
        if self._window is not None or self._first is None or self._first < 0:
            if self._first is None and last_index is not None:
                self.notes.append(self._too_short())
            return self._window
        if self._tracker is not None:
            self._last = last_index
            self._close()
        try:
            if self._last is not None and self._last >= self._first and self._dir is not None:
                self._window = self._read()
            else:
                self.notes.append(self._too_short())
        except Exception as exc:  # a file memray could not read must not lose the attribution
            self.notes.append(f"Native call stacks could not be read ({exc!r}).")
        finally:
            self._cleanup()
        return self._window

    def _too_short(self) -> str:
        return ("Native call stacks were not recorded: the run ended before the traced window "
                f"(it opens after {START_SECONDS:g} s and {self._start_at} iterations, and traces "
                f"at least {MIN_WINDOW}).")

    def _read(self) -> NativeWindow:
        import memray

        n = self._last - self._first + 1
        reader = memray.FileReader(os.path.join(self._dir, "window.bin"))
        try:
            records = list(reader.get_leaked_allocation_records(merge_threads=True))
            sites = group_sites(records, n)
        finally:
            reader.close()
        return NativeWindow(tuple(sites), self._first, self._last)

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _is_python(frame: tuple) -> bool:
    filename = str(frame[1])
    return filename.endswith(".py") or (filename.startswith("<") and filename != "<unknown>")


def short_name(function: str) -> str:
    """A C++ signature without its argument list and a long template tail."""
    name = str(function)
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0 and not name.startswith("operator", i - 8):
            name = name[:i]
            break
    return name if len(name) <= 90 else name[:89] + "\u2026"


def stack_frames(stack: list) -> tuple[tuple[str, str], ...] | None:
    """(frame, "native" | "python" | "wrapper") innermost first, cut where the runner called
    the step ("wrapper": leakwidget's own Python around the user's code, the magic's or a
    stage's); None when the allocation was the runner's own (its innermost Python frame is
    leakwidget's engine: the records, the sampler)."""
    out: list[tuple[str, str]] = []
    seen_python = False
    for frame in stack:
        function, filename, line = frame[0], str(frame[1]), frame[2]
        if _is_python(frame):
            if filename.startswith(_OWN_DIR):
                if not seen_python:
                    return None  # the watcher's own allocation (records, sampler)
                break  # below the step: the runner, the kernel
            seen_python = True
            kind = "wrapper" if filename.startswith(_PACKAGE_DIR) else "python"
            out.append((f"{function} ({os.path.basename(filename)}:{line})", kind))
        elif not filename.startswith(_INTERPRETER) and "/Python-3." not in filename:
            where = "" if filename == "<unknown>" else f" ({os.path.basename(filename)}:{line})"
            out.append((f"{short_name(function)}{where}", "native"))
    return tuple(out)


def _plumbing(frame: str) -> bool:
    low = frame.lower()
    return frame.startswith(_PLUMBING) or any(w in low for w in _PLUMBING_WORDS)


def _where(frames: tuple[tuple[str, str], ...]) -> str:
    """The innermost frame that is not allocator plumbing, the nearest Python frame, and the
    outermost one of the user's (the step's own line, when it is not the nearest)."""
    native = next((f for f, kind in frames if kind == "native" and not _plumbing(f)), "")
    python = [f for f, kind in frames if kind == "python"]
    parts = [p for p in (native, python[0] if python else "") if p]
    if len(python) > 1:
        parts.append(f"\u2026 {python[-1]}")
    return " \u2190 ".join(parts) if parts else (frames[0][0] if frames else "?")


def group_sites(records: list, iterations: int) -> list[NativeSite]:
    """memray's leaked-allocation records grouped by stack, biggest first, per iteration."""
    groups: dict[tuple, list] = {}
    for rec in sorted(records, key=lambda r: r.size, reverse=True)[:MAX_RESOLVED]:
        frames = stack_frames(rec.hybrid_stack_trace())
        if frames is None:
            continue
        g = groups.setdefault(frames[:FRAMES_KEPT], [0, 0, frames])
        g[0] += rec.size
        g[1] += rec.n_allocations
    ranked = sorted(groups.values(), key=lambda g: g[0], reverse=True)[:TOP_N]
    n = max(iterations, 1)
    return [
        NativeSite(
            where=_where(frames), frames=tuple(f for f, _ in frames[:FRAMES_KEPT]),
            bytes_per_iteration=size / n, allocations_per_iteration=count / n, total_bytes=size,
        )
        for size, count, frames in ranked
    ]
