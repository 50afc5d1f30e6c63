"""Where the suite's CPU goes by process kind: fresh Python processes, pytest's workers, kernels,
Chromium, JupyterLab servers (docs/development.md's table).

Reads every process's CPU every 2 s until the process PID (the suite's ``make test``) ends, then
writes the CPU each kind used, as JSON, to OUT. A process that ends between two readings loses
at most its last 2 s; processes older than the first reading count only what they used after it.

    make test &  python tests/cpu_by_process.py $(pgrep -f "make test") /tmp/kinds.json
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time

import psutil

KINDS = [("chromium", r"chrom"), ("jupyterlab server", r"jupyterlab|jupyter-lab"),
         ("kernel", r"ipykernel"), ("pytest worker", r"-c import sys;exec"), ("pytest main", r"pytest"),
         ("dask", r"distributed|dask"), ("node", r"^node|/node "), ("stress-ng", r"stress-ng"),
         ("python child", r"python")]


def kind(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    return next((name for name, pattern in KINDS if re.search(pattern, text)),
                "other: " + (cmdline[0][-30:] if cmdline else "?"))


def main() -> None:
    root, out = int(sys.argv[1]), sys.argv[2]
    seen: dict[tuple[int, float], list] = {}  # (pid, start) -> [kind, CPU since the first reading, CPU then]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    first = True
    while not stop and psutil.pid_exists(root):
        for p in psutil.process_iter(["pid", "cmdline", "create_time", "cpu_times"]):
            t = p.info["cpu_times"]
            if t is None:
                continue
            key = (p.info["pid"], p.info["create_time"])
            if key not in seen:
                seen[key] = [kind(p.info["cmdline"] or []), 0.0, t.user + t.system if first else 0.0]
            seen[key][1] = t.user + t.system - seen[key][2]
        first = False
        time.sleep(2)
    totals: dict[str, float] = {}
    for name, cpu, _ in seen.values():
        totals[name] = totals.get(name, 0.0) + cpu
    with open(out, "w") as f:
        json.dump({k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}, f, indent=1)


if __name__ == "__main__":
    main()
