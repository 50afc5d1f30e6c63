"""Cost of native call stacks (``native=True``): the traced window against the rest of the run.

memray traces every allocation of every thread while its tracker is on, unwinding the native
stack of each; leakwidget turns it on for a window of iterations after the warm-up only. This
bench watches a step of ~5 ms of ordinary work (a NumPy product, a list comprehension, a small
dict: the step of bench_attribution.py) with ``native=True`` and compares, within each run,
the median duration of the traced iterations with that of the untraced ones (one run, one
machine state: the ratio is what the window costs). Columns:

* untraced / traced — median step duration outside / inside the window;
* ratio — traced / untraced;
* window — iterations traced;
* in-run — seconds spent entering and leaving memray's tracker (with its one-time warm-up
  before the setup);
* finish — seconds spent at the end, mostly memray reading its file and symbolising the
  libraries on the stacks (TensorFlow's are large).

    python bench/bench_native.py [--iterations 600] [--rounds 3] [--tf]

``--tf`` imports TensorFlow first (its libraries are on memray's map and symbolised at the end).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_attribution import calibrate, make_step  # noqa: E402

from leakwidget.engine.spec import WatchSpec  # noqa: E402
from leakwidget.engine.watch import Watch  # noqa: E402


def one_run(step, n: int) -> dict:
    r = Watch(WatchSpec(step, iterations=n, native=True), live_verdict=False).run()
    a = r.attribution
    if a.native_window is None:
        raise SystemExit(f"no traced window: {a.notes}")
    first, last = a.native_window
    idx, dur = r.column("index"), r.column("duration")
    inside = (idx >= first) & (idx <= last)
    after_warmup = idx >= 3
    return {
        "untraced": float(np.median(dur[after_warmup & ~inside])),
        "traced": float(np.median(dur[inside])),
        "window": int(inside.sum()),
        "in_run": a.overhead_seconds,
        "finish": a.finish_seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tf", action="store_true", help="import TensorFlow first")
    args = ap.parse_args()
    if args.tf:
        import tensorflow  # noqa: F401

    step = make_step(calibrate(0.005))
    runs = [one_run(step, args.iterations) for _ in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{args.rounds} runs of {args.iterations} iterations of a step calibrated to 5 ms"
          f"{' (TensorFlow imported)' if args.tf else ''}; medians\n")
    print("| untraced/iter | traced/iter | ratio | window | in-run | finish |")
    print("|---------------|-------------|-------|--------|--------|--------|")
    for r in [*runs, med]:
        label = "" if r is not med else " (median)"
        print(f"| {r['untraced'] * 1e3:10.3f} ms | {r['traced'] * 1e3:8.3f} ms | "
              f"{r['traced'] / r['untraced']:5.2f} | {r['window']:6d} | {r['in_run']:5.2f} s | "
              f"{r['finish']:5.2f} s |{label}")


if __name__ == "__main__":
    main()
