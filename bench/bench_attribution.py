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
    python bench/bench_attribution.py --shapes        # what each way of holding memory gets
    python bench/bench_attribution.py --heap 1000000  # the census in a heap of a million objects

``--tf`` imports TensorFlow first: a heap of ~300k objects, the census's worst common case.

``--shapes`` watches every case of bench/holding_shapes.py (a list, a dict, an lru_cache, …
keeping arrays, bytes, tensors or frames) for 10, 15, 20, 30, 40, 60 iterations until it gets
the whole answer (a leak, held by Python objects, with a path naming the container), and prints
the verdict, the attribution, the path and the iterations it took.

``--heap N`` builds a heap of N gc-tracked objects (TensorFlow imported, then records of the
user's: an instance, its list and its dict of atoms each, the dict untracked), then times the
baseline census, a whole watch of a dict leak of arrays over that heap (its tracker's time in the
run and at the end: the final census and the path search), and what the budget allows.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

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


LADDER = (10, 15, 20, 30, 40, 60)  # iterations tried, until a shape gets its whole answer


def shapes() -> None:
    """The table of bench/holding_shapes.py's cases: what each got, and how soon."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import holding_shapes as hs  # noqa: PLC0415

    available = hs.available()
    for payload in available:
        hs.load(payload)
    print(f"| {'shape':24s} | {'kept':9s} | {'verdict':7s} | {'attribution':11s} | iterations | path |")
    print(f"|{'-' * 26}|{'-' * 11}|{'-' * 9}|{'-' * 13}|------------|------|")
    for name, payload in hs.cases(available):
        leaks = hs.SHAPES[name].leaks
        for n in LADDER if leaks else LADDER[-1:]:
            r = hs.watch_case(name, payload, n)
            if not leaks or hs.answered(r):
                break
        took = f"{n}" if not leaks or hs.answered(r) else f"> {LADDER[-1]}"
        print(f"| {name:24s} | {payload:9s} | {r['verdict']:7s} | {r['attribution']:11s} | "
              f"{took:>10s} | {'; '.join(r['paths']) or '-'} |", flush=True)


def heap(n: int) -> None:
    """The census's cost in a heap of ``n`` gc objects, against its budget."""
    import gc  # noqa: PLC0415

    import tensorflow  # noqa: F401, PLC0415 - a TensorFlow user's heap to begin with

    from leakwidget.engine.attribution.census import CENSUS_ALLOWANCE  # noqa: PLC0415
    from leakwidget.engine.attribution.survey import take_census  # noqa: PLC0415
    from leakwidget.engine.attribution.tracker import CENSUS_BUDGET  # noqa: PLC0415
    from leakwidget.engine.budget import DEFAULT_SECONDS  # noqa: PLC0415
    from leakwidget.engine.sampler import malloc_trim  # noqa: PLC0415

    class Record:
        def __init__(self, i: int) -> None:
            self.i, self.name, self.tags, self.meta = i, str(i), [i], {"k": i, "v": "x"}

    records = [Record(i) for i in range(max(0, (n - len(gc.get_objects())) // 2))]  # 2 tracked each
    gc.collect()
    objects = len(gc.get_objects())
    costs = []
    for _ in range(5):
        t = time.perf_counter()
        take_census(0, every=True)
        costs.append(time.perf_counter() - t)
    malloc_trim()  # what the timed censuses freed: the watch's leak would fill it unseen
    cache: dict = {}
    leak = lambda: cache.__setitem__(len(cache), np.ones(16 * 1024, np.float32))  # noqa: E731
    r = Watch(WatchSpec(leak, iterations=100), live_verdict=False).run()
    a = r.attribution
    print(f"{objects:,} gc objects ({len(records):,} records of the user's, TensorFlow imported), "
          f"{sys.getallocatedblocks():,} pymalloc blocks\n")
    print(f"baseline census: median {statistics.median(costs):.3f} s of 5 "
          f"({', '.join(f'{c:.3f}' for c in costs)})")
    print(f"watch of a dict leak of arrays, 100 iterations: in-run {a.overhead_seconds:.2f} s, "
          f"at the end {a.finish_seconds:.2f} s; {a.kind}; {'; '.join(p.text for p in a.paths)}")
    for note in a.notes:
        print(f"  note: {note}")
    print(f"budget: {CENSUS_BUDGET:.0%} of the planned run ({CENSUS_BUDGET * DEFAULT_SECONDS:.1f} s of "
          f"a default {DEFAULT_SECONDS:.0f} s watch), at least {CENSUS_ALLOWANCE} s; always with -n only")
    del records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--tf", action="store_true", help="import TensorFlow first (a big heap)")
    p.add_argument("--shapes", action="store_true", help="the table of ways of holding memory")
    p.add_argument("--heap", type=int, metavar="N",
                   help="the census in a heap of N gc objects (0: TensorFlow's alone)")
    a = p.parse_args()
    if a.shapes:
        return shapes()
    if a.heap is not None:
        return heap(a.heap)
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
