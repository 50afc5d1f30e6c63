"""How many configurations does bisection cost? Prints two tables.

1. The search alone (``Bisector`` against an exact oracle), for every culprit position among
   k = 2..16 stages: worst and mean number of configurations, against ⌈log2 k⌉ + 2, in the
   documented order (all-off second) and with ``all_off_first=False``; and the worst case for
   a leak that needs two stages together.
2. Real bisections (``leakwidget.bisect``): k ``@leakwidget.stage`` functions, one of which leaks
   256 KiB per call; every configuration is a real watch that runs until its verdict is
   confident. No TensorFlow needed.

    .venv/bin/python bench/bench_bisect.py                 # both tables, real k = 2, 4, 8, 16
    .venv/bin/python bench/bench_bisect.py --real 2 3 5    # real runs for these k
    .venv/bin/python bench/bench_bisect.py --no-real       # the search table only
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time

import numpy as np

import leakwidget
from leakwidget.engine.search import Bisector, Observed
from leakwidget.engine.verdict import Verdict
from leakwidget.stages import Stage


def oracle_cost(k: int, culprits: set[int], all_off_first: bool) -> tuple[int, list[str]]:
    ids = [f"s{i}@{i}" for i in range(k)]
    stages = [Stage(id=i, kind=i.split("@")[0], site=i.split("@")[1], toggleable=True) for i in ids]
    want = {ids[c] for c in culprits}
    b = Bisector(all_off_first=all_off_first)
    while (config := b.next_configuration()) is not None:
        on = set(ids) if config.on is None else set(config.on)
        leak = want <= on
        b.report(config, Observed(Verdict("leak" if leak else "stable", slope=2.6e5 if leak else 0.0),
                                  stages=stages))
    result = b.result()
    assert set(result.culprit_ids) == want, (k, culprits, result.culprit_ids)
    return len(result.configurations), result.culprit_ids


def search_table() -> None:
    print("Configurations per bisection, exact oracle (baseline and all-off included)")
    print(f"{'k':>3}  {'bound':>5}  {'worst':>5}  {'mean':>5}  {'worst, all-off last':>19}  "
          f"{'mean, all-off last':>18}  {'worst pair':>10}")
    for k in range(2, 17):
        bound = math.ceil(math.log2(k)) + 2
        first = [oracle_cost(k, {i}, True)[0] for i in range(k)]
        last = [oracle_cost(k, {i}, False)[0] for i in range(k)]
        pairs = [oracle_cost(k, set(p), True)[0] for p in itertools.combinations(range(k), 2)]
        print(f"{k:>3}  {bound:>5}  {max(first):>5}  {np.mean(first):>5.2f}  {max(last):>19}  "
              f"{np.mean(last):>18.2f}  {max(pairs):>10}")
    print("bound = ⌈log2 k⌉ + 2. All-off second (the default) costs one more when the search")
    print("ends on an unconfirmed half; all-off last never exceeds the bound for one culprit.\n")


HOLD: list = []


def work(n: int = 40_000) -> int:
    # A step that takes a few ms, as a training step does: fewer iterations per second, so a
    # leaking configuration eats tens of MB, not GB, before its verdict is confident.
    total = 0
    for i in range(n):
        total += i
    return total


def real_run(k: int, culprit: int) -> tuple[int, float, str, bool]:
    fns = []
    for i in range(k):
        def f(x: int, i: int = i) -> int:
            if i == culprit:
                HOLD.append(np.ones(256 * 1024 // 8))
            return x + 1
        f.__qualname__ = f"stage{i}"
        fns.append(leakwidget.stage(f))

    def setup() -> None:
        HOLD.clear()

    def step(_: None) -> None:
        x = 0
        for f in fns:
            x = f(x)
        work()

    t0 = time.perf_counter()
    result = leakwidget.bisect(step, setup, seconds_per_config=30)
    HOLD.clear()
    found = [s.kind for s in result.culprits]
    return (len(result.configurations), time.perf_counter() - t0, ",".join(found),
            found == [f"stage{culprit}"])


def real_table(ks: list[int], seed: int) -> None:
    rng = random.Random(seed)
    print("Real bisections: k @leakwidget.stage functions, one leaks 256 KiB per call")
    print(f"{'k':>3}  {'culprit':>8}  {'found':>9}  {'right':>5}  {'configs':>7}  {'bound':>5}  "
          f"{'seconds':>7}")
    for k in ks:
        culprit = rng.randrange(k)
        n, seconds, found, right = real_run(k, culprit)
        bound = math.ceil(math.log2(k)) + 2
        print(f"{k:>3}  {'stage' + str(culprit):>8}  {found:>9}  {'yes' if right else 'NO':>5}  "
              f"{n:>7}  {bound:>5}  {seconds:>7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=int, nargs="*", default=[2, 4, 8, 16],
                        help="k values for real bisections (default 2 4 8 16)")
    parser.add_argument("--no-real", action="store_true", help="only the search table")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    search_table()
    if not args.no_real and args.real:
        real_table(args.real, args.seed)


if __name__ == "__main__":
    main()
