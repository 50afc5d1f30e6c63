"""The child processes of a watched process: each one's memory, and the tree's total.

A step that hands work to child processes (a ``multiprocessing`` pool, a data loader's workers)
can leak in a child while the watched process stays flat. :class:`WithChildren` finds this
process's descendants and reads each one's private and shared memory (:mod:`.members`, from
``/proc/PID/smaps_rollup``): pages a forked child still shares with this process are counted
once, in this process's RSS, so nothing is counted twice. What the watch samples
(:class:`WithChildren`) becomes this process's RSS plus its children's private memory (their
unique set size, USS) — the tree's total — and each child keeps its own series and, at the end,
its own verdict and copy-on-write test (``result.children``).

A child's verdict is made on its own memory — private plus shared, its RSS, each reading given
to the first iteration to end after it — not on its private memory alone: a forked worker that
copies what it shares with this process (:mod:`.copying`) grows its private memory without
growing, and a worker that leaks still shows as a leak, copying or not.

Cost: a daemon thread reads the known children on a budget and looks for new ones when a process
has been created (see :mod:`.members`); a watch of a process without children pays one attribute
read per sample and iteration, and a read of ``/proc/loadavg`` ten times a second.

A process whose parent ends (a daemon's double fork, a child of a child that exited) leaves the
tree: Linux hands it to init. A process that runs the watched code and must end all of it (an
isolated watch's worker, ``leakwidget run``) first calls :func:`adopt_orphans`, and such
processes become its own children instead: still in its tree, watched, and ended by
:func:`end_descendants`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .copying import WorkerCopy, worker_copy
from .members import ChildrenReading, Member, Members
from .records import RecordLog
from .sources import MemorySource
from .units import format_bytes
from .verdict import Verdict, decide

PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
END_ROUNDS_SECONDS = 5.0  # end_descendants: at most this long killing what keeps appearing


@dataclass
class ChildResult:
    """One child process over the watch: its memory per iteration, its verdict, and whether it
    copies what it shares with its parent (``copying``: None for a process not forked from the
    watched tree)."""

    pid: int
    cmdline: str
    verdict: Verdict
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (seconds, private bytes)
    # (iteration, RSS): each reading, at the first iteration to end after it
    per_iteration: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    shared: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (seconds, shared bytes)
    copying: WorkerCopy | None = None
    number: int = 0  # "worker 3" (forked) or "process 3": the order the watch found it in

    def __str__(self) -> str:
        last = format_bytes(self.samples[-1, 1]) if self.samples.size else "-"
        rate = (f" of {format_bytes(self.verdict.slope, signed=True)}/iteration"
                if self.verdict.kind == "leak" else "")
        line = f"pid {self.pid} ({self.cmdline[:60]}): {self.verdict.kind}{rate}, {last} private now"
        if self.copying is not None and self.copying.copying:
            line += f"; copy-on-write: {self.copying.sentence}"
        elif self.copying is not None and self.copying.missing:
            line += f"; copy-on-write not known: {self.copying.missing}"
        return line


# Scans a rehearsal makes: the process table changes between scans, and the first few each
# took new pages (12, 16, 8, 8 KiB; then none) on a machine where processes came and went.
REHEARSED_SCANS = 4


class WithChildren:
    """This process (``source``) and its descendants: what a watch samples and records.

    ``rss()`` is the source's RSS plus the children's private memory at the last reading; a
    daemon thread reads them (see the module's docstring) from creation until :meth:`stop`.
    What the watch's object census keeps during the run (``held_rss``, ``held_in_use``: its
    checkpoints' arrays) is not the user's: the readings leave it out, the records, the
    sampler's series and the guard alike.
    """

    def __init__(self, source: MemorySource) -> None:
        self.source = source
        self._source_rss = source.rss  # (read at every iteration's end: one lookup less)
        self.in_process = source.in_process
        self.hz = source.hz
        self.total = 0  # bytes of every descendant at the last reading
        self.held_rss = self.held_in_use = 0  # the census's own (set by the watch)
        self.members = Members(os.getpid(), count_root=False, root_watched=True)
        self.t0 = time.perf_counter()  # the watch's clock, for the live readings (set by it)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and rehearse()
        self._asked: list[threading.Event] = []  # rehearsals asked for, each set when done
        self._read()  # children already running count from the start
        self._thread: threading.Thread | None = threading.Thread(
            target=self._loop, name="leakwidget-children", daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self._source_rss() + self.total - self.held_rss

    def in_use(self) -> int | None:
        """This process's bytes in use plus its children's private memory, whose allocators
        the watch cannot read: growth in a child is never "nothing in use grew" (the parent's
        counters alone called a worker's steady leak the allocator taking more room); what
        the children add moves this and rss() alike."""
        own = self.source.in_use()
        return None if own is None else max(0, own - self.held_in_use) + self.total

    @property
    def latest(self) -> ChildrenReading | None:
        """The last round of readings of the children (for a live view), or None."""
        return self.members.latest if self.members.members else None

    def rehearse(self) -> None:
        """Looks for new processes and reads every child on the reader's thread, waited for:
        after the watch's clean-up before iteration 0, what the looks for new processes take
        (8-24 KiB each at first with psutil's scans of every process, in that thread's arena) is
        taken before the baseline, and each child's series starts there. Looks follow any
        process created on the system (someone else's too): inside a calm run they were rises
        in it."""
        if self._thread is None:
            return
        done = threading.Event()
        self._asked.append(done)
        self._wake.set()
        done.wait(timeout=5)

    def stop(self) -> None:
        """Stop reading, with a last reading of the known children at once (whatever the
        budget): a short run in a large process may have had none since its setup, and each
        child's series, verdict and line must reach the run's end."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return
        self._thread.join(timeout=5)
        ended = not self._thread.is_alive()  # (else a reading still runs: no second one beside it)
        self._thread = None
        if ended and self.members.members:
            try:
                self._read(at_once=True)
            except Exception:  # a process table that changes under us must not lose the result
                pass

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.members.next_due())
            self._wake.clear()
            if self._stop.is_set():
                return
            asked, self._asked = self._asked, []
            try:
                for _ in range(REHEARSED_SCANS if asked else 0):
                    self.members.find(force=True)
                # Asked before iteration 0: every child already running is read now, whatever
                # the budget, so its series starts at the run's start (under load a budgeted
                # first reading came seconds in, and its growth before that was never seen).
                self._read(at_once=bool(asked))
            except Exception:  # a process table that changes under us must not end the thread
                pass
            finally:
                for done in asked:
                    done.set()

    def _read(self, at_once: bool = False) -> None:
        readings = self.members.poll(self.t0, at_once=at_once)
        if readings is not None:
            self.total = sum(r.private for r in readings.values())

    def results(self, log: RecordLog, t0: float) -> list[ChildResult]:
        """Each child's series (seconds since ``t0``), its verdict over the iterations of ``log``
        that ended while it was read, and its copy-on-write test."""
        return child_results(self.members.members.values(), log, t0)


def child_results(members: Iterable[Member], log: RecordLog, t0: float) -> list[ChildResult]:
    """Each member's :class:`ChildResult`: its verdict made from its RSS (private + shared), each
    reading given to the first iteration to end after it, ``log`` on the clock of ``t0``."""
    index, end = log.column("index"), log.column("end") + t0
    # Readings before the first iteration began (the one taken as the watch settles) are where
    # a child's line starts, not an iteration's value: a worker still starting then would give
    # every iteration before its next reading its memory from before it was ready.
    began = float(log.column("start")[0]) + t0 if index.size else np.inf
    out = []
    for m in members:
        t, private = m.private.arrays()
        if not t.size:  # found and never read (a worker found as it exited): nothing to say
            continue
        m.rename()
        _ts, shared = m.shared.arrays()
        _tw, written = m.shared_dirty.arrays()
        _tf, faults = m.faults.arrays()
        at = np.searchsorted(t, end, side="right") - 1  # the reading before each end
        gap = 2 * max(float(np.median(np.diff(t))), 0.05) if t.size > 1 else 0.2
        read_at = t[np.maximum(at, 0)]  # (at -1: before the first reading, excluded next)
        seen = np.flatnonzero((at >= 0) & (read_at >= began) & (end <= t[-1] + gap))
        # One point per reading, given to the first iteration to end after it: the iterations
        # ending before the next reading would repeat its value, and a leak read a few times
        # makes a staircase that the verdict took for a plateau, or for stable.
        seen = seen[np.unique(at[seen], return_index=True)[1]]
        i = index[seen].astype(float)
        own = (private[at[seen]] + shared[at[seen]]).astype(float)
        verdict = decide(i, own) if i.size else Verdict(
            "inconclusive", summary="No iteration ended while it ran.")
        rel = t - t0
        copying = worker_copy(m.pid, m.number, rel, private, written, faults) if m.forked else None
        out.append(ChildResult(
            m.pid, m.cmdline, verdict,
            np.column_stack([rel, private.astype(float)]),
            np.column_stack([i, own]) if i.size else np.zeros((0, 2)),
            np.column_stack([rel, shared.astype(float)]),
            copying, m.number))
    return out


def adopt_orphans(on: bool = True) -> bool:
    """Make this process the subreaper of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    a descendant whose parent ends becomes this process's child, not init's. ``on=False`` undoes
    it. False where the system cannot (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(pid: int | None = None) -> list:
    """The live descendants of ``pid`` (this process), as psutil processes; zombies left out."""
    import psutil

    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    alive = []
    for p in found:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def end_descendants(grace: float = 0.0, pid: int | None = None) -> None:
    """End every descendant of ``pid`` (this process): SIGTERM and ``grace`` seconds to exit
    when ``grace`` > 0, then SIGKILL, again and again while new ones appear (one that forked
    while it ended; the orphans of those killed, which come back to a subreaper), for at most
    ``END_ROUNDS_SECONDS``. Ended ones may stay zombies until their parent collects them."""
    procs = descendants(pid)
    if grace > 0 and procs:
        _send(procs, signal.SIGTERM)
        _wait_ended(procs, grace)
        procs = descendants(pid)
    deadline = time.monotonic() + END_ROUNDS_SECONDS
    while procs and time.monotonic() < deadline:
        _send(procs, signal.SIGKILL)
        _wait_ended(procs, 1.0)
        procs = descendants(pid)


def _send(procs: list, signum: int) -> None:
    import psutil

    for p in procs:
        try:
            p.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def _wait_ended(procs: list, timeout: float) -> None:
    """Until each of ``procs`` is gone or a zombie, at most ``timeout`` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    while procs and time.monotonic() < deadline:
        running = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    running.append(p)
            except psutil.NoSuchProcess:
                pass
        procs = running
        if procs:
            time.sleep(0.005)
