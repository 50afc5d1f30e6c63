"""Garbage awaiting the cycle collector: objects the step left unreachable in reference cycles.

CPython frees an object when its last reference goes, unless it sits in a reference cycle:
then only the cyclic collector frees it. Objects that outlived two young collections (any
object alive while a long step ran: a Keras ``fit`` or ``predict`` allocates thousands) are
in the oldest generation, which is collected in full only once the objects that reached it
since the last full collection number a quarter of those that were there then. With
TensorFlow and Keras loaded that is ~90,000 objects: garbage of a few dozen objects an
iteration piles up for thousands of iterations, and RSS climbs like a leak. Measured: a
``model.fit`` of one small batch in a loop, RSS +16 KiB and ~40 objects an iteration; with
``gc.collect()`` every 50 iterations flat; a watch said "Leak +21.9 KiB per iteration", and a
path to the objects from ``numbers.Complex._abc_impl``.

The measure is a phase after the measured run, between full collections (the run itself
never pays for them), after a run whose verdict is not "stable": the first one clears what the
run left (and says whether any garbage is worth a phase: unreachable objects found, and at least
a quarter of what the run's recent RSS rate adds over the run); then
the step runs a few more times; the second one, saving what it finds (``gc.DEBUG_SAVEALL``) to
count and size it before freeing it, measures the garbage those iterations made. The phase makes
that measuring collection at PHASE_POINTS evenly spaced points, not only at its end: what the
heap holds after each is a series, and its slope with a 95% interval is what the heap kept past
the garbage (a Keras ``predict`` per iteration: ~+1.2 KiB an iteration, as a plain loop with
``gc.collect()`` every 100 calls grows; decide.py calls it a leak only when it adds as much as
any leak must, kept_call). A phase whose slope is still unsettled when its plan is spent goes
on, when the user left the length to the watch, into the seconds of the default budget the run
left, until the slope has its answer (extend_phase). Only the garbage an iteration
makes, against the verdict's rate, can say the growth is garbage: one-off garbage left by a
warm-up (a first trace) freed at the end would pass for it if the run's end were measured.
"""

from __future__ import annotations

import collections
import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..records import RecordLog
from ..sampler import malloc_in_use
from ..units import format_bytes
from ..verdict.constants import BLOCK_BYTES, MIN_LEAK_GROWTH
from .series import robust_slope
from .sizes import type_name

GATE_RISE = 64 << 10  # RSS rising by this much over the run's second half, at least …
GATE_SHARE = 0.25  # garbage at the run's end worth a phase: this share of the recent RSS rate
PHASE_SHARE = 0.2  # the phase lasts at most this share of the measured run's time …
PHASE_MIN_ITERATIONS = 3  # … but at least this many iterations
PHASE_POINTS = 10  # measuring collections in the phase (its last at its end): the kept bytes' series
KEPT_SAID = 0.05  # what the heap keeps past the garbage is said from this share of RSS's rate
# Student's t at 97.5% for 1..10 degrees of freedom: the kept slope's 95% interval from so few points.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
SMALL_OBJECT = 512  # pymalloc serves objects up to this size (bigger ones count in malloc's)
TRACKED_KEPT = 0.1  # tracked objects kept an iteration from which Python objects may be what is kept


class Phase(Protocol):
    """Iterations after the measured run, for evidence the run itself must not pay for."""

    def plan_phase(self, log: RecordLog, seconds: float, grew: Callable[[], bool],
                   spare: float = 0.0) -> tuple[int, int, float] | None:
        """(least, most) iterations and seconds at most; None: no phase. ``grew()``: is the
        measured run's verdict other than "stable" (decided once, when first asked)?
        ``spare``: seconds of the watch's default budget the measured run left (0 when the user
        set its length), which a phase still without its answer may take (extend_phase)."""

    def begin_phase(self) -> None: ...
    def on_phase_iteration(self) -> bool | None:
        """After each iteration; True: the phase has its answer, end it now."""
    def extend_phase(self) -> tuple[int, float] | None:
        """The planned iterations or seconds are spent: (more iterations, more seconds) at
        most, or None to end the phase."""
    def end_phase(self, exc: BaseException | None) -> None: ...


@dataclass(frozen=True)
class Collected:
    """What one full collection found unreachable and freed."""

    objects: int  # unreachable objects it found
    bytes: int  # what freeing them gave back: pymalloc's objects plus malloc's bytes in use
    types: tuple[tuple[str, int], ...] = ()  # the commonest types among them, with counts


@dataclass(frozen=True)
class GarbageRate:
    """What an iteration of the step leaves, measured in the phase between two collections."""

    iterations: int  # of the phase
    objects: float  # unreachable objects / iteration
    bytes: float  # their bytes / iteration
    live: float | None  # bytes / iteration the heap kept after the second collection (None:
    # malloc's bytes in use unreadable, so memory outside Python's heap could not be counted)
    types: tuple[tuple[str, float], ...]  # the commonest types of garbage, objects / iteration
    long_lived: int  # objects in the oldest generation after the full collection
    full_collections: int  # full collections Python ran itself during the phase
    live_interval: tuple[float, float] | None = None  # 95% of the kept slope over the phase's
    # measuring collections (None: fewer than three, or malloc's bytes in use unreadable)
    # Of what the heap kept past the garbage, the slopes of its two parts over the same
    # collections: pymalloc's blocks (at BLOCK_BYTES: Python's small objects) and the objects
    # the collector tracks (containers, instances: Python objects of any size), an iteration.
    kept_blocks: float | None = None
    kept_tracked: float | None = None
    kept_payloads: float | None = None  # bytes of arrays, bytes and bytearrays held (held.py's
    # payloads: Python objects over 512 B, malloc's), from a survey at the phase's start and end

    def to_dict(self) -> dict:
        return {"iterations": self.iterations, "objects": self.objects, "bytes": self.bytes,
                "live": self.live, "types": [list(t) for t in self.types],
                "long_lived": self.long_lived, "full_collections": self.full_collections,
                "live_interval": None if self.live_interval is None else list(self.live_interval),
                "kept_blocks": self.kept_blocks, "kept_tracked": self.kept_tracked,
                "kept_payloads": self.kept_payloads}


def until_full_collection(long_lived: int, per_iteration: float) -> float | None:
    """Iterations until Python's own full collection when ``per_iteration`` objects reach the
    oldest generation each, at most (other objects reaching it bring it sooner): CPython
    collects it in full once a quarter of ``long_lived`` have; None where that is not the rule
    (3.14 collects the old generation incrementally)."""
    if sys.version_info >= (3, 14) or per_iteration <= 0:
        return None
    return long_lived / 4 / per_iteration


def heap() -> tuple[int, int | None]:
    """(pymalloc blocks, malloc's bytes in use or None): what the heap holds, free memory the
    allocators keep not counted."""
    return sys.getallocatedblocks(), malloc_in_use()


def held_since(before: tuple[int, int | None]) -> int | None:
    """Bytes the heap holds now more than at ``before`` (blocks at BLOCK_BYTES); None when
    malloc's bytes in use cannot be read."""
    blocks, in_use = heap()
    if in_use is None or before[1] is None:
        return None
    return (blocks - before[0]) * BLOCK_BYTES + in_use - before[1]


def kept_slope(points: list[tuple[int, int]]) -> tuple[float, float] | None:
    """The 95% interval of the bytes an iteration the heap keeps, from (iterations, bytes held)
    after each measuring collection: least squares with an intercept (an iteration's one-off
    allocation after the first collection is not a rate), Student's t for so few points; None
    under three points."""
    if len(points) < 3:
        return None
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= 0:
        return None
    slope = float(dx @ (y - y.mean())) / sxx
    dof = x.size - 2
    resid = y - y.mean() - slope * dx
    se = math.sqrt(float(resid @ resid) / dof / sxx)
    t = T975[min(dof, len(T975)) - 1]
    return slope - t * se, slope + t * se


def kept_rate(interval: tuple[float, float] | list[float] | None) -> float | None:
    """The bytes an iteration the heap kept, read from ``kept_slope``'s interval (its midpoint,
    the least-squares slope); None without one."""
    return None if interval is None else (interval[0] + interval[1]) / 2


def kept_call(interval: tuple[float, float] | list[float] | None, iterations: int,
              rss_rate: float) -> str | None:
    """What the heap's kept slope over ``iterations`` says, against a run whose RSS grew
    ``rss_rate`` an iteration: "leak" (above zero at 95%, at least KEPT_SAID of RSS's rate and a
    pymalloc block an iteration, and MIN_LEAK_GROWTH added over the iterations: a slower leak
    behind the garbage), "unsettled" (not that, but its 95% upper bound reaches as much: a short
    phase cannot rule a slower leak out), "none" (under it at 95%); None without a slope.
    decide.py reads it; so does the phase, to end when the slope has its answer."""
    if interval is None:
        return None
    said = max(KEPT_SAID * rss_rate, BLOCK_BYTES)
    slope = kept_rate(interval)
    if interval[0] > 0 and slope >= said and slope * iterations >= MIN_LEAK_GROWTH:
        return "leak"
    return "unsettled" if interval[1] >= said else "none"


def kept_python(r: dict) -> float | None:
    """Bytes an iteration of Python objects the heap kept past the garbage (a garbage phase's
    ``to_dict``): pymalloc's blocks (objects up to 512 B) and the payloads held (arrays, bytes,
    bytearrays: larger objects, malloc's); None when the phase did not measure them."""
    blocks, payloads = r.get("kept_blocks"), r.get("kept_payloads")
    if blocks is None or payloads is None:
        return None
    return blocks * BLOCK_BYTES + max(payloads, 0.0)


def kept_kind(r: dict) -> str | None:
    """What the heap kept past the garbage is (a garbage phase's ``to_dict``): "python" when
    Python's objects (kept_python) explain half of it or more; "native" when they explain under
    half and the objects the collector tracks did not grow by one in ten iterations (no
    container or instance kept, whose size neither figure shows); None when the phase cannot
    tell. Measured with ``gc.collect()`` every 100 calls: a Keras ``predict`` per call kept
    malloc's bytes in use +1,059 B, blocks +3.1 and tracked objects +0.0 a call, ``fit`` +993 B,
    +3.1 and +0.0: native, which the run's census, counting the garbage still uncollected as
    Python objects, called "python" in one run of two. A ``bytearray`` of 4 KiB kept an
    iteration is malloc's too, and untracked: the payloads show it."""
    kept, python, tracked = kept_rate(r.get("live_interval")), kept_python(r), r.get("kept_tracked")
    if kept is None or python is None or tracked is None or kept <= 0:
        return None
    if python >= 0.5 * kept:
        return "python"
    return "native" if tracked < TRACKED_KEPT else None


def payload_bytes() -> int:
    """Bytes of the arrays, bytes and bytearrays that tracked objects hold now (a survey: ~0.1 s
    with TensorFlow loaded)."""
    from .survey import no_huge_pages, survey  # noqa: PLC0415 - the phase's only use of it

    with no_huge_pages():
        s = survey()
        total = sum(b for _, b, _ in s.payloads.values())
        del s
    return total


def collect_and_measure(save: bool) -> Collected:
    """A full collection and what it freed; ``save``: count and size what it found first."""
    before = heap()
    if not save:
        found = gc.collect()
        return Collected(found, -(held_since(before) or 0))
    debug, first = gc.get_debug(), len(gc.garbage)
    gc.set_debug(debug | gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
    finally:
        gc.set_debug(debug)
    saved = gc.garbage[first:]
    del gc.garbage[first:]
    types = collections.Counter(type_name(type(o)) for o in saved).most_common(3)
    small = sum(s for s in (sys.getsizeof(o, 0) for o in saved) if s <= SMALL_OBJECT)
    del saved
    gc.collect()  # frees them (their finalizers ran in the first one)
    in_use = malloc_in_use()
    native = max(0, before[1] - in_use) if in_use is not None and before[1] is not None else 0
    return Collected(found, small + native, tuple(types))


class Garbage:
    """The garbage phase (:meth:`plan_phase`, :meth:`begin_phase`, :meth:`on_phase_iteration`,
    :meth:`end_phase`: the phase protocol the watch drives, as trace.py's)."""

    doing = "measuring the garbage Python's cycle collector frees"  # what a view says meanwhile

    def __init__(self) -> None:
        self.rate: GarbageRate | None = None
        self.ended_by: BaseException | None = None
        self._done = 0
        self._full0 = 0
        self._heap0: tuple[int, int | None] = (0, None)
        self._tracked0 = 0  # objects the collector tracked at the phase's start
        self._payloads0 = 0  # bytes of the payloads tracked objects held then (payload_bytes)
        self._plan = (0, 0.0)  # the phase's most iterations and seconds
        self._marks = (0, 0.0)  # the next measuring collection: at this many iterations, or time
        self._start = 0.0
        self._found: list[Collected] = []  # what each measuring collection found
        self._held: list[tuple[int, int]] = []  # (iterations, bytes the heap held) after each
        self._parts: list[tuple[int, int, int]] = []  # (iterations, pymalloc blocks, tracked objects) more than at the start, after each
        self._ours = 0  # full collections the measuring ones made (not Python's own)
        self._rss_rate = 0.0  # the run's RSS rate an iteration, late in the run (kept_call's)
        self._spare = 0.0  # seconds the phase may go on past its plan without its answer
        self._points = PHASE_POINTS - 1  # measuring collections at most before the phase's end
        self.extended = False  # the phase went on past its plan (extend_phase)

    @property
    def extra_seconds(self) -> float:
        """Seconds the phase may go on past its plan (extend_phase), as planned."""
        return self._spare

    def plan_phase(self, log: RecordLog, seconds: float, grew: Callable[[], bool],
                   spare: float = 0.0) -> tuple[int, int, float] | None:
        """After the measured run: the phase's (least, most) iterations and its seconds at
        most, or None when there is nothing to measure (RSS not rising at the end, a run
        whose verdict is "stable", or too little garbage left for it to matter). Its first
        full collection is made here. ``spare``: the default budget's seconds the run left,
        for extend_phase."""
        self.rate, self.ended_by, self._done, self.extended = None, None, 0, False
        if log.n < 8:
            return None
        idx, rss = (np.asarray(log.column(k), dtype=float) for k in ("index", "rss"))
        half = idx.size // 2
        rate = robust_slope(idx[half:], rss[half:])
        # A stable run has no growth to explain: a step of noise in its second half (CI: a
        # calm step in a test process) cost it a phase, and a full collection of what the
        # process had left from before.
        if rate * (idx[-1] - idx[half]) < GATE_RISE or not grew():
            return None
        left = collect_and_measure(save=False)
        if not left.objects or left.bytes < GATE_SHARE * rate * max(1.0, idx[-1] - idx[0]):
            return None
        self._full0 = gc.get_stats()[2]["collections"]
        self._payloads0 = payload_bytes()
        self._heap0, self._tracked0 = heap(), len(gc.get_objects())
        self._plan = (max(PHASE_MIN_ITERATIONS, log.total), PHASE_SHARE * seconds)
        self._rss_rate, self._spare, self._points = rate, max(0.0, spare - self._plan[1]), PHASE_POINTS - 1
        return PHASE_MIN_ITERATIONS, self._plan[0], self._plan[1]

    def begin_phase(self) -> None:
        self._done = 0
        self._found, self._held, self._parts, self._ours = [], [], [], 0
        self._start = time.perf_counter()
        self._marks = (self._plan[0] / PHASE_POINTS, self._plan[1] / PHASE_POINTS)

    def on_phase_iteration(self) -> bool:
        """A measuring collection at each PHASE_POINTS-th of the phase's iterations or of its
        time, whichever comes first (not at its end: end_phase makes that one). True once an
        extended phase's kept slope has its answer (kept_call: a leak, or none)."""
        self._done += 1
        most, seconds = self._plan
        elapsed = time.perf_counter() - self._start
        if (self._done >= most or len(self._found) >= self._points
                or (self._done < self._marks[0] and elapsed < self._marks[1])):
            return False
        self._measure()
        # The next mark past both where the phase is now (a slow step skips marks).
        k = max(math.floor(self._done * PHASE_POINTS / most), math.floor(elapsed * PHASE_POINTS / seconds)) + 1
        self._marks = (k * most / PHASE_POINTS, k * seconds / PHASE_POINTS)
        return self.extended and self._call() != "unsettled"

    def _call(self) -> str | None:
        """kept_call of the measuring collections so far (None: no slope yet)."""
        if len(self._held) < len(self._found):  # malloc's bytes in use unreadable
            return None
        return kept_call(kept_slope(self._held), self._done, self._rss_rate)

    def extend_phase(self) -> tuple[int, float] | None:
        """Once: the planned phase is spent and its kept slope is unsettled (neither a leak's
        worth nor ruled out, kept_call), and the watch's default budget has seconds left (the
        user set no length): go on for them, PHASE_POINTS more measuring collections spread over
        them, until the slope has its answer. A Keras ``predict`` per call kept +1.2 KiB past
        its garbage, ~100 KiB over the 20% phase: 1 MiB, a leak's worth, takes ~850 calls."""
        if self.extended or self._spare <= 0 or not self._done:
            return None
        if not self._held or self._held[-1][0] < self._done:
            self._measure()
        if self._call() != "unsettled":
            return None
        self.extended = True
        elapsed = time.perf_counter() - self._start
        self._plan = (sys.maxsize, elapsed + self._spare)
        self._points = len(self._found) + PHASE_POINTS - 1
        k = math.floor(elapsed * PHASE_POINTS / self._plan[1]) + 1
        self._marks = (sys.maxsize, k * self._plan[1] / PHASE_POINTS)
        return sys.maxsize, self._spare

    def _measure(self) -> None:
        before = gc.get_stats()[2]["collections"]
        self._found.append(collect_and_measure(save=not gc.get_debug() & gc.DEBUG_SAVEALL))  # (not the user's list)
        self._ours += gc.get_stats()[2]["collections"] - before
        if (held := held_since(self._heap0)) is not None:
            self._held.append((self._done, held))
            self._parts.append((self._done, sys.getallocatedblocks() - self._heap0[0],
                                len(gc.get_objects()) - self._tracked0))

    def end_phase(self, exc: BaseException | None) -> None:
        """The phase is over: its last measuring collection, and what they all found."""
        self.ended_by = exc
        if not self._done:
            return
        if not self._held or self._held[-1][0] < self._done:
            self._measure()
        full = gc.get_stats()[2]["collections"] - self._full0 - self._ours
        n, live = self._done, held_since(self._heap0)
        types: collections.Counter[str] = collections.Counter()
        for got in self._found:
            types.update(dict(got.types))
        interval = kept_slope(self._held) if len(self._held) == len(self._found) else None
        blocks = tracked = payloads = None
        if interval is not None:
            blocks, tracked = (kept_rate(kept_slope([(p[0], p[k]) for p in self._parts])) for k in (1, 2))
            payloads = (payload_bytes() - self._payloads0) / n
        self.rate = GarbageRate(n, sum(g.objects for g in self._found) / n,
                                sum(g.bytes for g in self._found) / n,
                                None if live is None else live / n,
                                tuple((t, c / n) for t, c in types.most_common(3)),
                                len(gc.get_objects(generation=2)), full, interval, blocks, tracked,
                                payloads)

    def note(self) -> str:
        """How the rate was measured (empty when no phase ran)."""
        if self.rate is None:
            return ""
        r = self.rate
        ended = ("" if self.ended_by is None else
                 f" The phase stopped early: {type(self.ended_by).__name__}.")
        own = (f" Python ran {r.full_collections} full collection(s) of its own meanwhile: "
               "the figure is a lower bound." if r.full_collections else "")
        kept = ("" if r.live is None else
                f", and the heap kept {format_bytes(r.live, signed=True)} an iteration past them")
        if r.live_interval is not None:
            lo, hi = r.live_interval
            slope = format_bytes(kept_rate(r.live_interval), signed=True)
            kept += (f" by the phase's end, {slope} from one "
                     f"collection to the next (95%: {format_bytes(lo, signed=True)} to "
                     f"{format_bytes(hi, signed=True)})")
        return (f"Garbage in reference cycles was measured over {r.iterations} more iterations "
                f"after the run, between full collections: {r.objects:,.1f} unreachable "
                f"objects ({format_bytes(r.bytes)}) an iteration{kept}.{own}{ended}")
