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
   span still grows (95%) and the first half grew too; no single step carries 40% of the growth
   (beyond its width's share, where values were read at uneven iterations);
   and it added at least 1 MiB and at least what one iteration allocates and frees again (the
   median of peak minus end RSS: the allocator may keep that much). A single jump, a few jumps,
   growth that stopped, or a creep too small to matter yet are therefore not a leak. Python
   objects that keep accumulating (the allocator's block count), and memory malloc handed out and
   did not get back (glibc's bytes in use, when that is the process's heap), are a leak even
   before RSS shows it, when freed memory is reused. The onset candidates include the knee of a "rise, then
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
5. **Stable**: no significant growth, and even the 95% upper bound of the slope would not use
   the available memory within 30 days of running (STABLE_HORIZON_S: training jobs run for
   weeks, and with 24 hours a real 3 KiB-per-iteration leak of 20 ms steps was called stable
   after 13 s); or one rise under 1 MiB, flat since. A creep significant at 95% but not at
   99.9% is stable too when even its 95% upper bound adds under 1 MiB over the run and would
   use the memory available no sooner: a quiet step watched for minutes creeps by a byte per
   iteration, and "run longer" would never end.
6. Otherwise **inconclusive**, with the reason: too few iterations, noise too large for the length
   of the run, or growth that may be levelling off.

Where it can be wrong: a buffer that is still filling when the run ends looks exactly like a leak
(run at least three times longer than the fill); a leak far smaller than the noise needs many
iterations; growth in rare large steps is called inconclusive until there are enough of them.

The modules: ``stats`` (the estimators), ``growth`` (the leak test and what grew in use),
``evidence`` (the facts computed once per verdict), ``hypotheses`` (one function per kind of
answer, tried in the order above by ``decision.decide``), ``model`` (the Verdict, and what a
hypothesis hands over) and ``words`` (the sentences).
"""

from __future__ import annotations

from .constants import (
    BLOCK_BYTES,
    LIVE_SHARE,
    MAX_POINTS,
    MIN_LEAK_GROWTH,
    MIN_POINTS,
    MIN_RISES_UNEXPLAINED,
    PYTHON_LEAK_HORIZON_S,
    STABLE_HORIZON_S,
    Z95,
    Z99,
    Z_DECIDE,
)
from .decision import decide
from .model import Verdict
from .stats import Trend, batches, detect_warmup, effective_rises, robust_sigma, theil_sen, trend
from .words import RETENTION_PREFIX, exhaust_at, read_summary, unsettled_prefix

__all__ = [
    "BLOCK_BYTES",
    "LIVE_SHARE",
    "MAX_POINTS",
    "MIN_LEAK_GROWTH",
    "MIN_POINTS",
    "MIN_RISES_UNEXPLAINED",
    "PYTHON_LEAK_HORIZON_S",
    "STABLE_HORIZON_S",
    "Z95",
    "Z99",
    "Z_DECIDE",
    "Trend",
    "Verdict",
    "batches",
    "decide",
    "detect_warmup",
    "effective_rises",
    "RETENTION_PREFIX",
    "read_summary",
    "exhaust_at",
    "unsettled_prefix",
    "robust_sigma",
    "theil_sen",
    "trend",
]
