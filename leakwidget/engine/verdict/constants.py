"""The levels and sizes a verdict is decided with (the package docstring says what each is for)."""

from __future__ import annotations

Z95 = 1.959964
Z99 = 2.575829
Z_DECIDE = 3.290527  # 99.9% two-sided: the level a leak must reach
MAX_POINTS = 300  # bucket medians the estimators work on
MIN_POINTS = 8  # iterations after warm-up before anything is decided
# "stable": even the slope's 95% upper bound would not use the memory available within this
# much running (a training job of weeks); a creep called stable neither.
STABLE_HORIZON_S = 30 * 24 * 3600.0
PYTHON_LEAK_HORIZON_S = 24 * 3600.0  # Python objects piling up fast enough to fill memory in this are a leak
SPREAD = 0.4  # no step between batches may carry this share of a leak's growth (growth.py)
MIN_LEAK_GROWTH = 1024 * 1024  # a leak must have added at least this much during the run
BLOCK_BYTES = 64  # a typical pymalloc block (objects of 49–64 B): turns block counts into bytes
MIN_RISES_UNEXPLAINED = 12  # rises growth needs when nothing in use grows with it (see 3.)
# malloc's bytes in use are the process's heap only when at least this share of RSS (with
# jemalloc or tcmalloc preloaded, glibc's count stays flat and small)
HEAP_SHARE = 0.02
LIVE_SHARE = 0.25  # growth is "in use" when malloc's bytes or Python's blocks grow this fast
STEP_BUCKETS = 100  # stretches of a leak's second half whose rises are counted (growth.py)
STEPWISE_SHARE = 0.12  # a leak rising in fewer than this share of them is not sure yet
