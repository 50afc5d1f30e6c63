"""Overhead of watching: the same steps as a plain loop and under leakwidget, in one run.

Three measures, all taken in one process so that the machine's drift cancels:

* **ratio**: the wall time of a whole watch (its start and end included) per iteration,
  divided by a plain loop's, in rounds whose order rotates; the median of each round's ratio.
* **bookkeeping**: the time between one call of the step returning and the next call starting
  (timestamps taken inside the step), median and 99th percentile: what leakwidget adds to every
  iteration, measured directly.
* **added (in-run)**: all the time a run spent outside its step (the call's start and end
  included) beyond a plain loop's gap between steps, as a share of the time spent in the step,
  both taken from the same run. A machine whose speed drifts by tens of percent from minute to
  minute moves the ratio above by as much; it scales both sides of this one alike. Beside it,
  the CPU the process's other threads used per second of the run: the watch's sampler and
  children threads, and TensorFlow's own (the plain loop's row shows those alone). They run on
  the other core, and hold the GIL only for their readings.

Beside the plain loop and the watch, a **floor**: the least any watch must do between steps
(the clock, one RSS read, a row into a table), written as tightly as Python allows. Its
bookkeeping is what reading RSS after every step costs on this machine from Python at all.

    python bench/bench_overhead.py                 # a 5 ms pure-Python step, no TensorFlow
    python bench/bench_overhead.py --tf            # TensorFlow imported: a 5 ms Python step and
                                                   # a tf.data step calibrated to ~1 ms, runs of
                                                   # --seconds
    python bench/bench_overhead.py --cold          # single calls right after a 5 ms step
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

_WORK = 1


def busy() -> None:
    """A fixed amount of CPU work (calibrated to about 5 ms): interruptions make it slower,
    unlike a loop that spins until the clock says 5 ms."""
    x = 0
    for i in range(_WORK):
        x += i * i


def calibrate(target: float = 0.005) -> None:
    global _WORK
    _WORK = 10_000
    while True:
        t = time.perf_counter()
        busy()
        dt = time.perf_counter() - t
        if dt > target / 4:
            _WORK = int(_WORK * target / dt)
            break
        _WORK *= 4
    # The fastest of five timings: other jobs on a shared machine only ever slow one down (a
    # single timing once made the "5 ms" step 1 ms).
    best = min(_timed(busy) for _ in range(5))
    _WORK = int(_WORK * target / best)


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def tfdata_step(target: float = 0.001) -> Callable[[], None]:
    """``next(it)`` on a map + batch + map pipeline, its batch size calibrated so that a call
    takes about ``target`` seconds on this machine (the fastest of three timings of 20 calls)."""
    import tensorflow as tf

    def pipeline(batch: int) -> Callable[[], None]:
        ds = tf.data.Dataset.range(10**12).map(lambda x: tf.math.sqrt(tf.cast(x, tf.float32) + 1.0))
        it = iter(ds.batch(batch).map(lambda b: tf.reduce_sum(tf.sin(b) * tf.cos(b))))
        for _ in range(20):
            next(it)
        return lambda: next(it)

    batch = 256
    for _ in range(3):
        step = pipeline(batch)
        took = min(_timed(lambda s=step: [s() for _ in range(20)]) for _ in range(3)) / 20
        batch = max(1, min(1 << 14, round(batch * target / took)))
    print(f"tf.data step: batch {batch}, {took * 1e3:.2f} ms a call before the last resize\n")
    return pipeline(batch)


class Stamped:
    """Wraps a step, recording when each call starts and ends (a bounded, pre-touched array)."""

    def __init__(self, step: Callable[[], object], capacity: int = 400_000) -> None:
        self.step = step
        self.enter = np.zeros(capacity)
        self.leave = np.zeros(capacity)
        self.n = 0

    def __call__(self) -> None:
        i = self.n
        self.enter[i] = time.perf_counter()
        self.step()
        self.leave[i] = time.perf_counter()
        self.n = i + 1

    def gaps(self) -> np.ndarray:
        """Seconds between a call's end and the next call's start."""
        return self.enter[1 : self.n] - self.leave[: self.n - 1]


def plain(step: Stamped, seconds: float) -> Stamped:
    step.n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        step()
    return step


def floor(step: Stamped, seconds: float) -> Stamped:
    """The least a watch must do between steps, written as tightly as Python allows: the
    clock before and after the step, one RSS read, a row of three numbers into a pre-touched
    table, the time budget. What the watch does beyond it (the high-water mark, the sampler's
    window, checkpoints, interrupt and memory-guard brackets, live verdicts) is its own cost."""
    from leakwidget.engine.sampler import rss

    step.n = 0
    rows = np.zeros((step.enter.size, 3))
    clock = time.perf_counter
    i = 0
    end = clock() + seconds
    while True:
        t0 = clock()
        if t0 >= end:
            break
        step()
        rows[i] = (t0, clock(), rss())
        i += 1
    return step


def watched(step: Stamped, seconds: float, variant: str) -> Stamped:
    import leakwidget
    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import Watch

    step.n = 0
    if variant == "watch(widget=False)":
        leakwidget.watch(step, seconds=seconds, widget=False)
    else:  # sampling and records only: no attribution, no live verdicts
        Watch(WatchSpec(step, seconds=seconds), tracker=False, live_verdict=False).run()
    return step


def measure(name: str, step: Callable[[], object], seconds: float, rounds: int) -> list[str]:
    stamped = Stamped(step)
    variants = {
        "plain loop": lambda: plain(stamped, seconds),
        "floor: clock, RSS, a row": lambda: floor(stamped, seconds),
        "watch: sampler + records": lambda: watched(stamped, seconds, "sampling"),
        "watch(widget=False)": lambda: watched(stamped, seconds, "watch(widget=False)"),
    }
    per_iter: dict[str, list[float]] = {k: [] for k in variants}
    gaps: dict[str, list[np.ndarray]] = {k: [] for k in variants}
    added: dict[str, list[float]] = {k: [] for k in variants}
    threads: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        # The machine's speed drifts over seconds: rotate the order every round, and compare
        # each variant with the plain loop of its own round.
        runs = {}
        for v in names[r % len(names):] + names[: r % len(names)]:
            t0, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
            s = variants[v]()
            t1 = time.perf_counter()
            other_cpu = (time.process_time() - cpu0) - (time.thread_time() - main0)
            per_iter[v].append((t1 - t0) / s.n)
            gaps[v].append(s.gaps().copy())
            threads[v].append(other_cpu / (t1 - t0))
            runs[v] = (t0, t1, s.n, s.enter[: s.n].copy(), s.leave[: s.n].copy())
        plain_gap = float(np.median(gaps["plain loop"][-1]))
        for v, run in runs.items():
            added[v].append(_added_share(*run, plain_gap))
    rows = []
    for v in names:
        ratio = statistics.median(p / q for p, q in zip(per_iter[v], per_iter["plain loop"], strict=True))
        g = np.concatenate(gaps[v])
        rows.append(f"| {name:22s} | {v:26s} | {statistics.median(per_iter[v]) * 1e3:8.3f} ms | "
                    f"{ratio:6.3f} | {np.median(g) * 1e6:7.1f} µs | {np.percentile(g, 99) * 1e6:7.1f} µs | "
                    f"{statistics.median(added[v]) * 100:5.2f}% | {statistics.median(threads[v]) * 100:5.2f}% |")
    return rows


def _added_share(t0: float, t1: float, n: int, enter: np.ndarray, leave: np.ndarray,
                 plain_gap: float) -> float:
    """The time a run spent outside its step beyond what a plain loop spends there (the call's
    start and end, and every gap above the plain loop's median gap), as a share of the time in
    the step: both are measured in the same run, so the machine's drift cancels out of it."""
    outside = (enter[0] - t0) + (t1 - leave[-1]) + float(np.sum(enter[1:] - leave[:-1]))
    return (outside - (n - 1) * plain_gap) / float(np.sum(leave - enter))


def cold_costs(rounds: int = 300) -> None:
    """What one call costs right after a 5 ms step (the caches hold the step's data) and again
    at once: the floor under the per-iteration bookkeeping, which must read RSS after every
    step."""
    import os
    import resource

    from leakwidget.engine import sampler

    fd = os.open("/proc/self/statm", os.O_RDONLY)
    calls: dict[str, Callable[[], object]] = {
        "a Python function call": lambda: None,
        "getppid() (a trivial system call)": os.getppid,
        "pread of /proc/self/statm": lambda: os.pread(fd, 64, 0),
        "sampler.rss() (the RSS read, GIL kept)": sampler.rss,
        "getrusage() (the peak-RSS mark)": lambda: resource.getrusage(resource.RUSAGE_SELF),
    }
    print(f"{rounds} rounds per call: a 5 ms step, then the call twice; medians\n")
    print("| call | right after the step | again at once |")
    print("|---|---|---|")
    for name, fn in calls.items():
        first, again = [], []
        for _ in range(rounds):
            busy()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            fn()
            t2 = time.perf_counter()
            first.append(t1 - t0)
            again.append(t2 - t1)
        print(f"| {name} | {statistics.median(first) * 1e6:.1f} µs | {statistics.median(again) * 1e6:.1f} µs |")
    os.close(fd)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tf", action="store_true", help="import TensorFlow; add a ~1 ms tf.data step")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each run (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="rounds in rotating order (default 3)")
    p.add_argument("--cold", action="store_true",
                   help="only the cost of single calls right after a 5 ms step (the floor)")
    a = p.parse_args()
    if a.cold:
        calibrate()
        cold_costs()
        return
    workloads: dict[str, Callable[[], object]] = {}
    if a.tf:
        import tensorflow  # noqa: F401 - the point: a heap of TensorFlow's size

        workloads["tf.data next(it)"] = tfdata_step()
    calibrate()
    workloads["5 ms Python step"] = busy
    print(f"runs of {a.seconds:g} s, {a.rounds} rounds in rotating order, TensorFlow "
          f"{'imported' if a.tf else 'not imported'}; ratio: whole run per iteration against the "
          "plain loop of the same round (median); bookkeeping: from one step's end to the next "
          "one's start; added: time outside the step beyond a plain loop's gap (start and end "
          "included) as a share of the time in the step, in the same run; other threads: CPU "
          "seconds of the process's other threads per second of the run (TensorFlow's and the "
          "watch's)\n")
    print("| workload               | variant                    | per iteration | ratio | "
          "bookkeeping median | p99 | added (in-run) | other threads |")
    print("|---|---|---|---|---|---|---|---|")
    for name, step in workloads.items():
        for row in measure(name, step, a.seconds, a.rounds):
            print(row)


if __name__ == "__main__":
    main()
