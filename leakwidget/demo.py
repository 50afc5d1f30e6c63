"""A headless tour of leakwidget: ``python -m leakwidget.demo`` (``--quick``: parts 1 and 2 only).

Three watches with known answers, each told in the words the dashboard uses (its headline, then
the details: the verdict's sentence, the rates, the run, what is growing):

1. a Python-object leak (256 KiB per iteration) — leak, attributed to Python objects;
2. a list capped at 20 items — a plateau, not a leak;
3. with TensorFlow installed: a tf.data pipeline whose ``map`` calls a ``tf.py_function`` that
   appends to a global list — a leak, then a bisection that names that ``map``.

Every sentence printed here is one ``tests/test_words.py`` checks against its numbers.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from . import examples as ex
from . import watch
from .engine.search import BisectResult, short_id
from .engine.units import format_bytes
from .notebook.banner import bisect_banner, final_banner
from .notebook.dashboard import report_text

KiB = 1024


def _title(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def configurations_table(result: BisectResult) -> str:
    """The bisection's runs, one line each, nothing cut: what was off, the verdict, the slope."""
    rows = [("#", "switched off", "verdict", "slope/it", "leaks")]
    for c in result.configurations:
        off = ", ".join(map(short_id, c.toggles.off)) or "nothing"
        slope = "" if c.slope is None else format_bytes(c.slope, signed=True)
        rows.append((str(c.index), off, c.kind or "-", slope,
                     {True: "yes", False: "no", None: ""}[c.reproduces]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _pipeline() -> tuple[Callable[[], object], Callable[[object], object]]:
    # TensorFlow's own start-up lines are not the demo's: keep its C++ log to errors.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    kept: list = []

    def remember(x):
        kept.append(b"x" * (64 * KiB))  # the leak: a global list that only grows
        return x

    def make_iterator():
        kept.clear()
        ds = tf.data.Dataset.range(10**9)
        ds = ds.shuffle(64)
        ds = ds.map(lambda x: tf.py_function(remember, [x], tf.int64))
        ds = ds.prefetch(4)
        return iter(ds)

    return make_iterator, lambda it: next(it)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    t0 = time.perf_counter()
    _title("1. Python objects kept alive, 256 KiB per iteration")
    setup, step = ex.python_leak(256 * KiB, noise=2 * 1024 * KiB)
    print(report_text(final_banner(watch(step, setup=setup, iterations=80, widget=False))))

    _title("2. A list capped at 20 arrays of 256 KiB: fills, then stops")
    setup, step = ex.capped_list(256 * KiB, 20)
    print(report_text(final_banner(watch(step, setup=setup, iterations=80, widget=False))))
    if "--quick" in argv:
        return 0
    try:
        setup, step = _pipeline()
    except ImportError:
        print("\n(TensorFlow is not installed: the tf.data part of the demo is skipped.)")
        return 0

    _title("3. tf.data: a py_function in map keeps every element alive")
    print(report_text(final_banner(watch(step, setup=setup, seconds=15, widget=False))))

    from . import bisect

    _title("   ...and which stage is it? (bisection)")
    found = bisect(step, setup=setup, seconds_per_config=15)
    banner = bisect_banner(found)
    print("\n".join([banner.headline, *banner.details, "", configurations_table(found)]))
    print(f"\n(demo took {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
