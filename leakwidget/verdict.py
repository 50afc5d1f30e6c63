"""Is memory leaking? The statistics behind every verdict, in one place.

Input: the RSS at the end of each iteration (and, optionally, each iteration's duration and the
memory still available). Output: a :class:`Verdict` — ``leak``, ``plateau``, ``stable`` or
``inconclusive`` — with a slope and its interval, the onset of growth and a projection.

How it is decided, in plain words (the README repeats this for users):

1. **Warm-up.** The first iterations of almost any code allocate once (imports, caches, TensorFlow
   tracing, buffers filling). Iteration 0 is always warm-up; so is the leading cluster of
   iterations whose rise, within the first 10% of the run, is an outlier against the typical
   iteration-to-iteration change of the rest of the run (``--warmup N`` overrides this).
2. **Robust trend.** Long runs are summarised into at most 300 bucket medians. The slope is the
   Theil–Sen estimator (the median of all pairwise slopes), which ignores up to ~29% wild
   points. Its confidence interval is Sen's rank interval, widened for autocorrelated noise by the
   factor (1+ρ)/(1−ρ), ρ being the lag-1 autocorrelation of the residuals: memory noise is sticky
   (the allocator keeps a freed block for a while), and ignoring that makes steps look like trends.
3. **Leak**: growth since the onset is significant at 99.9% (a stricter level than the 95%
   interval we report, because a live verdict is looked at many times); the second half of that
   span still grows (95%) and the first half grew too; no single step carries 40% of the growth;
   and it added at least 1 MiB and at least what one iteration allocates and frees again (the
   median of peak minus end RSS: the allocator may keep that much). A single jump, a few jumps,
   growth that stopped, or a creep too small to matter yet are therefore not a leak. Python
   objects that keep accumulating (the allocator's block count) are a leak even before RSS shows
   it, when freed memory is reused. The onset candidates include the knee of a "rise, then
   slower" fit, and when a later start shows a clearly slower rate, that current rate is used.
   When nothing in use grew with RSS (glibc malloc's bytes in use, read at checkpoints, and
   Python's block count both flat), the growth is the allocator taking more room for the same
   data. Fragmentation does that in a few steps that become rarer, so such growth must also be
   spread over at least 12 rises' worth of steps (the effective number of rises, (Σd)²/Σd² over
   the iteration-to-iteration rises d): steady allocator growth, which does run a process out of
   memory, still is a leak.
4. **Plateau**: the best "rise, then flat" fit has a flat part at least half as long as the
   rise, whose slope (95% upper bound) is under a quarter of the rise's; the rise is well above
   the noise and at least 1 MiB. A long or several-step warm-up counts as the start of the fill.
5. **Stable**: no significant growth, and even the 95% upper bound of the slope would not exhaust
   the available memory within 24 hours of running; or one rise under 1 MiB, flat since.
6. Otherwise **inconclusive**, with the reason: too few iterations, noise too large for the length
   of the run, or growth that may be levelling off.

Where it can be wrong: a buffer that is still filling when the run ends looks exactly like a leak
(run at least three times longer than the fill); a leak far smaller than the noise needs many
iterations; growth in rare large steps is called inconclusive until there are enough of them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

Z95 = 1.959964
Z99 = 2.575829
Z_DECIDE = 3.290527  # 99.9% two-sided: the level a leak must reach
MAX_POINTS = 300  # bucket medians the estimators work on
MIN_POINTS = 8  # iterations after warm-up before anything is decided
STABLE_HORIZON_S = 24 * 3600.0
KINDS = ("leak", "plateau", "stable", "inconclusive")
MIN_LEAK_GROWTH = 1024 * 1024  # a leak must have added at least this much during the run
BLOCK_BYTES = 64  # a typical pymalloc block (objects of 49–64 B): turns block counts into bytes
MIN_RISES_UNEXPLAINED = 12  # rises growth needs when nothing in use grows with it (see 3.)
LIVE_SHARE = 0.25  # growth is "in use" when malloc's bytes or Python's blocks grow this fast


@dataclass
class Verdict:
    kind: str
    slope: float = 0.0  # bytes per iteration
    slope_low: float = 0.0  # 95% interval
    slope_high: float = 0.0
    onset: int | None = None  # iteration where steady growth starts (leak) or the rise (plateau)
    warmup: int = 0  # iterations treated as warm-up
    exhaust_iterations: float | None = None
    exhaust_seconds: float | None = None
    confident: bool = False
    fit: list[tuple[float, float]] = field(default_factory=list)
    summary: str = ""
    iterations: int = 0
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return self.summary


# ---------------------------------------------------------------------------------------------
# Formatting


def format_bytes(n: float, signed: bool = False) -> str:
    """Human size in binary units: 98 KiB, 1.5 MiB; signed=True adds + / − ."""
    sign = ""
    if signed:
        sign = "+" if n >= 0 else "\u2212"
    elif n < 0:
        sign = "\u2212"
    a = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if a < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{a:.0f} B"
            return f"{sign}{a:.0f} {unit}" if a >= 100 else f"{sign}{a:.1f} {unit}"
        a /= 1024
    raise AssertionError("unreachable")


def _format_number(v: float, div: int, unit: str) -> str:
    x = v / div
    s = f"{abs(x):.0f}" if abs(x) >= 100 or unit == "B" else f"{abs(x):.1f}"
    return ("\u2212" if x < 0 and s.strip("0.") else "") + s


def _format_range(lo: float, hi: float) -> str:
    """'91–104 KiB' with a shared unit."""
    scale = max(abs(lo), abs(hi))
    for unit, div in (("B", 1), ("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3)):
        if scale < 1024 * div or unit == "GiB":
            return f"{_format_number(lo, div, unit)}\u2013{_format_number(hi, div, unit)} {unit}"
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# ---------------------------------------------------------------------------------------------
# Estimators


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


def _bucket(x: np.ndarray, y: np.ndarray, m: int):
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


def trend(x, y) -> Trend:
    """Theil–Sen slope on at most MAX_POINTS bucket medians: the verdict's estimator, for others
    (attribution, the widget's duration chart) that need a robust slope of a long series."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    bx, by = _bucket(x, y, max(1, math.ceil(x.size / MAX_POINTS)))
    return theil_sen(bx, by)


def batches(x: np.ndarray, y: np.ndarray):
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
        bx, by = _bucket(x, y, m)
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


def theil_sen(x: np.ndarray, y: np.ndarray) -> Trend:
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
    N = s.size
    if N == 0:
        return Trend(0.0, -math.inf, math.inf, -math.inf, math.inf, -math.inf, float(np.median(y)), 0.0, n)
    # Only a few order statistics are needed (the median and the interval ends): one
    # partition finds them all, in linear time, instead of sorting every pairwise slope.
    mid = [(N - 1) // 2, N // 2]
    part = np.partition(s, mid)
    slope = float(0.5 * (part[mid[0]] + part[mid[1]]))
    intercept = float(np.median(y - slope * x))
    rho = _lag1(y - (intercept + slope * x))
    var = n * (n - 1) * (2 * n + 5) / 18.0 * (1 + rho) / (1 - rho)

    def ranks(z: float) -> tuple[int, int]:
        c = z * math.sqrt(var)
        lo = int(math.floor((N - c) / 2.0))
        hi = int(math.ceil((N + c) / 2.0))
        # Past the ends, the extreme pairwise slope is the honest bound: it is only positive
        # when every pair of points shows growth.
        return min(max(lo, 0), N - 1), max(min(hi, N - 1), 0)

    r95, rd, r99 = ranks(Z95), ranks(Z_DECIDE), ranks(Z99)
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


def _hinge_fit(x: np.ndarray, y: np.ndarray, kind: str):
    """Least-squares 'rise then flat' (kind='down') or 'flat then rise' (kind='up') fit.

    Returns (sse, k, a, b) for the best change point k among the data's own x values between
    the 10% and 90% quantiles, or None when there are too few points.
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
    return float(sse[k]), float(cand[k]), float(a[k]), float(b[k])


def _linear_sse(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3:
        return 0.0
    b, a = np.polyfit(x, y, 1)
    return float(np.sum((y - a - b * x) ** 2))


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


def _running_median(v: np.ndarray, k: int) -> np.ndarray:
    if v.size < 2 * k:
        return v
    pad = k // 2
    p = np.concatenate([np.full(pad, v[0]), v, np.full(pad, v[-1])])
    return np.median(np.lib.stride_tricks.sliding_window_view(p, k), axis=1)


@dataclass
class _LeakTest:
    onset: float
    trend: Trend
    h2: Trend
    sustained: bool
    is_leak: bool
    material: bool


def _leak_test(x: np.ndarray, y: np.ndarray, onset: float, min_growth: float) -> _LeakTest:
    """Is memory growing steadily from ``onset`` to the end?"""
    keep = x >= onset
    gx, gy, trend, _ = batches(x[keep], y[keep])
    start = float(gx[0]) if gx.size else onset
    if not trend.low_decide > 0:
        # Not significant: not a leak, whatever its halves do (and live verdicts are cheaper).
        return _LeakTest(start, trend, trend, False, False, False)
    half = gx.size // 2
    h1 = theil_sen(gx[:half], gy[:half])
    h2 = theil_sen(gx[half:], gy[half:])
    # A few big jumps (the allocator's high-water mark rising now and then) are not a leak:
    # no single step between batches may carry 40% of the growth. A running median of 5 keeps
    # level shifts and drops isolated spikes, which Theil–Sen already ignores.
    sm = _running_median(gy, 5)
    total_rise = float(sm[-1] - sm[0])
    spread = total_rise > 0 and float(np.max(np.diff(sm))) < 0.4 * total_rise
    sustained = h1.slope > 0.3 * trend.slope and h2.slope > 0.5 * trend.slope and spread
    # Growth too small to matter yet (the allocator's slow creep under threads looks like this)
    # is not called a leak until it adds up to MIN_LEAK_GROWTH.
    material = trend.slope * (float(x[-1]) - start) >= min_growth
    is_leak = (keep.sum() >= MIN_POINTS and trend.low_decide > 0 and h2.low > 0 and sustained
               and material)
    return _LeakTest(start, trend, h2, sustained, is_leak, material)


def effective_rises(y: np.ndarray) -> float:
    """How many equal rises the growth of ``y`` amounts to: (Σd)²/Σd² over its rises d.

    n equal rises count n; growth carried by one jump counts 1, however many tiny rises
    surround it. The allocator's fragmentation steps are few and large; a leak adds a little in
    most iterations.
    """
    d = np.diff(np.asarray(y, dtype=float))
    d = d[d > 0]
    return float(d.sum() ** 2 / np.dot(d, d)) if d.size else 0.0


def _in_use_grows(x, rss, in_use, blocks, onset: float, rss_slope: float) -> bool | None:
    """Did anything in use grow along with RSS since ``onset``?

    True when Python's block count or glibc malloc's bytes in use grew at LIVE_SHARE of the RSS
    slope or more; False when malloc's count (read at 4 points at least) did not; None when it
    was not read (no glibc 2.33+, or too few checkpoints) or cannot be the process's heap (under
    2% of RSS: jemalloc or tcmalloc preloaded serve malloc, and glibc's count stays flat).
    """
    keep = x >= onset
    if blocks is not None:
        b = np.asarray(blocks, dtype=float)[keep]
        bt = theil_sen(*_bucket(x[keep], b, max(1, math.ceil(b.size / MAX_POINTS))))
        if bt.low > 0 and bt.slope * BLOCK_BYTES >= LIVE_SHARE * rss_slope:
            return True
    if in_use is None:
        return None
    u = np.asarray(in_use, dtype=float)[keep]
    read = u >= 0
    if read.sum() < 4:
        return None
    ux, uy = x[keep][read], u[read]
    if np.median(uy) < 0.02 * float(np.median(rss[keep])):
        return None
    ut = theil_sen(*_bucket(ux, uy, max(1, math.ceil(ux.size / MAX_POINTS))))
    return ut.slope >= LIVE_SHARE * rss_slope


# ---------------------------------------------------------------------------------------------
# The decision


def decide(
    index,
    rss,
    *,
    durations=None,
    warmup: int | None = None,
    headroom: float | None = None,
    blocks=None,
    peaks=None,
    in_use=None,
) -> Verdict:
    """Decide leak / plateau / stable / inconclusive from per-iteration end-of-iteration RSS.

    ``index`` are iteration numbers (they need not be contiguous), ``rss`` bytes at the end of
    each, ``durations`` seconds per iteration (for the time projection), ``warmup`` a fixed
    warm-up length in iterations (None: detect), ``headroom`` bytes still available,
    ``blocks`` the Python allocator's block count at the end of each iteration
    (``sys.getallocatedblocks()``): Python objects that keep accumulating are a leak even while
    RSS does not grow yet because the process is reusing memory it freed earlier. ``peaks``, the
    highest RSS during each iteration: growth smaller than what one iteration allocates and
    frees again is what the allocator may simply be holding on to, so it is not called a leak.
    ``in_use``, glibc malloc's bytes in use at the end of each iteration (-1 where not read):
    RSS growth that nothing in use follows must come in many rises to be a leak (see 3. above).
    """
    x_all = np.asarray(index, dtype=float)
    y_all = np.asarray(rss, dtype=float)
    if x_all.shape != y_all.shape:
        raise ValueError("index and rss must have the same length")
    n_all = x_all.size
    dur = None if durations is None else np.asarray(durations, dtype=float)

    if n_all == 0:
        return Verdict("inconclusive", summary="Inconclusive: no iteration finished.", reason="no data")
    first = x_all[0]
    w = detect_warmup(x_all, y_all) if warmup is None else int(warmup)
    w_abs = first + w
    post = x_all >= w_abs
    x, y = x_all[post], y_all[post]
    n_post = x.size
    base = Verdict("inconclusive", warmup=w, iterations=int(x_all[-1] - first + 1))

    if n_post < MIN_POINTS:
        base.summary = (
            f"Inconclusive after {base.iterations} iterations: "
            f"{n_post} after the warm-up, at least {MIN_POINTS} are needed."
        )
        base.reason = "too few iterations"
        return base

    # Shape (onset, rise-then-flat) is read at fine resolution; significance on batches whose
    # residuals are nearly independent.
    fx, fy = _bucket(x, y, max(1, math.ceil(n_post / MAX_POINTS)))
    bx, by, overall, _batch = batches(x, y)
    sigma = robust_sigma(by - (overall.intercept + overall.slope * bx))
    sec_per_iter = float(np.mean(dur[post])) if dur is not None and dur.size == n_all else None
    iters_per_horizon = STABLE_HORIZON_S / sec_per_iter if sec_per_iter else 1e6

    # --- onset: flat, then rising -----------------------------------------------------------
    onset = float(fx[0])
    up = _hinge_fit(fx, fy, "up")
    if up is not None and up[3] > 0:
        lin = _linear_sse(fx, fy)
        pre = fx < up[1]
        if lin > 0 and up[0] < 0.5 * lin and pre.sum() >= 4 and (~pre).sum() >= MIN_POINTS:
            # Growth starts later only if before it memory was clearly flatter than after.
            if theil_sen(fx[pre], fy[pre]).slope < 0.25 * up[3]:
                onset = up[1]
    # Candidate starts of the growth: the fitted onset, then the last two thirds and the last
    # half of the run — memory freed earlier is often reused first, so a leak may show in RSS
    # only after a while, behind a rise and a flat stretch the onset fit cannot describe.
    span = x[-1] - x[0]
    starts = [onset] + [s for s in (x[0] + span / 3, x[0] + span / 2) if s > onset]
    # ... and the knee of a "rise, then slower" fit: a buffer that filled, with memory still
    # growing after it, is a leak at the slower rate.
    down = _hinge_fit(fx, fy, "down")
    if down is not None and down[1] > onset and (x >= down[1]).sum() >= MIN_POINTS:
        starts = sorted({*starts, down[1]})
    min_growth = float(MIN_LEAK_GROWTH)
    if peaks is not None and np.asarray(peaks).size == n_all:
        transient = np.asarray(peaks, dtype=float)[post] - y
        min_growth = max(min_growth, float(np.median(transient)))
    tests = [_leak_test(x, y, s, min_growth) for s in starts]
    b_post = None if blocks is None or np.asarray(blocks).size != n_all else np.asarray(blocks)[post]
    u_post = None if in_use is None or np.asarray(in_use).size != n_all else np.asarray(in_use)[post]
    unexplained = None  # (growth, rises) of RSS growth nothing in use followed, in too few rises

    def explained(t: _LeakTest) -> bool:
        nonlocal unexplained
        if _in_use_grows(x, y, u_post, b_post, t.onset, t.trend.slope) is not False:
            return True
        rises = effective_rises(y[x >= t.onset])
        if rises >= MIN_RISES_UNEXPLAINED:
            return True
        if unexplained is None:
            unexplained = (t.trend.slope * (float(x[-1]) - t.onset), rises)
        return False

    passing = [t for t in tests if t.is_leak and explained(t)]
    chosen = passing[0] if passing else tests[0]
    for t in passing[1:]:
        # Growth that has slowed down since the onset (caches warming up on top of a slower
        # leak): the current rate is what runs memory out, so report the later, slower one —
        # clearly slower, or as slow with a much tighter interval (the early, faster stretch
        # was only widening it).
        slower = t.trend.high < chosen.trend.low and t.trend.slope < 0.75 * chosen.trend.slope
        tighter = t.trend.high < 0.75 * chosen.trend.high and t.trend.slope <= 1.05 * chosen.trend.slope
        if slower or tighter:
            chosen = t
    onset, trend, h2, sustained = chosen.onset, chosen.trend, chosen.h2, chosen.sustained
    is_leak = bool(passing)
    room = float(headroom) if headroom else None
    negligible = (room / iters_per_horizon) if room else 1024.0

    hidden = None
    if not is_leak and blocks is not None and np.asarray(blocks).size == n_all:
        b = np.asarray(blocks, dtype=float)[post]
    else:
        b = None
    # Python objects that are not accumulating at all (the usual case) need no closer look:
    # even a leak starting halfway would lift the whole run's trend to a quarter of its rate.
    if b is not None and theil_sen(*_bucket(x, b, max(1, math.ceil(x.size / MAX_POINTS)))).high \
            * BLOCK_BYTES >= 0.25 * max(negligible, 1024.0):
        bt = next(
            (t for t in (_leak_test(x, b, s, MIN_LEAK_GROWTH / BLOCK_BYTES) for s in starts) if t.is_leak),
            None,
        )
        if bt is not None and bt.trend.slope * BLOCK_BYTES >= max(negligible, 1024.0):
            hidden = bt

    def fill_from(tr: Trend, x0: float, x1: float) -> list[tuple[float, float]]:
        return [(x0, tr.intercept + tr.slope * x0), (x1, tr.intercept + tr.slope * x1)]

    if hidden is not None:
        v = Verdict(
            "leak",
            slope=hidden.trend.slope * BLOCK_BYTES,
            slope_low=hidden.trend.low * BLOCK_BYTES,
            slope_high=hidden.trend.high * BLOCK_BYTES,
            onset=int(round(hidden.onset)),
            warmup=w,
            iterations=base.iterations,
            confident=hidden.trend.low_decide > 0 and hidden.h2.low99 > 0,
        )
        v.fit = fill_from(trend, onset, float(x[-1]))
        v.reason = "python-blocks"
        v.summary = (
            f"Leak of Python objects: {hidden.trend.slope:+,.0f} allocator blocks per iteration "
            f"(95%: {hidden.trend.low:,.0f}\u2013{hidden.trend.high:,.0f}; about "
            f"{format_bytes(v.slope)}) since iteration {v.onset}. RSS has not grown yet: the "
            "process is reusing memory it freed earlier, and RSS will follow once that is used up."
        )
        return v

    if is_leak:
        v = Verdict(
            "leak",
            slope=trend.slope,
            slope_low=trend.low,
            slope_high=trend.high,
            onset=int(round(onset)),
            warmup=w,
            iterations=base.iterations,
        )
        # Still slowing down (its second half clearly slower than the whole): not yet sure of
        # the rate, nor that it will not level off; keep watching.
        decelerating = h2.high < 0.75 * trend.slope
        v.confident = (trend.low_decide > 0 and h2.low99 > 0 and (x[-1] - onset) >= 12
                       and not decelerating)
        level0 = trend.intercept + trend.slope * onset
        v.fit = [(float(fx[0]), level0)] if onset > fx[0] else []
        v.fit += fill_from(trend, onset, float(x[-1]))
        if room is not None and trend.slope > 0:
            v.exhaust_iterations = room / trend.slope
            if sec_per_iter:
                v.exhaust_seconds = v.exhaust_iterations * sec_per_iter
        since = f" since iteration {v.onset}"
        line = (
            f"Leak: {format_bytes(v.slope, signed=True)} per iteration "
            f"(95%: {_format_range(v.slope_low, v.slope_high)}){since}"
        )
        if v.exhaust_iterations is not None:
            when = (
                f"about {format_duration(v.exhaust_seconds)} ({v.exhaust_iterations:,.0f} iterations)"
                if v.exhaust_seconds is not None
                else f"about {v.exhaust_iterations:,.0f} iterations"
            )
            line += f"; at this rate available memory runs out in {when}"
        v.summary = line + "."
        return v

    # --- plateau: rising, then flat ---------------------------------------------------------
    step_up = None  # a rise too small to call a plateau, flat since: stable, said below
    # A detected warm-up that is long, or rose in several steps, may be the first part of a
    # fill (memory freed earlier is reused first, so a buffer can look full early).
    warm_rises = int(np.sum(np.diff(y_all[: w + 1]) > max(4 * sigma, 64 * 1024.0))) if w > 1 else 0
    long_warmup = warmup is None and (w >= MIN_POINTS or warm_rises >= 3)
    if down is not None and down[3] > 0:
        kp, b_fill = down[1], down[3]
        rise_len = kp - fx[0]
        tail_len = fx[-1] - kp
        in_tail = x >= kp
        if in_tail.sum() >= MIN_POINTS and tail_len >= max(0.5 * rise_len, MIN_POINTS):
            tbx, tby, tt, _ = batches(x[in_tail], y[in_tail])
            tail_sigma = robust_sigma(tby - (tt.intercept + tt.slope * tbx))
            rise = b_fill * rise_len
            a = down[2]
            top = a + b_fill * kp
            start, start_level = float(fx[0]), a + b_fill * fx[0]
            if long_warmup and start_level - float(y_all[0]) > 4 * max(tail_sigma, 4096.0):
                # The warm-up was the first part of this fill (a cache filling fast at first):
                # the user's question is how much the buffer holds, so count it from iteration 0.
                start, start_level = float(first), float(y_all[0])
            filled = top - start_level
            fill_rate = max(b_fill, filled / max(kp - start, 1.0))
            rise_sig = filled > 4 * max(tail_sigma, 4096.0)
            flat = tt.high < 0.25 * fill_rate and tt.high < filled / max(tail_len, 1)
            if rise_sig and flat and filled < MIN_LEAK_GROWTH:
                # A few hundred KiB once (an allocator arena, a thread's first buffers) then
                # flat: that is not a buffer worth naming, and not growth either.
                step_up = (rise, float(fx[0]), kp, tt)
            elif rise_sig and flat:
                v = Verdict(
                    "plateau",
                    slope=tt.slope,
                    slope_low=tt.low,
                    slope_high=tt.high,
                    onset=int(round(fx[0])),
                    warmup=w,
                    iterations=base.iterations,
                )
                v.confident = tail_len >= 20 and tt.high < 0.15 * fill_rate
                v.onset = int(round(start))
                v.fit = [(start, start_level), (kp, top), (float(x[-1]), top)]
                v.summary = (
                    f"Plateau: memory grew by {format_bytes(filled)} over iterations "
                    f"{int(start)}\u2013{int(kp)}, then stopped growing "
                    f"({format_bytes(tt.slope, signed=True)} per iteration since; "
                    f"95%: {_format_range(tt.low, tt.high)}): a buffer or cache filling up, "
                    "not a leak."
                )
                return v

    # --- stable --------------------------------------------------------------------------
    flat_all = overall.low <= 0 and overall.high < max(negligible, 64.0)
    flat_since_step = step_up is not None and step_up[3].high < max(negligible, 64.0)
    # A long warm-up that was a fill, and flat since by the plateau rule (under a quarter of
    # the fill's rate), even if a few stray pages since keep it from being "stable" at a fast
    # step's rate of iterations.
    warm_fill = float(np.median(by)) - float(y_all[0])
    filled_in_warmup = (long_warmup and warm_fill >= max(MIN_LEAK_GROWTH, 4 * sigma)
                        and overall.high < 0.25 * warm_fill / max(w, 1)
                        and overall.high * (x[-1] - x[0]) < warm_fill)
    if flat_all or flat_since_step or filled_in_warmup:
        use_all = flat_all or not flat_since_step
        tr = overall if use_all else step_up[3]
        level = float(np.median(by)) if use_all else float(step_up[3].intercept + step_up[3].slope * x[-1])
        # A warm-up that is really a fill (many iterations, a material rise) is a plateau:
        # a cache or buffer filling during the first iterations and full since.
        fill = level - float(y_all[0])
        if long_warmup and fill >= max(MIN_LEAK_GROWTH, 4 * sigma):
            v = Verdict(
                "plateau", slope=tr.slope, slope_low=tr.low, slope_high=tr.high,
                onset=int(first), warmup=w, iterations=base.iterations, confident=n_post >= 20,
            )
            v.fit = [(float(first), float(y_all[0])), (float(w_abs), level), (float(x[-1]), level)]
            v.summary = (
                f"Plateau: memory grew by {format_bytes(fill)} over iterations "
                f"{int(first)}\u2013{int(w_abs)}, then stopped growing "
                f"({format_bytes(tr.slope, signed=True)} per iteration since; "
                f"95%: {_format_range(tr.low, tr.high)}): a buffer or cache filling up, not a leak."
            )
            return v
        v = Verdict(
            "stable",
            slope=tr.slope,
            slope_low=tr.low,
            slope_high=tr.high,
            warmup=w,
            iterations=base.iterations,
            confident=n_post >= 20,
        )
        v.fit = [(float(fx[0]), level), (float(x[-1]), level)]
        warm = f" (iterations 0\u2013{w - 1})" if w > 1 else ""
        if flat_all:
            v.summary = (
                f"Stable: no growth after the warm-up{warm}: "
                f"{format_bytes(v.slope, signed=True)} per iteration "
                f"(95%: {_format_range(v.slope_low, v.slope_high)})."
            )
        else:
            rise, x0, kp, _ = step_up
            v.fit = [(x0, level - rise), (kp, level), (float(x[-1]), level)]
            v.summary = (
                f"Stable: after the warm-up{warm} memory rose once by {format_bytes(rise)} "
                f"(iterations {int(x0)}\u2013{int(kp)}) and has stayed flat since: "
                f"{format_bytes(v.slope, signed=True)} per iteration "
                f"(95%: {_format_range(v.slope_low, v.slope_high)})."
            )
        return v

    # --- inconclusive, with the reason -----------------------------------------------------
    v = Verdict(
        "inconclusive",
        slope=trend.slope,
        slope_low=trend.low,
        slope_high=trend.high,
        warmup=w,
        iterations=base.iterations,
        onset=int(round(onset)),
    )
    v.fit = fill_from(trend, onset, float(x[-1]))
    if unexplained is not None:
        grown, rises = unexplained
        reason = (
            f"memory grew by {format_bytes(grown)}, in steps worth only {rises:.0f} equal rises, "
            "while nothing in use grew (malloc's bytes in use and Python's objects stayed flat): "
            "the allocator taking more room for the same data, which usually levels off"
        )
    elif trend.low_decide > 0 and sustained and not chosen.material:
        reason = (
            f"memory grew steadily but only by {format_bytes(trend.slope * (x[-1] - onset))}, "
            f"too little to call a leak (at least {format_bytes(min_growth)}: 1 MiB, or what "
            "one iteration allocates and frees, which the allocator may keep)"
        )
    elif trend.low_decide > 0 and not sustained:
        reason = "memory grew, but not steadily (a jump, or growth that may be levelling off)"
    elif trend.low > 0:
        reason = "memory is growing, but not yet significantly enough to call it a leak"
    elif overall.low <= 0:
        reason = (
            "no significant growth, but the noise ("
            f"{format_bytes(sigma)}) still allows a leak of up to "
            f"{format_bytes(overall.high)} per iteration"
        )
    else:
        reason = "the data do not fit a leak, a plateau or a stable level"
    v.reason = reason
    v.summary = (
        f"Inconclusive after {base.iterations} iterations: {reason}; run longer "
        f"(slope {format_bytes(trend.slope, signed=True)} per iteration, "
        f"95%: {_format_range(trend.low, trend.high)})."
    )
    return v
