"""An isolated watch: the setup and the step run in a fresh Python worker process.

    result = await run_isolated(spec, observers, pause)      # or run_sync(run_isolated(...))

The parent spawns ``python -m leakwidget.engine.workers.worker`` (:mod:`.worker`) with the spec's
environment (``env``, ``LD_PRELOAD`` for ``allocator``), sends it the cloudpickled spec, and
replays what the worker streams back — stages, samples, records, verdicts, the result — into the
caller's observers, through :class:`IsolatedRun`, a :class:`RunControl` whose ``request_stop``
messages the worker. So the same dashboard, Stop and result work as for a watch in this process;
what is charted is the worker's memory.

Every way out ends the worker and everything it started (it runs in its own process group, which
is killed before the worker is reaped; what left the group carries the worker's mark in its
environment, ``TOKEN_ENV``): the normal end, Stop, an exception, KeyboardInterrupt (the worker
gets SIGINT first and a few seconds to send its partial result). A worker that dies mid-run
leaves a partial result with ``stopped == "worker-died"`` saying how it died, with every
iteration it finished.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import cloudpickle
import numpy as np

from .. import sampler
from ..interrupts import Interrupts
from ..kinds import StopReason
from ..observer import Observer, tell_phase
from ..records import IterationRecord, RecordLog
from ..result import WatchResult
from ..spec import WatchSpec
from ..units import format_bytes
from ..verdict import Verdict
from ..watch import Pause, Watch, YieldToLoop, verdict_of
from .channel import Receiver, Sender
from .hub import Hub
from .log import WorkerLog
from .sequence import Elsewhere
from .worker import PROGRESS_BYTES, RING, ROW, Header, Job

__all__ = ["IsolatedRun", "IsolationError", "WorkerDied", "allocator_library", "allocator_package",
           "run_isolated", "run_watch"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
# Not "-m leakwidget.engine.workers.worker": importing the package imports that module first, and runpy
# would then run a second copy of it.
_WORKER_MAIN = "import sys; from leakwidget.engine.workers.worker import run; run(sys.argv)"
INTERRUPT_GRACE = 3.0  # seconds a worker gets, after SIGINT, to send its partial result
TOKEN_ENV = "LEAKWIDGET_WORKER"  # the environment variable that marks a worker's processes
EXIT_GRACE = 5.0  # seconds a worker that sent its result gets to exit
_ALLOCATOR_SONAMES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}
_ALLOCATOR_PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}


class IsolationError(RuntimeError):
    """The watch cannot run in a worker process: it cannot travel there, or the worker could not
    start or load it. Nothing ran."""


class WorkerDied(RuntimeError):
    """The worker process ended without sending its result (the result's ``error``)."""


# ---------------------------------------------------------------------------------------------
# The worker's environment


def allocator_library(name: str | None) -> str | None:
    """The shared library that makes ``name`` the worker's malloc (None for glibc's own).

    Looked up in the multiarch and usual library folders; a missing library is an error, never
    a silent run under glibc."""
    if name in (None, "glibc"):
        return None
    soname = _ALLOCATOR_SONAMES.get(name)
    if soname is None:
        raise ValueError(f"unknown allocator {name!r}: use glibc, jemalloc or tcmalloc")
    import sysconfig

    arch = sysconfig.get_config_var("MULTIARCH") or ""
    folders = [f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    for folder in folders:
        path = os.path.join(folder, soname)
        if os.path.isfile(path):
            return path
    raise IsolationError(
        f"allocator {name!r} needs {soname}, which is not installed (looked in "
        f"{', '.join(dict.fromkeys(folders))}); on Debian/Ubuntu: apt-get install "
        f"{_ALLOCATOR_PACKAGES[name]} (scripts/install-system.sh installs it)")


def allocator_package(name: str | None) -> str | None:
    """The Debian package that installs allocator ``name`` (None for glibc's own)."""
    return _ALLOCATOR_PACKAGES.get(name or "glibc")


def worker_environment(spec: WatchSpec) -> tuple[dict[str, str], str | None]:
    """(environment, preloaded library) of a worker for ``spec``."""
    env = dict(os.environ)
    env.update(spec.env)
    # The worker imports this very leakwidget, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    library = allocator_library(spec.allocator)
    if library is not None:
        env["LD_PRELOAD"] = " ".join(filter(None, [library, env.get("LD_PRELOAD")]))
    return env, library


def _cell_sources(spec: WatchSpec) -> dict[str, list[str]]:
    """linecache's lines of notebook cells the step and setup were defined in (tracebacks and
    autograph read them; in the worker they exist nowhere else)."""
    import linecache

    out: dict[str, list[str]] = {}
    for fn in (spec.step, spec.setup):
        code = getattr(fn, "__code__", None)  # a user's function (not a method or a callable object)
        if code is None or os.path.isfile(code.co_filename):
            continue
        lines = linecache.cache.get(code.co_filename)
        if lines is not None:
            out[code.co_filename] = list(lines[2])
    return out


def _job_bytes(spec: WatchSpec, attribute: bool, census: bool | None) -> bytes:
    try:
        return cloudpickle.dumps(Job(spec, attribute=attribute, census=census),
                                 protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise IsolationError(
            f"the step or setup cannot travel to a worker process ({type(exc).__name__}: {exc}); "
            "build what it needs (open files, iterators, datasets) inside the step or its setup"
        ) from exc


# ---------------------------------------------------------------------------------------------
# The worker process


class WorkerProcess:
    """One worker process (:mod:`.worker`) in its own process group.

    Messages go to ``hub``'s queue as ``(run, message)``. What the worker's Python code prints
    (``sys.stdout`` / ``sys.stderr``: the user's prints, warnings, tracebacks) comes through
    pipes to this process's ``sys.stdout`` / ``sys.stderr`` — in a notebook, the cell's output;
    what its C libraries write to the file descriptors (TensorFlow's start-up log) goes where
    this process's own does, as it would for a watch in this process.
    """

    def __init__(self, run: IsolatedRun, hub: Hub, env: dict[str, str], log: WorkerLog | None = None) -> None:
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # Iterations begun and the last records, in shared memory: exact even when a fast
        # step's records, sent in batches, die with the worker.
        self._progress = Progress()
        theirs = (events_w, out_w, err_w)
        # Inherited by every process the step starts: found by it after they left the worker's
        # group and tree (a new session; a daemon whose worker died first).
        self.token = uuid.uuid4().hex
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, *map(str, theirs), str(self._progress.fd)],
                stdin=control_r, pass_fds=(*theirs, *self._progress.fds),
                env={**env, TOKEN_ENV: self.token}, cwd=os.getcwd(), start_new_session=True,
                # A kept log takes what its C libraries write to stderr too (TensorFlow's log).
                stderr=err_w if log is not None else None,
            )
        except BaseException:
            for fd in (events_r, control_w, out_r, err_r):
                os.close(fd)
            self._progress.close()
            raise
        finally:
            for fd in (events_w, out_w, err_w, control_r):
                os.close(fd)
        self.pid = self.proc.pid
        self.control = Sender(control_w)
        self._events = Receiver(events_r)
        self._status: tuple[int, int] | None = None  # (code, signal) once it has exited
        self._threads = [
            threading.Thread(target=self._read, args=(run, hub), name="leakwidget-worker-events", daemon=True),
            threading.Thread(target=_relay, args=(out_r, "stdout"), daemon=True),
            threading.Thread(target=_relay, args=(err_r, "stderr"), daemon=True) if log is None
            else threading.Thread(target=log.read_from, args=(err_r,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, run: IsolatedRun, hub: Hub) -> None:
        try:
            while True:
                hub.put(run, self._events.recv())
        except (EOFError, OSError):
            pass
        except Exception as exc:  # a message this process cannot unpickle
            hub.put(run, ("unreadable", f"{type(exc).__name__}: {exc}"))
        finally:
            hub.put(run, ("eof",))

    def send(self, message: object) -> bool:
        """Send to the worker; False when it is gone."""
        try:
            self.control.send(message)
            return True
        except (BrokenPipeError, OSError):
            return False

    def exited(self) -> tuple[int, int] | None:
        """(exit code, signal number) once the worker has ended, else None. The worker is not
        reaped (WNOWAIT): its pid, the process group's id, cannot be reused until close()."""
        if self._status is None:
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
            if info is not None:
                killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                self._status = (0, info.si_status) if killed else (info.si_status, 0)
        return self._status

    @property
    def iteration(self) -> int:
        """The iteration the worker's loop is in (the one after the last that ended)."""
        return self._progress.value

    def records_from(self, first: int) -> list[IterationRecord]:
        """Records of iterations ``first`` on that it finished (see Progress.records_from)."""
        return self._progress.records_from(first)

    def wait_exit(self, timeout: float) -> tuple[int, int] | None:
        deadline = time.monotonic() + timeout
        while (status := self.exited()) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return status

    def interrupt(self) -> None:
        if self.exited() is None:
            try:
                os.kill(self.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """End the worker, every process of its group and every other process the step
        started, then reap it. Its shared progress stays readable until :meth:`release`."""
        try:
            if self.exited() is None:
                _kill_group(self.pid)
                self.wait_exit(EXIT_GRACE)
            _kill_group(self.pid)  # what the step left behind (the worker is not reaped yet)
            end_marked(self.token, EXIT_GRACE)  # ... and what left the group
            _wait_group_gone(self.pid, EXIT_GRACE)
        finally:
            self.proc.wait()
            self.control.close()
            for t in self._threads:
                t.join(timeout=2)
            self._events.close()

    def release(self) -> None:
        """After close(): the shared progress too."""
        self._progress.close()


class Progress:
    """The iteration the worker is in and its last records (worker.PROGRESS_BYTES), which the
    worker writes and this process reads: shared memory (a memfd; where there is none, fd -1,
    the counter stays 0 and there are no records)."""

    def __init__(self) -> None:
        import mmap

        self.fd, self._map = -1, None
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("leakwidget-progress")
            os.ftruncate(self.fd, PROGRESS_BYTES)
            self._map = mmap.mmap(self.fd, PROGRESS_BYTES)

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.fd,) if self.fd >= 0 else ()

    @property
    def value(self) -> int:
        return int.from_bytes(self._map[:8], sys.byteorder) if self._map is not None else 0

    def records_from(self, first: int) -> list[IterationRecord]:
        """The records of iterations ``first`` on that the worker finished (those still in the
        ring: at most its last ``RING``)."""
        if self._map is None:
            return []
        end = self.value
        return [IterationRecord(*ROW.unpack_from(self._map, 8 + (i % RING) * ROW.size))
                for i in range(max(first, end - RING), end)]

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def end_marked(token: str, timeout: float) -> None:
    """SIGKILL every process whose environment carries the worker's ``token``, again while any
    appear, until none runs (zombies have ended) or ``timeout`` has passed."""
    needle = f"{TOKEN_ENV}={token}".encode()
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while pids := _carrying(needle):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() >= deadline:
            return
        time.sleep(0.005)
    # A process loses its environment as it exits, a moment before it is a zombie.
    while any(map(_exiting, killed)) and time.monotonic() < deadline:
        time.sleep(0.005)


def _exiting(pid: int) -> bool:
    """Does ``pid`` still exist and not yet as a zombie?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _carrying(needle: bytes) -> list[int]:
    """Processes whose environment holds ``needle`` (NAME=VALUE); a zombie's is empty."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:  # ended meanwhile, or not ours to read
                continue
    return found


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout: float) -> None:
    """SIGKILL is delivered asynchronously: wait (at most ``timeout``) until no process of the
    group still runs, so that a caller finds them ended (zombies waiting for init count as
    ended)."""
    deadline = time.monotonic() + timeout
    while _group_runs(pgid) and time.monotonic() < deadline:
        time.sleep(0.005)


def _group_runs(pgid: int) -> bool:
    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):  # ended meanwhile
            continue
    return False


def _relay(fd: int, name: str) -> None:
    """Copy the worker's printed output to ours as it comes (in a notebook: the cell's output)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while chunk := os.read(fd, 1 << 16):
            text = decoder.decode(chunk)
            out = sys.stdout if name == "stdout" else sys.stderr
            try:
                out.write(text)
                out.flush()
            except Exception:  # a closed or odd stream must not end the relay
                pass
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# The run, seen from here


class IsolatedRun(Elsewhere):
    """A watch running in a worker process: the :class:`RunControl` its observers get, and the
    replay of its stream into them (in the thread that calls the hub's ``wait``).

    It keeps its own bounded copy of the stream (records, samples, stages), from which a partial
    result is made when the worker dies or must be killed.
    """

    def __init__(self, spec: WatchSpec, observers: Sequence[Observer] = (), *, hub: Hub | None = None,
                 attribute: bool = True, census: bool | None = None,
                 yields_to_loop: bool = False, keep_stderr: bool = False) -> None:
        self.spec = spec
        # The worker's stderr, kept instead of printed (a comparison's workers): see log.py.
        self.stderr: WorkerLog | None = WorkerLog() if keep_stderr else None
        self.observers = list(observers)
        self.hub = hub if hub is not None else Hub()
        self.yields_to_loop = yields_to_loop
        self.attribute, self.census = attribute, census
        self.log = RecordLog()
        self.samples = sampler.Series()
        self.stages: list = []
        self.verdict = Verdict("inconclusive", summary="Starting\u2026")
        self.baseline_rss = 0
        self.pid: int | None = None
        self.result: WatchResult | None = None
        self.worker: WorkerProcess | None = None
        self._t0 = 0.0
        self._headroom: int | None = None
        self._interrupted = False
        self._notes: list[str] = []
        self._load_error = ""

    # ------------------------------------------------------------------ RunControl
    @property
    def active(self) -> bool:
        """Started and not finished."""
        return self.worker is not None and self.result is None

    def request_stop(self, reason: StopReason = "stopped") -> None:
        """Ask the worker's watch to stop at its next iteration boundary (any thread)."""
        if self.worker is not None and self.result is None:
            self.worker.send(("stop", reason))

    def so_far(self) -> tuple[list, np.ndarray, np.ndarray, list[IterationRecord], Verdict]:
        """What the worker has sent so far (a view that starts following late replays it)."""
        t, v = self.samples.arrays()
        return list(self.stages), t, v, self.log.records(), self.verdict

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Spawn the worker and send it the watch; raises IsolationError (nothing started) when
        the watch cannot travel or its allocator is missing."""
        env, library = worker_environment(self.spec)
        job = _job_bytes(self.spec, self.attribute, self.census)
        header = Header(sys_path=list(sys.path), sources=_cell_sources(self.spec), preload=library)
        self._headroom = sampler.memory_status()[0]
        self._t0 = time.perf_counter()
        self.hub.runs.append(self)
        # An interrupt between the spawn and this assignment would leave a worker nobody ends:
        # SIGINT waits (blocked) until the worker is ours; the worker unblocks it for itself.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.worker = WorkerProcess(self, self.hub, env, self.stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        self.pid = self.worker.pid
        if self.worker.send(header):
            try:
                self.worker.control.send_bytes(job)
            except (BrokenPipeError, OSError):
                pass  # it died at once: its end of the stream says how
        for ob in self.observers:
            ob.on_start(self)

    def interrupt(self) -> None:
        """SIGINT to the worker, as Ctrl-C would: its watch ends and sends a partial result."""
        self._interrupted = True
        if self.worker is not None:
            self.worker.interrupt()

    def close(self) -> None:
        """End the worker and its processes (every way out); a result exists afterwards."""
        try:
            if self.worker is not None:
                self.worker.close()
        finally:
            if self in self.hub.runs:
                self.hub.runs.remove(self)
            try:
                if self.result is None and not self._load_error:
                    self._recover_records()
                    self._conclude(self._partial("interrupted"))
            finally:
                if self.worker is not None:
                    self.worker.release()

    # ------------------------------------------------------------------ the stream
    def handle(self, message: tuple) -> None:
        if self.result is not None:  # what was still on its way when the run was closed
            return
        kind = message[0]
        if kind == "records":
            for row in message[1]:
                record = IterationRecord(*row)
                self.log.append(record)
                for ob in self.observers:
                    ob.on_iteration(record)
        elif kind == "samples":
            t, v = message[1], message[2]
            for ti, vi in zip(t.tolist(), v.tolist(), strict=True):
                self.samples.append(ti, vi)
            for ob in self.observers:
                ob.on_samples(t, v)
        elif kind == "verdict":
            self.verdict = message[1]
            for ob in self.observers:
                ob.on_verdict(self.verdict)
        elif kind == "children":
            for ob in self.observers:
                ob.on_children(message[1])
        elif kind == "phase":
            tell_phase(self.observers, message[1])
        elif kind == "stages":
            self.stages = list(message[1])
            for ob in self.observers:
                ob.on_stages(self.stages)
        elif kind == "start":
            self.baseline_rss = int(message[1]["baseline_rss"])
        elif kind == "finish":
            result: WatchResult = message[1]
            result.spec = self.spec  # the caller's, with its step: Run again works from it
            result.stage_notes.extend(self._notes)
            self._conclude(result)
        elif kind == "error":
            self._load_error = message[1]
        elif kind == "unreadable":
            self._notes.append(f"A message from the worker could not be read: {message[1]}")
        elif kind == "eof":
            self._ended()

    def check(self) -> None:
        # A worker that died while processes it started still hold its pipe open sends no end
        # of stream: end them, so the pipe closes and what it sent is read to the end.
        if self.result is None and self.worker is not None and self.worker.exited() is not None:
            _kill_group(self.worker.pid)
            end_marked(self.worker.token, 0.0)

    def _ended(self) -> None:
        if self.result is not None:
            return
        status = self.worker.wait_exit(EXIT_GRACE) if self.worker is not None else None
        if self._load_error:
            raise IsolationError("the worker process could not load the watch:\n" + self._load_error)
        self._recover_records()
        if self._interrupted:
            self._conclude(self._partial("interrupted"))
            return
        text = self._death_text(status)
        self._notes.append(text)
        self._conclude(self._partial("worker-died", WorkerDied(text)))

    def _recover_records(self) -> None:
        """The iterations the worker finished and never sent (their batch died with it), from
        the shared ring: the partial result has every iteration, with or without a view."""
        if self.worker is None:
            return
        for record in self.worker.records_from(self.log.total):
            self.log.append(record)
            for ob in self.observers:
                ob.on_iteration(record)

    def _death_text(self, status: tuple[int, int] | None) -> str:
        where = f"in iteration {self._dead_in()}" if self._dead_in() else "in the setup or iteration 0"
        last = int(self.samples.arrays()[1][-1]) if len(self.samples) else self.baseline_rss
        limit = self.spec.max_rss or ((self._headroom or 0) + self.baseline_rss) or None
        how = _how_it_ended(status, last, limit)
        return f"The worker process (pid {self.pid}) {how} {where}; the notebook's kernel is untouched."

    def _dead_in(self) -> int:
        """The iteration the worker was in (0: the setup or the first)."""
        return max(self.log.total, self.worker.iteration if self.worker is not None else 0)

    def _partial(self, stopped: StopReason, error: BaseException | None = None) -> WatchResult:
        t, v = self.samples.arrays()
        notes = list(self._notes)
        return WatchResult(
            spec=self.spec, stopped=stopped, error=error,
            verdict=verdict_of(self.log, self.spec, self._headroom, self.baseline_rss),
            error_iteration=(self._dead_in() or None) if error is not None else None,
            samples=np.column_stack([t, v.astype(np.float64)]) if t.size else np.zeros((0, 2)),
            stages=list(self.stages), stage_notes=notes,
            elapsed=time.perf_counter() - self._t0 if self._t0 else 0.0,
            baseline_rss=self.baseline_rss, _log=self.log,
        )

    def _conclude(self, result: WatchResult) -> None:
        self.result = result
        self.verdict = result.verdict
        for ob in self.observers:
            try:
                ob.on_finish(result)
            except Exception as exc:  # an observer must not lose the result
                result.stage_notes.append(f"{type(ob).__name__} failed: {exc!r}")


def _how_it_ended(status: tuple[int, int] | None, last_rss: int, limit: int | None) -> str:
    """'was killed by SIGKILL at 3.9 GiB, near the memory limit (4 GiB) ...', 'exited with code 3'."""
    if status is None:
        return "stopped sending and did not exit"
    code, signum = status
    if not signum:
        return f"exited with code {code}"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    text = f"was killed by {name}"
    if signum == signal.SIGKILL and limit and last_rss >= 0.8 * limit:
        text += (f" at {format_bytes(last_rss)}, near the memory limit ({format_bytes(limit)}): "
                 "most likely the kernel's out-of-memory killer")
    return text


# ---------------------------------------------------------------------------------------------
# Drivers


async def drive(hub: Hub, runs: Sequence[IsolatedRun], pause: Pause, jobs: int | None = None) -> None:
    """Start ``runs`` (``jobs`` at a time; default all), replay their streams until each has a
    result, awaiting ``pause`` between messages; end every worker on every way out (an interrupt
    first asks them for their result). A run never started gets an empty, interrupted result."""
    interrupts = Interrupts()
    interrupts.raise_at_once()
    waiting = list(runs)
    limit = len(runs) if jobs is None else jobs
    try:
        while not all(run.finished for run in runs):
            while waiting and sum(run.active for run in runs) < limit:
                waiting.pop(0).start()
            hub.wait(0.02)
            await pause()
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupts.hold()
        collect_after_interrupt(hub, runs)
    finally:
        interrupts.hold()
        try:
            for run in runs:
                run.close()
        finally:
            interrupts.restore()


def collect_after_interrupt(hub: Hub, runs: Sequence[IsolatedRun]) -> None:
    """Interrupt every active run (SIGINT to a worker), then collect their partial results for
    a few seconds."""
    for run in runs:
        if run.active:
            run.interrupt()
    deadline = time.monotonic() + INTERRUPT_GRACE
    while any(run.active for run in runs) and time.monotonic() < deadline:
        hub.wait(0.05)


async def run_isolated(spec: WatchSpec, observers: Sequence[Observer] = (), pause: Pause | None = None,
                       *, attribute: bool = True, census: bool | None = None) -> WatchResult:
    """Run ``spec`` in a fresh worker process; its result, partial if the worker died or was
    interrupted. ``pause`` is awaited between the stream's messages (default: yield to the loop;
    ``NO_PAUSE`` with :func:`run_sync` drives it without one)."""
    pause = YieldToLoop() if pause is None else pause
    hub = Hub()
    run = IsolatedRun(spec, observers, hub=hub, attribute=attribute, census=census,
                      yields_to_loop=pause.yields_to_loop)
    await drive(hub, [run], pause)
    return run.result


async def run_watch(spec: WatchSpec, observers: Sequence[Observer] = (),
                    pause: Pause | None = None) -> WatchResult:
    """A watch of ``spec`` where it asks to run: in this process, or in a worker
    (``spec.isolate``). What the magic, ``leakwidget.watch`` and Run again call."""
    if spec.isolate:
        return await run_isolated(spec, observers, pause)
    return await Watch(spec, observers).run_async(pause)
