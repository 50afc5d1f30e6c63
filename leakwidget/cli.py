"""``leakwidget``: watch a program's memory from the command line.

    leakwidget run [options] -- PROGRAM ARGS...   run PROGRAM and watch its process tree
    leakwidget attach PID [options]               watch a process that is already running
    leakwidget report RESULT.json --html OUT.html render a saved result as a page

An iteration is a fixed time window (``--interval``, 1 s) unless the program marks its own steps
with ``leakwidget.mark()`` (then one iteration per mark). The verdict is the notebook's: leak,
plateau, stable or inconclusive, with the slope per iteration, per second and per hour and the
time until memory runs out. ``run`` watches until the program ends (or ``--seconds`` /
``--iterations``, after which the program is stopped); ``attach`` until the process ends, the
budget is spent or Ctrl-C, and leaves the process running.

Exit status: 0 stable or plateau, 1 leak, 2 inconclusive, 3 the program failed (non-zero exit
status or killed) or the attached process vanished, 4 bad input (a usage error, no such pid, a
process of another user, a program that is not found, an output path that cannot be written),
130 interrupted (Ctrl-C). Every message of leakwidget's own goes to stderr; stdout is the
program's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import psutil

from . import __version__
from .engine import sampler
from .engine.arguments import non_negative_int, positive_float, positive_int, size
from .engine.environment import environment, process_variables
from .engine.kinds import StopReason, VerdictKind
from .engine.records import RecordLog
from .engine.result import WatchResult, write_whole
from .engine.sources import ProcessTree
from .engine.spec import WatchSpec
from .engine.units import format_bytes, format_duration, rss_travel
from .engine.watch import Watch, verdict_of
from .marks import ENV as MARKS_ENV
from .marks import MarkCounter

if TYPE_CHECKING:
    from .console import LiveLine, ProgramOutput

EXIT_CODES: dict[VerdictKind, int] = {"stable": 0, "plateau": 0, "leak": 1, "inconclusive": 2}
EXIT_PROGRAM_FAILED = 3
EXIT_BAD_INPUT = 4
EXIT_INTERRUPTED = 130

POLL_WINDOW = 0.02  # seconds between looks at the marks and the program while a window runs
POLL_MARKS = 0.001  # ... once the program marks its steps
MAX_BEHIND = 100  # marks the watch may lag before it folds them into one iteration
TEARDOWN = 2.0  # seconds before a program's end in which falling RSS is taken for its exit
TEARDOWN_FALL = 0.05  # ... when it fell by this share of its height
GRACE = 5.0  # seconds a program gets to end after SIGTERM before SIGKILL


class BadInput(Exception):
    """What the user asked for cannot be done: one line, exit status 4."""


class ProgramEnded(Exception):
    """The watched program (or process) ended while the watch ran."""


# ---------------------------------------------------------------------------------------------
# What is watched


class Target:
    """The watched process tree as the engine's memory source, tolerant of its ending: once the
    root is gone ``rss()`` repeats the last reading and ``ended`` is set (the sampler thread
    must not die of it; the waiting step ends the watch)."""

    in_process = False
    hz = ProcessTree.hz

    def __init__(self, tree: ProcessTree) -> None:
        self.tree = tree
        self.last = 0
        self.ended = False
        self.rss()  # a program that is over already is seen at the first look of the step

    def rss(self) -> int:
        if not self.ended:
            try:
                self.last = self.tree.rss()
            except ProcessLookupError:
                self.ended = True
        return self.last


@dataclass
class Program:
    """A process to watch: the one ``run`` started (``popen``), or the one ``attach`` found."""

    pid: int
    command: list[str]
    popen: subprocess.Popen | None = None
    handle: psutil.Process | None = None
    started: float = field(default_factory=time.monotonic)
    # Its environment (read at the start: an attached process may vanish), which sets its
    # allocator: MALLOC_ARENA_MAX, LD_PRELOAD.
    variables: dict[str, str] | None = None

    def returncode(self) -> int | None:
        """None while it runs; its exit status once it ended (-N: killed by signal N; for an
        attached process, which is not our child, 0)."""
        if self.popen is not None:
            return self.popen.poll()
        try:
            alive = self.handle.is_running() and self.handle.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        return None if alive else 0

    def stop(self) -> None:
        """End a program ``run`` started, and its descendants (SIGTERM, then SIGKILL)."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            procs = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=GRACE)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.popen.wait()


class Waiter:
    """The watch's step: wait until the window ends or the program marks a step.

    Windows until the first mark; from the first mark on, one iteration per mark. A mark that
    comes while the watch is busy between iterations (reading the tree, a live verdict) still
    gets its own iteration, measured a little late, so the verdict's "per iteration" stays "per
    mark"; only when marks outrun the watch by more than ``MAX_BEHIND`` are the missed ones
    folded into one iteration (``folded`` counts them). Ends the watch (``ProgramEnded``) when
    the program ends, and returns at once when the watch is asked to stop (the memory guard),
    so a long window does not delay it.
    """

    def __init__(self, program: Program, target: Target, counter: MarkCounter, interval: float) -> None:
        self.program = program
        self.target = target
        self.counter = counter
        self.interval = interval
        self.stop = threading.Event()
        self.marking = False
        self.marks = 0  # marks that have ended an iteration so far
        self.folded = 0  # marks folded into another's iteration (the watch fell behind)

    def __call__(self) -> None:
        deadline = time.monotonic() + self.interval
        next_check = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_check:
                self._check_program()
                next_check = now + POLL_WINDOW
            behind = self.counter.count() - self.marks - self.folded
            if behind > 0:
                self.marking = True
                if behind > MAX_BEHIND:
                    self.folded += behind - 1
                self.marks += 1
                return
            if not self.marking and now >= deadline:
                return
            time.sleep(POLL_MARKS if self.marking else min(POLL_WINDOW, max(0.0, deadline - now)))

    def _check_program(self) -> None:
        code = self.program.returncode()
        if code is not None or self.target.ended:
            code = self.program.returncode()
            raise ProgramEnded(_ended_text(self.program, code))


class ProgramWatch(Watch):
    """A watch whose stop requests also wake the waiting step."""

    def __init__(self, spec: WatchSpec, observers: Sequence, *, source: Target, waiter: Waiter) -> None:
        super().__init__(spec, observers, source=source, live_verdict=True)
        self.waiter = waiter

    def request_stop(self, reason: StopReason = "stopped") -> None:
        super().request_stop(reason)
        self.waiter.stop.set()


# ---------------------------------------------------------------------------------------------
# The commands


def main(argv: Sequence[str] | None = None) -> int:
    """The ``leakwidget`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            return _report(args)
        return _watch(args)
    except BadInput as exc:
        _say(f"error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # outside the watch (which keeps its result on Ctrl-C)
        _say("interrupted")
        return EXIT_INTERRUPTED


def _report(args: argparse.Namespace) -> int:
    from .report.html import render_html

    try:
        with open(args.result, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the result {args.result}: {_reason(exc)}") from None
    if not isinstance(doc, dict) or "verdict" not in doc:
        raise BadInput(f"{args.result} is not a leakwidget result (saved with --json or result.to_json())")
    _check_writable(args.html, "--html")
    write_whole(args.html, render_html(doc))
    _say(f"wrote {args.html}")
    return 0


def _watch(args: argparse.Namespace) -> int:
    outputs = {"--json": args.json, "--csv": args.csv, "--html": args.html}
    for option, path in outputs.items():
        if path is not None:
            _check_writable(path, option)
    command = _command(args)
    line = output = None
    if not args.quiet:
        from .console import LiveLine, ProgramOutput

        line = LiveLine(_label(args, command))
        if command is not None and ProgramOutput.wanted(args.quiet):
            output = ProgramOutput(line)
    with MarkCounter() as counter:
        program = _start(args, command, counter, output)
        try:
            result, waiter = _observe(args, program, counter, line)
        finally:
            program.stop()
            if output is not None:
                output.close()  # the program's last lines come before the report
        code = _conclude(args, result, program, waiter)
    # The allocator that matters is the program's (its environment), not leakwidget's own; and
    # the libraries leakwidget has loaded say nothing about the program.
    result.environment = environment(program.variables or {})
    doc = json.loads(result.to_json())
    doc["program"] = _program_info(args, program, waiter)
    _write_outputs(args, result, doc)
    return code


def _command(args: argparse.Namespace) -> list[str] | None:
    """The program ``run`` is to start (None for ``attach``)."""
    if args.command != "run":
        return None
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise BadInput("no program to run: leakwidget run [options] -- PROGRAM ARGS...")
    return command


def _start(args: argparse.Namespace, command: list[str] | None, counter: MarkCounter,
           output: ProgramOutput | None) -> Program:
    if command is None:
        if args.pid == os.getpid():
            raise BadInput("that pid is leakwidget itself")
        try:
            handle = psutil.Process(args.pid)
            command = handle.cmdline()
        except psutil.NoSuchProcess:
            raise BadInput(f"no process with pid {args.pid}") from None
        except psutil.AccessDenied:
            raise BadInput(f"not allowed to read process {args.pid} (it belongs to another user)") from None
        return Program(args.pid, command, handle=handle, variables=process_variables(args.pid))
    env = dict(os.environ, **{MARKS_ENV: counter.path})
    streams = {} if output is None else {"stdout": output.slave, "stderr": output.slave}
    try:
        popen = subprocess.Popen(command, env=env, **streams)
    except OSError as exc:  # not found, not executable
        if output is not None:
            output.close()
        raise BadInput(f"cannot run {command[0]}: {_reason(exc)}") from None
    if output is not None:
        output.start()
    return Program(popen.pid, command, popen=popen, variables=env)


def _observe(args: argparse.Namespace, program: Program, counter: MarkCounter,
             line: LiveLine | None) -> tuple[WatchResult, Waiter]:
    try:
        target = Target(ProcessTree(program.pid))
    except ProcessLookupError:
        raise BadInput(f"no process with pid {program.pid}") from None
    except PermissionError as exc:
        raise BadInput(str(exc)) from None
    waiter = Waiter(program, target, counter, args.interval)
    spec = WatchSpec(
        step=waiter, iterations=args.iterations,
        seconds=args.seconds if args.seconds is not None else math.inf,
        warmup=args.warmup, max_rss=args.max_rss, label=_label(args, program.command),
    )
    watch = ProgramWatch(spec, [line] if line is not None else [], source=target, waiter=waiter)
    return watch.run(), waiter


def _conclude(args: argparse.Namespace, result: WatchResult, program: Program, waiter: Waiter) -> int:
    """Print the report; the exit status."""
    ended = isinstance(result.error, ProgramEnded)
    failed = False
    if ended:
        code = program.returncode()
        failed = program.popen is None or (code is not None and code != 0)
        if not failed:  # the program finished early: its partial verdict stands
            result.stopped = "stopped"
            result.error = None
            result.error_traceback = ""
        result.stage_notes.append(_ended_text(program, code))
        _leave_out_the_exit(result)
    elif result.error is not None:
        result.stage_notes.append(f"The watch failed: {result.error!r}")
        failed = True
    if waiter.folded:
        result.stage_notes.append(
            f"Marks came faster than the process tree's memory can be read: {waiter.folded:,} of "
            f"{waiter.marks + waiter.folded:,} marks were folded into another mark's iteration.")
    if not args.quiet:
        _print_report(result, waiter)
    if result.stopped == "interrupted":
        return EXIT_INTERRUPTED
    if failed:
        return EXIT_PROGRAM_FAILED
    return EXIT_CODES[result.verdict.kind]


def _leave_out_the_exit(result: WatchResult) -> None:
    """A program that ends frees its memory first (the interpreter's teardown): the last
    iterations may show RSS falling off a cliff that says nothing about a leak. When RSS fell
    clearly (by ``TEARDOWN_FALL`` of its height, and at least 1 MiB) within the last
    ``TEARDOWN`` seconds, the iterations after that window's highest point are left out of the
    verdict (they stay in the records, the CSV and the chart)."""
    end, rss = result.column("end"), result.column("rss")
    tail = np.flatnonzero(end >= result.elapsed - TEARDOWN)
    if rss.size < 2 or tail.size == 0:
        return
    top = int(tail[np.argmax(rss[tail])])
    fall = rss[top] - rss[-1]
    if top == rss.size - 1 or fall < max(2**20, TEARDOWN_FALL * rss[top]):
        return
    k = rss.size - 1 - top
    log = RecordLog()
    for record in result.iterations[: top + 1]:
        log.append(record)
    result.verdict = verdict_of(log, result.spec, sampler.memory_status()[0], result.baseline_rss)
    result.stage_notes.append(
        f"The last {k} iteration{'s' if k > 1 else ''}, in which the program was exiting (its "
        f"memory falling by {format_bytes(fall)}), are left out of the verdict.")


def _print_report(result: WatchResult, waiter: Waiter) -> None:
    from .report.rates import rates

    v = result.verdict
    _say(v.summary)
    r = rates(v, result.column("index"), result.column("end"))
    what = "marks" if waiter.marking else f"{waiter.interval:g} s windows"
    if result.iteration_count >= 2 and v.kind != "stable":
        _say(f"rate {r.text()} (iterations: {what})")
    rss = result.column("rss")
    line = f"{result.iteration_count:,} iterations in {format_duration(result.elapsed)} (stopped: {result.stopped})"
    if rss.size:
        line += "; " + rss_travel(result.baseline_rss, rss[0], rss[-1], result.column("peak_rss").max())
    _say(line + ".")
    for note in result.stage_notes:
        _say(note)


def _write_outputs(args: argparse.Namespace, result: WatchResult, doc: dict) -> None:
    if args.json:
        write_whole(args.json, json.dumps(doc))
    if args.csv:
        result.to_csv(args.csv)
    if args.html:
        from .report.html import render_html

        write_whole(args.html, render_html(doc))


def _program_info(args: argparse.Namespace, program: Program, waiter: Waiter) -> dict:
    variables = program.variables
    info = {
        "command": " ".join(program.command),
        "pid": program.pid,
        "how": "started by leakwidget run" if program.popen is not None else "attached",
        "iterations": "one per leakwidget.mark()" if waiter.marking else f"{waiter.interval:g} s windows",
        "marks": waiter.marks + waiter.folded,
        "marks_folded": waiter.folded,
        "exit_status": program.popen.returncode if program.popen is not None else None,
        "allocator": "unknown (its environment cannot be read)",
    }
    if variables is not None:
        env = environment(variables)
        info["allocator"] = env["allocator"]
        info.update(env["allocator_variables"])
    return info


# ---------------------------------------------------------------------------------------------
# Arguments


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="leakwidget",
        description="Watch a program's memory and decide whether it leaks.",
        epilog="Exit status: 0 stable or plateau, 1 leak, 2 inconclusive, 3 the program failed "
               "or the process vanished, 4 bad input, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser("run", help="run a program and watch its process tree",
                         description="Run PROGRAM and watch the memory of its process tree until it "
                                     "ends (or --seconds / --iterations, then it is stopped).")
    _watch_options(run)
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                     help="the program and its arguments, after --")
    attach = sub.add_parser("attach", help="watch a process that is already running",
                            description="Watch the memory of process PID and its descendants until "
                                        "it ends, --seconds / --iterations, or Ctrl-C; the process "
                                        "is left running.")
    attach.add_argument("pid", type=positive_int, help="the process id")
    _watch_options(attach)
    report = sub.add_parser("report", help="render a saved result (--json) as an HTML page",
                            description="Render a result saved with --json (or result.to_json()) as "
                                        "one self-contained HTML page.")
    report.add_argument("result", metavar="RESULT.json")
    report.add_argument("--html", required=True, metavar="OUT.html", help="the page to write")
    return parser


def _watch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=positive_float, default=1.0, metavar="S",
                   help="seconds per iteration when the program does not call leakwidget.mark() (default: 1)")
    p.add_argument("--seconds", "-t", type=positive_float, metavar="S", help="stop watching after S seconds")
    p.add_argument("--iterations", "-n", type=positive_int, metavar="N", help="stop after N iterations")
    p.add_argument("--warmup", type=non_negative_int, metavar="N",
                   help="treat the first N iterations as warm-up (default: detected)")
    p.add_argument("--max-rss", type=size, metavar="SIZE",
                   help="stop before the tree's memory exceeds SIZE (2GiB, 500M)")
    p.add_argument("--json", metavar="PATH", help="save the result as JSON (for leakwidget report)")
    p.add_argument("--csv", metavar="PATH", help="save one row per iteration as CSV")
    p.add_argument("--html", metavar="PATH", help="save the report as one self-contained HTML page")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no report")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits with 4: 2 means "inconclusive" here."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")






# ---------------------------------------------------------------------------------------------
# Small helpers


def _check_writable(path: str, option: str) -> None:
    """Refuse an output path before the watch starts rather than lose the result after it."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BadInput(f"cannot write {option} {path}: it is a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".leakwidget-probe-")
    except OSError as exc:
        raise BadInput(f"cannot write {option} {path}: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(probe)


def _label(args: argparse.Namespace, command: list[str] | None) -> str:
    if args.command == "attach":
        return f"pid {args.pid}"
    return os.path.basename(command[0]) if command else "program"


def _ended_text(program: Program, code: int | None) -> str:
    after = format_duration(time.monotonic() - program.started)
    if program.popen is None:
        return f"Process {program.pid} ended after {after} of watching."
    if code is not None and code < 0:
        return f"The program was killed by signal {-code} after {after}."
    return f"The program exited with status {code} after {after}."


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _say(text: str) -> None:
    print(f"leakwidget: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
