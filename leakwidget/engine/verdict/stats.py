"""The estimators behind every verdict: bucket medians, batch means, Theil–Sen with Sen's
interval, hinge fits, warm-up detection, and the small robust measures they share.

Each is a pure function of its arrays (the one table kept between calls, the pair table of
:func:`_pairs`, is built once and never changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .constants import MAX_POINTS, MIN_POINTS, Z95, Z99, Z_DECIDE


@dataclass
class Trend:
    slope: float
    low: float  # 95%
    high: float
    low_decide: float  # Z_DECIDE level
    high_decide: float
    low99: float
    intercept: float
    rho: float
    n: int


def bucket(x: np.ndarray, y: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Medians of consecutive groups of m points (a short last group joins the one before)."""
    n = x.size
    if m <= 1:
        return x.astype(float), y.astype(float)
    k = max(1, n // m)
    bx = np.median(x[: k * m].reshape(k, m).astype(float), axis=1)
    by = np.median(y[: k * m].reshape(k, m).astype(float), axis=1)
    if k * m < n:  # vectorised above; only the last group needs its remainder
        bx[-1] = np.median(x[(k - 1) * m :])
        by[-1] = np.median(y[(k - 1) * m :])
    return bx, by


def trend(x: ArrayLike, y: ArrayLike) -> Trend:
    """Theil–Sen slope on at most MAX_POINTS bucket medians: the verdict's estimator, for others
    (attribution, the widget's duration chart) that need a robust slope of a long series."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    bx, by = bucket(x, y, max(1, math.ceil(x.size / MAX_POINTS)))
    return theil_sen(bx, by)


def batches(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, Trend, int]:
    """Batch medians long enough that their residuals are nearly independent.

    The batch-means method of simulation output analysis: memory noise is sticky (a freed
    block stays resident until reused), so neighbouring iterations are not independent.
    Batches of m iterations, m doubled until the lag-1 autocorrelation of the residuals is
    small (keeping at least 10 batches), turn a staircase into a clean series; whatever
    autocorrelation remains still widens the interval.
    """
    n = x.size
    m = max(1, math.ceil(n / MAX_POINTS))
    while True:
        bx, by = bucket(x, y, m)
        # The batch length is chosen on least-squares residuals (cheap); the trend itself is
        # Theil–Sen, computed once, and its interval still widens for the residual ρ left.
        if n // (2 * m) < 10 or _lag1(_ls_residuals(bx, by)) <= 0.3:
            return bx, by, theil_sen(bx, by), m
        m *= 2


def _ls_residuals(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.size < 3:
        return np.zeros(x.size)
    xc = x - x.mean()
    den = float(np.dot(xc, xc))
    b = float(np.dot(xc, y - y.mean()) / den) if den > 0 else 0.0
    return y - y.mean() - b * xc


def _lag1(r: np.ndarray) -> float:
    if r.size < 4:
        return 0.0
    r = r - r.mean()
    den = float(np.dot(r, r))
    if den <= 0:
        return 0.0
    return float(np.clip(np.dot(r[1:], r[:-1]) / den, 0.0, 0.95))


_PAIRS: list = []


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs i < j of n points.

    Ordered by j, so the pairs of n points are the first n(n-1)/2 pairs of any larger n: one
    table for MAX_POINTS, built once and kept, serves every smaller n as a view. (A cache of
    tables per n, evicted as a run's bucket count changes, made glibc's heap ratchet up around
    the watched program's buffers: measured +1 KiB RSS per iteration of a tf.data pipeline with
    a shuffle buffer of 64 KiB tensors, a leak the tool made itself. Temporaries freed at once
    do not do that; long-lived allocations freed later do.)
    """
    if n > MAX_POINTS:
        return np.triu_indices(n, 1)
    if not _PAIRS:
        i = np.concatenate([np.arange(k) for k in range(MAX_POINTS)])  # (0,1) (0,2) (1,2) (0,3)…
        j = np.repeat(np.arange(MAX_POINTS), np.arange(MAX_POINTS))
        i.flags.writeable = j.flags.writeable = False
        _PAIRS.extend((i, j))
    count = n * (n - 1) // 2
    return _PAIRS[0][:count], _PAIRS[1][:count]


def _sen_ranks(z: float, var: float, count: int) -> tuple[int, int]:
    """Ranks, among ``count`` sorted pairwise slopes, of Sen's interval at normal quantile z."""
    c = z * math.sqrt(var)
    lo = int(math.floor((count - c) / 2.0))
    hi = int(math.ceil((count + c) / 2.0))
    # Past the ends, the extreme pairwise slope is the honest bound: it is only positive
    # when every pair of points shows growth.
    return min(max(lo, 0), count - 1), max(min(hi, count - 1), 0)


def theil_sen(x: ArrayLike, y: ArrayLike) -> Trend:
    """Theil–Sen slope with Sen's rank intervals, widened for lag-1 autocorrelation."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = x.size
    if n < 2:
        return Trend(0.0, -math.inf, math.inf, -math.inf, math.inf, -math.inf, float(y.mean()) if n else 0.0, 0.0, n)
    i, j = _pairs(n)
    dx = x[j] - x[i]
    keep = dx != 0
    s = (y[j] - y[i])[keep] / dx[keep]
    count = s.size
    if count == 0:
        return Trend(0.0, -math.inf, math.inf, -math.inf, math.inf, -math.inf, float(np.median(y)), 0.0, n)
    # Only a few order statistics are needed (the median and the interval ends): one
    # partition finds them all, in linear time, instead of sorting every pairwise slope.
    mid = [(count - 1) // 2, count // 2]
    part = np.partition(s, mid)
    slope = float(0.5 * (part[mid[0]] + part[mid[1]]))
    intercept = float(np.median(y - slope * x))
    rho = _lag1(y - (intercept + slope * x))
    var = n * (n - 1) * (2 * n + 5) / 18.0 * (1 + rho) / (1 - rho)
    r95 = _sen_ranks(Z95, var, count)
    rd = _sen_ranks(Z_DECIDE, var, count)
    r99 = _sen_ranks(Z99, var, count)
    wanted = sorted({*r95, *rd, r99[0]})
    part = np.partition(s, wanted)
    lo, hi = float(part[r95[0]]), float(part[r95[1]])
    lod, hid = float(part[rd[0]]), float(part[rd[1]])
    lo99 = float(part[r99[0]])
    return Trend(slope, lo, hi, lod, hid, lo99, intercept, rho, n)


def robust_sigma(v: np.ndarray) -> float:
    if v.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(v - np.median(v))))


class Hinge(NamedTuple):
    """A two-piece fit y = level + slope·z, z the hinge regressor of the change point ``knee``."""

    sse: float
    knee: float
    level: float
    slope: float


def hinge_fit(x: np.ndarray, y: np.ndarray, kind: Literal["up", "down"]) -> Hinge | None:
    """Least-squares 'rise then flat' (kind='down') or 'flat then rise' (kind='up') fit.

    The best change point is chosen among the data's own x values between the 10% and 90%
    quantiles; None when there are too few points.
    """
    n = x.size
    if n < 8:
        return None
    cand = np.unique(x[int(0.1 * n) : int(0.9 * n) + 1])
    if cand.size > 60:
        cand = cand[np.linspace(0, cand.size - 1, 60).astype(int)]
    # Every candidate change point at once: one row of the hinge regressor per candidate.
    z = np.minimum(x[None, :], cand[:, None]) if kind == "down" else np.maximum(x[None, :] - cand[:, None], 0.0)
    zc = z - z.mean(axis=1, keepdims=True)
    den = np.einsum("ij,ij->i", zc, zc)
    ok = den > 0
    if not ok.any():
        return None
    yc = y - y.mean()
    b = np.where(ok, (zc @ yc) / np.where(ok, den, 1.0), 0.0)
    a = y.mean() - b * z.mean(axis=1)
    sse = np.sum((y[None, :] - a[:, None] - b[:, None] * z) ** 2, axis=1)
    sse = np.where(ok, sse, np.inf)
    k = int(np.argmin(sse))
    return Hinge(float(sse[k]), float(cand[k]), float(a[k]), float(b[k]))


def linear_sse(x: np.ndarray, y: np.ndarray) -> float:
    """The squared residuals of the least-squares line through (x, y).

    Written out rather than np.polyfit: its LAPACK call (lstsq) makes OpenBLAS take ~1.8 MiB
    of buffers on its first use in a process, and a live verdict's first use lands inside the
    run it judges (a calm step read as a plateau of the tool's own memory)."""
    if x.size < 3:
        return 0.0
    xc, yc = x - x.mean(), y - y.mean()
    den = float(np.dot(xc, xc))
    if den <= 0:
        return float(np.dot(yc, yc))
    b = float(np.dot(xc, yc)) / den
    r = yc - b * xc
    return float(np.dot(r, r))


def detect_warmup(index: np.ndarray, rss: np.ndarray) -> int:
    """Number of leading iterations that are warm-up (at least 1).

    Warm-up ends after the last iteration, within the first 10% of the run, whose rise is an
    outlier against the typical iteration-to-iteration change of the rest of the run, and
    which belongs to the leading cluster of such rises: once the quiet stretch since the last
    outlier is longer than the warm-up so far (and than MIN_POINTS), a later jump is part of
    the run, not of its warm-up.
    """
    n = rss.size
    if n < 4:
        return min(1, n)
    d = np.diff(rss.astype(float))
    later = d[d.size // 3 :] if d.size >= 6 else d
    centre = float(np.median(later))
    scale = max(robust_sigma(later), 16 * 1024.0)  # below 16 KiB everything is page noise
    cap = max(1, int(0.10 * n))
    w = 1
    # d[k] is the rise of iteration k+1; the warm-up ends after the last outlier within the cap.
    for k in range(min(cap, d.size)):
        if d[k] > centre + 6 * scale:
            w = k + 2
        elif k + 2 - w > max(MIN_POINTS, w):
            break
    return int(index[min(w, n - 1)] - index[0])


def running_median(v: np.ndarray, k: int) -> np.ndarray:
    if v.size < 2 * k:
        return v
    pad = k // 2
    p = np.concatenate([np.full(pad, v[0]), v, np.full(pad, v[-1])])
    return np.median(np.lib.stride_tricks.sliding_window_view(p, k), axis=1)


def effective_rises(y: ArrayLike) -> float:
    """How many equal rises the growth of ``y`` amounts to: (Σd)²/Σd² over its rises d.

    n equal rises count n; growth carried by one jump counts 1, however many tiny rises
    surround it. The allocator's fragmentation steps are few and large; a leak adds a little in
    most iterations.
    """
    d = np.diff(np.asarray(y, dtype=float))
    d = d[d > 0]
    return float(d.sum() ** 2 / np.dot(d, d)) if d.size else 0.0
