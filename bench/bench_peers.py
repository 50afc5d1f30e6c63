"""leakwidget against its peers: the same four workloads under each memory tool, side by side.

    python bench/bench_peers.py [--seconds 10] [--repeats 3] [--json PATH]
                                [--tools leakwidget memray ...] [--workloads cpu tfdata-leak ...]

Workloads, each run with TensorFlow imported (that is where users are):

- ``cpu``: a pure-Python CPU step (a sum of squares, calibrated to about 5 ms), not leaking;
- ``cpu-leak``: the same step, keeping 64 KiB of written bytes per iteration in a global list;
- ``tfdata``: ``next(it)`` on ``range(10**9).map(x * 2).batch(B)``, B calibrated to about 1 ms;
- ``tfdata-leak``: the same pipeline followed by a ``map`` whose ``tf.py_function`` keeps 64 KiB
  per batch (one batch per iteration) in the same global list.

Tools: the plain loop (the baseline); ``leakwidget.watch``; ``leakwidget.watch(trace=True)``,
whose speed is its whole call's per measured iteration (the traced phase after the measured
run included), and which flags the leak when its top growing site is the leaking line;
memray's ``Tracker`` without and with native traces, then its leaked and high-water-mark
records; ``memory_profiler.memory_usage`` sampling every 0.1 s; ``tracemalloc`` with a
first-vs-last snapshot diff; Scalene's CLI. Every measurement runs in a fresh process (this
script re-invoked with ``--worker TOOL WORKLOAD SECONDS``, answering one JSON line), for a
fixed wall time. Each tool run is paired with a plain
run of the same workload, the pair's order alternating, ``--repeats`` times; the slowdown is the
ratio of the medians of iterations per second taken in this one run (the machines are noisy:
never compare absolute numbers across runs). Beside it, the same ratio of the process's CPU
seconds per iteration, which other load on the machine disturbs less.

What the table says: the slowdown; in how many runs the tool flagged the leak (leakwidget: the
verdict is "leak"; memray, tracemalloc: the top site is the leaking line; memory_profiler:
memory grew by more than 1 MiB during the loop; Scalene: its leak detector reported a line);
what the tool said in one such run; and the time from the start of the measured run (setup
included) until that answer was available, post-run analysis included.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

KiB = 1024
MiB = 1024 * KiB
LEAK_BYTES = 64 * KiB
MARK = "BENCH_PEERS_RESULT "  # prefix of the one JSON line a worker prints
THIS_FILE = os.path.abspath(__file__)
THIS_NAME = os.path.basename(THIS_FILE)

WORKLOADS = {
    "cpu": "~5 ms pure-Python CPU step",
    "cpu-leak": "same, +64 KiB kept per iteration",
    "tfdata": "~1 ms tf.data next()",
    "tfdata-leak": "same, py_function keeps 64 KiB per batch",
}
TOOLS = ("leakwidget", "leakwidget-trace", "memray", "memray-native", "memory_profiler", "tracemalloc", "scalene")
PACKAGES = ("leakwidget", "tensorflow-cpu", "tensorflow", "memray", "scalene", "memory-profiler",
            "numpy", "psutil")

KEEP: list[bytes] = []  # where the leaking workloads keep their bytes
_WORK = 20_000  # terms of the CPU step's sum (calibrated)
_BATCH = 64  # batch size of the tf.data step (calibrated)


# ---------------------------------------------------------------------------------------------
# Workloads


def _leak() -> None:
    KEEP.append(b"x" * LEAK_BYTES)  # the leak: 64 KiB of written, Python-owned memory


LEAK_LINE = _leak.__code__.co_firstlineno + 1  # the line every tool should point at


def _busy() -> int:
    return sum(i * i for i in range(_WORK))


def cpu_step(_state: Any = None) -> None:
    _busy()


def cpu_leak_step(_state: Any = None) -> None:
    _busy()
    _leak()


def _py_leak(batch: Any) -> Any:
    _leak()
    return batch


def _dataset(leaking: bool) -> Any:
    import tensorflow as tf

    ds = tf.data.Dataset.range(10**9).map(lambda x: x * 2).batch(_BATCH)
    if leaking:
        ds = ds.map(lambda b: tf.py_function(_py_leak, [b], tf.int64))
    return ds


def tf_step(it: Any) -> None:
    next(it)


def make_workload(name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """(setup, step): ``state = setup()`` once, then ``step(state)`` each iteration."""
    if name == "cpu":
        return (lambda: None), cpu_step
    if name == "cpu-leak":
        return (lambda: None), cpu_leak_step
    if name in ("tfdata", "tfdata-leak"):
        leaking = name == "tfdata-leak"
        return (lambda: iter(_dataset(leaking))), tf_step
    raise ValueError(f"unknown workload {name!r}")


@dataclass
class Loop:
    iterations: int
    begin: float  # perf_counter before the setup
    start: float  # after the setup, when the first iteration starts
    end: float
    cpu: float  # CPU seconds of the whole process (every thread), setup included

    @property
    def ips(self) -> float:
        return self.iterations / (self.end - self.start)

    def out(self, **answer: Any) -> dict:
        """The loop's numbers, and what the tool said."""
        return {"ips": self.ips, "iterations": self.iterations, "cpu_s": self.cpu, **answer}


def run_loop(setup: Callable[[], Any], step: Callable[[Any], None], seconds: float,
             before: Callable[[], None] | None = None) -> Loop:
    """The plain loop: setup, then the step until ``seconds`` have passed."""
    begin, cpu = time.perf_counter(), time.process_time()
    state = setup()
    if before is not None:
        before()
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        step(state)
        n += 1
    return Loop(n, begin, start, time.perf_counter(), time.process_time() - cpu)


def _is_leak_site(filename: str, line: int) -> bool:
    return os.path.basename(filename) == THIS_NAME and line == LEAK_LINE


def _site(filename: str, line: int) -> str:
    where = f"{os.path.basename(filename)}:{line}" if line > 0 else os.path.basename(filename)
    return f"{where} (the leak)" if _is_leak_site(filename, line) else where


def fmt_bytes(n: float, signed: bool = False) -> str:
    sign = ("+" if n >= 0 else "-") if signed else ("-" if n < 0 else "")
    a = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if a < 1024 or unit == "GiB":
            return f"{sign}{a:.0f} {unit}" if a >= 100 or unit == "B" else f"{sign}{a:.1f} {unit}"
        a /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------
# Tools, as run inside a worker: each returns the loop's numbers and what the tool said


def measure_plain(setup, step, seconds: float) -> dict:
    loop = run_loop(setup, step, seconds)
    return loop.out(answer="no answer")


def measure_scalene_inner(setup, step, seconds: float) -> dict:
    """The loop Scalene profiles from outside; the parent reads Scalene's profile."""
    loop = run_loop(setup, step, seconds)
    offset = time.time() - time.perf_counter()
    return loop.out(begin_wall=loop.begin + offset)


def measure_leakwidget(setup, step, seconds: float, trace: bool = False) -> dict:
    import leakwidget
    from leakwidget.engine.observer import BaseObserver

    class FirstConfident(BaseObserver):
        """perf_counter() of the first confident live verdict of each kind."""

        def __init__(self) -> None:
            self.first: dict[str, float] = {}

        def on_verdict(self, verdict) -> None:
            if verdict.confident and verdict.kind not in self.first:
                self.first[verdict.kind] = time.perf_counter()

    obs = FirstConfident()
    begin, cpu = time.perf_counter(), time.process_time()
    result = leakwidget.watch(step, setup=setup, seconds=seconds, widget=False, observers=[obs],
                              trace=trace)
    done, cpu = time.perf_counter(), time.process_time() - cpu
    starts, ends = result.column("start"), result.column("end")
    v = result.verdict
    at = {kind: t - begin for kind, t in obs.first.items()}
    answer = v.kind
    if v.kind == "leak":
        answer += f", {fmt_bytes(v.slope, signed=True)}/it"
        answer += f", confident after {at['leak']:.1f} s" if "leak" in at else ", not confident"
    elif v.kind == "inconclusive" and v.reason:
        answer += f" ({v.reason})"
    elif "leak" in at:
        answer += f" (but a confident leak at {at['leak']:.1f} s)"
    found = v.kind == "leak"
    if trace:
        sites = result.attribution.top_sites if result.attribution is not None else []
        if sites:
            filename, _, line = sites[0].site.rpartition(":")
            answer += (f"; top growing site: {_site(filename, int(line))}, "
                       f"{fmt_bytes(sites[0].bytes_per_iteration, signed=True)}/it")
            found = _is_leak_site(filename, int(line))
        else:
            answer += "; no growing site"
            found = False
    return {
        # --trace: the whole call per measured iteration, the traced phase after the run included.
        "ips": result.iteration_count / ((done - begin) if trace else (ends[-1] - starts[0])),
        "iterations": result.iteration_count, "cpu_s": cpu, "answer": answer,
        "found": found, "kind": v.kind,
        "answer_s": done - begin if trace else at.get(v.kind, done - begin),
        "slope": v.slope,
        "confident_at": at, "summary": v.summary, "stopped": result.stopped,
    }


def _memray_top(records) -> tuple[str, int, bool]:
    """The Python line holding the most bytes among the records (summed over stacks)."""
    sizes: dict[tuple[str, int], int] = {}
    for rec in records:
        frames = rec.stack_trace(max_stacks=1)
        key = (frames[0][1], frames[0][2]) if frames else ("<no Python frame>", 0)
        sizes[key] = sizes.get(key, 0) + rec.size
    if not sizes:
        return "none (no leaked allocation)", 0, False
    (filename, line), size = max(sizes.items(), key=lambda kv: kv[1])
    return _site(filename, line), size, _is_leak_site(filename, line)


def measure_memray(setup, step, seconds: float, native: bool) -> dict:
    import memray

    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        path = os.path.join(tmp, "capture.bin")
        with memray.Tracker(path, native_traces=native):
            loop = run_loop(setup, step, seconds)
        t0 = time.perf_counter()
        capture = os.path.getsize(path)
        with memray.FileReader(path) as reader:
            leaked = _memray_top(reader.get_leaked_allocation_records())
            peak = _memray_top(reader.get_high_watermark_allocation_records())
        done = time.perf_counter()
    answer = (f"top leaked site: {leaked[0]}, {fmt_bytes(leaked[1])}; high-water top: "
              + ("same" if peak[0] == leaked[0] else peak[0]) + f"; analysis {done - t0:.1f} s")
    return loop.out(answer=answer, found=leaked[2], answer_s=done - loop.begin,
                    analysis_s=done - t0, capture_bytes=capture, leaked_top=leaked[0],
                    leaked_top_bytes=leaked[1], peak_top=peak[0], peak_top_bytes=peak[1],
                    peak_found=peak[2])


def measure_memory_profiler(setup, step, seconds: float) -> dict:
    from memory_profiler import memory_usage

    box: dict[str, Loop] = {}

    def target() -> None:
        box["loop"] = run_loop(setup, step, seconds)

    samples = memory_usage((target, (), {}), interval=0.1, timestamps=True)
    done = time.perf_counter()
    loop = box["loop"]
    offset = time.time() - time.perf_counter()
    during = [mib for mib, ts in samples if loop.start + offset <= ts <= loop.end + offset]
    growth = (during[-1] - during[0]) * MiB if len(during) >= 2 else 0.0
    found = growth > MiB
    answer = f"grew {fmt_bytes(growth)}" if found else f"flat ({fmt_bytes(growth, signed=True)})"
    return loop.out(answer=answer, found=found, answer_s=done - loop.begin, growth_bytes=growth,
                    samples=len(during))


def measure_tracemalloc(setup, step, seconds: float) -> dict:
    import tracemalloc

    own = (tracemalloc.Filter(False, tracemalloc.__file__),)
    first: list[tracemalloc.Snapshot] = []
    tracemalloc.start()
    loop = run_loop(setup, step, seconds, before=lambda: first.append(tracemalloc.take_snapshot()))
    t0 = time.perf_counter()
    last = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = last.filter_traces(own).compare_to(first[0].filter_traces(own), "lineno")
    done = time.perf_counter()
    top = max(stats, key=lambda s: s.size_diff, default=None)
    if top is None or top.size_diff <= 0:
        return loop.out(answer="nothing grew", found=False, answer_s=done - loop.begin,
                        analysis_s=done - t0)
    frame = top.traceback[0]
    return loop.out(answer=(f"top growing site: {_site(frame.filename, frame.lineno)}, "
                            f"{fmt_bytes(top.size_diff, signed=True)}; analysis {done - t0:.1f} s"),
                    found=_is_leak_site(frame.filename, frame.lineno), answer_s=done - loop.begin,
                    analysis_s=done - t0, top_growth_bytes=top.size_diff)


RUNNERS: dict[str, Callable[..., dict]] = {
    "plain": measure_plain,
    "leakwidget": measure_leakwidget,
    "leakwidget-trace": lambda setup, step, s: measure_leakwidget(setup, step, s, trace=True),
    "memray": lambda setup, step, s: measure_memray(setup, step, s, native=False),
    "memray-native": lambda setup, step, s: measure_memray(setup, step, s, native=True),
    "memory_profiler": measure_memory_profiler,
    "tracemalloc": measure_tracemalloc,
    "scalene": measure_scalene_inner,
}


# ---------------------------------------------------------------------------------------------
# Worker side: one measurement (or the calibration) in a fresh process


def calibrate() -> dict:
    """Terms of the CPU sum for ~5 ms, and the tf.data batch size for ~1 ms per next()."""
    global _WORK, _BATCH
    _WORK = 10_000
    while (dt := _time_calls(_busy, 3)) < 0.002:
        _WORK *= 2
    for _ in range(3):
        _WORK = max(1, int(_WORK * 0.005 / _time_calls(_busy, 15)))
    for _ in range(4):
        it = iter(_dataset(False))
        dt = _time_calls(lambda: next(it), 300, warm=30)  # noqa: B023 (called right here)
        _BATCH = max(1, min(65536, round(_BATCH * 0.001 / dt)))
    return {"work": _WORK, "batch": _BATCH}


def _time_calls(fn: Callable[[], Any], n: int, warm: int = 1) -> float:
    """Median CPU seconds of the process per call, over n calls after ``warm`` unmeasured ones:
    CPU time, so that other load on the machine does not shrink the calibrated step."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(n):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def worker(tool: str, workload: str, seconds: float) -> dict:
    import tensorflow  # noqa: F401  (every workload runs with TensorFlow loaded)

    if tool == "calibrate":
        return calibrate()
    setup, step = make_workload(workload)
    return RUNNERS[tool](setup, step, seconds)


def worker_main(a: argparse.Namespace) -> None:
    global _WORK, _BATCH
    tool, workload, seconds = a.worker[0], a.worker[1], float(a.worker[2])
    _WORK, _BATCH = a.work or _WORK, a.batch or _BATCH
    try:
        out = worker(tool, workload, seconds)
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    print(MARK + json.dumps(out), flush=True)
    if tool != "scalene":
        # Skip TensorFlow's slow teardown (Scalene writes its profile at exit: let it).
        os._exit(0)


# ---------------------------------------------------------------------------------------------
# Parent side: the plan, the fresh processes, the table


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    return env


def run_child(cmd: list[str], timeout: float) -> dict:
    """Run one worker in its own process group; its JSON line, or {"error": why}."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_child_env(), start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
        out, err = proc.communicate()
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
            if timed_out:
                result["note"] = f"did not exit within {timeout:.0f} s"
            return result
    if timed_out:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return {"error": f"exit {proc.returncode}: {lines[-1][:160] if lines else 'no output'}"}


def worker_cmd(tool: str, workload: str, seconds: float, calib: dict) -> list[str]:
    return [THIS_FILE, "--worker", tool, workload, f"{seconds:g}",
            "--work", str(calib["work"]), "--batch", str(calib["batch"])]


def measure(tool: str, workload: str, seconds: float, calib: dict, timeout: float) -> dict:
    """One measurement in a fresh process (Scalene: the worker run under ``scalene run``)."""
    args = worker_cmd(tool, workload, seconds, calib)
    if tool != "scalene":
        return run_child([sys.executable, *args], timeout)
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        profile = os.path.join(tmp, "profile.json")
        cmd = [sys.executable, "-m", "scalene", "run", "--memory", "-o", profile,
               args[0], "---", *args[1:]]
        result = run_child(cmd, timeout)
        exited = time.time()
        if "error" in result:
            return result
        if not os.path.exists(profile):
            return {**result, "error": "Scalene wrote no profile"}
        return {**result, **scalene_answer(profile, result["begin_wall"], exited)}


def scalene_answer(path: str, begin_wall: float, exited_wall: float) -> dict:
    """What Scalene's JSON profile says: its leak report, and where the footprint peaked."""
    t0 = time.perf_counter()
    with open(path) as f:
        prof = json.load(f)
    files = prof.get("files", {})
    entry = next((v for k, v in files.items() if os.path.basename(k) == THIS_NAME), {})
    leaks = entry.get("leaks") or {}
    if leaks:
        line, info = max(leaks.items(), key=lambda kv: kv[1].get("likelihood", 0.0))
        answer = (f"leak reported at {_site(THIS_FILE, int(line))}, likelihood "
                  f"{info.get('likelihood', 0):.2f}, {info.get('velocity_mb_s', 0):.2f} MB/s")
        if len(leaks) > 1:
            answer += f" (+{len(leaks) - 1} other lines)"
    else:
        answer = "no leak reported"
    if prof.get("max_footprint_fname"):
        site = _site(prof["max_footprint_fname"], int(prof.get("max_footprint_lineno") or 0))
        answer += f"; peak {prof.get('max_footprint_mb', 0):.0f} MB at {site}"
    parsed = time.perf_counter() - t0
    return {"answer": answer, "found": bool(leaks), "leaks": leaks,
            "answer_s": exited_wall - begin_wall + parsed,
            "max_footprint_mb": prof.get("max_footprint_mb")}


def plan(workloads: list[str], tools: list[str], repeats: int) -> list[tuple[int, str, str, str]]:
    """(repeat, workload, tool to run, tool it is paired with): plain and tool alternate, the
    pair's order flipping every repeat."""
    steps = []
    for r in range(repeats):
        for wl in workloads:
            for tool in tools:
                pair = [("plain", tool), (tool, tool)]
                steps += [(r, wl, run, paired) for run, paired in (pair[::-1] if r % 2 else pair)]
    return steps


def run_all(a: argparse.Namespace, calib: dict, timeout: float) -> list[dict]:
    runs = []
    steps = plan(a.workloads, a.tools, a.repeats)
    t0 = time.perf_counter()
    for k, (r, wl, tool, paired) in enumerate(steps, 1):
        result = measure(tool, wl, a.seconds, calib, timeout)
        result.update(repeat=r, workload=wl, tool=tool, pair=paired)
        runs.append(result)
        said = result.get("error") or f"{result['ips']:.1f} it/s, {result.get('answer', '')}"
        print(f"[{k}/{len(steps)} {time.perf_counter() - t0:5.0f} s] #{r + 1} {wl} {tool}: {said}",
              file=sys.stderr, flush=True)
    return runs


def _speed(ok: list[dict], plain: list[dict]) -> dict:
    """Medians of the tool's and its paired plain runs: wall-clock it/s, and process CPU
    seconds per iteration (every thread counted: less sensitive to a loaded machine)."""
    ips, plain_ips = (statistics.median(x["ips"] for x in xs) for xs in (ok, plain))
    cpu, plain_cpu = (statistics.median(x["cpu_s"] / max(1, x["iterations"]) for x in xs)
                      for xs in (ok, plain))
    return {"ips": ips, "plain_ips": plain_ips, "slowdown": plain_ips / ips,
            "cpu_per_it": cpu, "plain_cpu_per_it": plain_cpu, "cpu_ratio": cpu / plain_cpu}


def _answer(ok: list[dict]) -> dict:
    """What the tool said in a typical run (the majority's flag), and how often it flagged."""
    found = sum(bool(x.get("found")) for x in ok)
    majority = 2 * found >= len(ok)
    answer = next(x for x in ok if bool(x.get("found")) == majority).get("answer", "")
    kinds = [x["kind"] for x in ok if x.get("kind")]
    if len(set(kinds)) > 1:  # leakwidget's verdicts differed between runs: say how
        answer += " [" + ", ".join(f"{k} {kinds.count(k)}/{len(ok)}"
                                   for k in sorted(set(kinds), key=kinds.index)) + "]"
    times = [x["answer_s"] for x in ok if x.get("answer_s") is not None]
    return {"flagged": f"{found}/{len(ok)}", "answer": answer,
            "answer_s": statistics.median(times) if times else None}


def summarize(runs: list[dict], workload: str, tool: str) -> dict:
    """One table row: medians over the repeats, and the answer of a typical run."""
    pairs = [x for x in runs if x["workload"] == workload and x["pair"] == tool]
    plain = [x for x in pairs if x["tool"] == "plain" and "error" not in x]
    ok = [x for x in pairs if x["tool"] == tool and "error" not in x]
    errors = [x["error"] for x in pairs if x["tool"] == tool and "error" in x]
    row: dict[str, Any] = {"workload": workload, "tool": tool, "runs": len(ok), "errors": errors}
    if not ok or not plain:
        row["answer"] = f"n/a ({errors[0] if errors else 'no baseline run'})"
        return row
    row.update(_speed(ok, plain), **_answer(ok))
    if errors:
        row["answer"] += f" ({len(errors)} run(s) failed: {errors[0]})"
    return row


def plain_row(runs: list[dict], workload: str) -> dict:
    """The baseline: every plain run of the workload."""
    plain = [x for x in runs if x["workload"] == workload and x["tool"] == "plain"
             and "error" not in x]
    row = {"workload": workload, "tool": "plain loop", "runs": len(plain), "answer": "n/a"}
    if plain:
        ips = statistics.median(x["ips"] for x in plain)
        cpu = statistics.median(x["cpu_s"] / max(1, x["iterations"]) for x in plain)
        row.update(ips=ips, plain_ips=ips, slowdown=1.0, cpu_per_it=cpu, cpu_ratio=1.0,
                   answer=f"no answer ({1e3 / ips:.2f} ms/step wall, {1e3 * cpu:.2f} ms CPU)")
    return row


def print_table(rows: list[dict]) -> None:
    head = ("workload", "tool", "it/s", "paired plain it/s", "slowdown", "CPU/it ratio",
            "flagged", "what it said", "answer after")

    def num(v: float | None, f: str) -> str:
        return format(v, f) if v is not None else "n/a"

    cells = [(r["workload"], r["tool"], num(r.get("ips"), ".1f"), num(r.get("plain_ips"), ".1f"),
              num(r.get("slowdown"), ".2f") + "x", num(r.get("cpu_ratio"), ".2f") + "x",
              r.get("flagged", "-"), r["answer"],
              num(r.get("answer_s"), ".1f") + " s" if r.get("answer_s") is not None else "-")
             for r in rows]
    widths = [max(len(str(c[i])) for c in [head, *cells]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        print("| " + " | ".join(str(v).ljust(w) for v, w in zip(c, widths, strict=True)) + " |")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_line() -> str:
    """Date, machine, versions and the command, for the line under the table."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 0
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    versions = ", ".join(f"{p} {v}" for p in PACKAGES if (v := _version(p)))
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"{when}; nproc {cpus}, {fmt_bytes(mem)} RAM, {platform.machine()}; "
            f"Python {platform.python_version()}; {versions}; "
            f"command: {shlex.join([os.path.basename(sys.executable), *sys.argv])}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="wall time of each run (10)")
    p.add_argument("--repeats", type=int, default=3, help="pairs (plain, tool) per row (3)")
    p.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS), metavar="TOOL",
                   help=f"tools to compare (all): {', '.join(TOOLS)}")
    p.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS),
                   metavar="WORKLOAD", help=f"workloads (all): {', '.join(WORKLOADS)}")
    p.add_argument("--json", metavar="PATH", help="also save every run's raw numbers here")
    p.add_argument("--work", type=int, help="terms of the CPU step's sum (default: calibrated)")
    p.add_argument("--batch", type=int, help="tf.data batch size (default: calibrated)")
    p.add_argument("--timeout", type=float,
                   help="seconds before one measurement is abandoned (6 x --seconds + 180)")
    p.add_argument("--worker", nargs=3, metavar=("TOOL", "WORKLOAD", "SECONDS"),
                   help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.repeats < 1:
        p.error("--seconds must be positive and --repeats at least 1")
    return a


def get_calibration(a: argparse.Namespace, timeout: float) -> dict:
    if a.work and a.batch:
        return {"work": a.work, "batch": a.batch}
    calib = run_child([sys.executable, THIS_FILE, "--worker", "calibrate", "-", "0"], timeout)
    if "error" in calib:
        raise SystemExit(f"calibration failed: {calib['error']}")
    return {"work": a.work or calib["work"], "batch": a.batch or calib["batch"]}


LEGEND = (
    "slowdown: median it/s of the paired plain runs / median it/s of the tool's runs (wall "
    "clock). CPU/it ratio: the same with the process's CPU seconds per iteration, every thread "
    "counted (memory_profiler's sampling process is not), less sensitive to other load. "
    "flagged: runs in which the tool flagged the leak (leakwidget: verdict \"leak\"; "
    "leakwidget-trace, memray, tracemalloc: the top site is the leaking line; memory_profiler: "
    "memory grew > 1 MiB during the loop; Scalene: its leak detector reported a line). answer "
    "after: seconds from the start of the run (setup included) until the answer was available, "
    "post-run analysis included."
)


def _load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def report(a: argparse.Namespace, calib: dict, runs: list[dict], load0: str,
           elapsed: float) -> dict:
    """Print the table and the lines around it; the whole report as a dict (for --json)."""
    rows = []
    for wl in a.workloads:
        rows.append(plain_row(runs, wl))
        rows += [summarize(runs, wl, tool) for tool in a.tools]
    print(f"\n{a.seconds:g} s per run, {a.repeats} (plain, tool) pairs per row, each run in a "
          f"fresh process; CPU step: sum of {calib['work']} squares; tf.data batch "
          f"{calib['batch']}; the leaking line: {THIS_NAME}:{LEAK_LINE}\n")
    print_table(rows)
    print(f"\n{LEGEND}")
    machine = machine_line()
    load = f"load average (1/5/15 min) {load0} at the start, {_load()} at the end"
    print(f"\n{machine}; {load}; full run {elapsed / 60:.1f} min")
    return {"machine": machine, "load": load, "elapsed_s": elapsed, "calibration": calib,
            "seconds": a.seconds, "repeats": a.repeats, "leak_line": LEAK_LINE,
            "workloads": WORKLOADS, "rows": rows, "runs": runs}


def main() -> None:
    a = parse_args()
    if a.worker:
        worker_main(a)
        return
    started, load0 = time.perf_counter(), _load()
    timeout = a.timeout or 6 * a.seconds + 180
    calib = get_calibration(a, timeout)
    print(f"calibrated: CPU sum of {calib['work']} squares, tf.data batch {calib['batch']}",
          file=sys.stderr, flush=True)
    runs = run_all(a, calib, timeout)
    result = report(a, calib, runs, load0, time.perf_counter() - started)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
