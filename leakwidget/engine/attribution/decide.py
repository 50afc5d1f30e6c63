"""The decision: from the evidence the collectors gathered to an :class:`Attribution`.

Pure: no I/O, no process state. The numbers come in an :class:`Evidence`; the kind, the
Python/native split, the summary and the notes come out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..units import format_bytes
from ..verdict.constants import MIN_LEAK_GROWTH
from .garbage import (
    BLOCK_BYTES,
    KEPT_SAID,
    GarbageRate,
    kept_call,
    kept_kind,
    kept_python,
    kept_rate,
    until_full_collection,
)
from .growth import Growth
from .holders import cause as holder_cause
from .result import (
    FROM_BLOCKS,
    FROM_CENSUS,
    FROM_TRACEMALLOC,
    Attribution,
    LineGrowth,
    NativeSite,
    RefPath,
    SiteGrowth,
    TypeGrowth,
)

RETENTION_SHARE = 0.5  # malloc_trim returning at least this share of the growth -> "allocator"
IN_USE_HELD_SHARE = 0.5  # ... unless malloc's bytes in use grew at this share of RSS's rate
# A trim returns only whole free pages, so an arena its pinned blocks fragment keeps part of what
# was freed: with malloc's bytes in use and Python's objects flat (each at most this share of
# RSS's rate) the growth is not in use, and the trim handing back RETAINED_SHARE of it is
# enough. Measured: 16 threads' arenas (examples.arena_growth), in use +325 B and Python +620 B
# against RSS +6.5 KiB an iteration, the trim returning 46-60% of the growth.
IN_USE_FLAT_SHARE = 0.2
RETAINED_SHARE = 0.25
GARBAGE_SHARE = 0.5  # garbage an iteration makes, at this share of RSS's rate -> "garbage" …
# … if what the heap keeps past it is at most this share: a Dataset.from_generator built each
# step left 63 KiB of garbage an iteration, and TensorFlow's global graph kept its function
# (5.1 KiB an iteration past the garbage, 35% of RSS's rate): a leak, not garbage. Keras's
# fit or predict per iteration: 9-13% (each call's dataset iterator, TensorFlow's own).
LIVE_SHARE = 0.2


@dataclass(frozen=True)
class Evidence:
    """What the collectors measured over one watch."""

    growth: Growth | None  # None: no iteration finished
    notes: tuple[str, ...] = ()  # the collectors' own notes, in the order they arose
    reclaimed: int | None = None  # RSS malloc_trim(0) handed back at the end (None: not measured)
    own_rss: int = 0  # RSS our own object censuses left with the allocator during the run
    traced_slope: float | None = None  # tracemalloc bytes / iteration after the warm-up
    census_slope: float | None = None  # object census bytes / iteration (None: no census)
    census_outside: float | None = None  # … of it in buffers outside Python's heap
    bytes_per_block: float | None = None  # of the growing objects (None: no better figure)
    censuses: int = 0
    top_types: tuple[TypeGrowth, ...] = ()
    top_sites: tuple[SiteGrowth, ...] = ()
    lines: tuple[LineGrowth, ...] = ()
    gpu: dict | None = None
    paths: tuple[RefPath, ...] = ()  # what keeps the growing types alive
    native_sites: tuple[NativeSite, ...] = ()  # native=True: memray's window
    native_window: tuple[int, int] | None = None  # the iterations it traced
    cause: str = ""  # a named cause its own evidence shows (retracing.py), said before the summary
    garbage_cause: str = ""  # … in its words for a growth that is garbage (what it made died)
    garbage: GarbageRate | None = None  # garbage.py's phase: what an iteration leaves to the collector
    free_at_start: int | None = None  # bytes free in malloc's heap after the trim before iteration 0
    frozen: int = 0  # objects gc.freeze() put out of the collector's sight (gc.get_freeze_count())


def attribute(ev: Evidence) -> Attribution:
    """What grew: Python objects, native memory, memory the allocator keeps, or nothing."""
    att = Attribution(notes=list(ev.notes), lines=list(ev.lines), gpu=ev.gpu,
                      native_sites=list(ev.native_sites), native_window=ev.native_window,
                      paths=list(ev.paths))
    g = ev.growth
    if g is None:
        att.summary = "Nothing to attribute: no iteration finished."
        return att
    att.rss_slope = g.rss_slope
    att.blocks_slope = g.blocks_slope
    att.growth_bytes = g.bytes
    att.reclaimed_bytes = ev.reclaimed
    att.in_use_slope = g.in_use_slope
    att.censuses = ev.censuses
    att.top_types = list(ev.top_types)
    att.census_slope = ev.census_slope
    if ev.bytes_per_block is not None:
        att.bytes_per_block = ev.bytes_per_block
    att.top_sites = list(ev.top_sites)
    att.garbage = ev.garbage.to_dict() if ev.garbage is not None else None
    att.free_at_start = ev.free_at_start
    _split(att, ev)
    if att.rss_slope != g.rss_slope:  # a block count's estimate, sized by the census (_split)
        g = dataclasses.replace(g, rss_slope=att.rss_slope, bytes=att.rss_slope * g.span)
        att.growth_bytes = g.bytes
    att.growth_of = {"leak": "leak", "plateau": "plateau"}.get(g.verdict, "growth")
    if g.verdict in ("leak", "plateau"):  # a plateau's slopes are per iteration of its rise
        python_growth = att.python_slope * g.span
    else:
        python_growth = max(att.python_slope, 0.0) * g.run
    if not g.grew:
        att.kind = "none"
        if g.climbing:  # the verdict says what is in use still climbs: no "did not grow"
            moved = (f"RSS grew {format_bytes(g.bytes, signed=True)}" if g.bytes >= 0 else
                     f"RSS fell {format_bytes(-g.bytes)}")  # not "grew −360 KiB"
            att.summary = (
                f"Nothing to attribute yet: {moved} after the warm-up, too little to split, while "
                "what is in use kept climbing behind it (the verdict); a longer run attributes it."
            )
        elif g.verdict != "stable" and g.bytes > 0:
            # "Inconclusive: memory grew steadily but only by 607 KiB" was followed by "memory
            # did not grow" (an iterator made each step, +108 B an iteration for 60 s).
            att.summary = (
                f"Nothing to attribute yet: RSS grew {format_bytes(g.bytes, signed=True)} over "
                "the run, too little to split into Python and native memory; a longer run "
                "attributes it."
            )
        else:
            att.summary = (
                f"Nothing to attribute: memory did not grow ({g.verdict}, "
                f"{format_bytes(g.bytes, signed=True)} over the run)."
            )
        if g.verdict != "stable":
            att.summary += _kept_unseen(att)
        return att
    _classify(att, g, python_growth, _reclaimed(att, ev), ev.bytes_per_block is not None)
    if ev.frozen:
        _out_of_sight(att, ev.frozen)
    if att.kind == "garbage" and (att.top_types or att.paths):
        # The census's rows count from its baseline, before the warm-up: under garbage they are
        # the first iterations' one-off objects (a fit loop's first trace read "dict +19 per
        # iteration", with a path from the model's history), not what grows.
        att.top_types, att.paths = [], []
        att.notes.append("The object census's growing types are not shown: its baseline "
                         "precedes the warm-up, and past the garbage nothing grew that it counts "
                         "apart from the warm-up's one-off objects.")
    cause = ev.garbage_cause if att.kind == "garbage" else ev.cause
    if cause:  # the named cause first: it says what to change
        att.summary = f"{cause} {att.summary}"
    return att


def _split(att: Attribution, ev: Evidence) -> None:
    """The Python share (the largest estimate that applies) and the native rest.

    The shares add up to the RSS growth and neither is negative: an estimate above the growth
    (RSS reusing memory freed earlier lags the objects; sizes are estimated from samples) is
    capped at it, and a note gives the estimate."""
    primary, source = att.blocks_slope * att.bytes_per_block, FROM_BLOCKS
    if ev.traced_slope is not None:
        att.traced_slope = ev.traced_slope
        primary, source = ev.traced_slope, FROM_TRACEMALLOC
    if ev.census_slope is not None and ev.census_slope > primary:
        primary, source = ev.census_slope, FROM_CENSUS
    if ev.growth.from_blocks and ev.census_slope is not None and primary > 0:
        # RSS did not grow: the verdict sized the blocks with the heap's average block, and
        # the census sized the objects that grow. The difference is no native memory (the
        # second watch of a Python leak, refilling what the first one freed, read "native
        # 72 of 128 KiB" beside the census's 55 KiB of lists and objects).
        att.notes.append(
            f"RSS has not grown yet: the verdict's {format_bytes(att.rss_slope)}/iteration is the "
            f"block count sized with the heap's average block; the object census sizes the "
            f"objects that grow at {format_bytes(primary)}/iteration, and that is what is split."
        )
        att.rss_slope = float(primary)
    growth = max(att.rss_slope, 0.0)
    att.python_slope = min(max(float(primary), 0.0), growth)
    att.python_source = source
    att.native_slope = growth - att.python_slope
    if ev.census_outside is not None:
        att.buffer_slope = min(max(float(ev.census_outside), 0.0), att.python_slope)
    if growth > 0 and primary > 1.1 * growth:
        att.notes.append(
            f"Python objects were estimated at {format_bytes(primary)}/iteration ({source}), more "
            f"than RSS grew ({format_bytes(growth)}/iteration): RSS lags while freed memory is "
            "reused, and object sizes are estimated from samples. The Python share is capped at "
            "the growth."
        )


def _reclaimed(att: Attribution, ev: Evidence) -> int:
    """What malloc_trim handed back that the run, not our own census, left with the allocator
    (``att.reclaimed_bytes`` becomes that figure, so the table and the sentences agree)."""
    reclaimed = att.reclaimed_bytes or 0
    if ev.own_rss and att.reclaimed_bytes is not None:
        reclaimed = max(0, reclaimed - ev.own_rss)
        att.reclaimed_bytes = reclaimed
        att.notes.append(
            f"The object census itself left {format_bytes(ev.own_rss)} with the allocator; "
            f"that much of what malloc_trim returned is not counted."
        )
    return reclaimed


def _classify(att: Attribution, g: Growth, python_growth: float, reclaimed: int,
              sized_blocks: bool) -> None:
    """The kind, its summary, and the notes that qualify it (``sized_blocks``: the census
    measured the bytes per block of the objects that grow)."""
    growth = g.bytes
    # Objects still alive that explain half the growth are what grew, whatever malloc_trim
    # hands back: free memory the allocator kept can predate the run (measured: a 20 KiB
    # per iteration list of tuples, census +20.5 KiB, trimmed 2.2 MiB against 1.2 MiB grown).
    # Measured sizes count as they are. The block count times a block size is an estimate:
    # it counts only with the census's size of the growing objects, and only when it is more
    # than the trim handed back (threads that each pin an arena, and keep a few objects alive,
    # leave blocks whose estimate passes for half the growth while the trim returns ten times
    # it). Measured: a dict filled from tf.py_function calls in eight threads, 4,135 blocks
    # of 32 B an iteration for 131 KiB of RSS, the census (which misses untracked floats) at
    # 68 KiB, and a trim that returned 5.3 of 9.6 MiB from the threads' arenas: "allocator".
    if att.python_source in (FROM_TRACEMALLOC, FROM_CENSUS):
        alive = python_growth >= 0.5 * growth
    else:
        alive = sized_blocks and python_growth >= 0.5 * growth and python_growth > reclaimed
    # Bytes in use that grew with RSS are memory handed out and not given back, whatever the
    # trim returns beside it: each `for b in ds` pass over a dataset kept ~0.7 KiB of
    # TensorFlow's iterator state (bytes in use +734 B an iteration, RSS +1.0 KiB), and the
    # trim's 4 MiB of free memory (twice the growth) made it "Allocator retention, not your code".
    held = _held(att)
    in_use_explains = _in_use_explains(att)
    alive = alive and not in_use_explains
    if _garbage(att, g):
        att.kind = "garbage"
        att.kept_unsettled = _kept_unsettled(att, g)
    elif att.reclaimed_bytes is not None and not alive and not held and _retained(att, reclaimed, growth, python_growth):
        att.kind = "allocator"
    elif not alive and not held and _refills(att, growth, python_growth):
        att.kind, att.refilling = "allocator", True
    elif alive or (python_growth >= 0.5 * max(growth - (0 if held else reclaimed), 0.0)
                   and not in_use_explains):
        # (What the trim returned is no part of a growth held in use: 61 B/iteration of Python
        # objects were "python" once 4 MiB of free memory was taken off a 2 MiB growth.)
        att.kind = "python"
    else:
        att.kind = "native"
    att.summary = summary(att, reclaimed)
    if att.kind != "garbage" and _much_garbage(att, g):
        _beside_garbage(att, g)
    if att.kind not in ("allocator", "garbage") and reclaimed >= 0.2 * growth and growth > 0:
        if alive:
            why = ("free memory glibc kept, from this run or from before it; the objects alive "
                   "explain the growth")
        elif held:
            why = (f"free memory glibc kept beside the growth, which is in use (malloc's bytes "
                   f"in use grew at {g.in_use_slope / g.rss_slope:.0%} of RSS's rate)")
        else:
            why = "part of it is allocator retention"
        att.notes.append(
            f"malloc_trim also handed back {format_bytes(reclaimed)} "
            f"({reclaimed / growth:.0%} of the growth): {why}."
        )
    if att.kind == "native" and python_growth > 0.2 * growth and att.paths:
        # Objects of an extension own native memory the census cannot size (a scalar
        # EagerTensor kept per iteration: 172 B of object, ~450 B of TensorFlow's handle and
        # buffer): whatever keeps them is where to look first.
        top = _top_row(att)
        att.summary += (
            f" Python objects grow beside it ({format_bytes(att.python_slope)}/iteration"
            f"{', most of all ' + top.name if top is not None else ''}{_kept_by(att)}); an "
            "extension's objects (tensors, say) own native memory the census cannot size, so "
            "freeing them may free the rest."
        )
    elif att.kind == "native" and att.blocks_slope > 0 and python_growth > 0.2 * growth:
        att.notes.append("Python objects grow too, but explain less than half of the growth.")
    if g.verdict == "inconclusive":
        att.notes.append("The verdict is inconclusive; the attribution describes the growth so far.")
    if att.kind == "allocator" and g.verdict == "leak":
        # Measured on a tf.data interleave re-iterated per step: its first 3,000 passes' growth
        # was trimmable (a watch of 1,250 said retention), the next 16,000 grew 12 MiB that
        # malloc_trim no longer handed back.
        att.notes.append(
            "Retention levels off once the freed memory is reused; steady growth that goes on in a "
            "longer run is more than retention (malloc_trim hands back only what was free at "
            "this run's end)."
        )


def summary(att: Attribution, reclaimed: int) -> str:
    """The one sentence for a run that grew (``att.kind`` decided)."""
    per = "/iteration"
    if att.growth_of == "plateau":
        return _plateau_summary(att, reclaimed)
    if att.kind == "allocator" and att.refilling:
        return (
            f"The allocator refilling free memory, not your code: RSS grew "
            f"{format_bytes(att.growth_bytes)} ({format_bytes(att.rss_slope)}{per}) while malloc's "
            f"bytes in use ({format_bytes(att.in_use_slope, signed=True)}{per}) and Python's "
            f"objects stayed flat. Before the first iteration the watch returned the pages of "
            f"the free memory glibc held ({format_bytes(att.free_at_start)} in its heap) to the "
            "system; handing that memory out again touches its pages anew, so RSS climbs back, "
            "bounded by it, with nothing more in use."
        )
    if att.kind == "allocator":
        # What was handed back can exceed the growth measured (memory freed before the run, or
        # during the final clean-up): say so rather than give a share over 100%.
        back = (f"{format_bytes(reclaimed)} of the {format_bytes(att.growth_bytes)} growth"
                if reclaimed <= att.growth_bytes else
                f"{format_bytes(reclaimed)}, more than the {format_bytes(att.growth_bytes)} the run grew")
        if reclaimed < RETENTION_SHARE * att.growth_bytes:
            back += (f", and malloc's bytes in use stayed flat "
                     f"({format_bytes(att.in_use_slope)}{per} against RSS's {format_bytes(att.rss_slope)}{per}; "
                     f"the trim returns only whole free pages)")
        return (
            f"Allocator retention, not your code: malloc_trim(0) handed back {back}: memory the "
            f"program had freed, kept by glibc's arenas instead of returned. MALLOC_ARENA_MAX=2 (set before "
            f"Python starts), or jemalloc/tcmalloc through LD_PRELOAD, keeps it down."
        )
    if att.kind == "garbage":
        return _garbage_summary(att)
    top = _top_row(att)
    if att.kind == "python":
        what = ""
        if top is not None:
            count = (f"{top.per_iteration:+,.0f}" if abs(top.per_iteration) >= 10
                     else f"{top.per_iteration:+.2g}")  # 4,096, not 4.1e+03
            what = f"; most of all {top.name} ({count} per iteration, " \
                   f"~{format_bytes(top.bytes_per_iteration)}{per})"
        site = f"; allocated at {att.top_sites[0].site}" if att.top_sites else ""
        return (
            f"Python objects kept alive: about {format_bytes(att.python_slope)}{per} of the "
            f"{format_bytes(att.rss_slope)}{per} growth is held by Python objects"
            f"{_in_buffers(att)}{what}{site}{_kept_by(att)}."
        )
    if _in_use_explains(att) and att.python_slope >= 0.5 * att.rss_slope:
        # Not "Python objects explain only 1.7 of 1.7 KiB": the blocks' estimate is no size
        # measured, and malloc's growth, which is not pymalloc's, is RSS's.
        return (
            f"Native memory: RSS grows {format_bytes(att.rss_slope)}{per} and malloc's bytes in "
            f"use grew as fast ({format_bytes(att.in_use_slope)}{per}): memory handed out and not "
            f"given back, outside Python's heap (a C/C++ extension, TensorFlow's allocator). "
            f"Python's block count grew too (~{format_bytes(att.python_slope)}{per} estimated), "
            f"but a count of blocks is no size measured, and pymalloc's arenas are not "
            f"malloc's: the blocks can fill free slots of arenas already resident, or be garbage "
            f"awaiting Python's cycle collector{_native_where(att)}."
        )
    if _held(att):
        kept = (f", and malloc's bytes in use grew {format_bytes(att.in_use_slope)}{per} with it: "
                "memory handed out and not given back")
    else:
        kept = f" and malloc_trim returned only {format_bytes(reclaimed)}"
    return (
        f"Native memory: RSS grows {format_bytes(att.rss_slope)}{per} but Python objects explain only "
        f"{format_bytes(max(att.python_slope, 0))}{per}; the rest is held outside Python's heap "
        f"(a C/C++ extension, TensorFlow's allocator){kept}{_native_where(att)}."
    )


def _beside_garbage(att: Attribution, g: Growth) -> None:
    """Garbage on top of a leak: the leak is what the heap keeps past it (a from_generator
    built each step: 63 KiB of garbage an iteration over 5.1 KiB its graph keeps). A kept slope
    of a leak's worth (_kept_grows) is the leak's own rate (``kept_behind``), said first: the
    kind's sentence reads RSS's slope, the garbage's sawtooth included (a Keras predict per
    call: "RSS grows 15.0 KiB/iteration but Python objects explain only 6.7 KiB")."""
    r = att.garbage
    if not _kept_grows(att, g):
        att.summary += (
            f" Beside it each iteration leaves ~{format_bytes(r['bytes'])} of garbage awaiting "
            f"Python's cycle collector (freed by a full collection: gc.collect()); the leak is "
            f"what the heap kept past that garbage, {_kept(r)}, over the {r['iterations']} "
            "iterations measured after the run.")
        return
    att.kept_behind = kept_rate(r["live_interval"])
    att.summary = (
        f"A leak behind garbage: each iteration leaves ~{format_bytes(r['bytes'])} of garbage "
        f"awaiting Python's cycle collector (freed by a full collection: gc.collect()), and past "
        f"it the heap kept {_kept(r)}, over the {r['iterations']} iterations measured after the "
        f"run: that is the leak, not RSS's {format_bytes(att.rss_slope)}/iteration.{_kept_parts(att)} "
        f"RSS's growth, the garbage included, reads: {att.summary}")


def _kept_parts(att: Attribution) -> str:
    """What the leak behind the garbage is made of, read from the phase's collections (its kind,
    garbage.kept_kind): the run's census, taken between Python's own collections, counts the
    garbage not yet collected as Python objects, so the kind RSS's growth gives flaps with when
    it was taken. Sets ``att.kind`` to it; says nothing when the phase cannot tell."""
    r = att.garbage
    kind = kept_kind(r)
    if kind is None:
        return ""
    att.kind = kind
    python = format_bytes(kept_python(r), signed=True)
    if kind == "python":
        return (f" Python objects, mostly: {python} an iteration of it (pymalloc's blocks, and the "
                f"arrays, bytes and bytearrays held), the objects the collector tracks "
                f"{r['kept_tracked']:+.2g} an iteration.")
    return (f" Native memory: Python's objects (pymalloc's blocks, and the arrays, bytes and "
            f"bytearrays held) kept only {python} an iteration of it and the objects the "
            f"collector tracks did not grow ({r['kept_tracked']:+.2g} an iteration); the rest is "
            "malloc's bytes in use, held outside Python's heap (TensorFlow's allocator, a C/C++ "
            "extension).")


def _garbage(att: Attribution, g: Growth) -> bool:
    """Is the growth of a leak (or undecided run) garbage in reference cycles? In garbage.py's
    phase an iteration left garbage worth GARBAGE_SHARE of RSS's rate or more, and the heap
    kept at most LIVE_SHARE of it once that garbage was collected. (Not the census: its
    baseline precedes the warm-up, whose one-off objects it counts as growth. Measured: a
    ``model.fit`` per iteration, census +19 KiB an iteration from the first fit's trace.)

    What the heap keeps is a leak whatever its share when a reference path reaches the growing
    objects through a holder that never lets go (holders.py): a ``from_generator`` built each
    step kept 5.1-5.6 KiB an iteration in TensorFlow's graph against RSS rates of 15-29 KiB
    (35% and 19%) in two runs, the second on a busy machine; RSS's rate, the share's
    denominator, moves with the garbage's sawtooth, so no one share parts it from a Keras
    ``predict`` loop's 13%."""
    live = att.garbage["live"] if _much_garbage(att, g) else None
    return (g.verdict in ("leak", "inconclusive") and live is not None
            and live <= LIVE_SHARE * g.rss_slope
            and not (live > KEPT_SAID * g.rss_slope and holder_cause(att.paths))
            and not _kept_grows(att, g))


def _kept_grows(att: Attribution, g: Growth) -> bool:
    """Did the heap, collection after collection in garbage.py's phase, keep growing past the
    garbage by as much as the verdict asks of a leak: a kept slope above zero at 95%, at least
    KEPT_SAID of RSS's rate and one pymalloc block (BLOCK_BYTES) an iteration, that added
    MIN_LEAK_GROWTH over the phase? Then a slower leak is behind the garbage, whatever its share.

    A short phase's slope alone proves nothing: ``keras.models.load_model`` per iteration kept
    +2.2 KiB an iteration (95%: 1.3-3.1 KiB) over a phase of 67 iterations, and a plain loop of
    it with ``gc.collect()`` every 50 loads was flat over 5,600 (-3 B an iteration); a Keras
    ``predict`` per iteration kept +1.2 KiB (95%: 1.0-1.3 KiB) over 72, and its plain loop grew
    +1.2 KiB an iteration for 90 s. Both added ~100 KiB in their phase, far under what a leak must
    add, so neither is called a leak; and neither is called no leak (_kept_unsettled: predict's
    plain loop grows, and load_model's flat figure was read from RSS alone). A closed ``tf.compat.v1.Session`` per call kept +21 B an iteration
    (95%: 2-40 B) in one phase of three, flat with ``gc.collect()`` over 33,000 iterations:
    under a block an iteration is what tables growing in steps average to."""
    r = att.garbage
    return bool(r) and kept_call(r.get("live_interval"), r["iterations"], g.rss_slope) == "leak"


def _kept_unsettled(att: Attribution, g: Growth) -> float | None:
    """Under garbage, the most the heap may keep past it an iteration (the kept slope's 95%
    upper bound) when that is at least KEPT_SAID of RSS's rate and a block, and no leak was
    called behind the garbage (_kept_grows); else None. "Not a leak" needs the phase to rule out
    a slower leak, and a short one cannot, nor tell one from a cache still filling: a Keras
    ``predict`` per call kept +1.0-1.3 KiB an iteration in one phase and -0.3-2.3 KiB in another
    (44 iterations), ``fit`` +2.3-3.3 KiB, and with ``gc.collect()`` every 200 calls both grew
    +1.2 KiB a call for 5,800 calls (a leak); ``keras.models.load_model`` kept +1.3-3.1 KiB and
    was flat over 5,600 (none). Such growth is called neither (WatchResult.unsettled)."""
    r = att.garbage
    if not r or kept_call(r.get("live_interval"), r["iterations"], g.rss_slope) != "unsettled":
        return None
    return r["live_interval"][1]


def _kept(r: dict) -> str:
    """What the heap kept an iteration past the garbage: the slope from one measuring collection
    to the next with its 95% interval, or (a saved result measured once) what it held at the
    phase's end over its iterations."""
    if (interval := r.get("live_interval")) is None:
        return f"{format_bytes(max(r['live'], 0.0))} an iteration"
    lo, hi = interval
    return (f"{format_bytes(kept_rate(interval), signed=True)} an iteration (95%: "
            f"{format_bytes(lo, signed=True)} to {format_bytes(hi, signed=True)}) from one full "
            "collection to the next")


def _kept_unseen(att: Attribution) -> str:
    """What the garbage phase measured the heap keeping, when RSS grew too little to split: a
    kept slope above zero at 95% is said, not left behind "nothing to attribute" (a
    ``Dataset.map`` of ``tf.numpy_function`` built per call, RSS flat in memory TensorFlow's
    import had freed: "Inconclusive … may be a leak" over a phase that kept +1.9 KiB an
    iteration)."""
    r = att.garbage
    interval = r.get("live_interval") if r else None
    # Under a pymalloc block an iteration is what tables growing in steps average to (a closed
    # tf.compat.v1.Session per call: +21 B, flat over 33,000 calls): not said, as kept_call.
    if interval is None or interval[0] <= 0 or kept_rate(interval) < BLOCK_BYTES:
        return ""
    return (f" Past the garbage Python's cycle collector frees, though, the heap kept {_kept(r)}, "
            f"over the {r['iterations']} iterations measured after the run: memory in use that "
            "RSS does not show yet, because it reuses memory freed earlier.")


def _much_garbage(att: Attribution, g: Growth) -> bool:
    """Did garbage.py's phase measure what the heap keeps, and garbage an iteration worth at
    least GARBAGE_SHARE of RSS's rate?"""
    r = att.garbage
    return (r is not None and r["live"] is not None and g.rss_slope > 0
            and r["bytes"] >= GARBAGE_SHARE * g.rss_slope)


def _garbage_summary(att: Attribution) -> str:
    """Garbage awaiting the collector: what an iteration leaves, and when Python frees it."""
    r = att.garbage
    per = "/iteration"
    top = ", ".join(f"{name} ({n:.2g} per iteration)" for name, n in r["types"][:2])
    share = (f"~{format_bytes(r['bytes'])}{per} of the {format_bytes(att.rss_slope)}{per} growth"
             if r["bytes"] <= att.rss_slope else
             f"~{format_bytes(r['bytes'])}{per}, as much as the {format_bytes(att.rss_slope)}{per} growth")
    until = ""
    if (n := until_full_collection(r["long_lived"], r["objects"])) is not None:
        until = (f" Python runs one by itself once the objects that outlived its earlier "
                 f"collections have grown by a quarter (here {r['long_lived'] / 4:,.0f} objects: "
                 f"within about {n:,.0f} iterations at this rate, ~{format_bytes(n * min(r['bytes'], att.rss_slope))}), "
                 "so memory climbs in a sawtooth up to there, not without end.")
    kept = ""
    if r["live"] > KEPT_SAID * att.rss_slope or att.kept_unsettled is not None:
        # Kept, but not called a leak (_kept_grows): not clearly growing from one collection to
        # the next, or too little to be one; or measured once (a result saved before the slope).
        unclear = ""
        if (interval := r.get("live_interval")) is not None:
            added = kept_rate(interval) * r["iterations"]
            if interval[0] <= 0:
                unclear = (", not clearly growing from one collection to the next"
                           + ("; too few iterations to rule out a slower leak behind the garbage"
                              if att.kept_unsettled is not None else ""))
            elif added < MIN_LEAK_GROWTH:
                unclear = (f", {format_bytes(added)} over them, under the "
                           f"{format_bytes(MIN_LEAK_GROWTH)} a leak must add to be called one"
                           + ("; too few iterations to tell a slower leak from a cache still "
                              "filling" if att.kept_unsettled is not None else ""))
            else:
                unclear = ", too little an iteration to call a leak"
        kept = (f" Past the garbage the heap kept {_kept(r)} over the {r['iterations']} "
                f"iterations measured ({r['live'] / att.rss_slope:.0%} of the growth by the "
                f"phase's end){unclear}: if it goes on, a slower leak is behind the garbage; a "
                "watch of a step that calls gc.collect() after its work measures it alone.")
    whose = ("Mostly garbage awaiting Python's cycle collector" if att.kept_unsettled is not None
             else "Garbage awaiting Python's cycle collector, not kept by your code")
    return (
        f"{whose}: each iteration "
        f"leaves about {r['objects']:,.0f} objects ({share}) unreachable in reference cycles"
        f"{', most of all ' + top if top else ''}; only a full collection frees them, and "
        f"gc.collect() did.{until} gc.collect() every few hundred iterations keeps memory "
        f"down; so does breaking the cycle (a weakref, or dropping the reference that closes it).{kept}"
    )


def _nothing_in_use_grew(att: Attribution, python_growth: float, growth: float) -> bool:
    """Did neither malloc's bytes in use nor Python's objects grow with RSS (each at most
    IN_USE_FLAT_SHARE of it)? Python's objects live in pymalloc's own arenas, outside malloc's
    count: a leak of tuples (the quickstart's, 34 KiB an iteration) leaves bytes in use flat."""
    return (att.in_use_slope is not None and att.in_use_slope <= IN_USE_FLAT_SHARE * att.rss_slope
            and python_growth <= IN_USE_FLAT_SHARE * growth)


def _refills(att: Attribution, growth: float, python_growth: float) -> bool:
    """Is RSS climbing back into free memory malloc already held? The watch trimmed it before
    iteration 0 (watch.settle_memory), returning the pages of the free chunks inside the heap;
    handing those chunks out again touches their pages anew. So RSS grows with malloc's bytes in
    use and Python's objects flat (_nothing_in_use_grew), by at most what was free then.
    Measured: ``tf.random.normal([256, 256])`` per iteration, bytes in use +0.09 B an iteration
    over 20,000 iterations, read "Leak +143 B per iteration" in 3 of 5 watches of 10-12 s: the
    heap's resident pages grew 1.3 MiB inside its 7 MiB of free chunks, its size unchanged."""
    return (att.free_at_start is not None and 0 < growth <= att.free_at_start
            and _nothing_in_use_grew(att, python_growth, growth))


def _retained(att: Attribution, reclaimed: int, growth: float, python_growth: float) -> bool:
    """Did the trim hand back enough of the growth to call it memory the allocator kept: half
    of it, or a quarter when nothing in use grew (the rest freed, in pages a pinned block
    keeps from the system)?"""
    return reclaimed >= RETENTION_SHARE * growth or (
        reclaimed >= RETAINED_SHARE * growth and _nothing_in_use_grew(att, python_growth, growth))


def _in_use_explains(att: Attribution) -> bool:
    """Did malloc's bytes in use grow as fast as RSS while Python's share is only a count of
    blocks (not sizes measured)? Then malloc's growth is RSS's: pymalloc's arenas are not
    malloc's, and blocks that grew beside it filled free slots of arenas already resident (a
    ``for b in ds`` pass over a dataset each step: bytes in use +1.1 KiB and blocks worth
    533 B an iteration against RSS's +863 B; with ``gc.collect()`` every 200 passes the blocks
    stay flat, +0.07 an iteration, and bytes in use grow +820 B: TensorFlow's iterator state)."""
    return (att.python_source == FROM_BLOCKS and att.in_use_slope is not None
            and att.in_use_slope >= att.rss_slope > 0)


def _held(att: Attribution) -> bool:
    """Did malloc's bytes in use grow with RSS (IN_USE_HELD_SHARE of its rate): memory handed
    out and not given back, not free memory the allocator keeps?"""
    return att.in_use_slope is not None and att.in_use_slope >= IN_USE_HELD_SHARE * att.rss_slope > 0


def _top_row(att: Attribution) -> TypeGrowth | None:
    """The row the sentence names: the biggest, or the grown container holding it (``dict of
    numpy.ndarray (len 200)`` says more than ``numpy.ndarray``, for as many bytes)."""
    top = next((t for t in att.top_types if t.bytes_per_iteration > 0), None)
    if top is None or top.container:
        return top
    return next((t for t in att.top_types if t.container and t._item == top.name
                 and t.bytes_per_iteration >= 0.5 * top.bytes_per_iteration), top)


def _in_buffers(att: Attribution) -> str:
    """How much of what Python objects hold lives in native buffers they own (array data,
    tensor buffers): Python's to answer for, though outside its heap."""
    if not att.names_buffers:
        return ""
    much = (f"{att.buffer_slope / att.python_slope:.0%}" if att.growth_of == "plateau"
            else f"{format_bytes(att.buffer_slope)}/iteration")
    return f" ({much} of it in native buffers they own: array data, tensor buffers)"


def _kept_by(att: Attribution) -> str:
    return f"; kept alive by {att.paths[0].root}" if att.paths else ""


def _native_where(att: Attribution) -> str:
    """The biggest native call stack, or how to get the stacks."""
    if att.native_sites:
        top = att.native_sites[0]
        return (f". The biggest native stack allocated and did not free "
                f"{format_bytes(top.bytes_per_iteration)}/iteration at {top.where}")
    if att.native_window is None:
        return ". watch(..., native=True) or %%leakwatch --native shows its call stacks"
    return ""


def _plateau_summary(att: Attribution, reclaimed: int) -> str:
    """What a plateau's rise holds: Python objects, native memory, or allocator retention."""
    rise = max(att.growth_bytes, 0.0)
    head = f"The plateau holds {format_bytes(rise)} (a buffer or cache that filled, not a leak)"
    if att.kind == "allocator":
        return (f"{head}, and malloc_trim(0) handed back {format_bytes(reclaimed)} of it: memory "
                "freed but kept by glibc's arenas (allocator retention). MALLOC_ARENA_MAX=2 (set "
                "before Python starts), or jemalloc/tcmalloc through LD_PRELOAD, keeps it down.")
    share = att.python_slope / att.rss_slope if att.rss_slope > 0 else 0.0
    held = share * rise
    if att.kind == "python":
        top = _top_row(att)
        what = f"; most of all {top.name}" if top is not None else ""
        return (f"{head}: Python objects hold about {format_bytes(held)} of it{_in_buffers(att)}"
                f"{what}{_kept_by(att)}.")
    return (f"{head}: Python objects hold only {format_bytes(held)} of it; the rest is native "
            f"memory (a tf.data buffer, TensorFlow's allocator, a C extension's cache){_native_where(att)}.")


def _out_of_sight(att: Attribution, frozen: int) -> None:
    """After ``gc.freeze()`` (the copy-on-write advice suggests it) the collector lists none of
    the objects it froze: the census cannot count them, nor what only they hold (arrays, bytes,
    strings: a NumPy array kept in a list made before the freeze read as native memory), and
    no reference path passes through them. Objects made since are counted. So the growth is
    not called native on the census's silence, and the note says what is hidden."""
    att.notes.append(
        f"gc.freeze() has put {frozen:,} objects out of the garbage collector's sight: the object "
        "census counts none of them, nor what only they hold (arrays, bytes, strings), and no "
        "reference path passes through them. gc.unfreeze() before the watch shows them.")
    if att.kind == "native":
        att.kind = "none"
        att.summary = (
            "Not split into Python and native memory: Python objects explain only "
            f"{format_bytes(att.python_slope)} of the {format_bytes(att.rss_slope)} an iteration "
            "RSS grows, but gc.freeze() hides objects from the census, and a container frozen "
            "before the run can hold the rest (see the note).")
