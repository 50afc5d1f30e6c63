"""Record real runs for tests/test_words.py: ``python tests/recorded/record.py [NAME ...]``.

Each run is a real watch — the TensorFlow cases of ``bench/bench_tf_cases.py``, the watches of
the two notebooks, the synthetic steps of ``leakwidget.examples``, a quiet step — run in a fresh
process with its records and the attribution's evidence kept: ``tests/recorded/NAME.npz``
(per-iteration columns, and a JSON header with the evidence and the verdict the run had). The
sentence checks replay the verdict and the attribution on them, so a change of wording or of
decision is checked against what real runs look like, in a second instead of ten minutes.

Re-record after a change that alters what is measured (the records, the evidence), not after
one of words or decisions: those are what the replay exercises.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COLUMNS = ("index", "end", "rss", "duration", "blocks", "peak_rss", "malloc_in_use")

# Runs in a child: wraps the attribution's decision to keep its evidence, runs ``BODY``
# (which leaves WatchResults in ``results``), and writes one .npz per result.
CHILD = r"""
import json, sys, textwrap
import numpy as np
import leakwidget.engine.attribution.tracker as tracker
evidence = []
_attribute = tracker.attribute
def keep(ev):
    evidence.append(ev)
    return _attribute(ev)
tracker.attribute = keep
results = {}
COLUMNS = json.loads(sys.argv[3])
exec(textwrap.dedent(sys.argv[2]), globals())
for (name, r), ev in zip(results.items(), evidence):
    g = ev.growth
    header = {
        "name": name, "kind": r.verdict.kind, "summary": r.verdict.summary,
        "attribution": r.attribution.kind if r.attribution else None,
        "warmup": r.spec.warmup, "stopped": r.stopped, "elapsed": r.elapsed,
        "headroom": (r.verdict.exhaust_iterations * r.verdict.slope
                     if r.verdict.exhaust_iterations is not None else None),
        "evidence": {
            "reclaimed": ev.reclaimed, "own_rss": ev.own_rss, "traced_slope": ev.traced_slope,
            "census_slope": ev.census_slope, "bytes_per_block": ev.bytes_per_block,
            "censuses": ev.censuses, "grew": None if g is None else g.grew,
        },
    }
    cols = {k: np.asarray(r.column(k)) for k in COLUMNS}
    text = json.dumps(header, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    np.savez_compressed(sys.argv[1] + "/" + name + ".npz", header=text, **cols)
    print(name, r.verdict.kind, r.attribution.kind if r.attribution else None)
"""


def _tf_cases() -> dict[str, str]:
    sys.path.insert(0, str(REPO / "bench"))
    from bench_tf_cases import CASES  # noqa: PLC0415

    def body(name: str, case: str, budget: str = "") -> str:
        _expected, _what, setup, step = CASES[case]
        return ("import numpy as np\nimport tensorflow as tf\nimport leakwidget\n"
                + textwrap.dedent(setup) + textwrap.dedent(step)
                + f"results[{name!r}] = leakwidget.watch(step, setup=setup, widget=False{budget})\n")

    bodies = {f"tf_{name}": body(f"tf_{name}", name) for name in CASES}
    # The first 13 s of a real 3 KiB-per-iteration leak, which the stable rule's old 24-hour
    # horizon called "stable" (tests/test_verdict.py).
    bodies["tf_py_function_13s"] = body("tf_py_function_13s", "py_function_map_rebuilt", ", seconds=13")
    return bodies


def _notebook(path: Path, prefix: str) -> str:
    """The notebook's cells in a plain IPython shell (no widget); every -o result kept."""
    import nbformat  # noqa: PLC0415

    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "--bisect" not in c.source]
    return (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from leakwidget.engine.result import WatchResult\n"
        "shell = InteractiveShell.instance(history_length=0)\n"
        "shell.history_manager.enabled = False\n"
        f"for src in {cells!r}:\n"
        "    shell.run_cell(src)  # a cell that reads a skipped bisection's result fails: fine\n"
        "for k, v in list(shell.user_ns.items()):\n"
        "    if isinstance(v, WatchResult):\n"
        f"        results[{prefix!r} + k] = v\n"
    )


def _examples() -> dict[str, str]:
    run = ("import time\nimport leakwidget\nfrom leakwidget import examples as ex\n"
           "KiB = 1024\n")
    return {
        "ex_python_leak": run + "s, t = ex.python_leak(256 * KiB, noise=2048 * KiB)\n"
                                "results['ex_python_leak'] = leakwidget.watch(t, setup=s, iterations=200, widget=False)\n",
        "ex_native_leak": run + "s, t = ex.native_leak(64 * KiB, noise=512 * KiB)\n"
                                "results['ex_native_leak'] = leakwidget.watch(t, setup=s, seconds=10, widget=False)\n",
        "ex_capped_list": run + "s, t = ex.capped_list(256 * KiB, 20)\n"
                                "results['ex_capped_list'] = leakwidget.watch(t, setup=s, iterations=300, widget=False)\n",
        "ex_steady": run + "s, t = ex.steady(noise=1024 * KiB)\n"
                           "results['ex_steady'] = leakwidget.watch(t, setup=s, seconds=10, widget=False)\n",
        "ex_retention": run + "s, t, release = ex.allocator_retention()\n"
                              "results['ex_retention'] = leakwidget.watch(t, setup=s, seconds=10, widget=False)\n"
                              "release()\n",
        "ex_flat": run + "results['ex_flat'] = leakwidget.watch(lambda: sum(range(2000)), iterations=4000, widget=False)\n",
        "quiet_sleep_plain": run + "results['quiet_sleep_plain'] = leakwidget.watch(lambda: time.sleep(0.001), "
                                   "seconds=10, widget=False)\n",
        "quiet_sleep": run + "from leakwidget.engine.observer import BaseObserver\n"
                             "results['quiet_sleep'] = leakwidget.watch(lambda: time.sleep(0.001), seconds=20, "
                             "observers=[BaseObserver()], widget=False)\n",
    }


def bodies() -> dict[str, str]:
    out = dict(_examples())
    out["notebook_quickstart"] = _notebook(REPO / "notebooks" / "quickstart.ipynb", "quickstart_")
    out["notebook_pitfalls"] = _notebook(REPO / "notebooks" / "tfdata_pitfalls.ipynb", "pitfalls_")
    out.update(_tf_cases())
    return out


def main(names: list[str]) -> int:
    todo = bodies()
    for name in names or list(todo):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(HERE), todo[name], json.dumps(COLUMNS)], cwd=REPO,
                              capture_output=True, text=True, timeout=1200)
        print(proc.stdout.strip() or f"{name}: FAILED\n{proc.stderr[-2000:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
