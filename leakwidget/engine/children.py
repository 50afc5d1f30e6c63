"""The child processes of a watched process: each one's memory, and the tree's total.

A step that hands work to child processes (a ``multiprocessing`` pool, a data loader's workers)
can leak in a child while the watched process stays flat. :class:`WithChildren` finds this
process's descendants (psutil) and reads each one's unique set size (USS: the pages only that
process holds, from ``/proc/PID/smaps_rollup``): pages a forked child still shares with this
process are counted once, in this process's RSS, so nothing is counted twice. What the watch
samples (:class:`WithChildren`) becomes this process's RSS plus its children's USS — the tree's
total — and each child keeps its own series and, at the end, its own verdict
(``result.children``: the child's reading at the end of each iteration it lived through).

Cost: a daemon thread reads the known children every ``READ_INTERVAL`` and looks for new ones
every ``FIND_INTERVAL`` (a scan of every process of the system, a few ms); a watch of a process
without children pays one attribute read per sample and iteration.

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
from dataclasses import dataclass, field

import numpy as np

from .records import RecordLog
from .sampler import Series
from .sources import MemorySource
from .units import format_bytes
from .verdict import Verdict, decide

# A child's leak must show as many small rises, not a few steps (the verdict doubts growth in
# few steps that nothing in this process's heap explains): read often while there are children.
READ_INTERVAL = 0.1  # seconds between readings of the known children
FIND_INTERVAL = 1.0  # seconds between searches for new ones while there are none
FIND_INTERVAL_CHILDREN = 0.5  # ... and while there are
MAX_CHILDREN = 64  # children given their own series (the rest count in the total only)
SERIES_CAPACITY = 4096
PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
END_ROUNDS_SECONDS = 5.0  # end_descendants: at most this long killing what keeps appearing


@dataclass
class ChildResult:
    """One child process over the watch: its memory per iteration and its verdict."""

    pid: int
    cmdline: str
    verdict: Verdict
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (seconds, USS bytes)
    per_iteration: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (iteration, USS)

    def __str__(self) -> str:
        last = format_bytes(self.samples[-1, 1]) if self.samples.size else "-"
        rate = (f" of {format_bytes(self.verdict.slope, signed=True)}/iteration"
                if self.verdict.kind == "leak" else "")
        return f"pid {self.pid} ({self.cmdline[:60]}): {self.verdict.kind}{rate}, {last} now"


class _Child:
    def __init__(self, pid: int, cmdline: str) -> None:
        self.pid = pid
        self.cmdline = cmdline
        self.samples = Series(SERIES_CAPACITY)  # (perf_counter time, USS)


def uss(pid: int) -> int | None:
    """Private_Clean + Private_Dirty of ``pid`` (bytes), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    total = 0
    for key in (b"\nPrivate_Clean:", b"\nPrivate_Dirty:"):
        i = text.find(key)
        if i < 0:
            return None
        total += int(text[i + len(key): text.index(b"kB", i)]) * 1024
    return total


class WithChildren:
    """This process (``source``) and its descendants: what a watch samples and records.

    ``rss()`` is the source's RSS plus the children's USS at the last reading; a daemon thread
    reads them (see the module's docstring) from creation until :meth:`stop`.
    """

    def __init__(self, source: MemorySource) -> None:
        import psutil

        self.source = source
        self._source_rss = source.rss  # (read at every iteration's end: one lookup less)
        self.in_process = source.in_process
        self.hz = source.hz
        self.total = 0  # bytes of every descendant at the last reading
        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        self._children: dict[int, _Child] = {}
        self._procs: dict[int, object] = {}  # pid -> psutil.Process, alive at the last search
        self._next_find = 0.0
        self._stop = threading.Event()
        self._read()  # children already running count from the start
        self._thread: threading.Thread | None = threading.Thread(
            target=self._loop, name="leakwidget-children", daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self._source_rss() + self.total

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(READ_INTERVAL if self._procs else FIND_INTERVAL):
            try:
                self._read()
            except Exception:  # a process table that changes under us must not end the thread
                pass

    def _find(self, now: float) -> None:
        ps = self._psutil
        try:
            found = self._me.children(recursive=True)
        except ps.Error:
            return
        self._procs = {p.pid: p for p in found}
        for p in found:
            if p.pid not in self._children and len(self._children) < MAX_CHILDREN:
                try:
                    cmd = " ".join(p.cmdline()) or p.name()
                except ps.Error:
                    cmd = "?"
                self._children[p.pid] = _Child(p.pid, cmd)
        # Look again soon while there are children; rarely while there are none.
        self._next_find = now + (FIND_INTERVAL_CHILDREN if found else FIND_INTERVAL)

    def _read(self) -> None:
        now = time.perf_counter()
        if now >= self._next_find:
            self._find(now)
        total = 0
        for pid, proc in list(self._procs.items()):
            value = uss(pid)
            if value is None:
                try:
                    value = int(proc.memory_info().rss)
                except self._psutil.Error:
                    continue  # ended since the search
            total += value
            child = self._children.get(pid)
            if child is not None:
                child.samples.append(now, value)
        self.total = total

    def results(self, log: RecordLog, t0: float) -> list[ChildResult]:
        """Each child's series (seconds since ``t0``) and its verdict over the iterations of
        ``log`` that ended while it was read (its latest reading at each iteration's end)."""
        index, end = log.column("index"), log.column("end") + t0
        out = []
        for child in self._children.values():
            t, v = child.samples.arrays()
            at = np.searchsorted(t, end, side="right") - 1  # the reading before each end
            seen = (at >= 0) & (end <= (t[-1] + 2 * READ_INTERVAL if t.size else -np.inf))
            i, u = index[seen].astype(float), v[at[seen]].astype(float)
            verdict = decide(i, u) if i.size else Verdict(
                "inconclusive", summary="No iteration ended while it ran.")
            out.append(ChildResult(child.pid, child.cmdline, verdict,
                                   np.column_stack([t - t0, v.astype(float)]) if t.size else np.zeros((0, 2)),
                                   np.column_stack([i, u]) if i.size else np.zeros((0, 2))))
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
