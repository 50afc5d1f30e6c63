"""The processes of a watched tree: found, read on a budget, each with its own bounded series.

A watch of this process reads its descendants (:class:`~.children.WithChildren`); ``leakwidget
run`` and ``attach`` read a whole tree from outside (:class:`~.sources.ProcessTree`). Both read
each process's ``/proc/PID/smaps_rollup`` (:mod:`.rollup`: its private and shared memory) through
one :class:`Members`, which keeps, for each descendant, the series a verdict and the
copy-on-write test are made from, and the latest round for a live view.

Costs, kept small whatever the tree (``rollup`` has the measurements):

- reading: every ``READ_INTERVAL`` at most, slower as the round gets dearer, so that it takes at
  most ``READ_SHARE`` of one core (``YOUNG_SHARE`` until each forked worker has been read as
  often as the copy-on-write test needs);
- looking for new processes (a walk down the tree through ``/proc/PID/task/TID/children``,
  psutil's scan of every process where the kernel has no such lists, ~1–6 ms): only when
  a process was created somewhere since the last look (the last pid the kernel handed out, in
  ``/proc/loadavg``, has moved), at most every ``FIND_INTERVAL`` and ``FIND_SHARE`` of a core.
  A worker is found within about a tenth of a second of its fork, before it has copied much.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass

from .copying import MIN_READINGS
from .rollup import CostShare, Rollup, minor_faults, read_rollup
from .sampler import Series

READ_INTERVAL = 0.1  # seconds between readings of the known processes, at least
# Of one core, at most, spent reading them: on a loaded machine a round of five ~65 MiB processes
# costs 5-20 ms of CPU, and a worker must be read a dozen times while it copies.
READ_SHARE = 0.1
# ... and while a forked worker has been read fewer times than the copy-on-write test needs: the
# copying happens in its first seconds, and at a tenth of a core four forks of an 890 MiB process
# were read 10-11 times in 9 s beside a busy machine, "run longer" where the answer was due.
YOUNG_SHARE = 0.3
FIND_INTERVAL = 0.1  # seconds between looks for new processes, at least
FIND_SHARE = 0.01  # of one core, at most, spent looking
MAX_MEMBERS = 64  # descendants given their own series (the rest count in the total only)
SERIES_CAPACITY = 1024  # readings kept per series (then merged pairwise: see sampler.Series)


class Member:
    """One descendant: its series of private and shared memory (seconds: ``perf_counter``)."""

    def __init__(self, pid: int, cmdline: str, number: int, forked: bool, proc=None,
                 parent_image: tuple[int, ...] | None = None) -> None:
        self.pid = pid
        self.cmdline = cmdline
        self._proc = proc  # its psutil.Process, to read its command line again
        # 1, 2, ...: the order it was found in among the forked ones ("worker 3"), or among the
        # others (under ``run``, the program itself is not one of its workers).
        self.number = number
        # Its parent is a process of the watched tree and it has not exec'd since (``image``):
        # it started out sharing that process's memory (a fork), and what it copies of it is
        # the tree's growth.
        self.forked = forked
        self._parent_image = parent_image  # its parent's layout (``image``) when it was found
        self.private = Series(SERIES_CAPACITY)
        self.shared = Series(SERIES_CAPACITY)
        self.shared_dirty = Series(SERIES_CAPACITY)  # the written part of ``shared`` (Rollup)
        self.faults = Series(SERIES_CAPACITY)  # minor page faults taken so far

    def rename(self) -> None:
        """Read its command line again while it runs: the one read when it was found may be
        from between its fork and its exec (a ``spawn`` worker, a subprocess), its parent's; and
        one that has exec'd since is no longer a fork (``forked``): it shares none of its
        parent's memory."""
        if self.forked and self._parent_image is not None:
            now = image(self.pid)
            if now is not None and now != self._parent_image:
                self.forked = False
        try:
            if self._proc is not None and self._proc.is_running():
                self.cmdline = " ".join(self._proc.cmdline()) or self.cmdline
        except Exception:  # (psutil.Error: it ended, or is closed to us) the first reading stands
            pass


@dataclass(frozen=True)
class MemberMemory:
    """A descendant's memory at one reading (what a live view charts)."""

    pid: int
    number: int
    private: int
    shared: int
    forked: bool = True  # forked from the watched tree: one of its workers


@dataclass(frozen=True)
class ChildrenReading:
    """One round of readings of the descendants; ``t``: seconds since the watch started."""

    t: float
    members: tuple[MemberMemory, ...]


class Members:
    """The descendants of ``root`` (and ``root`` itself when ``count_root``), read on a budget.

    ``root_watched``: ``root`` is a process of the watched tree (this process; an attached
    one), so its children are forks of the tree; False for ``leakwidget run``, whose root is
    leakwidget itself and whose child is the program it started.
    """

    def __init__(self, root: int, *, count_root: bool, root_watched: bool,
                 fastest: float = READ_INTERVAL, slowest: float = math.inf) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(root)
        self.count_root = count_root
        self.root_watched = root_watched
        self.members: dict[int, Member] = {}
        self.procs: list = [self.root] if count_root else []  # alive at the last look
        self.latest: ChildrenReading | None = None
        self.rounds = 0
        self._reading = CostShare(READ_SHARE, fastest, slowest)
        self.share = READ_SHARE  # of a core, what the readings take now (YOUNG_SHARE: see poll)
        self._finding = CostShare(FIND_SHARE, FIND_INTERVAL)
        self._read_at = self._find_at = 0.0
        self._last_pid: bytes | None = None

    def next_due(self) -> float:
        """Seconds until :meth:`poll` would read."""
        return max(0.0, self._read_at - time.perf_counter())

    def poll(self, t0: float = 0.0, *, at_once: bool = False) -> dict[int, Rollup] | None:
        """A reading of every process, looking for new ones first when that is due; None when
        no reading is due yet (the budget: the last one stands). ``at_once``: read and look now,
        due or not. Raises ``psutil.NoSuchProcess`` when the root has ended. ``t0``: the watch's
        start (``perf_counter``), for ``latest``."""
        now = time.perf_counter()
        if now < self._read_at and not at_once:
            return None
        if now >= self._find_at or at_once:
            self.find(force=at_once)
        self._reading.begin()
        readings = self._read(now)
        self._reading.end()
        # (Those read now only: a worker that ended young must not keep the share up.)
        young = any(m.forked and m.private.total < MIN_READINGS
                    for pid in readings if (m := self.members.get(pid)) is not None)
        self.share = YOUNG_SHARE if young else READ_SHARE
        self._read_at = time.perf_counter() + self._reading.interval(self.share)
        self.latest = ChildrenReading(now - t0, tuple(
            MemberMemory(m.pid, m.number, r.private, r.shared, m.forked)
            for pid, r in readings.items() if (m := self.members.get(pid)) is not None))
        self.rounds += 1
        return readings

    def find(self, force: bool = False) -> None:
        """Look for new processes (when one was created since the last look, or ``force``)."""
        last_pid = _last_pid()
        if not force and last_pid is not None and last_pid == self._last_pid:
            return  # no process was created on the system since: nothing new to find
        self._finding.begin()
        try:
            found = self._descendants()
        finally:
            self._finding.end()
            self._find_at = time.perf_counter() + self._finding.interval()
        self._last_pid = last_pid
        self.procs = [self.root, *found] if self.count_root else found
        tree = {p.pid for p in self.procs} | ({self.root.pid} if self.root_watched else set())
        for p in found:
            if p.pid not in self.members and len(self.members) < MAX_MEMBERS:
                self.members[p.pid] = self._member(p, tree)

    def _descendants(self) -> list:
        """The root's descendants, walked down from it through the kernel's lists of each
        thread's children (what it costs follows the tree, not the machine: psutil's
        ``children(recursive=True)`` builds a table of every process of the system, whose
        temporaries, on a machine where others start processes, come and go in the watched
        process's memory); psutil's where the kernel keeps no such lists."""
        pids = tree_pids(self.root.pid)
        if pids is None:
            return self.root.children(recursive=True)
        known = {p.pid: p for p in self.procs}
        out = []
        for pid in pids:
            proc = known.get(pid)
            if proc is None:
                try:
                    proc = self._psutil.Process(pid)
                except self._psutil.Error:
                    continue  # ended since
            out.append(proc)
        return out

    def _member(self, proc, tree: set[int]) -> Member:
        ps = self._psutil
        try:
            cmd = " ".join(proc.cmdline()) or proc.name()
        except ps.Error:
            cmd = "?"
        try:
            parent = proc.ppid()
        except ps.Error:
            parent = None
        # A fork of a process of the tree, not exec'd since: it lays its memory out as its
        # parent did (a spawn worker, a subprocess: anew).
        parent_image = image(parent) if parent in tree else None
        forked = parent_image is not None and image(proc.pid) == parent_image
        number = 1 + sum(m.forked == forked for m in self.members.values())
        return Member(proc.pid, cmd, number, forked, proc, parent_image)

    def _read(self, now: float) -> dict[int, Rollup]:
        out = {}
        for p in self.procs:
            reading = read_rollup(p.pid)
            if reading is None:
                try:  # smaps closed to us: the RSS, all of it counted as its own
                    rss = int(p.memory_info().rss)
                except self._psutil.NoSuchProcess:
                    if p is self.root:
                        raise
                    continue  # ended since the look
                except self._psutil.Error:
                    continue
                reading = Rollup(rss, rss, rss, 0, 0)
            if not reading.rss and p is not self.root:
                continue  # a zombie: its memory is gone
            out[p.pid] = reading
            member = self.members.get(p.pid)
            if member is not None:
                member.private.append(now, reading.private)
                member.shared.append(now, reading.shared)
                member.shared_dirty.append(now, reading.shared_dirty)
                member.faults.append(now, minor_faults(p.pid) or 0)
        return out


def image(pid: int) -> tuple[int, ...] | None:
    """Where ``pid``'s stack, data, heap, arguments and environment begin and end
    (``/proc/PID/stat``: startstack, start_data ... env_end; ~10 µs), or None where unreadable
    (ended; another user's, whose fields read 0). A fork keeps its parent's to the byte; an exec
    lays them out anew: randomised, and, for other arguments, elsewhere even without ASLR."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        out = (int(fields[25]), *map(int, fields[42:49]))  # fields 28 and 45-51 of proc(5)
    except (OSError, IndexError, ValueError):
        return None
    return out if any(out) else None


def tree_pids(root: int) -> list[int] | None:
    """The process ids below ``root``, from ``/proc/PID/task/TID/children`` (Linux built with
    CONFIG_PROC_CHILDREN); None where the kernel has no such lists. A process that ends while
    it is walked is left out, with what is below it (Linux hands those to a subreaper or init)."""
    if not _has_children_lists():
        return None
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # ended
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue  # the thread or the process ended
            out.extend(kids)
            todo.extend(kids)
    return out


@functools.cache
def _has_children_lists() -> bool:
    return os.path.exists("/proc/thread-self/children")


def _last_pid() -> bytes | None:
    """The last process id the kernel handed out (``/proc/loadavg``'s last field), or None."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return f.read().rsplit(None, 1)[-1]
    except (OSError, IndexError):
        return None
