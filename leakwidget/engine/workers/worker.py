"""What runs in an isolated watch's worker process (:func:`run`, started by :mod:`.isolate`).

The parent (:mod:`.isolate`) writes two messages to the worker's stdin: a plain pickle of the
:class:`Header` (``sys.path``, source lines of notebook cells, the preloaded allocator to check),
then the cloudpickled :class:`Job` (the :class:`WatchSpec` and the attribution options). The
worker runs an ordinary :class:`Watch` of itself whose observer, :class:`Streamer`, sends every
event over the pipe ``FD``:

=====================  ==========================================================
("start", info)        baseline RSS, pid, allocator loaded
("stages", stages)     the recorded pipeline stages, when they change
("samples", t, rss)    RSS samples (numpy arrays)
("records", rows)      finished iterations, batched (IterationRecord values)
("verdict", verdict)   each live verdict
("finish", result)     the WatchResult (its step and setup replaced: see its pickling)
("error", text)        the job could not be loaded; nothing ran
=====================  ==========================================================

Later messages on stdin are ``("stop", reason)``; end of stdin means the parent is gone, and the
worker stops (and exits, whatever the step does) rather than run on as an orphan.
"""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...stages import Stage
from ..attribution import Tracker
from ..children import adopt_orphans, end_descendants
from ..members import ChildrenReading
from ..observer import BaseObserver, RunControl
from ..records import IterationRecord
from ..result import WatchResult
from ..spec import WatchSpec
from ..verdict import Verdict
from ..watch import Watch
from .channel import Receiver, Sender

# Records of fast steps are sent in batches at most this far apart (one message per iteration
# would slow a sub-millisecond step down); a step of a millisecond or more sends each one, so a
# worker that dies is known to have died in the iteration after the last record.
RECORD_BATCH_SECONDS = 0.02
RECORD_ALONE_SECONDS = 0.001
RECORD_BATCH_MAX = 2000
ORPHAN_EXIT_SECONDS = 3.0  # after the parent is gone, exit this long after asking the step to stop
# Shared memory the parent makes (isolate.Progress) and reads when the worker dies: the
# iteration the loop is in (8 bytes), then the records of the last RING iterations, slot
# index % RING, each written before the count. A batch of records not sent yet dies with the
# worker; the ring keeps it (RING > RECORD_BATCH_MAX).
RING = 2048
ROW = struct.Struct("=qddqqdqqq")  # IterationRecord.values()
PROGRESS_BYTES = 8 + RING * ROW.size


@dataclass
class Header:
    sys_path: list[str]
    sources: dict[str, list[str]] = field(default_factory=dict)  # linecache entries
    preload: str | None = None  # the library LD_PRELOAD must have loaded


@dataclass
class Job:
    spec: WatchSpec
    attribute: bool = True  # run the attribution tracker
    census: bool | None = None  # its object census (see Tracker)


class Streamer(BaseObserver):
    """Sends the watch's events to the parent; iteration records in batches."""

    def __init__(self, out: Sender, info: dict, progress: SharedProgress | None = None) -> None:
        self.out = out
        self.info = info
        self.progress = progress  # the iteration the loop is in and the last records, shared
        self.watch: Watch | None = None  # set once the watch exists: its baseline is sent
        self._rows: list[tuple] = []
        self._lock = threading.Lock()
        self._last_flush = time.perf_counter()

    def _send(self, message: tuple, *, by_value: bool = False) -> None:
        try:
            self.out.send(message, by_value=by_value)
        except (BrokenPipeError, OSError):
            pass  # the parent is gone: the stdin listener ends the run

    def _flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            self._last_flush = time.perf_counter()
        if rows:
            self._send(("records", rows))

    def on_start(self, run: RunControl) -> None:
        baseline = self.watch.baseline_rss if self.watch is not None else 0
        self._send(("start", {**self.info, "baseline_rss": baseline}))

    def on_stages(self, stages: Sequence[Stage]) -> None:
        self._send(("stages", list(stages)))

    def on_samples(self, t: np.ndarray, rss: np.ndarray) -> None:
        self._flush()
        self._send(("samples", t, rss))

    def on_children(self, reading: ChildrenReading) -> None:
        self._send(("children", reading))

    def on_iteration(self, record: IterationRecord) -> None:
        values = record.values()
        if self.progress is not None:
            self.progress.record(values)
        with self._lock:
            self._rows.append(values)
            due = (record.duration >= RECORD_ALONE_SECONDS or len(self._rows) >= RECORD_BATCH_MAX
                   or time.perf_counter() - self._last_flush >= RECORD_BATCH_SECONDS)
        if due:
            self._flush()

    def on_verdict(self, verdict: Verdict) -> None:
        self._flush()
        self._send(("verdict", verdict))

    def on_phase(self, what: str) -> None:
        self._flush()
        self._send(("phase", what))

    def on_finish(self, result: WatchResult) -> None:
        self._flush()
        try:
            self.out.send(("finish", result), by_value=True)
        except (BrokenPipeError, OSError):
            return
        except Exception as exc:  # something in the result cannot travel: send it without that
            self._send(("finish", _travelling(result, exc)), by_value=True)


def _travelling(result: WatchResult, exc: Exception) -> WatchResult:
    """The result with its exception replaced by a description (it would not pickle)."""
    if result.error is not None:
        result.error = RuntimeError(f"{type(result.error).__name__}: {result.error}")
    result.stage_notes.append(f"Part of the result could not be sent from the worker: {exc!r}")
    return result


def _listen(inbox: Receiver, watch: Watch, done: threading.Event) -> None:
    """Stop requests from the parent; its end of stdin, before the run is done, means it is gone."""
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            break
        if message[0] == "stop":
            watch.request_stop(message[1])
    if done.is_set():
        return
    watch.request_stop("interrupted")
    os.kill(os.getpid(), signal.SIGINT)  # out of a long step, as Ctrl-C would
    timer = threading.Timer(ORPHAN_EXIT_SECONDS, exit_now, args=(3,))
    timer.daemon = True
    timer.start()


def _preloaded(path: str) -> bool:
    """Is the library ``path`` mapped into this process (did LD_PRELOAD take effect)?"""
    name = os.path.basename(path)
    try:
        with open("/proc/self/maps") as f:
            return any(name in line for line in f)
    except OSError:  # no procfs: nothing to check against
        return True


def _load(inbox: Receiver) -> tuple[Header, Job]:
    header: Header = inbox.recv()
    sys.path[:] = header.sys_path
    import linecache

    for filename, lines in header.sources.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)
    if header.preload is not None and not _preloaded(header.preload):
        raise RuntimeError(f"LD_PRELOAD={header.preload} did not load into the worker")
    return header, inbox.recv()


class SharedProgress:
    """The worker's side of the parent's shared memory (see ``PROGRESS_BYTES``)."""

    def __init__(self, buf: mmap.mmap) -> None:
        self._buf = buf
        self._count = memoryview(buf)[:8].cast("q")

    def record(self, values: tuple) -> None:
        """An iteration has ended: its record in the ring; the loop goes on to the next one."""
        index = values[0]
        ROW.pack_into(self._buf, 8 + (index % RING) * ROW.size, *values)
        self._count[0] = index + 1


def _shared_progress(fd: int) -> SharedProgress | None:
    """The parent's shared progress (see isolate.Progress), or None without one."""
    if fd < 0:
        return None
    try:
        return SharedProgress(mmap.mmap(fd, PROGRESS_BYTES))
    except (OSError, ValueError):
        return None


def _print_to(fd: int) -> io.TextIOWrapper:
    """A text stream on a pipe to the parent, which shows what comes through as it comes."""
    return io.TextIOWrapper(io.FileIO(fd, "w"), encoding="utf-8", errors="backslashreplace",
                            line_buffering=True, write_through=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``argv``: [program, events fd, stdout fd, stderr fd, progress fd] (see :mod:`.isolate`)."""
    argv = sys.argv if argv is None else argv
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while the parent spawned us
    sys.stdout, sys.stderr = _print_to(int(argv[2])), _print_to(int(argv[3]))
    out = Sender(int(argv[1]))
    inbox = Receiver(sys.stdin.fileno())
    try:
        header, job = _load(inbox)
    except KeyboardInterrupt:  # interrupted while loading: the parent knows, nothing to say
        return 130
    except BaseException as exc:  # nothing ran: the parent raises this as the run's error
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        out.send(("error", text))  # plain text: it must travel whatever failed
        return 2
    info = {"pid": os.getpid(), "preload": header.preload}
    tracker: Tracker | bool = (Tracker(trace=job.spec.trace, lines=job.spec.lines, census=job.census)
                               if job.attribute else False)
    streamer = Streamer(out, info, _shared_progress(int(argv[4])))
    # This process is the run's own: resetting its peak-RSS mark disturbs nobody, and gives
    # every iteration's exact peak.
    spec = dataclasses.replace(job.spec, exact_peaks=True)
    watch = Watch(spec, [streamer], tracker=tracker, live_verdict=True)
    streamer.watch = watch
    done = threading.Event()
    threading.Thread(target=_listen, args=(inbox, watch, done), name="leakwidget-control",
                     daemon=True).start()
    try:
        watch.run()
    finally:
        done.set()
    out.close()
    return 0


def run(argv: Sequence[str]) -> None:
    """The worker's entry point (see :mod:`.isolate`): main(), then exit at once."""
    # The worker is the subreaper of what the step starts: a process whose parent ends (a
    # daemon's double fork) stays in its tree, watched (WithChildren) and ended with it.
    adopt_orphans()
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    exit_now(code)


def exit_now(code: int) -> None:
    """End every process the step started, then this one, at once: os._exit, no interpreter
    teardown to hang on (TensorFlow's threads, the user's daemons). (Should the worker die
    first, the parent ends them: they carry its token.)"""
    end_descendants()
    os._exit(code)
