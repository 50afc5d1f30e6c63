"""The decision: gather the evidence once, then try each hypothesis in turn."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .constants import MIN_POINTS
from .evidence import cut_warmup, gather_evidence
from .hypotheses import (
    hidden_heap_leak,
    hidden_python_leak,
    inconclusive,
    no_data,
    plateau,
    rise_then_flat,
    rss_leak,
    stable,
    too_few,
)
from .model import Verdict
from .words import tell


def decide(
    index: ArrayLike,
    rss: ArrayLike,
    *,
    durations: ArrayLike | None = None,
    warmup: int | None = None,
    headroom: float | None = None,
    blocks: ArrayLike | None = None,
    peaks: ArrayLike | None = None,
    in_use: ArrayLike | None = None,
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
    RSS growth that nothing in use follows must come in many rises to be a leak (see 3. in the
    package's description), and bytes in use that keep accumulating are a leak even while RSS
    does not grow yet, as Python's blocks are.
    """
    x_all = np.asarray(index, dtype=float)
    y_all = np.asarray(rss, dtype=float)
    if x_all.shape != y_all.shape:
        raise ValueError("index and rss must have the same length")
    dur = None if durations is None else np.asarray(durations, dtype=float)
    if x_all.size == 0:
        return tell(no_data())
    window = cut_warmup(x_all, y_all, warmup)
    if window.x.size < MIN_POINTS:
        return tell(too_few(window))
    ev = gather_evidence(window, durations=dur, headroom=headroom, blocks=blocks, peaks=peaks,
                         in_use=in_use)
    found = hidden_python_leak(ev) or hidden_heap_leak(ev) or rss_leak(ev)
    if found is None:
        # Read once: the plateau is a large fill, and "one small rise, flat since" is stable.
        fill = rise_then_flat(ev)
        found = plateau(ev, fill) or stable(ev, fill) or inconclusive(ev)
    return tell(found)
