"""Where the suite's CPU goes: sums ``LEAKWIDGET_TEST_CPU`` lines (tests/conftest.py) by file.

    LEAKWIDGET_TEST_CPU=/tmp/cpu.jsonl make test
    python tests/cpu_table.py /tmp/cpu.jsonl [--tests N]

With each line's worker and end time (recorded since 2026-11-29), also when each xdist worker
finished its last test: a worker idle long before the others is time a reordering could win.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--tests", type=int, default=0, help="also list the N costliest tests")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.file)]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        entry = by_file[r["test"].split("::")[0]]
        entry[0] += r["cpu"]
        entry[1] += r["wall"]
        entry[2] += 1
    total_cpu = sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests, {total_cpu:.0f} CPU s, {sum(r['wall'] for r in rows):.0f} worker s\n")
    print("| CPU s | worker s | tests | file |\n|---|---|---|---|")
    for name, (c, w, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0]):
        print(f"| {c:.0f} | {w:.0f} | {n} | `{name}` |")
    workers: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("worker") and r.get("end"):
            workers[r["worker"]].append(r)
    if workers:
        start = min(r["end"] - r["wall"] for w in workers.values() for r in w)
        print("\n| worker | busy s | idle after s | last test |\n|---|---|---|---|")
        for name, runs in sorted(workers.items()):
            last = max(runs, key=lambda r: r["end"])
            print(f"| {name} | {sum(r['wall'] for r in runs):.0f} | {last['end'] - start:.0f} "
                  f"| `{last['test']}` |")
    if args.tests:
        print("\n| CPU s | worker s | test |\n|---|---|---|")
        for r in sorted(rows, key=lambda r: -r["cpu"])[: args.tests]:
            print(f"| {r['cpu']:.0f} | {r['wall']:.0f} | `{r['test']}` |")


if __name__ == "__main__":
    main()
