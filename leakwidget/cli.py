"""``leakwidget``: watch a program's memory from the command line.

    leakwidget run [options] -- PROGRAM ARGS...   run PROGRAM and watch its process tree
    leakwidget run --allocator jemalloc -- ...    ... with jemalloc (or tcmalloc) preloaded
    leakwidget attach PID [options]               watch a process that is already running
    leakwidget report RESULT.json --html OUT.html render a saved result as a page

An iteration is a fixed time window (``--interval``, 1 s) unless the program marks its own steps
with ``leakwidget.mark()`` (then one iteration per mark). The verdict is the notebook's: leak,
plateau, stable or inconclusive, with the slope per iteration, per second and per hour and the
time until memory runs out. ``run`` watches until the program ends (or ``--seconds`` /
``--iterations``, after which the program is stopped); ``attach`` until the process ends, the
budget is spent or Ctrl-C, and leaves the process running.

Exit status: 0 stable or plateau (or workers copying what they share), 1 leak, 2 inconclusive, 3 the program failed (non-zero exit
status or killed) or the attached process vanished, 4 bad input (a usage error, no such pid, a
process of another user, a kernel thread or one leakwidget runs under, a program that is not
found, an output path that cannot be written or names the same file as another) or an output
that could not be written at the end, 130 interrupted (Ctrl-C), 143 / 129 ended by SIGTERM /
SIGHUP (the result so far saved, as for Ctrl-C). Every message of leakwidget's own goes to
stderr; stdout is the program's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
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
from .engine.children import adopt_orphans, end_descendants
from .engine.environment import environment, process_variables
from .engine.kinds import ALLOCATORS, StopReason, VerdictKind
from .engine.records import RecordLog
from .engine.result import WatchResult, write_whole, written_in_place
from .engine.sources import ProcessTree, kernel_thread
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
        self.members = tree.members  # each process's own series (the copy-on-write test)
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

    # When the process ``run`` started exited (its descendants may live on: they are watched
    # until they end too).
    exited: float | None = None

    def reap_adopted(self) -> None:
        """Collect the processes the program left behind that have ended since: they are
        leakwidget's children (it is their subreaper), each a zombie until collected — a program
        that leaves one per step would fill the process table. Its own first process is left to
        ``popen``, which keeps its exit status."""
        while self.popen is not None:
            try:
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if ended is None:
                return
            if ended.si_pid == self.pid:
                if self.returncode() is None:  # (not collectable yet: look again next time)
                    return
                continue
            try:
                os.waitpid(ended.si_pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def returncode(self) -> int | None:
        """None while it runs; its exit status once it ended (-N: killed by signal N; for an
        attached process, which is not our child, 0)."""
        if self.popen is not None:
            code = self.popen.poll()
            if code is not None and self.exited is None:
                self.exited = time.monotonic()
            return code
        try:
            alive = self.handle.is_running() and self.handle.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        return None if alive else 0



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
        # ``run``'s program has ended when every process of it has (the target's tree), an
        # attached process when it has.
        self.program.reap_adopted()
        code = self.program.returncode()
        if self.target.ended or (code is not None and self.program.popen is None):
            raise ProgramEnded(_ended_text(self.program, self.program.returncode()))


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
    with EndSignals() as signals:
        try:
            if args.command == "report":
                return _report(args)
            return _watch(args, signals)
        except BadInput as exc:
            _say(f"error: {exc}")
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:  # outside the watch (which keeps its result on Ctrl-C)
            _say("interrupted")
            return signals.status()


class EndSignals:
    """SIGTERM and SIGHUP (a CI timeout, ``kill``, a closed terminal, a job scheduler) end the
    watch as Ctrl-C does: the result so far is kept and saved, the program stopped. Each is
    turned into SIGINT, so the watch's own interrupt handling (raise in the step, ignore while
    the result is put together) applies; the exit status says which came (128 + its number)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self._saved: dict[int, object] = {}

    def __enter__(self) -> EndSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._saved[signum] = signal.signal(signum, self._as_interrupt)
            # A script's background job starts with SIGINT ignored; what it is turned into must
            # still be heard.
            if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
                self._saved[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)

    def _as_interrupt(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        signal.raise_signal(signal.SIGINT)

    def status(self) -> int:
        """The exit status of an interrupted watch: 130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP."""
        return EXIT_INTERRUPTED if self.received is None else 128 + self.received

    def note(self, program: Program) -> str:
        if self.received is None:
            return ""
        then = "the program was stopped" if program.popen is not None else "the process is left running"
        return (f"leakwidget received {signal.Signals(self.received).name}: the watch ended there, "
                f"and {then}.")


def _report(args: argparse.Namespace) -> int:
    from .report.html import render_html
    from .report.saved import check_saved

    try:
        with open(args.result, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the result {args.result}: {_reason(exc)}") from None
    try:
        check_saved(doc)
    except ValueError as exc:
        raise BadInput(f"{args.result} is not a leakwidget result (saved with --json or "
                       f"result.to_json()): {exc}") from None
    _check_outputs({"--html": args.html}, reads=("RESULT.json", args.result))
    page = render_html(doc)
    try:
        write_whole(args.html, page)
    except OSError as exc:
        raise BadInput(f"cannot write --html {args.html}: {_reason(exc)}") from None
    _say(f"wrote {args.html}")
    return 0


def _watch(args: argparse.Namespace, signals: EndSignals) -> int:
    _check_outputs({"--json": args.json, "--csv": args.csv, "--html": args.html})
    command = _command(args)
    line = output = None
    if not args.quiet:
        from .console import LiveLine, ProgramOutput

        line = LiveLine(_label(args, command))
        if command is not None and ProgramOutput.wanted(args.quiet):
            output = ProgramOutput(line)
    with MarkCounter() as counter:
        program = None
        try:
            program = _start(args, command, counter, output)
            result, waiter = _observe(args, program, counter, line)
        finally:
            if command is not None:  # also when an interrupt cut _start short
                _end_run(program)
            if output is not None:
                output.close()  # the program's last lines come before the report
        code = _conclude(args, result, program, waiter, signals)
    # The allocator that matters is the program's (its environment), not leakwidget's own; and
    # the libraries leakwidget has loaded say nothing about the program.
    result.environment = environment(program.variables or {})
    doc = json.loads(result.to_json())
    doc["program"] = _program_info(args, program, waiter)
    if not _write_outputs(args, result, doc):
        return EXIT_BAD_INPUT
    return code


def _end_run(program: Program | None) -> None:
    """End the program ``run`` started and every process it started, those it left behind
    included (leakwidget is their subreaper): SIGTERM, then SIGKILL after ``GRACE``."""
    end_descendants(GRACE)
    if program is not None:
        program.popen.wait()
    adopt_orphans(False)


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
        try:
            handle = psutil.Process(args.pid)
            _check_attachable(handle)
            command = handle.cmdline()
        except psutil.NoSuchProcess:
            raise BadInput(f"no process with pid {args.pid}") from None
        except psutil.AccessDenied:
            raise BadInput(f"not allowed to read process {args.pid} (it belongs to another user)") from None
        return Program(args.pid, command, handle=handle, variables=process_variables(args.pid))
    env = dict(os.environ, **{MARKS_ENV: counter.path})
    library = _allocator_library(args.allocator)
    if library is not None:  # before the program starts: the only time a preload acts
        env["LD_PRELOAD"] = " ".join(filter(None, [library, env.get("LD_PRELOAD")]))
    streams = {} if output is None else {"stdout": output.slave, "stderr": output.slave}
    # What the program leaves behind (a daemon's double fork, `cmd &` in a script that exits)
    # becomes leakwidget's child, not init's: watched with the rest, and stopped with it.
    adopt_orphans()
    try:
        popen = subprocess.Popen(command, env=env, **streams)
    except OSError as exc:  # not found, not executable (the caller closes the output)
        raise BadInput(f"cannot run {command[0]}: {_reason(exc)}") from None
    if output is not None:
        output.start()
    return Program(popen.pid, command, popen=popen, variables=env)


def _check_attachable(handle: psutil.Process) -> None:
    """Refuse what has no memory of its own to watch, or whose tree holds leakwidget itself."""
    pid = handle.pid
    if pid == os.getpid():
        raise BadInput("that pid is leakwidget itself")
    if kernel_thread(pid):
        raise BadInput(f"process {pid} ({handle.name()}) is a kernel thread: it has no memory of its "
                       "own to watch")
    if pid in {p.pid for p in psutil.Process().parents()}:
        what = ("init, the system's first process" if pid == 1
                else f"{handle.name()}, which leakwidget runs under")
        raise BadInput(f"process {pid} is {what}: its tree includes leakwidget itself, whose memory "
                       "would be counted as its own; attach to the program you want to watch")


def _observe(args: argparse.Namespace, program: Program, counter: MarkCounter,
             line: LiveLine | None) -> tuple[WatchResult, Waiter]:
    try:
        tree = (ProcessTree(os.getpid(), descendants_only=True) if program.popen is not None
                else ProcessTree(program.pid))
        target = Target(tree)
    except ProcessLookupError:
        raise BadInput(f"no process with pid {program.pid}") from None
    except PermissionError as exc:
        raise BadInput(str(exc)) from None
    waiter = Waiter(program, target, counter, args.interval)
    spec = WatchSpec(
        step=waiter, iterations=args.iterations,
        seconds=args.seconds if args.seconds is not None else math.inf,
        warmup=args.warmup, max_rss=args.max_rss, label=_label(args, program.command),
        repeatable=False,
    )
    watch = ProgramWatch(spec, [line] if line is not None else [], source=target, waiter=waiter)
    return watch.run(), waiter


def _conclude(args: argparse.Namespace, result: WatchResult, program: Program, waiter: Waiter,
              signals: EndSignals) -> int:
    """Print the report; the exit status."""
    ended = isinstance(result.error, ProgramEnded)
    failed = False
    if ended:
        code = program.returncode()
        failed = program.popen is None or (code is not None and code != 0)
        if not failed:  # the program finished early: its partial verdict stands
            result.stopped = "ended"
            result.error = None
            result.error_traceback = ""
        result.stage_notes.append(_ended_text(program, code))
        _leave_out_the_exit(result)
    elif result.error is not None:
        result.stage_notes.append(f"The watch failed: {result.error!r}")
        failed = True
    if signals.note(program):
        result.stage_notes.append(signals.note(program))
    if waiter.folded:
        result.stage_notes.append(
            f"Marks came faster than the process tree's memory can be read: {waiter.folded:,} of "
            f"{waiter.marks + waiter.folded:,} marks were folded into another mark's iteration.")
    if not args.quiet:
        _print_report(result, waiter)
    if result.stopped == "interrupted":
        return signals.status()
    if failed:
        return EXIT_PROGRAM_FAILED
    if result.copying:  # workers copying what they share: bounded, a plateau per worker
        return EXIT_CODES["plateau"]
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
    _say(result.summary)  # (forked workers copying what they share: the copies, first)
    if result.copying:
        _say(result.tree_summary)
    r = rates(v, result.column("index"), result.column("end"))
    what = "marks" if waiter.marking else f"{waiter.interval:g} s windows"
    if result.iteration_count >= 2 and v.kind != "stable":
        _say(f"rate {r.text()} (iterations: {what})")
    rss = result.column("rss")
    line = f"{result.iteration_count:,} iterations in {format_duration(result.elapsed)} (stopped: {result.stopped})"
    if rss.size:
        line += "; " + rss_travel(result.baseline_rss, rss[0], rss[-1], result.column("peak_rss").max())
    _say(line + ".")
    if result.copy_on_write is not None:  # what bounds the copies, each worker's, what to change
        for said in result.copy_on_write.lines()[1 if result.copying else 0:]:
            _say(said)
    for note in result.stage_notes:
        _say(note)


def _write_outputs(args: argparse.Namespace, result: WatchResult, doc: dict) -> bool:
    """Write each file asked for; False (each failure said in one line) if one could not be."""
    from .report.html import render_html

    writes = {"--json": (args.json, lambda: write_whole(args.json, json.dumps(doc))),
              "--csv": (args.csv, lambda: result.to_csv(args.csv)),
              "--html": (args.html, lambda: write_whole(args.html, render_html(doc)))}
    written = True
    for option, (path, write) in writes.items():
        if path:
            try:
                write()
            except OSError as exc:  # the folder removed, the disk full since the start
                _say(f"error: cannot write {option} {path}: {_reason(exc)}")
                written = False
    return written


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
               "or the process vanished, 4 bad input or an output not written, 130 interrupted "
               "(143 SIGTERM, 129 SIGHUP).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser("run", help="run a program and watch its process tree",
                         description="Run PROGRAM and watch the memory of its process tree until it "
                                     "ends (or --seconds / --iterations, then it is stopped).")
    _watch_options(run)
    run.add_argument("--allocator", choices=ALLOCATORS,
                     help="the program's malloc: glibc, or jemalloc / tcmalloc preloaded (LD_PRELOAD)")
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


def _check_outputs(outputs: dict[str, str | None], reads: tuple[str, str] | None = None) -> None:
    """Refuse output paths before the watch starts rather than lose the result after it: each
    must be writable, and no two may name the same file (nor the one ``reads`` names, the
    option and path of an input)."""
    seen: dict[str, str] = {}
    if reads is not None:
        seen[os.path.realpath(reads[1])] = reads[0]
    for option, path in outputs.items():
        if path is None:
            continue
        same = seen.setdefault(os.path.realpath(path), option)
        if same != option:
            raise BadInput(f"{same} and {option} name the same file ({path}): give each its own")
        _check_writable(path, option)


def _check_writable(path: str, option: str) -> None:
    if os.path.isdir(path):
        raise BadInput(f"cannot write {option} {path}: it is a directory")
    if written_in_place(path):  # a FIFO, a terminal, /dev/stdout: written as it is
        if not os.access(path, os.W_OK):
            raise BadInput(f"cannot write {option} {path}: Permission denied")
        return
    # A new or regular file is written beside its target (a symlink's), then renamed.
    folder = os.path.dirname(os.path.realpath(path))
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".leakwidget-probe-")
    except OSError as exc:
        raise BadInput(f"cannot write {option} {path}: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(probe)


def _allocator_library(name: str | None) -> str | None:
    """The library to preload for ``--allocator`` (None: glibc's own); a missing one is bad input."""
    from .engine.workers.isolate import IsolationError, allocator_library

    try:
        return allocator_library(name)
    except IsolationError as exc:
        raise BadInput(str(exc)) from None


def _label(args: argparse.Namespace, command: list[str] | None) -> str:
    if args.command == "attach":
        return f"pid {args.pid}"
    return os.path.basename(command[0]) if command else "program"


def _ended_text(program: Program, code: int | None) -> str:
    now = time.monotonic()
    after = format_duration(now - program.started)
    if program.popen is None:
        return f"Process {program.pid} ended after {after} of watching."
    exited = program.exited if program.exited is not None else now
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    text = f"The program {how} after {format_duration(exited - program.started)}"
    if now - exited >= 1.0:
        text += f"; the processes it left running ended after {after}"
    return text + "."


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _say(text: str) -> None:
    try:
        print(f"leakwidget: {text}", file=sys.stderr, flush=True)
    except OSError:  # a terminal that hung up (SIGHUP): the files must still be written
        pass


if __name__ == "__main__":
    sys.exit(main())
