"""Worker processes that copy what they share with their parent: copy-on-write growth.

A worker forked from a process holding a dataset (a ``multiprocessing`` pool, a Keras
``PyDataset`` with ``use_multiprocessing=True``, a data loader's workers) starts out sharing
every page of it. Reading a Python object writes its reference count, and the kernel then gives
the worker its own copy of the page: page by page, each worker gets a private copy of whatever
it reads. Its RSS hardly moves (the pages were already counted as resident), while the
machine's memory fills once per worker. It is bounded — a worker can copy at most what it
shares — so it is a plateau per worker, not a leak; but it is real memory, N times over.

How it is decided, for each forked worker (its private and shared memory, :mod:`.members`;
"shared" here is the written pages it shares, ``Shared_Dirty``: what copy on write moves to
private. Its shared total also holds the clean pages of the libraries it maps, which Linux
does not hand a fork at fork time: the child faults them in as it runs code, and a worker read
early (Keras, measured) rose 1.2-1.7 MiB that way, hiding part of what it copied):

1. **Enough readings**: at least ``MIN_READINGS``; otherwise what is missing is said.
2. **Its shared memory fell**: its first ``k`` readings against its last ``k`` (``k`` =
   max(6, n/8)), a Mann–Whitney comparison whose Hodges–Lehmann interval of the fall, at 99%,
   lies above zero — and the fall, from its first reading to the median of its last
   ``AT_THE_END`` (a worker copies until it stops reading: the median of the last ``k`` would
   leave out what it copied in their time), is
   at least ``MIN_COPY``.
3. **Its private memory rose by about as much** (at least half the fall): the pages it no longer
   shares came back as its own — copies — rather than being let go of.
4. **It made the copies**: the minor page faults it took, less the pages its RSS grew by, cover
   at least half the fall, or at least ``MIN_COPY`` (a copy on write is one fault a page). A
   page also turns private without a fault when every other process that shared it has made
   its own copy (its parent, or its siblings): the last one left holding it copied nothing.
   A worker that copied ``MIN_COPY`` itself is copying however many more pages its parent's
   writes left it (CI: a worker read 10 MiB of a list and faulted 10.9 MiB while its shared
   memory fell 23.2 MiB, the parent's collections writing the rest).

The worker's own growth (its private memory beyond what it copied: private + shared, its RSS)
is judged by its own leak verdict (:mod:`.children`), so a worker that leaks is still called a
leak, whether it copies or not. The tree's finding (:class:`CopyOnWrite`) names the worker that
copied most, how many copied at once, what bounds it, and what to change; it is the
attribution of the watch's growth unless a leak bigger than the copies remains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .attribution.result import Attribution
from .sampler import PAGE_SIZE
from .units import format_bytes
from .verdict.constants import Z99

MIN_READINGS = 12  # readings of a worker before anything is decided (6 at each end)
AT_THE_END = 3  # readings whose median is a worker's memory at the end (one may be its exit)
MIN_COPY = 4 * 1024 * 1024  # a worker's shared memory must fall at least this much
ABOUT_AS_MUCH = 0.5  # its private memory must rise by at least this share of the fall
EXPLAINS = 0.5  # the copies are the story when they are at least this share of the tree's growth

ADVICE = (
    "What to change: hold the data as NumPy arrays, Arrow tables or one bytes buffer instead of "
    "lists of Python objects (one reference count is written, not one per object read); call "
    "gc.freeze() before the workers start (the garbage collector then leaves the parent's "
    "objects alone; reference counts are still written); use fewer workers; or start the "
    "workers with the spawn start method (each loads its own copy once, instead of copying it "
    "page by page as it reads)."
)


@dataclass
class WorkerCopy:
    """What one forked worker's readings show of copy-on-write (``copying``), or what is
    missing to tell (``missing``). Bytes; intervals at 99%."""

    pid: int
    number: int  # "worker 3": the order the watch found it in
    readings: int = 0
    private_growth: float = 0.0  # from its first reading to the median of its last ``AT_THE_END``
    shared_fall: float = 0.0
    fall_low: float = -math.inf  # Hodges–Lehmann interval of the fall, first vs last readings
    fall_high: float = math.inf
    bound: float = 0.0  # what it shared when first read: the most it can copy
    faulted: float | None = None  # bytes of pages it faulted in beyond its own growth (None: unknown)
    span: tuple[float, float] = (0.0, 0.0)  # seconds of its first and last reading
    copying: bool = False
    missing: str = ""  # why it is not called copying, when evidence is what is missing

    @property
    def sentence(self) -> str:
        return (f"worker {self.number}'s private memory grew {format_bytes(self.private_growth)} "
                f"while its shared memory fell by {format_bytes(self.shared_fall)}")

    def to_dict(self) -> dict:
        def num(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        return {"pid": self.pid, "number": self.number, "readings": self.readings,
                "private_growth": num(self.private_growth), "shared_fall": num(self.shared_fall),
                "fall_low": num(self.fall_low), "fall_high": num(self.fall_high),
                "bound": num(self.bound), "copying": self.copying, "missing": self.missing,
                "faulted": None if self.faulted is None else num(self.faulted)}


def shift_interval(before: np.ndarray, after: np.ndarray, z: float = Z99) -> tuple[float, float]:
    """The distribution-free interval of the shift from ``before`` to ``after`` (Hodges–Lehmann,
    from the Mann–Whitney statistic's normal approximation); infinite where too few values."""
    m, n = before.size, after.size
    diffs = np.sort((after[:, None] - before[None, :]).ravel())
    c = math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12.0))
    if c < 0:
        return -math.inf, math.inf
    return float(diffs[c]), float(diffs[m * n - 1 - c])


def worker_copy(pid: int, number: int, t: np.ndarray, private: np.ndarray, shared: np.ndarray,
                faults: np.ndarray | None = None) -> WorkerCopy:
    """The copy-on-write test on one forked worker's readings (see the module's docstring);
    ``shared``: the written pages it shares (``Rollup.shared_dirty``); ``faults``: its minor
    page faults so far at each reading (None, or all 0: not known)."""
    n = int(t.size)
    found = WorkerCopy(pid, number, readings=n)
    if n == 0:
        found.missing = "its memory was never read"
        return found
    found.bound = float(shared[0])
    found.span = (float(t[0]), float(t[-1]))
    if n < MIN_READINGS:
        found.missing = (f"only {n} reading{'s' if n != 1 else ''} of its memory ({MIN_READINGS} "
                         "needed to tell whether it copies what it shares): run longer")
        return found
    k = max(MIN_READINGS // 2, n // 8)
    private, shared = private.astype(float), shared.astype(float)
    end = AT_THE_END
    found.private_growth = float(np.median(private[-end:]) - private[0])
    found.shared_fall = float(shared[0] - np.median(shared[-end:]))
    low, high = shift_interval(-shared[:k], -shared[-k:])
    found.fall_low, found.fall_high = low, high
    if faults is not None and faults.any():
        own = private + shared  # its RSS: what it holds, copies or not
        grew = max(0.0, float(np.median(own[-end:]) - own[0]))
        found.faulted = float(np.median(faults[-end:]) - faults[0]) * PAGE_SIZE - grew
    found.copying = (low > 0 and found.shared_fall >= MIN_COPY
                     and found.private_growth >= ABOUT_AS_MUCH * found.shared_fall
                     and (found.faulted is None
                          or found.faulted >= min(ABOUT_AS_MUCH * found.shared_fall, MIN_COPY)))
    return found


@dataclass
class CopyOnWrite:
    """Forked workers copying their parent's memory as they read it: the tree's finding."""

    workers: list[WorkerCopy]  # those copying, the biggest copy first
    at_once: int  # the most forked workers read at the same time (copying or not)
    copied: float  # bytes: their shared memory's falls, summed
    growth: float  # bytes the tree grew over the run (workers' arrival not counted: tree_growth)
    explains: bool = True  # the copies are the story of the growth (see ``EXPLAINS``)
    details: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        top = self.workers[0]
        if self.at_once > 1:
            times = f"with {self.at_once} workers that is up to {self.at_once}\u00d7 the dataset"
        else:
            times = "with one worker that is one more copy of the dataset"
        return (f"Copy-on-write: {top.sentence} \u2014 it is copying the parent's data as it reads "
                "it (Python reference counts write to every object read); " + times + ".")

    @property
    def headline(self) -> str:
        many = f"{len(self.workers)} workers copy" if len(self.workers) > 1 else "a worker copies"
        return (f"Copy-on-write: {many} their parent's data as they read it "
                f"(+{format_bytes(self.copied)}), not a leak")

    def lines(self) -> list[str]:
        """The summary, what bounds it, each worker's numbers, and what to change."""
        return [self.summary, *self.details, ADVICE]

    def to_dict(self) -> dict:
        return {"summary": self.summary, "at_once": self.at_once, "copied": self.copied,
                "growth": self.growth, "explains": self.explains,
                "workers": [w.to_dict() for w in self.workers], "details": list(self.details)}

    def __str__(self) -> str:
        return "\n".join(self.lines())


def copy_on_write(workers: Sequence[WorkerCopy], growth: float, leaking: bool,
                  stable: bool = False) -> CopyOnWrite | None:
    """The tree's finding from its workers' (None: none copies). ``growth``: what the tree
    grew over the run; ``leaking``: the watch's verdict is a leak — the copies are its story
    only if they make up at least ``EXPLAINS`` of that growth; ``stable``: the verdict is
    "stable" — no growth for the copies to be the story of (forked workers reading one NumPy
    array, beside a busy machine, once read "Copy-on-write" on a stable run: likely a worker's
    full collection touching its parent's heap pages, not measured)."""
    copying = sorted((w for w in workers if w.copying), key=lambda w: -w.shared_fall)
    if not copying:
        return None
    copied = float(sum(w.shared_fall for w in copying))
    # Each forked worker alive at once can copy what it shares, whether or not its readings
    # showed it copying yet: all of them bound the "up to N times".
    found = CopyOnWrite(copying, _at_once([w for w in workers if w.readings]), copied, growth,
                        explains=not stable and (not leaking or copied >= EXPLAINS * growth))
    top = copying[0]
    found.details.append(
        f"It is bounded: a worker can copy at most what it shares with its parent "
        f"({format_bytes(top.bound)} for worker {top.number}), so each worker's memory levels off "
        "there \u2014 a plateau per worker, not a leak.")
    found.details.extend(
        f"Worker {w.number} (pid {w.pid}): private +{format_bytes(w.private_growth)}, shared "
        f"\u2212{format_bytes(w.shared_fall)} (99%: {format_bytes(w.fall_low)}\u2013"
        f"{format_bytes(w.fall_high)}, first against last readings, {w.readings} readings)."
        for w in copying[:8])
    others = [w for w in workers if not w.copying]
    if others:
        found.details.append("Not shown copying: " + "; ".join(
            f"worker {w.number} (pid {w.pid}, {w.missing})" if w.missing else
            f"worker {w.number} (pid {w.pid}, {w.readings} readings: private "
            f"{format_bytes(w.private_growth, signed=True)}, shared {format_bytes(-w.shared_fall, signed=True)})"
            for w in others[:8]) + ".")
    if not found.explains:
        found.details.append(f"The copies ({format_bytes(copied)}) are less than half of the "
                             f"growth ({format_bytes(growth)}, workers' start-up not counted): "
                             "something else leaks too.")
    return found


def tree_growth(rss: np.ndarray, ends: np.ndarray | None = None,
                children: Sequence[np.ndarray] = (), warmup: int = 0) -> float:
    """What the tree's total grew over a run past its ``warmup`` iterations (the verdict's: the
    growth it judged): the median of its last twentieth of iterations less that of its first
    (one reading at either end is no measure) — less what workers that started in between
    brought with them (``children``: each one's (seconds, private bytes) readings, ``ends``:
    the iterations' end times on the same clock). A worker that starts is in the total from its
    first reading on, with the private memory it already made (its start-up, the copies made
    before it was first read); that is its arrival, not growth the copies measured from its
    first reading have to explain. Nor is the program's own start-up: a forking program's
    dataset, loaded before its first mark but read by a loaded host only after it, was counted
    as growth the copies did not explain ("something else leaks too", runs AN and AQ)."""
    if rss.size - warmup >= 2:
        if ends is not None and ends.size == rss.size:
            ends = ends[warmup:]
        rss = rss[warmup:]
    if rss.size < 2:
        return 0.0
    k = max(1, rss.size // 20)
    growth = float(np.median(rss[-k:]) - np.median(rss[:k]))
    if ends is not None and ends.size == rss.size:
        first, last = ends[k - 1], ends[-k]
        growth -= sum(float(c[0, 1]) for c in children
                      if c.size and c[0, 0] > first and c[-1, 0] >= last)
    return max(growth, 0.0)


def tree_sentence(verdict_summary: str) -> str:
    """The watch's verdict sentence (on the tree's total) as it reads beside the copies."""
    text = re.sub(r"^Leak\b", "growing", verdict_summary)
    # No projection of when memory runs out: the copies are bounded (see the finding).
    text = re.sub(r"; at (this|that|the current) rate available memory runs out in [^;]*?(?=\.$)", "", text)
    return "This process and its workers together: " + text[:1].lower() + text[1:]


def _at_once(workers: Sequence[WorkerCopy]) -> int:
    """The most of ``workers`` whose readings overlap in time."""
    events = sorted([(w.span[0], 1) for w in workers] + [(w.span[1], -1) for w in workers],
                    key=lambda e: (e[0], -e[1]))
    most = alive = 0
    for _t, step in events:
        alive += step
        most = max(most, alive)
    return most


def as_attribution(found: CopyOnWrite, before: Attribution | None) -> Attribution:
    """The attribution of a growth the copies explain: its kind "copy-on-write", its sentence
    the finding's, what bounds it and what to change first among its notes. The growth's own
    numbers (this process's attribution, when there was one) are kept; its Python/native split
    of this process's heap is not the story and is not told."""
    att = Attribution(kind="copy-on-write", summary=found.summary)
    if before is not None:
        att.rss_slope, att.growth_bytes, att.growth_of = before.rss_slope, before.growth_bytes, before.growth_of
        att.overhead_seconds, att.finish_seconds = before.overhead_seconds, before.finish_seconds
    att.notes = [found.details[0], ADVICE, *found.details[1:]]
    return att
