"""What a watch measures: this Python process, or another process tree.

A watch of this process (the default) can do everything: patch tf.data stages, count Python's
blocks, read malloc's bytes in use, interrupt the step when memory runs out, attribute growth.
A watch of another process (the command line's ``run`` and ``attach``) sees only its memory from
outside: its RSS over time, the verdict and the projection.
"""

from __future__ import annotations

from typing import Protocol

from . import sampler


class MemorySource(Protocol):
    in_process: bool  # this interpreter: stages, Python's heap, malloc's counters, the guard's interrupt
    hz: float  # samples per second the sampler takes

    def rss(self) -> int:
        """Bytes resident now."""
        ...


class ThisProcess:
    in_process = True
    hz = 125.0

    def rss(self) -> int:
        return sampler.rss()


THIS_PROCESS = ThisProcess()


class ProcessTree:
    """Another process and all its descendants, read from outside (psutil).

    Each process counts its proportional set size (PSS: pages shared between processes of the
    tree, such as a forked worker's copy-on-write pages, split between them, so nothing is
    counted twice), or its RSS where PSS cannot be read. Processes that end between two
    readings are simply no longer counted. ``rss()`` raises ``ProcessLookupError`` once the
    root process is gone.
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
        self.pid = pid

    def members(self) -> dict[int, int]:
        """{pid: bytes} of the root and each descendant alive now."""
        ps = self._psutil
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except ps.NoSuchProcess:
            raise ProcessLookupError(f"process {self.pid} has ended") from None
        out = {}
        for p in procs:
            try:
                out[p.pid] = _pss(p.pid) or int(p.memory_info().rss)
            except ps.NoSuchProcess:
                if p is self.root:
                    raise ProcessLookupError(f"process {self.pid} has ended") from None
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
