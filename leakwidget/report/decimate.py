"""Min/max-per-bucket decimation of a series for plotting.

A chart needs a bounded number of points whatever the run length: the front end never receives
more than ``max_points`` per series. Keeping the lowest and the highest sample of every bucket
(in time order) instead of averaging keeps spikes visible, which matters when the thing being
hunted is a transient RSS peak.

Pure numpy: no IPython, no widgets, no TensorFlow.
"""

from __future__ import annotations

import numpy as np

__all__ = ["minmax"]


def minmax(x: np.ndarray, y: np.ndarray, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Reduce ``(x, y)`` to at most ``max_points`` points, keeping each bucket's min and max.

    ``x`` must be sorted ascending (times or iteration numbers). The first and last points are
    always kept, so the line starts and ends where the data does. Returns new float64 arrays;
    series that already fit are returned as copies, unchanged.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"minmax: x and y must be 1-D, got shapes {x.shape} and {y.shape}")
    if x.shape != y.shape:
        raise ValueError(f"minmax: x and y differ in length ({x.size} vs {y.size})")
    if max_points < 4:
        raise ValueError(f"minmax: max_points must be at least 4, got {max_points}")
    n = x.size
    if n <= max_points:
        return x.copy(), y.copy()

    # Interior points go into buckets of (almost) equal count; each bucket yields two points,
    # and the two ends are kept separately.
    buckets = (max_points - 2) // 2
    interior = np.arange(1, n - 1)
    bucket_of = (interior - 1) * buckets // (n - 2)
    # Sort each bucket's members by value (stable, bucket-major): the first member of a bucket
    # is its minimum and the last its maximum.
    order = np.lexsort((y[interior], bucket_of))
    sorted_idx = interior[order]
    sorted_bucket = bucket_of[order]
    starts = np.flatnonzero(np.r_[True, sorted_bucket[1:] != sorted_bucket[:-1]])
    ends = np.r_[starts[1:], sorted_idx.size] - 1
    lo = sorted_idx[starts]
    hi = sorted_idx[ends]
    # Emit each bucket's two points in time order so the drawn line does not zig-zag backwards.
    first = np.minimum(lo, hi)
    second = np.maximum(lo, hi)
    keep = np.empty(2 * first.size + 2, dtype=np.int64)
    keep[0] = 0
    keep[1:-1:2] = first
    keep[2:-1:2] = second
    keep[-1] = n - 1
    # A bucket whose min and max are the same sample would emit it twice; drop the duplicate.
    keep = keep[np.r_[True, keep[1:] != keep[:-1]]]
    return x[keep], y[keep]
