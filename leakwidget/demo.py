"""A headless tour of leakwidget: ``python -m leakwidget.demo``.

Three watches with known answers, printed as a user would see them in plain IPython:

1. a Python-object leak (256 KiB per iteration) — leak, attributed to Python objects;
2. a list capped at 20 items — a plateau, not a leak;
3. with TensorFlow installed: a tf.data pipeline whose ``map`` calls a ``tf.py_function`` that
   appends to a global list — a leak, then a bisection that names that ``map``.
"""

from __future__ import annotations

import sys
import time

from . import examples as ex
from . import watch

KiB = 1024


def _title(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    _title("1. Python objects kept alive, 256 KiB per iteration")
    setup, step = ex.python_leak(256 * KiB, noise=2 * 1024 * KiB)
    print(watch(step, setup=setup, iterations=80, widget=False))

    _title("2. A list capped at 20 arrays of 256 KiB: fills, then stops")
    setup, step = ex.capped_list(256 * KiB, 20)
    print(watch(step, setup=setup, iterations=80, widget=False))

    try:
        import tensorflow as tf
    except ImportError:
        print("\n(TensorFlow is not installed: the tf.data part of the demo is skipped.)")
        return 0

    _title("3. tf.data: a py_function in map keeps every element alive")
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

    result = watch(lambda it: next(it), setup=make_iterator, seconds=15, widget=False)
    print(result)

    from . import bisect

    _title("   ...and which stage is it? (bisection)")
    print(bisect(lambda it: next(it), setup=make_iterator, seconds_per_config=15))
    print(f"\n(demo took {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
