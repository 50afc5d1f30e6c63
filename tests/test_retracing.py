"""tf.function retracing named from TensorFlow's own count (engine/attribution/retracing.py),
with real TensorFlow: only when the run's calls traced, and only then."""

from __future__ import annotations

import numpy as np
import pytest

import leakwidget

tf = pytest.importorskip("tensorflow")


def test_a_tf_function_called_with_python_numbers_is_named_as_retracing() -> None:
    @tf.function
    def double(x):
        return x * 2

    n = [0]

    def step() -> None:
        n[0] += 1
        double(n[0])  # a new Python value: a new trace, a new graph kept

    # Until the verdict is sure (at least 10 s, at most 60), not a fixed count: beside a CPU hog
    # (run 31) this test's worker, a 900 MiB process, read 1 MiB of RSS noise, and 80 traces of
    # 39 KiB were rightly "inconclusive" (while retracing was already named).
    r = leakwidget.watch(step, widget=False)
    assert r.verdict.kind == "leak", str(r)
    summary = r.attribution.summary
    assert summary.startswith("tf.function retracing: TensorFlow traced "), summary
    assert "double" in summary and "test_retracing.py" in summary, summary


def test_a_tf_function_traced_once_is_not_named_beside_a_leak_of_its_own() -> None:
    @tf.function
    def double(x):
        return x * 2

    for i in range(12):  # traced 12 times before the run: the run itself does not trace
        double(i)
    kept = []
    x = tf.constant(1.0)

    def step() -> None:
        double(x)
        kept.append(np.ones(16 * 1024))  # 128 KiB kept per call: a leak, not retracing

    # 300 iterations: in a test process of a gigabyte, reused heap makes RSS a staircase, and
    # 80 left the leak "inconclusive" at the verdict's deciding level in a CI run.
    r = leakwidget.watch(step, iterations=300, widget=False)
    assert r.verdict.kind == "leak", str(r)
    assert "tf.function retracing" not in r.attribution.summary, r.attribution.summary
