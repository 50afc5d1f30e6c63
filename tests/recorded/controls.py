"""Record the verdict's non-leaking controls: ``python tests/recorded/controls.py``.

A capped list, a bounded cache and steady churn (``leakwidget.examples``), quiet and under 4 MiB
of noise, each watched 20 times with a different seed in one fresh process — the runs
tests/test_verdict.py once made live, 20 at a time, on every test run. Each run's columns and
the arguments its final verdict was decided with go to ``tests/recorded/controls/runs.npz``; the test
replays ``decide`` on all of them (no false leak in 20) in a fraction of a second, and keeps one
live run of each case to prove the live measurement still looks like these.

Re-record after a change to what is measured (the meter, the sampler, the records), not after a
change to the verdict's rules: those are what the replay checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATH = HERE / "controls" / "runs.npz"  # not beside the runs tests/test_words.py reads
KiB, MiB = 1024, 1024 * 1024
SEEDS = 20
# id: (factory expression over noise and seed, iterations)
CASES = {
    "capped-list": ("ex.capped_list(256 * KiB, 20, noise=noise, seed=seed)", 60),
    "bounded-cache": ("ex.bounded_cache(256 * KiB, 20, noise=noise, seed=seed)", 60),
    "steady": ("ex.steady(noise=noise, seed=seed)", 100),
}
NOISES = {"quiet": 0, "noise4MiB": 4 * MiB}
COLUMNS = ("index", "rss", "duration", "blocks", "peak_rss", "malloc_in_use")


def watch(case: str, noise: int, seed: int):
    """One live run of a control, as the recording made it: (result, decide's keyword args)."""
    import leakwidget.engine.live as judging  # where the watch's verdicts call decide
    import leakwidget.engine.watch as watch_module
    from leakwidget import examples as ex  # noqa: F401  (the factories' namespace)
    from leakwidget.engine.spec import WatchSpec

    factory, n = CASES[case]
    setup, step = eval(factory, {"ex": ex, "KiB": KiB, "noise": noise, "seed": seed})
    seen: list[dict] = []
    decide = judging.decide

    def keep(*args, **kwargs):
        seen.append({"headroom": kwargs.get("headroom"), "warmup": kwargs.get("warmup")})
        return decide(*args, **kwargs)

    judging.decide = keep
    try:
        result = watch_module.Watch(WatchSpec(step, setup=setup, iterations=n), tracker=False).run()
    finally:
        judging.decide = decide
    return result, seen[-1]


CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from controls import CASES, COLUMNS, NOISES, SEEDS, watch
out, meta = {}, {}
for case in CASES:
    for noise_id, noise in NOISES.items():
        for seed in range(SEEDS):
            r, args = watch(case, noise, seed)
            key = f"{case}/{noise_id}/{seed}"
            for c in COLUMNS:
                out[f"{key}/{c}"] = np.asarray(r.column(c))
            meta[key] = {**args, "kind": r.verdict.kind}
np.savez_compressed(sys.argv[2], meta=json.dumps(meta), **out)
print(len(meta), "runs")
"""


def main() -> int:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(HERE), str(PATH)], text=True,
                          capture_output=True, timeout=1800)
    print(proc.stdout.strip() or proc.stderr[-3000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
