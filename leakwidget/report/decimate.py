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


class Buckets:
    """A time-ordered series kept as at most ``capacity`` buckets, in arrays allocated once.

    What a live chart needs of a series of any length, at the grain of its pixels: each bucket
    holds ``width`` consecutive points (the newest bucket fewer) and keeps their first and last x,
    their sums (for means), and the lowest and the highest y with their x (a one-sample spike stays
    visible). When every bucket is used, neighbours merge in pairs and ``width`` doubles, so the
    whole run stays in view at one grain. ``extras`` more values per point are kept as sums, for
    their means per bucket (an iteration's end time and RSS beside its duration).

    Appending costs a few float operations and allocates nothing: the open bucket lives in a
    Python list, closed ones in the pre-allocated arrays, and merges work in place. A view that
    measures memory must not grow it (see "Its own footprint" in the README).
    """

    # Rows of the array: first x, last x, sum x, sum y, count, x of min, min, x of max, max.
    _X0, _X1, _SX, _SY, _N, _XLO, _YLO, _XHI, _YHI = range(9)

    def __init__(self, capacity: int = 1000, extras: int = 0) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError(f"capacity must be an even number of at least 4, got {capacity}")
        self.capacity = capacity
        self.extras = extras
        # Written once now (np.ones, not np.empty), so the pages are resident before a run.
        self._a = np.ones((9 + extras, capacity))
        # The envelope's masks, written in place (``out=``). Fresh ones would be numpy buffers
        # under 1 KiB whose size follows the bucket count, and numpy keeps up to 7 freed buffers
        # of every such size for reuse: one redraw after another, they piled up in a quiet
        # 10-minute soak as a steady trickle of the kernel's memory (~1 KiB/s, seen with memray).
        self._lo_first = np.ones(capacity + 1, dtype=bool)
        self._keep = np.ones((capacity + 1, 2), dtype=bool)
        # Where a merge writes (its sums and its masks): fresh, they were 36-44 KiB taken from
        # the heap at the first merge, a second or so into a fast step's run in a kernel.
        self._merged = np.ones((9 + extras, capacity // 2))
        self._odd_wins = np.ones((2, capacity // 2), dtype=bool)
        self.width = 1
        self.closed = 0
        self.total = 0  # points ever appended
        self._open: list[float] | None = None

    def __len__(self) -> int:
        return self.closed + (self._open is not None)

    def clear(self) -> None:
        self.width, self.closed, self.total, self._open = 1, 0, 0, None

    def append(self, x: float, y: float, *extra: float) -> None:
        self.total += 1
        b = self._open
        if b is None:
            self._open = b = [x, x, x, y, 1.0, x, y, x, y, *extra]
        else:
            b[1] = x
            b[2] += x
            b[3] += y
            b[4] += 1.0
            if y < b[6]:
                b[5], b[6] = x, y
            if y > b[8]:
                b[7], b[8] = x, y
            for k, e in enumerate(extra, 9):
                b[k] += e
        if b[4] >= self.width:
            self._close()

    def _close(self) -> None:
        self._a[:, self.closed] = self._open
        self.closed += 1
        self._open = None
        if self.closed == self.capacity:
            self._merge()

    def _merge(self) -> None:
        a, half, merged = self._a, self.capacity // 2, self._merged
        even, odd = a[:, 0::2], a[:, 1::2]
        np.add(even, odd, out=merged)  # the sums
        merged[self._X0] = even[self._X0]
        merged[self._X1] = odd[self._X1]
        low_odd, high_odd = self._odd_wins
        np.less(odd[self._YLO], even[self._YLO], out=low_odd)
        np.greater(odd[self._YHI], even[self._YHI], out=high_odd)
        for x, y, odd_wins in ((self._XLO, self._YLO, low_odd), (self._XHI, self._YHI, high_odd)):
            merged[x], merged[y] = even[x], even[y]
            np.copyto(merged[x], odd[x], where=odd_wins)
            np.copyto(merged[y], odd[y], where=odd_wins)
        a[:, :half] = merged
        self.closed = half
        self.width *= 2

    def _rows(self) -> np.ndarray:
        """The buckets so far, the open one included: a view, or a small copy with it."""
        if self._open is None:
            return self._a[:, : self.closed]
        rows = np.empty((self._a.shape[0], self.closed + 1))
        rows[:, :-1] = self._a[:, : self.closed]
        rows[:, -1] = self._open
        return rows

    def envelope(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) to draw: each bucket's lowest and highest point, in x order (one point for a
        bucket of one)."""
        r = self._rows()
        n = r.shape[1]
        lo_first = np.less_equal(r[self._XLO], r[self._XHI], out=self._lo_first[:n])
        x = np.empty((n, 2))
        y = np.empty((n, 2))
        x[:, 0] = np.where(lo_first, r[self._XLO], r[self._XHI])
        y[:, 0] = np.where(lo_first, r[self._YLO], r[self._YHI])
        x[:, 1] = np.where(lo_first, r[self._XHI], r[self._XLO])
        y[:, 1] = np.where(lo_first, r[self._YHI], r[self._YLO])
        keep = self._keep[:n]
        keep[:, 0] = True
        np.greater(r[self._N], 1, out=keep[:, 1])  # a bucket of one sample gives one point
        return x[keep], y[keep]

    def means(self) -> tuple[np.ndarray, ...]:
        """(mean x, mean y, *mean extras, count) per bucket."""
        r = self._rows()
        n = r[self._N]
        return (r[self._SX] / n, r[self._SY] / n, *(r[9 + k] / n for k in range(self.extras)), n.copy())

    def last(self) -> tuple[float, ...] | None:
        """(last x, mean y, *mean extras) of the newest bucket, or None when empty."""
        r = self._rows()
        if not r.shape[1]:
            return None
        n = r[self._N, -1]
        return (float(r[self._X1, -1]), float(r[self._SY, -1] / n),
                *(float(r[9 + k, -1] / n) for k in range(self.extras)))

    def first_at(self, x: float) -> float | None:
        """The mean y of the first bucket that reaches ``x`` (None: none does yet)."""
        r = self._rows()
        i = int(np.searchsorted(r[self._X1], x, side="left"))  # buckets are in x order
        return float(r[self._SY, i] / r[self._N, i]) if i < r.shape[1] else None

    def y_range(self, x_from: float = -np.inf) -> tuple[float, float] | None:
        """Lowest and highest y of the buckets that start at or after ``x_from`` (None: none)."""
        r = self._rows()
        i = int(np.searchsorted(r[self._X0], x_from, side="left"))  # a slice: no mask (see _keep)
        if i >= r.shape[1]:
            return None
        return float(r[self._YLO, i:].min()), float(r[self._YHI, i:].max())
