"""What a watch measures: this Python process, or another process tree.

A watch of this process (the default) can do everything: patch tf.data stages, count Python's
blocks, read malloc's bytes in use, interrupt the step when memory runs out, attribute growth.
A watch of another process (the command line's ``run`` and ``attach``) sees only its memory from
outside: its RSS over time, the verdict and the projection.
"""

from __future__ import annotations

import time
from typing import Protocol

from . import sampler

# Finding a tree's descendants scans every process of the system (~3–6 ms): done at most this
# often, the members found last being read in between.
CHILDREN_REFRESH = 0.5  # seconds


class MemorySource(Protocol):
    in_process: bool  # this interpreter: stages, Python's heap, malloc's counters, the guard's interrupt
    hz: float  # samples per second the sampler takes

    def rss(self) -> int:
        """Bytes resident now."""
        ...


class ThisProcess:
    in_process = True
    hz = 125.0

    rss = staticmethod(sampler.rss)  # (no wrapper: read at every iteration's end)


THIS_PROCESS = ThisProcess()


class ProcessTree:
    """Another process and all its descendants, read from outside (psutil).

    Each process counts its proportional set size (PSS: pages shared between processes of the
    tree, such as a forked worker's copy-on-write pages, split between them, so nothing is
    counted twice), or its RSS where PSS cannot be read. Processes that end between two
    readings are simply no longer counted; new descendants are found within
    ``CHILDREN_REFRESH`` seconds. ``rss()`` raises ``ProcessLookupError`` once the root process
    is gone. A process whose memory we may not read (another user's) is refused with
    ``PermissionError``.
    """

    in_process = False
    hz = 20.0  # reading every process's smaps costs ~0.1–1 ms each: fewer samples

    def __init__(self, pid: int) -> None:
        import psutil

        self._psutil = psutil
        try:
            self.root = psutil.Process(pid)
            self.root.memory_info()
        except psutil.NoSuchProcess:
            raise ProcessLookupError(f"no process with pid {pid}") from None
        except psutil.AccessDenied:
            raise PermissionError(f"not allowed to read the memory of process {pid}") from None
        try:
            open(f"/proc/{pid}/smaps_rollup", "rb").close()
        except PermissionError:
            # statm is readable by anyone, smaps only by the owner: without it the tree's
            # children and shared pages cannot be counted right.
            raise PermissionError(
                f"not allowed to read the memory of process {pid} (it belongs to another user)"
            ) from None
        except OSError:
            pass  # no smaps_rollup on this kernel: RSS it is
        self.pid = pid
        self._procs: list = [self.root]
        self._found_at = -CHILDREN_REFRESH

    def members(self) -> dict[int, int]:
        """{pid: bytes} of the root and each descendant alive now."""
        ps = self._psutil
        procs = self._procs
        if time.monotonic() - self._found_at >= CHILDREN_REFRESH:
            try:
                procs = self._procs = [self.root, *self.root.children(recursive=True)]
            except ps.NoSuchProcess:
                raise ProcessLookupError(f"process {self.pid} has ended") from None
            self._found_at = time.monotonic()
        out = {}
        for p in procs:
            try:
                out[p.pid] = _pss(p.pid) or int(p.memory_info().rss)
            except ps.NoSuchProcess:
                if p is self.root:
                    raise ProcessLookupError(f"process {self.pid} has ended") from None
        if not out.get(self.pid):
            # No memory at all: the root has exited and waits for its parent to collect its
            # exit status (a zombie). Counting it as 0 bytes would draw a false cliff.
            raise ProcessLookupError(f"process {self.pid} has ended")
        return out

    def rss(self) -> int:
        return sum(self.members().values())


def _pss(pid: int) -> int | None:
    """PSS from ``/proc/PID/smaps_rollup`` (the kernel sums it: far cheaper than parsing
    ``smaps``), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    i = text.find(b"\nPss:")
    if i < 0:
        return None
    return int(text[i + 5 : text.index(b"kB", i)]) * 1024
