"""A process's memory split into what it shares and what it holds alone, and what reading it costs.

``/proc/PID/smaps_rollup`` sums the process's mappings in the kernel: its resident pages (Rss),
its proportional share of them (Pss: a page mapped by k processes counts 1/k to each), and
which of them are mapped by this process alone (``Private_Clean`` + ``Private_Dirty``: its
unique set size, USS) or by others too (``Shared_Clean`` + ``Shared_Dirty``). A forked worker
starts with nearly everything shared with its parent; when it writes to a page — and reading a
Python object writes its reference count — the kernel gives it a private copy: its private
memory grows, its shared memory falls by as much, and its RSS does not move.

**What it costs.** Unlike ``/proc/PID/statm`` (a counter: ~6 µs whatever the size), reading
``smaps_rollup`` walks the process's page tables. Measured on the 2-core test machine
(Linux 6.x, CPU time of the reading thread): ~0.13 ms for a 10 MiB process, ~0.4 ms at
100 MiB, ~0.9 ms at 500 MiB, ~2.6 ms at 1.5 GiB — about 2 µs per resident MiB; the wall time
is 2–5× that on a busy machine. Four data-loader workers forked from a 1.5 GiB TensorFlow
process cost ~10 ms a round: read ten times a second, a tenth of a core. :class:`CostShare`
keeps such readings to a share of one core, slowing their rate as they grow dearer.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

# The fields summed, and into which of Rollup's slots; each line reads "Name:   1234 kB".
_FIELDS = {b"Rss": (0,), b"Pss": (1,), b"Private_Clean": (2,), b"Private_Dirty": (2,),
           b"Shared_Clean": (3,), b"Shared_Dirty": (3, 4)}


class Rollup(NamedTuple):
    """One reading of a process's memory, in bytes."""

    rss: int
    pss: int
    private: int  # Private_Clean + Private_Dirty: the USS, pages no other process maps
    shared: int  # Shared_Clean + Shared_Dirty: pages other processes map too
    # Shared_Dirty: of those, the written ones. A fork's share of its parent's heap (what it can
    # copy on write) is here; a library's code it pages in after the fork is Shared_Clean (Linux
    # does not copy a file mapping's page tables at fork: the child faults them in as it runs).
    shared_dirty: int


def read_rollup(pid: int) -> Rollup | None:
    """``pid``'s memory from ``/proc/PID/smaps_rollup``, or None where it cannot be read (the
    process has ended, belongs to another user, or the kernel has no such file)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    sums = [0] * len(Rollup._fields)
    seen = 0
    for line in text.split(b"\n")[1:]:  # the first line names the range the rollup spans
        name, _, value = line.partition(b":")
        slots = _FIELDS.get(name)
        if slots is not None:
            for slot in slots:
                sums[slot] += int(value.split()[0]) * 1024
            seen += 1
    if seen < len(_FIELDS):
        return None
    return Rollup(*sums)


def minor_faults(pid: int) -> int | None:
    """The minor page faults ``pid`` has taken (``/proc/PID/stat``, ~10 µs), or None. Each page
    a fork copies on write is one: a page that merely became its own (every other process that
    shared it made its own copy) is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[7])  # after the name: state, ppid, pgrp, session, tty, tpgid, flags, minflt
    except (OSError, IndexError, ValueError):
        return None


class CostShare:
    """How often a reading may be taken so that it costs at most ``share`` of one core.

    Each reading is timed in the reading thread's CPU time (what it takes from the machine,
    not the time it waits for a busy CPU); the next one is due ``max(fastest, cost / share)``
    seconds later, the cost being a running mean of the last few.
    """

    def __init__(self, share: float, fastest: float, slowest: float = math.inf) -> None:
        self.share = share
        self.fastest = fastest
        self.slowest = slowest  # what a reading's user cannot wait longer for
        self.cost = 0.0  # seconds of CPU per reading (running mean)
        self.readings = 0
        self._began = 0.0

    def begin(self) -> None:
        self._began = time.thread_time()

    def end(self) -> None:
        spent = max(0.0, time.thread_time() - self._began)
        self.readings += 1
        weight = max(0.25, 1.0 / self.readings)  # the first reading counts whole
        self.cost += weight * (spent - self.cost)

    def interval(self, share: float | None = None) -> float:
        """Seconds until the next reading is due (``share``: another share for this one)."""
        return min(max(self.fastest, self.cost / (share or self.share)), self.slowest)
