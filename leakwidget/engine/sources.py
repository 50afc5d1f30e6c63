"""What a watch measures: this Python process, or another process tree.

A watch of this process (the default) can do everything: patch tf.data stages, count Python's
blocks, read malloc's bytes in use, interrupt the step when memory runs out, attribute growth.
A watch of another process (the command line's ``run`` and ``attach``) sees only its memory from
outside: its RSS over time, the verdict and the projection.
"""

from __future__ import annotations

from typing import Protocol

from . import sampler
from .members import Members

PF_KTHREAD = 0x00200000  # a process's flags (/proc/PID/stat): a kernel thread


class MemorySource(Protocol):
    in_process: bool  # this interpreter: stages, Python's heap, malloc's counters, the guard's interrupt
    hz: float  # samples per second the sampler takes
    members: Members | None  # the processes of the tree beside the watched one, each read (or None)
    # An in-process source also has in_use() -> int | None: what of rss() is in use (ThisProcess)

    def rss(self) -> int:
        """Bytes resident now."""
        ...


class ThisProcess:
    in_process = True
    hz = 125.0
    members = None  # (a watch of this process reads its children through children.WithChildren)

    rss = staticmethod(sampler.rss)  # (no wrapper: read at every iteration's end)
    # What of rss() is in use (read at checkpoints, in-process sources only): glibc malloc's
    # bytes handed out, or None where they cannot be read.
    in_use = staticmethod(sampler.malloc_in_use)


THIS_PROCESS = ThisProcess()


STALEST = 0.2  # seconds: the longest a tree's reading stands in for the next one


class ProcessTree:
    """Another process and all its descendants, read from outside (psutil).

    Each process counts its proportional set size (PSS: pages shared between processes of the
    tree, such as a forked worker's copy-on-write pages, split between them, so nothing is
    counted twice), or its RSS where PSS cannot be read. Processes that end between two
    readings are simply no longer counted; new descendants are found soon after they start,
    and each descendant's private and shared memory is kept (``members``, :mod:`.members`:
    read on a budget, the last reading standing in between). ``rss()`` raises
    ``ProcessLookupError`` once the root process is gone. A process whose memory we may not
    read (another user's) is refused with ``PermissionError``.

    ``descendants_only``: the tree is what ``pid`` started, not ``pid`` itself (``leakwidget
    run`` watches its own descendants: the program, and the processes it left behind, which
    come back to leakwidget, their subreaper); ``rss()`` raises ``ProcessLookupError`` once
    every one of them has ended.
    """

    in_process = False
    hz = 20.0  # reading every process's smaps costs ~0.1–3 ms each: fewer samples

    def __init__(self, pid: int, *, descendants_only: bool = False) -> None:
        import psutil

        self._psutil = psutil
        self.descendants_only = descendants_only
        self.pid = pid
        self._last: dict[int, int] = {}
        if not descendants_only:
            try:
                psutil.Process(pid).memory_info()
            except psutil.NoSuchProcess:
                raise ProcessLookupError(f"no process with pid {pid}") from None
            except psutil.AccessDenied:
                raise PermissionError(f"not allowed to read the memory of process {pid}") from None
            try:
                open(f"/proc/{pid}/smaps_rollup", "rb").close()
            except PermissionError:
                # statm is readable by anyone, smaps only by the owner: without it the tree's
                # children and shared pages cannot be counted right.
                raise PermissionError(f"not allowed to read the memory of process {pid} "
                                      f"({_why_not_readable(psutil.Process(pid))})") from None
            except OSError:
                pass  # no smaps_rollup on this kernel: RSS it is
        try:
            # What the verdict reads of the tree: a reading at least every STALEST seconds,
            # whatever one costs (a costly first reading had left a 2 s run of a leaking
            # program on its first 0.7 s, and called it a plateau).
            self.members = Members(pid, count_root=not descendants_only,
                                   root_watched=not descendants_only, fastest=1.0 / self.hz,
                                   slowest=STALEST)
        except psutil.NoSuchProcess:
            raise ProcessLookupError(f"no process with pid {pid}") from None

    def read(self) -> dict[int, int]:
        """{pid: bytes} of the root and each descendant alive at the last reading (a new
        reading when one is due)."""
        try:
            readings = self.members.poll()
        except self._psutil.NoSuchProcess:
            raise ProcessLookupError(f"process {self.pid} has ended") from None
        if readings is None:
            return self._last
        out = {pid: r.pss or r.rss for pid, r in readings.items()}
        if self.descendants_only:
            if not out:  # those known have ended: any left that were not found yet?
                out = {pid: r.pss or r.rss for pid, r in (self.members.poll(at_once=True) or {}).items()}
            if not out:
                raise ProcessLookupError(f"every process started by process {self.pid} has ended")
        elif not out.get(self.pid):
            # No memory at all: the root has exited and waits for its parent to collect its
            # exit status (a zombie). Counting it as 0 bytes would draw a false cliff.
            raise ProcessLookupError(f"process {self.pid} has ended")
        self._last = out
        return out

    def rss(self) -> int:
        return sum(self.read().values())


def kernel_thread(pid: int) -> bool:
    """Is ``pid`` a thread of the kernel (kthreadd and its children: no memory of their own)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return bool(int(fields[6]) & PF_KTHREAD)  # the 9th field, flags


def _why_not_readable(proc) -> str:
    """Why another process's memory is closed to us, in the words that are true of it."""
    import os

    try:
        owner = proc.uids().real
    except Exception:  # it ended meanwhile, or its owner cannot be read either
        return "the system does not allow it"
    if owner != os.geteuid():
        return "it belongs to another user"
    return "the system does not allow it, though it is this user's"
