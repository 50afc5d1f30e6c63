"""leakwidget — hunt memory leaks interactively in Jupyter, first of all in tf.data pipelines.

    %load_ext leakwidget
    %%leakwatch -t 30 it = iter(make_dataset())
    next(it)

or from Python::

    import leakwidget
    result = leakwidget.watch(step, setup=make_state, seconds=30)
    result.verdict.kind      # "leak", "plateau", "stable" or "inconclusive"

The package is three floors with imports pointing down, ``notebook`` (magics, click delivery,
dashboard) → ``engine`` (sampling, the loop, verdict, attribution, bisection, run control,
worker processes) → ``stages`` (tf.data patches, ``@stage``), and ``report`` (static pictures of
a result: the chart, the HTML page) beside the engine, which draws its results with it. The
other doors (``cli``, ``keras``, ``pytest_plugin``) stand on the engine too. Importing this
package imports neither IPython, TensorFlow nor matplotlib: each loads only when used.
Documentation: docs/ (``make docs``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

from . import report  # static pictures of a result: the chart, the page (public: leakwidget.report)
from .engine.attribution import Attribution
from .engine.bisect import bisect
from .engine.kinds import Allocator
from .engine.observer import Observer
from .engine.records import IterationRecord
from .engine.result import WatchResult
from .engine.search import BisectResult, Configuration
from .engine.spec import WatchSpec
from .engine.units import format_bytes, parse_size
from .engine.verdict import Verdict
from .engine.watch import NO_PAUSE, run_sync
from .engine.workers.compare import CompareResult, compare
from .engine.workers.isolate import run_watch
from .marks import mark  # for `leakwidget run`: one iteration per mark (stdlib only)
from .stages import Stage, Toggles
from .stages.user import stage

__version__ = "0.2.0"  # the one place the version is written (pyproject reads it)

__all__ = [
    "Attribution",
    "BisectResult",
    "CompareResult",
    "Configuration",
    "IterationRecord",
    "Stage",
    "Verdict",
    "WatchResult",
    "__version__",
    "bisect",
    "compare",
    "format_bytes",
    "load_ipython_extension",
    "mark",
    "parse_size",
    "report",
    "stage",
    "unload_ipython_extension",
    "watch",
]


def watch(
    step: Callable,
    setup: Callable | None = None,
    iterations: int | None = None,
    seconds: float | None = None,
    warmup: int | None = None,
    max_rss: int | str | None = None,
    widget: bool | Observer | None = None,
    *,
    off: Iterable[str] | str = (),
    serial: Iterable[str] | str = (),
    trace: bool = False,
    lines: bool = False,
    native: bool = False,
    exact_peaks: bool = False,
    label: str = "",
    observers: Sequence[Observer] = (),
    isolate: bool = False,
    env: Mapping[str, str] | None = None,
    allocator: Allocator | None = None,
) -> WatchResult:
    """Run ``step`` repeatedly while sampling memory, and decide whether it leaks.

    ``setup()`` runs once and its return value is passed to ``step(state)``; without setup,
    ``step()`` takes no argument. Runs until ``iterations`` or ``seconds``; with neither, until
    the verdict is confident or 60 s pass (a growth that is mostly garbage awaiting Python's
    cycle collector is then measured further, within the rest of those 60 s, until what is kept
    past the garbage can be called). ``max_rss`` ("2GiB", "500M" or bytes) stops the run
    before the process grows past it. ``widget``: None shows the live dashboard when running in
    a Jupyter kernel, False never, True always, or pass a dashboard to reuse.
    ``trace=True`` lists the allocation sites that grow (``result.attribution.top_sites``):
    the step runs again under tracemalloc after the run, for up to as long as the run took (at
    least 14 iterations); the verdict reads the untraced run.
    ``native=True`` traces a window of iterations after the warm-up with memray and reports the
    C/C++ and Python call stacks of memory allocated there and not freed
    (``result.attribution.native_sites``; needs ``pip install 'leakwidget[native]'``).
    ``exact_peaks=True`` resets Linux's peak-RSS mark at every iteration so that each
    iteration's ``peak_rss`` is exact however short its spike; by default the mark is only read
    (new highs exact, the rest sampled at 125 Hz) and the process's ``ru_maxrss`` stays true.

    ``isolate=True`` runs the setup and the step in a fresh worker process (they travel there
    with cloudpickle); ``env`` (extra environment variables) and ``allocator`` ("glibc",
    "jemalloc", "tcmalloc") imply it. The worker's memory is what is measured.
    """
    spec = WatchSpec(
        step=step, setup=setup, iterations=iterations, seconds=seconds, warmup=warmup,
        max_rss=parse_size(max_rss) if max_rss is not None else None,
        toggles=Toggles.parse(off, serial), trace=trace, lines=lines, native=native,
        exact_peaks=exact_peaks, label=label,
        isolate=isolate, env=env or (), allocator=allocator,
    )
    view = _view(widget)
    return run_sync(run_watch(spec, [*observers, *([view] if view is not None else [])], NO_PAUSE))


def _view(widget: bool | Observer | None) -> Observer | None:
    if widget is False or (widget is None and not _in_kernel()):
        return None
    if widget is None or widget is True:
        from .notebook.dashboard import show_dashboard

        return show_dashboard()
    return widget


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (where a front end may render widgets)."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def load_ipython_extension(ipython) -> None:
    """%load_ext leakwidget: register %%leakwatch / %leakwatch."""
    from .notebook.magics import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """%unload_ext leakwidget: undo everything loading did."""
    from .notebook.magics import unload

    unload(ipython)
