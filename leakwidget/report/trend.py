"""The verdict's trend, drawn where the data are: from the onset to the last iteration, on time.

A verdict's ``fit`` is its hypothesis in (iteration, RSS) coordinates, computed on the records
the verdict saw. Drawn as it is, it misleads: a live verdict is a few hundred iterations old
(it ends before the data do), a leak's fit starts with a flat stub before the onset, and its
level comes from batch medians, so after a long run it can sit well below the line it describes.
:func:`trend_line` keeps the fit's shape (where it bends, its slopes), drops what lies before the
onset, extends its last segment to the newest iteration, sets its level on the data themselves
(the median of the residuals), and places every vertex at the time its iteration ended.

Pure numpy on small arrays: the live chart passes bucket means (at most a few thousand points),
the static picture the records.
"""

from __future__ import annotations

import numpy as np

from ..engine.verdict import Verdict

__all__ = ["trend_line"]

_VERTICES = 800  # vertices of the drawn line at most: enough for a chart 1,600 px wide


def _shape(verdict: Verdict, last_index: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The fit's vertices (iterations, bytes) from the onset, its last segment extended."""
    pts = sorted((float(i), float(v)) for i, v in (verdict.fit or []))
    if not pts:
        return None
    if verdict.kind in ("leak", "inconclusive") and verdict.onset is not None:
        # A leak's fit may start with a flat stub before the onset: the trend starts there.
        onset = float(verdict.onset)
        before = [p for p in pts if p[0] < onset]
        pts = [p for p in pts if p[0] >= onset]
        if before and (not pts or pts[0][0] > onset):
            level = float(np.interp(onset, *zip(*(before + pts), strict=True)))
            pts.insert(0, (onset, level))
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    if x[-1] < last_index:
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2]) if x.size >= 2 and x[-1] > x[-2] else 0.0
        y = np.append(y, y[-1] + slope * (last_index - x[-1]))
        x = np.append(x, last_index)
    return x, y


def trend_line(verdict: Verdict, index: np.ndarray, rss: np.ndarray, end: np.ndarray,
               last: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(time, bytes) of the verdict's trend, on the data from its onset to the last iteration.

    ``index``, ``rss``, ``end``: iteration numbers (ascending), RSS and end times of the records,
    or their means per bucket. ``last``: the newest iteration's exact (index, end time), which
    bucket means only approach. Empty arrays when there is nothing to draw.
    """
    index = np.asarray(index, dtype=float)
    rss = np.asarray(rss, dtype=float)
    end = np.asarray(end, dtype=float)
    empty = (np.zeros(0), np.zeros(0))
    if index.size == 0 or verdict.kind == "inconclusive" and not verdict.fit:
        return empty
    if last is None:
        last = (float(index[-1]), float(end[-1]))
    shape = _shape(verdict, last[0])
    if shape is None:
        return empty
    fx, fy = shape
    if fx[-1] <= fx[0]:
        return empty
    # The records inside the fit, as a slice of the ascending index. No masks, and the vertices
    # are always _VERTICES picks (repeats merge in union1d): the live chart calls this at every
    # redraw, and temporaries under 1 KiB whose size follows the data pile up in numpy's cache
    # of freed buffers (up to 7 of each size), a trickle in a quiet step's memory.
    a = int(np.searchsorted(index, fx[0], side="left"))
    b = int(np.searchsorted(index, fx[-1], side="right"))
    if b > a:
        # The level from the data themselves: the fit's offset from them, robustly.
        fy = fy + float(np.median(rss[a:b] - np.interp(index[a:b], fx, fy)))
        vertices = index[a:b][np.linspace(0, b - a - 1, _VERTICES).astype(np.intp)]
    else:
        vertices = index[a:b]
    xs = np.union1d(fx, vertices)
    # Iterations to times: the exact newest iteration joins the table, so the line ends
    # where the data end.
    ti, tt = index, end
    if last[0] > index[-1]:
        ti, tt = np.append(index, last[0]), np.append(end, last[1])
    elif last[0] == index[-1]:
        tt = end.copy()
        tt[-1] = last[1]
    return np.interp(xs, ti, tt), np.interp(xs, fx, fy)
