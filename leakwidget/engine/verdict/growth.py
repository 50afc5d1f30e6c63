"""Is RSS growing steadily from a given start, and did anything in use grow along with it?"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .constants import (
    BLOCK_BYTES,
    HEAP_SHARE,
    LIVE_SHARE,
    MIN_POINTS,
    MIN_RISES_UNEXPLAINED,
    SPREAD,
    STEP_BUCKETS,
    STEPWISE_SHARE,
)
from .stats import Trend, batches, bucket, effective_rises, running_median, theil_sen, trend


@dataclass(frozen=True)
class LeakTest:
    onset: float  # the first batch's iteration: where the tested growth starts
    trend: Trend
    h2: Trend  # the second half's trend (the whole one when not significant)
    sustained: bool  # both halves grew, and no single step carries the growth
    is_leak: bool
    material: bool  # it added at least the minimum growth
    spread: bool = False  # no single step carries 40% of the growth (beyond its width's share)
    h2_start: float = 0.0  # where the second half starts
    stepwise: bool = False  # the growth came in a few steps, not a little in most batches


def leak_test(x: np.ndarray, y: np.ndarray, onset: float, min_growth: float) -> LeakTest:
    """Is memory growing steadily from ``onset`` to the end?"""
    keep = x >= onset
    gx, gy, tr, _ = batches(x[keep], y[keep])
    start = float(gx[0]) if gx.size else onset
    if not tr.low_decide > 0:
        # Not significant: not a leak, whatever its halves do (and live verdicts are cheaper).
        return LeakTest(start, tr, tr, False, False, False)
    half = gx.size // 2
    h1 = theil_sen(gx[:half], gy[:half])
    h2 = theil_sen(gx[half:], gy[half:])
    # A few big jumps (the allocator's high-water mark rising now and then) are not a leak:
    # no single step between batches may carry SPREAD (40%) of the growth. A running median of
    # 5 keeps level shifts and drops isolated spikes, which Theil–Sen already ignores.
    sm = running_median(gy, 5)
    total_rise = float(sm[-1] - sm[0])
    spread = total_rise > 0 and _no_step_carries_it(gx, np.diff(sm) / total_rise)
    sustained = h1.slope > 0.3 * tr.slope and h2.slope > 0.5 * tr.slope and spread
    # Growth too small to matter yet (the allocator's slow creep under threads looks like this)
    # is not called a leak until it adds up to MIN_LEAK_GROWTH.
    material = tr.slope * (float(x[-1]) - start) >= min_growth
    is_leak = (keep.sum() >= MIN_POINTS and tr.low_decide > 0 and h2.low > 0 and sustained
               and material)
    return LeakTest(start, tr, h2, sustained, is_leak, material, spread,
                    float(gx[half]) if gx.size else onset, is_leak and _stepwise(x[keep], y[keep]))


def _no_step_carries_it(gx: np.ndarray, rises: np.ndarray) -> bool:
    """Does no step between batches carry 40% of the growth (``rises``: each step's share of
    it), beyond its share of the iterations between them?

    Readings every iteration make batches of even width, and the rule is the 40% alone. Values
    read at uneven iterations (the block count, at checkpoints that thin out over an open-ended
    run: iterations 0-39, then 60, 90, 135, 203, 304) leave a wide last batch, and a steady
    leak's rise across it is its width's share of the growth (78% there), not a jump."""
    span = float(gx[-1] - gx[0])
    if span <= 0:
        return False
    wider = np.maximum(0.0, np.diff(gx) / span - 1.0 / rises.size)  # than an even batch
    return bool(np.all(rises < SPREAD + wider))


def _stepwise(x: np.ndarray, y: np.ndarray) -> bool:
    """Did the second half's growth come in a few steps rather than a little at a time?

    A leak adds a little between most of ``STEP_BUCKETS`` stretches of its second half (the
    recorded leaks: rises in 21-100% of them); a buffer that filled can go on settling in a few
    of the allocator's steps for a while (a shuffle buffer of 4 KiB tensors, 8,000 iterations a
    second: 0.2-0.6 MiB steps, rises in 5-8% of them, flat a minute later). Such growth may be
    a leak, but it is no proof of one yet: the watch keeps going."""
    h = x.size // 2
    bx, by = bucket(x[h:], y[h:], max(1, (x.size - h) // STEP_BUCKETS))
    if by.size < MIN_POINTS:
        return False
    return effective_rises(running_median(by, 3)) < STEPWISE_SHARE * (by.size - 1)


def is_the_heap(in_use: np.ndarray, rss: np.ndarray) -> bool:
    """Can glibc malloc's bytes in use (read values only) be this process's heap? Not under
    HEAP_SHARE of RSS: jemalloc or tcmalloc preloaded serve malloc, and glibc's count stays flat."""
    return bool(np.nanmedian(in_use) >= HEAP_SHARE * float(np.median(rss)))


def in_use_grows(x: np.ndarray, rss: np.ndarray, in_use: np.ndarray | None, blocks: np.ndarray | None,
                 onset: float, rss_slope: float) -> bool | None:
    """Did anything in use grow along with RSS since ``onset``?

    True when Python's block count or glibc malloc's bytes in use grew at LIVE_SHARE of the RSS
    slope or more; False when malloc's count (read at 4 points at least) did not; None when it
    was not read (no glibc 2.33+, or too few checkpoints) or cannot be the process's heap (under
    2% of RSS: jemalloc or tcmalloc preloaded serve malloc, and glibc's count stays flat).
    """
    keep = x >= onset
    if blocks is not None:
        read = keep & ~np.isnan(blocks)  # the block count is read at checkpoints
        if read.sum() >= 2:
            bt = trend(x[read], blocks[read])
            if bt.low > 0 and bt.slope * BLOCK_BYTES >= LIVE_SHARE * rss_slope:
                return True
    if in_use is None:
        return None
    u = np.asarray(in_use, dtype=float)[keep]
    read = u >= 0
    if read.sum() < 4:
        return None
    ux, uy = x[keep][read], u[read]
    if not is_the_heap(uy, rss[keep]):
        return None
    return trend(ux, uy).slope >= LIVE_SHARE * rss_slope


@dataclass(frozen=True)
class LeakChoice:
    """Which start of growth the verdict reports, and whether that growth is a leak."""

    test: LeakTest  # the reported start: a leak's, or the first candidate's when none is one
    is_leak: bool
    earliest: LeakTest | None  # the first start that passed (faster, when the test is later)
    # (growth, rises) of the first significant growth nothing in use followed, in too few rises
    unexplained: tuple[float, float] | None


def _unexplained(x: np.ndarray, y: np.ndarray, in_use: np.ndarray | None, blocks: np.ndarray | None,
                 t: LeakTest) -> tuple[float, float] | None:
    """None when the growth ``t`` found is explained (something in use grew with it, or it came
    in many rises); else how much it grew and in how many rises' worth."""
    if in_use_grows(x, y, in_use, blocks, t.onset, t.trend.slope) is not False:
        return None
    rises = effective_rises(y[x >= t.onset])
    if rises >= MIN_RISES_UNEXPLAINED:
        return None
    return t.trend.slope * (float(x[-1]) - t.onset), rises


def _current_rate(chosen: LeakTest, later: LeakTest) -> LeakTest:
    """Growth that has slowed down since the onset (caches warming up on top of a slower leak):
    the current rate is what runs memory out, so report the later, slower one — clearly
    slower, or as slow with a much tighter interval (the early, faster stretch was only
    widening it)."""
    slower = later.trend.high < chosen.trend.low and later.trend.slope < 0.75 * chosen.trend.slope
    tighter = (later.trend.high < 0.75 * chosen.trend.high
               and later.trend.slope <= 1.05 * chosen.trend.slope)
    return later if slower or tighter else chosen


def choose_leak(x: np.ndarray, y: np.ndarray, tests: list[LeakTest], in_use: np.ndarray | None,
                blocks: np.ndarray | None) -> LeakChoice:
    """The leak among the candidate starts ``tests`` (in order), if any: the first that passes,
    or a later one that shows the current, slower rate."""
    passing: list[LeakTest] = []
    unexplained = None
    for t in tests:
        if not t.is_leak:
            continue
        why = _unexplained(x, y, in_use, blocks, t)
        if why is None:
            passing.append(t)
        elif unexplained is None:
            unexplained = why
    chosen = passing[0] if passing else tests[0]
    for t in passing[1:]:
        chosen = _current_rate(chosen, t)
    return LeakChoice(chosen, bool(passing), passing[0] if passing else None, unexplained)
