"""How soon Stop ends a running ``%%leakwatch`` cell, in a real kernel, quiet and beside a CPU hog.

The tests assert what Stop promises on any machine (no step starts more than a second after
the click; the run ends by the click, not by its budget); how long the cell then takes to
compute its final verdict and attribution is CPU time, so it is measured here. Each round runs
``%%leakwatch -t 30`` of a step that keeps 4 KiB (TensorFlow imported in the kernel, as in a
training notebook), waits for the dashboard to report a running watch, and sends the Stop
button's click exactly as JupyterLab does (tests/test_live_kernel.py's front end). Rounds
alternate between a quiet machine and one with ``--hog`` busy processes beside the kernel, so
both columns come from the same minutes.

    python bench/bench_stop.py                  # 4 rounds each, 2 busy processes
    python bench/bench_stop.py --rounds 6 --hog 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from jupyter_client.manager import start_new_kernel  # noqa: E402
from test_live_kernel import SETUP, FrontEnd  # noqa: E402

CELL = "%%leakwatch -t 30 -o stopped\ngrow(1)\n_stepped = __import__('time').monotonic()\n"


def _busy() -> None:
    while True:
        pass


def _round(front: FrontEnd) -> tuple[float, float]:
    """(seconds from the click to the last step's end, to the cell's reply)."""
    msg_id = front.kc.execute(CELL)
    front.wait_for(lambda m: 'data-running="true"' in (front.banner(m) or "")
                   and "iteration" in (front.banner(m) or ""), 60, "a running watch", keep=False)
    time.sleep(2.0)  # two seconds into the run: the watch is past its start (not a synchronisation)
    clicked = front.click("leakwidget-stop")
    front.wait_reply(msg_id, timeout=60)
    replied = time.monotonic()
    last = float(front.execute("print(_stepped)", timeout=30)["stdout"])
    return last - clicked, replied - clicked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--hog", type=int, default=2, help="busy processes in the loaded rounds")
    args = ap.parse_args()
    km, kc = start_new_kernel(kernel_name="python3")
    front = FrontEnd(kc)
    rows: dict[str, list[tuple[float, float]]] = {"quiet": [], f"{args.hog} busy processes": []}
    try:
        reply = front.execute("import tensorflow as tf\n%load_ext leakwidget\n" + SETUP, timeout=120)
        assert reply["status"] == "ok", reply["stdout"]
        _round(front)  # the first watch in a kernel imports and draws for the first time
        for _ in range(args.rounds):
            for name in rows:
                hogs = [mp.Process(target=_busy, daemon=True) for _ in range(args.hog if name != "quiet" else 0)]
                for h in hogs:
                    h.start()
                try:
                    rows[name].append(_round(front))
                finally:
                    for h in hogs:
                        h.kill()
                        h.join()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    print(f"Stop in a kernel: {args.rounds} rounds each, alternating (seconds after the click)")
    print(f"{'machine':<22} {'last step, median':>18} {'max':>6} {'cell done, median':>18} {'max':>6}")
    for name, got in rows.items():
        steps, done = [g[0] for g in got], [g[1] for g in got]
        print(f"{name:<22} {statistics.median(steps):>18.2f} {max(steps):>6.2f} "
              f"{statistics.median(done):>18.2f} {max(done):>6.2f}")


if __name__ == "__main__":
    main()
