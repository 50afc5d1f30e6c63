"""What is growing: Python objects, native memory, or memory the allocator keeps.

The runner attaches a :class:`Tracker` to every watch; at the end it sets
``result.attribution`` to an :class:`Attribution`::

    r = leakwidget.watch(step, iterations=300)
    r.attribution.kind          # "python", "native", "allocator", "garbage", "copy-on-write" or "none"
    r.attribution.summary       # one sentence
    print(r.attribution)        # the sentence plus tables
    r.attribution.top_types     # Python types (and containers) that grow, per iteration
    r.attribution.top_sites     # with trace=True: file:line allocation sites that grow
    r.attribution.lines         # with lines=True: growth per line of the step
    r.attribution.native_sites  # with native=True: C/C++ and Python call stacks (memray)
    r.attribution.paths         # what keeps the growing types alive (reference paths)
    r.device                    # GPU memory's own verdict, or why it was not measured

How it is decided (docs/attribution.md has the details and the ways it can be wrong):

* **RSS slope** — the verdict's slope (bytes per iteration after the warm-up).
* **Python slope** — the larger of two estimates of the bytes held by Python objects:
  the slope of ``sys.getallocatedblocks()`` (recorded by the runner every iteration) times a
  bytes-per-block figure, or — with ``trace=True`` or when tracemalloc is already on — the slope
  of tracemalloc's traced memory; and the *object census*: counts of every gc-tracked type, of the
  dicts and tuples the collector untracked, and of the arrays and buffers they all hold (found
  through their referents, whatever holds them: a dict, an lru_cache, a slot, a closure), and the
  length of every container, taken at a few checkpoints (not every iteration), with sizes from
  ``sys.getsizeof``, the array that owns the data, a tensor's bytes, a frame's ``memory_usage``.
  The census is what sees a retained NumPy array or ``bytes`` payload, which lives outside
  pymalloc's blocks; ``buffer_slope`` is how much of the Python share lives in such buffers.
* **Native slope** = RSS slope − Python slope.
* **Allocator retention** — when the run grew, glibc's ``malloc_trim(0)`` is called and the RSS
  it hands back is measured. If that is at least half of the growth, the growth was memory that
  had been freed but kept by the allocator: reclaimable, and not the user's code.

The default mode costs almost nothing per iteration (a counter and a comparison). The object
census is taken twice: after the setup, before iteration 0 (the allocator trimmed right after,
so its temporaries go back to the system), and at the end, after the verdict — never in the
middle of the RSS series the verdict reads. ``Tracker(census=True)`` adds censuses at iterations
1, 2, 4, 8, …, each trimmed after, with what they keep taken out of the records' RSS. ``malloc_trim(0)`` is also called once at the start, so memory freed
before the watch is not credited to it.
"""

from __future__ import annotations

from .allocator import trim
from .gpu import DeviceMemory, GpuMemory
from .lines import find_step_code
from .native import require_memray
from .result import Attribution, LineGrowth, NativeSite, RefPath, SiteGrowth, TypeGrowth
from .tracker import Tracker

__all__ = [
    "Attribution",
    "DeviceMemory",
    "GpuMemory",
    "LineGrowth",
    "NativeSite",
    "RefPath",
    "SiteGrowth",
    "Tracker",
    "TypeGrowth",
    "find_step_code",
    "require_memray",
    "trim",
]
