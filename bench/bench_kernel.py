"""Overhead of ``%%leakwatch`` with its live dashboard, in a real kernel (jupyter_client).

The front end here reads every iopub message as JupyterLab would. Each round runs, in one
kernel with TensorFlow imported, the same cell as a plain loop of N iterations and under
``%%leakwatch -n N`` (live dashboard on, default options), in rotating order; the wall time
of each cell is taken inside the kernel from the cell's first line to its last (the magic's
start and end costs included: the watched cell is timed by a cell that runs it through
``get_ipython().run_cell``). Ratio: watched per iteration / plain per iteration, median over
rounds. Outside the step (in-run): the watched cell's wall time beyond the sum of its steps'
durations (as the watch recorded them), as a share of that sum, median over rounds: measured
within one run, so the machine's drift from minute to minute cancels out of it (a plain
loop's own share is 0.1-0.2%, bench/bench_overhead.py).

    python bench/bench_kernel.py                 # a tf.data step calibrated to ~1 ms, a ~5 ms Python step
    python bench/bench_kernel.py --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import time

from jupyter_client.manager import start_new_kernel

SETUP = r'''
import time, json
import tensorflow as tf
%load_ext leakwidget

def _busy(n):
    x = 0
    for i in range(n):
        x += i * i

_n = 10_000
while True:
    _t = time.perf_counter(); _busy(_n); _dt = time.perf_counter() - _t
    if _dt > 0.00125:
        _n = int(_n * 0.005 / _dt); break
    _n *= 4

def python_step():
    _busy(_n)

def _per_call(step, k=200):
    t = time.perf_counter()
    for _ in range(k):
        step()
    return (time.perf_counter() - t) / k

def _pipeline(batch):
    ds = tf.data.Dataset.range(10**12).map(lambda x: tf.math.sqrt(tf.cast(x, tf.float32) + 1.0))
    it = iter(ds.batch(batch).map(lambda b: tf.reduce_sum(tf.sin(b) * tf.cos(b))))
    for _ in range(20):
        next(it)
    return it

_batch = 256
for _ in range(3):  # the batch size that makes a call take ~1 ms here
    _it = _pipeline(_batch)
    _batch = max(1, min(1 << 14, round(_batch * 0.001 / min(_per_call(lambda: next(_it), 20) for _ in range(3)))))
_it = _pipeline(_batch)

def tfdata_step():
    next(_it)
'''

PLAIN = "_t = time.perf_counter()\nfor _ in range({n}):\n    {step}()\nprint(json.dumps(time.perf_counter() - _t))"
WATCHED = (
    "_t = time.perf_counter()\n"
    "get_ipython().run_cell_magic('leakwatch', '-n {n} -o _r', '{step}()')\n"
    "_d = _r.column('duration')\n"
    "print(json.dumps([time.perf_counter() - _t, _r.iteration_count, _r.verdict.kind,\n"
    "                  float(_d.sum()) * _r.iteration_count / max(1, _d.size)]))"
)


class Front:
    def __init__(self) -> None:
        self.km, self.kc = start_new_kernel(kernel_name="python3")
        self.messages = 0

    def run(self, code: str, timeout: float = 600) -> str:
        msg_id = self.kc.execute(code)
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            self.messages += 1
            kind = m["msg_type"]
            if kind == "stream" and m["parent_header"].get("msg_id") == msg_id:
                out.append(m["content"]["text"])
            elif kind == "error":
                raise SystemExit("\n".join(m["content"]["traceback"]))
            elif (kind == "status" and m["parent_header"].get("msg_id") == msg_id
                  and m["content"]["execution_state"] == "idle"):
                return "".join(out)
        raise SystemExit(f"timed out: {code[:60]!r}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    front = Front()
    try:
        front.run(SETUP)
        rows = []
        for step in ("tfdata_step", "python_step"):
            per = float(front.run(f"print(json.dumps(_per_call({step})))"))
            n = max(100, int(args.seconds / per))
            ratios, plain_t, watched_t, kinds, outside = [], [], [], [], []
            for r in range(args.rounds):
                order = ("plain", "watched") if r % 2 == 0 else ("watched", "plain")
                got = {}
                for variant in order:
                    if variant == "plain":
                        got[variant] = json.loads(front.run(PLAIN.format(n=n, step=step))) / n
                    else:
                        wall, iters, kind, in_step = json.loads(
                            front.run(WATCHED.format(n=n, step=step)).split("\n")[-2])
                        if iters != n:
                            raise SystemExit(f"the watch ran {iters} of {n} iterations")
                        got[variant] = wall / n
                        kinds.append(kind)
                        outside.append((wall - in_step) / in_step)
                plain_t.append(got["plain"])
                watched_t.append(got["watched"])
                ratios.append(got["watched"] / got["plain"])
            rows.append((step, n, statistics.median(plain_t), statistics.median(watched_t),
                         statistics.median(ratios), min(ratios), max(ratios), kinds,
                         statistics.median(outside)))
    finally:
        front.close()
    print(f"runs of {args.seconds:g} s, {args.rounds} rounds in alternating order, one kernel with "
          "TensorFlow imported, live dashboard on, every iopub message read\n")
    print("| step | iterations | plain per iteration | %%leakwatch per iteration | ratio (median) | range | "
          "outside the step (in-run) | verdicts |")
    print("|---|---|---|---|---|---|---|---|")
    for step, n, pt, wt, ratio, lo, hi, kinds, out in rows:
        print(f"| {step} | {n:,} | {pt * 1e3:.3f} ms | {wt * 1e3:.3f} ms | {ratio:.3f} | "
              f"{lo:.3f}–{hi:.3f} | {out * 100:.2f}% | {', '.join(kinds)} |")


if __name__ == "__main__":
    main()
