"""Bisection in this process, in fresh workers two at a time, and on a 2-worker Dask cluster.

    python bench/bench_workers.py [--rounds N] [--seconds S]

A pipeline of 8 ``@leakwidget.stage`` functions, one of which (part5) keeps 256 KiB per call,
each step spinning 2 ms; the same bisection runs three ways, in rotating order, ``--rounds``
times. Printed per way: wall time (median and range), configurations run, whether the culprit
was right, and how often each configuration's answer (reproduces the leak or not) agreed with
the in-process run's answer for the same set of stages. Timings depend on the machine's load:
compare the ways within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import leakwidget  # noqa: E402

K, CULPRIT = 8, 5


def pipeline(k: int = K, culprit: int = CULPRIT):
    hold: list = []
    fns = []
    for i in range(k):
        def part(x, i=i):
            if i == culprit:
                hold.append(np.ones(256 * 1024 // 8))
            return x + 1
        part.__qualname__ = f"part{i}"
        fns.append(leakwidget.stage(part))

    def setup():
        hold.clear()

    def step(_):
        x = 0
        for f in fns:
            x = f(x)
        t = time.perf_counter()
        while time.perf_counter() - t < 0.002:
            pass

    return step, setup


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0, help="per configuration, at most")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    ways = {
        "in-process": {},
        "jobs=2 (fresh workers)": {"jobs": 2},
        "LocalCluster, 2 workers": {"client": client},
    }
    runs: dict[str, list] = {w: [] for w in ways}
    try:
        for r in range(args.rounds):
            order = list(ways)[r % 3:] + list(ways)[:r % 3]
            for way in order:
                # A fresh pipeline each time: what a run in this process kept would otherwise
                # travel (by value, in the closure) to the workers of the next one.
                step, setup = pipeline()
                t = time.perf_counter()
                result = leakwidget.bisect(step, setup, seconds_per_config=args.seconds, **ways[way])
                runs[way].append((time.perf_counter() - t, result))
                print(f"round {r + 1}: {way}: {runs[way][-1][0]:.1f} s, culprits {result.culprit_ids}",
                      file=sys.stderr)
    finally:
        client.close()
        cluster.close()
    reference = {c.on: c.reproduces for _t, res in runs["in-process"] for c in res.configurations
                 if c.on is not None}
    print("| way | wall time, median (range) | configurations | culprit right | answers agreeing with in-process |")
    print("|---|---|---|---|---|")
    for way, done in runs.items():
        times = [t for t, _ in done]
        configs = [len(res.configurations) for _, res in done]
        right = sum(res.culprit_ids and res.culprits[0].kind == f"part{CULPRIT}" for _, res in done)
        pairs = [(c.reproduces, reference[c.on]) for _, res in done for c in res.configurations
                 if c.on is not None and c.on in reference]
        agree = sum(a == b for a, b in pairs)
        print(f"| {way} | {statistics.median(times):.1f} s ({min(times):.1f}–{max(times):.1f}) | "
              f"{'/'.join(map(str, configs))} | {right}/{len(done)} | {agree}/{len(pairs)} |")


if __name__ == "__main__":
    main()
