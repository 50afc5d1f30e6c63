"""How fast is a leak called a leak, and how often is a non-leak called one?

For leak rates from 16 KiB to 4 MiB per iteration under noise from 0 to 4 MiB (numpy arrays
of random size up to the noise level, allocated and freed every iteration), each in a fresh
process, the run is replayed through the verdict on growing prefixes to find the first
iteration count at which it says "leak". Beside it: the least-squares bound
n ≈ (3·σ·√12 / L)^(2/3), σ being the measured spread around the best line, and the floor the
verdict sets on purpose (a leak must have added 1 MiB). Then the false-leak rate on the plateau
and stable cases (20 runs each).

    python bench/bench_detection.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

KiB = 1024
MiB = 1024 * KiB

_CHILD = r"""
import json, sys
import numpy as np
from leakwidget import examples as ex
from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import Watch
from leakwidget.engine.verdict import decide
rate, noise, nmax = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
setup, step = ex.numpy_leak(rate, noise=noise, seed=7)
r = Watch(WatchSpec(step, setup=setup, iterations=nmax), tracker=False).run()
x, y, b = r.column("index"), r.column("rss").astype(float), r.column("blocks")
first = None
n = 8
while n <= x.size:
    if decide(x[:n], y[:n], blocks=b[:n]).kind == "leak":
        first = n
        break
    n = max(n + 1, int(n * 1.1))
final = decide(x, y, blocks=b)
# Noise: the spread around the best straight line (the staircase the allocator makes included).
coef = np.polyfit(x, y, 1)
sigma = float(np.std(y - np.polyval(coef, x)))
print(json.dumps({"first": first, "sigma": sigma, "slope": final.slope, "kind": final.kind}))
"""


def detection_row(rate: int, noise: int) -> dict:
    nmax = int(min(2000, (1536 * MiB) // rate))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(rate), str(noise), str(nmax)],
                         capture_output=True, text=True, check=True, timeout=900)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["nmax"] = nmax
    return d


def false_leaks(runs: int) -> list[tuple[str, int, int]]:
    from leakwidget import examples as ex
    from leakwidget.engine.spec import WatchSpec
    from leakwidget.engine.watch import Watch

    cases = [
        ("list capped at 20 (60 it.)", lambda n, s: ex.capped_list(256 * KiB, 20, noise=n, seed=s), 60),
        ("cache over 20 keys (60 it.)", lambda n, s: ex.bounded_cache(256 * KiB, 20, noise=n, seed=s), 60),
        ("steady churn (100 it.)", lambda n, s: ex.steady(noise=n, seed=s), 100),
    ]
    rows = []
    for name, factory, iters in cases:
        for noise in (0, 4 * MiB):
            leaks = 0
            for seed in range(runs):
                setup, step = factory(noise, seed)
                r = Watch(WatchSpec(step, setup=setup, iterations=iters), tracker=False).run()
                leaks += r.verdict.kind == "leak"
            rows.append((f"{name}, noise {noise // MiB} MiB", leaks, runs))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args()
    from leakwidget.engine.verdict import MIN_LEAK_GROWTH
    print("Iterations until the verdict first says leak (numpy arrays kept alive)\n")
    print("| leak/iteration | noise | σ measured | first 'leak' at | LS bound | 1 MiB floor | final slope | error |")
    print("|---|---|---|---|---|---|---|---|")
    for rate in (16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB):
        for noise in (0, 1 * MiB, 4 * MiB):
            d = detection_row(rate, noise)
            sigma = max(d["sigma"], 4096.0)
            bound = (3 * sigma * 12**0.5 / rate) ** (2 / 3)
            first = d["first"] if d["first"] is not None else f"> {d['nmax']}"
            err = d["slope"] / rate - 1
            floor = MIN_LEAK_GROWTH / rate
            print(f"| {rate // KiB:,} KiB | {noise // MiB} MiB | {sigma / KiB:,.0f} KiB | {first} "
                  f"| {bound:.0f} | {floor:.0f} | {d['slope'] / KiB:,.1f} KiB | {err:+.1%} |", flush=True)
    print(f"\nFalse 'leak' verdicts on non-leaking cases ({a.runs} runs each, one process)\n")
    print("| case | false leaks |")
    print("|---|---|")
    for name, leaks, runs in false_leaks(a.runs):
        print(f"| {name} | {leaks}/{runs} |", flush=True)


if __name__ == "__main__":
    main()
