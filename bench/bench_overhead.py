"""Overhead of watching: the same 5 ms CPU step as a plain loop and under leakwidget.watch.

Prints a table; the ratio is measured in one run (plain and watched loops interleaved in
rounds whose order rotates, each watched time divided by its own round's plain time, the
median of those ratios taken), because these machines are noisy. Goal: watched/plain <= 1.03.

    python bench/bench_overhead.py [--iterations 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import Watch

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
            return
        _WORK *= 4


def plain(n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        busy()
    return time.perf_counter() - t


def watched(n: int, default_observers: bool, live: bool) -> float:
    t = time.perf_counter()
    Watch(WatchSpec(busy, iterations=n), default_observers=default_observers,
          live_verdict=live).run()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=8)
    a = p.parse_args()
    calibrate()
    variants = {
        "plain loop": lambda: plain(a.iterations),
        "watch: sampler + records": lambda: watched(a.iterations, False, False),
        "watch(widget=False) (default signals)": lambda: watched(a.iterations, True, False),
        "  + live verdict every 0.5 s": lambda: watched(a.iterations, True, True),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(a.rounds):
        # The machine's speed drifts over seconds: rotate the order every round, and compare
        # each variant with the plain loop of its own round.
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(variants[name]())
    ratios = {name: [t / p for t, p in zip(ts, times["plain loop"], strict=True)]
              for name, ts in times.items()}
    print(f"{a.iterations} iterations of a 5 ms CPU step, {a.rounds} rounds in rotating order; "
          "medians, and the median of each round's ratio to that round's plain loop\n")
    print(f"| {'variant':40s} | {'seconds':>8s} | {'per iteration':>13s} | {'ratio':>6s} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 15}|{'-' * 8}|")
    for name, ts in times.items():
        m = statistics.median(ts)
        ratio = statistics.median(ratios[name])
        print(f"| {name:40s} | {m:8.3f} | {m / a.iterations * 1e3:10.3f} ms | {ratio:6.3f} |")


if __name__ == "__main__":
    main()
