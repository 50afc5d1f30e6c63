"""Cost of attribution: the default signals, --trace and --lines, against a plain loop.

The step is ~5 ms of ordinary work (a NumPy product, a list comprehension, a small dict, a
dozen lines) that keeps nothing; the last two rows run it keeping 2 KiB per iteration, against
a plain loop of that leaking step (``--trace`` traces allocation sites only when a run grew). Every variant runs in the same process, interleaved in rounds,
and medians are compared, because these machines are shared and noisy. Columns:

* wall ratio — wall time of the whole watch (start to result) / the plain loop's;
* CPU ratio — the same with process CPU time (all threads: the sampler counts), which a busy
  shared machine disturbs far less than wall time;
* in-run — seconds the attribution tracker spent between iterations (object census, snapshots);
* finish — seconds it spent at the end (final census, malloc_trim, snapshot diff);
* tracker — (in-run + finish) / the plain loop's wall time: the tracker's own share, timed
  directly, so it does not drown in the run-to-run noise of the ratios.

    python bench/bench_attribution.py [--iterations 400] [--rounds 3] [--tf]

``--tf`` imports TensorFlow first: a heap of ~300k objects, the census's worst common case.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np

from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.watch import Watch

_A = np.random.default_rng(0).random((96, 96))


def make_step(k: int, keep: list | None = None):
    """``keep``: a list the step leaks into (2 KiB of bytes per iteration)."""

    def step() -> float:
        if keep is not None:
            keep.append(bytearray(2048))  # (not b"x" * 2048: the compiler folds it into one constant)
        a = _A @ _A
        total = float(a.sum())
        squares = [i * i for i in range(k)]
        names = {i: str(i) for i in range(64)}
        total += len(squares) + len(names)
        for j in range(8):
            total += j
        del squares, names
        return total

    return step


def calibrate(target: float) -> int:
    k = 1000
    for _ in range(6):
        step = make_step(k)
        step()
        # The fastest of five short timings: other jobs on a shared machine only ever slow one
        # down. (Not thread CPU time: NumPy's matrix product runs in BLAS threads.)
        per = math.inf
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(10):
                step()
            per = min(per, (time.perf_counter() - t) / 10)
        k = max(100, int(k * target / per))
    return k


def plain(step, n: int) -> tuple[float, float, float, float]:
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        step()
    return time.perf_counter() - t, time.process_time() - c, 0.0, 0.0


def watched(step, n: int, attribution: bool, **kw) -> tuple[float, float, float, float]:
    t, c = time.perf_counter(), time.process_time()
    r = Watch(WatchSpec(step, iterations=n, **kw), tracker=attribution, live_verdict=False).run()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    if r.stopped != "iterations" or r.iteration_count != n:
        # e.g. the memory guard stopping a run because other jobs filled the machine's memory
        raise SystemExit(f"a watch stopped early ({r.stopped}, {r.iteration_count} iterations): {r.stage_notes}")
    att = r.attribution
    if attribution and att is None:
        raise SystemExit(f"attribution missing: {r.stage_notes}")
    return wall, cpu, (att.overhead_seconds if att else 0.0), (att.finish_seconds if att else 0.0)


def blocks_cost() -> float:
    t = time.perf_counter()
    for _ in range(1000):
        sys.getallocatedblocks()
    return (time.perf_counter() - t) / 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--tf", action="store_true", help="import TensorFlow first (a big heap)")
    a = p.parse_args()
    if a.tf:
        import tensorflow  # noqa: F401 - only to make the heap as big as a TF user's

    import gc

    k = calibrate(a.step_ms / 1e3)
    step = make_step(k)
    # --trace traces a phase after the run only when the run grew: a leaking step shows its cost.
    leaked: list = []
    leaking = make_step(k, leaked)
    n = a.iterations
    variants = {
        "plain loop": lambda: plain(step, n),
        "watch, no attribution": lambda: watched(step, n, False),
        "watch (default attribution)": lambda: watched(step, n, True),
        "watch --trace": lambda: watched(step, n, True, trace=True),
        "watch --lines": lambda: watched(step, n, True, lines=True),
        "plain loop, leaking 2 KiB/it": lambda: plain(leaking, n),
        "watch --trace, leaking 2 KiB/it": lambda: watched(leaking, n, True, trace=True),
    }
    res: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in variants}
    for _ in range(a.rounds):
        for name, fn in variants.items():
            res[name].append(fn())
            leaked.clear()

    def baseline(name: str) -> tuple[float, float]:
        rows = res["plain loop, leaking 2 KiB/it" if "leaking" in name else "plain loop"]
        return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)

    print(
        f"{n} iterations of a step calibrated to {a.step_ms:g} ms when alone (the plain loop row shows "
        f"what it took in the run), {a.rounds} interleaved rounds, medians; "
        f"{len(gc.get_objects()):,} gc objects{' (TensorFlow imported)' if a.tf else ''}; "
        f"sys.getallocatedblocks() {blocks_cost() * 1e6:.1f} \u00b5s\n"
    )
    print(
        f"| {'variant':30s} | {'wall/iter':>10s} | {'wall ratio':>10s} | {'CPU/iter':>9s} | "
        f"{'CPU ratio':>9s} | {'in-run':>8s} | {'finish':>8s} | {'tracker':>7s} |"
    )
    print(f"|{'-' * 32}|{'-' * 12}|{'-' * 12}|{'-' * 11}|{'-' * 11}|{'-' * 10}|{'-' * 10}|{'-' * 9}|")
    for name, rows in res.items():
        wall, cpu, inrun, fin = (statistics.median(r[i] for r in rows) for i in range(4))
        base, base_cpu = baseline(name)
        print(
            f"| {name:30s} | {wall / n * 1e3:7.3f} ms | {wall / base:10.3f} | {cpu / n * 1e3:6.3f} ms | "
            f"{cpu / base_cpu:9.3f} | {inrun:6.3f} s | {fin:6.3f} s | {(inrun + fin) / base:7.2%} |"
        )


if __name__ == "__main__":
    main()
