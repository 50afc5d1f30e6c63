"""The facts every hypothesis reads, computed once per verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .constants import MAX_POINTS, MIN_LEAK_GROWTH, MIN_POINTS, STABLE_HORIZON_S
from .growth import LeakChoice, choose_leak, is_the_heap, leak_test
from .stats import (
    Hinge,
    Trend,
    batches,
    bucket,
    detect_warmup,
    hinge_fit,
    linear_sse,
    robust_sigma,
    theil_sen,
)


@dataclass(frozen=True)
class Window:
    """A run, cut after its warm-up: verdicts are read from what follows it."""

    first: float  # the first iteration's number
    warmup: int  # iterations treated as warm-up
    start: float  # the first iteration after the warm-up
    detected: bool  # the warm-up was detected, not given (only then may it be part of a fill)
    iterations: int  # iterations the run spans
    rss: np.ndarray  # every iteration's RSS, warm-up included
    post: np.ndarray  # which iterations follow the warm-up
    x: np.ndarray  # their numbers
    y: np.ndarray  # their RSS


def cut_warmup(index: np.ndarray, rss: np.ndarray, warmup: int | None) -> Window:
    """The run after its warm-up: ``warmup`` iterations, or as many as detected when None."""
    first = index[0]
    w = detect_warmup(index, rss) if warmup is None else int(warmup)
    start = first + w
    post = index >= start
    return Window(
        first=first, warmup=w, start=start, detected=warmup is None,
        iterations=int(index[-1] - first + 1), rss=rss, post=post, x=index[post], y=rss[post],
    )


@dataclass(frozen=True)
class Evidence:
    """What more than one hypothesis reads, computed once by :func:`gather_evidence`."""

    window: Window
    fx: np.ndarray  # bucket medians of the iteration numbers: the shape, at fine resolution
    overall: Trend  # the whole window's trend, on batches with nearly independent residuals
    level: float  # the median of those batches: the level a flat run sits at
    sigma: float  # the batches' noise about that trend
    rss0: float  # RSS after the first iteration
    long_warmup: bool  # a detected warm-up long or steppy enough to be the start of a fill
    down: Hinge | None  # the best "rise, then slower" fit
    starts: list[float]  # candidate starts of growth, in order
    min_growth: float  # what a leak must add during the run
    leak: LeakChoice
    blocks: np.ndarray | None  # Python's allocator blocks after the warm-up (NaN where not read)
    # glibc malloc's bytes in use after the warm-up (NaN where not read); None when too few were
    # read, or when they cannot be the process's heap (growth.is_the_heap)
    in_use: np.ndarray | None
    sec_per_iter: float | None  # mean duration of an iteration, when known
    room: float | None  # bytes still available, when known

    @property
    def negligible(self) -> float:
        """Growth per iteration too small to matter within STABLE_HORIZON_S."""
        return self.exhausting_rate(STABLE_HORIZON_S)

    def exhausting_rate(self, horizon: float) -> float:
        """Growth per iteration that would use the memory available within ``horizon`` seconds
        (1 KiB when the memory available is unknown; a million iterations when their time is)."""
        if not self.room:
            return 1024.0
        return self.room / (horizon / self.sec_per_iter if self.sec_per_iter else 1e6)


def gather_evidence(window: Window, *, durations: np.ndarray | None, headroom: float | None,
                    blocks: ArrayLike | None, peaks: ArrayLike | None,
                    in_use: ArrayLike | None) -> Evidence:
    """Everything the hypotheses share, from a window of at least MIN_POINTS iterations."""
    x, y, post = window.x, window.y, window.post
    # Shape (onset, rise-then-flat) is read at fine resolution; significance on batches whose
    # residuals are nearly independent.
    fx, fy = bucket(x, y, max(1, math.ceil(x.size / MAX_POINTS)))
    bx, by, overall, _ = batches(x, y)
    sigma = robust_sigma(by - (overall.intercept + overall.slope * bx))
    sec_per_iter = (float(np.mean(durations[post]))
                    if durations is not None and durations.size == post.size else None)
    room = float(headroom) if headroom else None
    down = hinge_fit(fx, fy, "down")
    starts = _starts(x, fx, fy, down)
    min_growth = _min_growth(y, post, peaks)
    blocks_post = _read_checkpoints(_after_warmup(blocks, post))
    in_use_post = _after_warmup(in_use, post)
    heap = _read_checkpoints(in_use_post)
    if heap is not None and not is_the_heap(heap, y):
        heap = None
    tests = [leak_test(x, y, s, min_growth) for s in starts]
    return Evidence(
        window=window, fx=fx, overall=overall, level=float(np.median(by)), sigma=sigma,
        rss0=float(window.rss[0]), long_warmup=_long_warmup(window, sigma), down=down,
        starts=starts, min_growth=min_growth,
        leak=choose_leak(x, y, tests, in_use_post, blocks_post),
        blocks=blocks_post, in_use=heap,
        sec_per_iter=sec_per_iter, room=room,
    )


def _read_checkpoints(values: np.ndarray | None) -> np.ndarray | None:
    """A count read at checkpoints only (the block count, malloc's bytes in use) as floats, NaN
    where it was not read (-1); None when it was read at fewer than MIN_POINTS of them."""
    if values is None:
        return None
    b = values.astype(float)
    unread = b < 0
    if (~unread).sum() < MIN_POINTS:
        return None
    b[unread] = np.nan
    return b


def _after_warmup(values: ArrayLike | None, post: np.ndarray) -> np.ndarray | None:
    """A per-iteration series after the warm-up; None unless given for every iteration."""
    if values is None or np.asarray(values).size != post.size:
        return None
    return np.asarray(values)[post]


def _fitted_onset(fx: np.ndarray, fy: np.ndarray) -> float:
    """Where the best "flat, then rising" fit starts rising; the first point if it does not."""
    onset = float(fx[0])
    up = hinge_fit(fx, fy, "up")
    if up is not None and up.slope > 0:
        lin = linear_sse(fx, fy)
        pre = fx < up.knee
        if lin > 0 and up.sse < 0.5 * lin and pre.sum() >= 4 and (~pre).sum() >= MIN_POINTS:
            # Growth starts later only if before it memory was clearly flatter than after.
            if theil_sen(fx[pre], fy[pre]).slope < 0.25 * up.slope:
                onset = up.knee
    return onset


def growth_starts(x: np.ndarray, y: np.ndarray) -> list[float]:
    """Candidate starts of the growth of any series read at ``x`` (see :func:`_starts`)."""
    fx, fy = bucket(x, y, max(1, math.ceil(x.size / MAX_POINTS)))
    return _starts(x, fx, fy, hinge_fit(fx, fy, "down"))


def _starts(x: np.ndarray, fx: np.ndarray, fy: np.ndarray, down: Hinge | None) -> list[float]:
    """Candidate starts of the growth: the fitted onset, then the last two thirds and the last
    half of the run — memory freed earlier is often reused first, so a leak may show in RSS
    only after a while, behind a rise and a flat stretch the onset fit cannot describe."""
    onset = _fitted_onset(fx, fy)
    span = x[-1] - x[0]
    starts = [onset] + [s for s in (x[0] + span / 3, x[0] + span / 2) if s > onset]
    # ... and the knee of a "rise, then slower" fit: a buffer that filled, with memory still
    # growing after it, is a leak at the slower rate.
    if down is not None and down.knee > onset and (x >= down.knee).sum() >= MIN_POINTS:
        starts = sorted({*starts, down.knee})
    return starts


def _min_growth(y: np.ndarray, post: np.ndarray, peaks: ArrayLike | None) -> float:
    """MIN_LEAK_GROWTH, or what one iteration allocates and frees again (the median of peak
    minus end RSS) when more: the allocator may keep that much."""
    min_growth = float(MIN_LEAK_GROWTH)
    if peaks is not None and np.asarray(peaks).size == post.size:
        transient = np.asarray(peaks, dtype=float)[post] - y
        min_growth = max(min_growth, float(np.median(transient)))
    return min_growth


def _long_warmup(window: Window, sigma: float) -> bool:
    """A detected warm-up that is long, or rose in several steps, may be the first part of a
    fill (memory freed earlier is reused first, so a buffer can look full early)."""
    w = window.warmup
    if not window.detected:
        return False
    warm_rises = int(np.sum(np.diff(window.rss[: w + 1]) > max(4 * sigma, 64 * 1024.0))) if w > 1 else 0
    return w >= MIN_POINTS or warm_rises >= 3
