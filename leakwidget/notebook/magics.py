"""``%%leakwatch`` and ``%leakwatch``: repeat a cell while watching memory.

Usage, like ``%%timeit``::

    %%leakwatch [options] [setup statement]
    <step: the cell body, run once per iteration in the notebook's namespace>

    %leakwatch [options] statement

The setup statement runs once; the cell body is the step. Sizes accept units ("2GiB",
"500M"). Stage ids look like ``map@4`` (a stage built on line 4 of the cell), ``map@file.py:12``
(built elsewhere) or a bare kind (``prefetch``: every prefetch). Examples::

    %%leakwatch -t 30 it = iter(make_dataset())
    next(it)

    %%leakwatch --bisect it = iter(make_dataset())
    next(it)

    %leakwatch -n 200 --no-widget process(batch)

    %%leakwatch --isolate -t 30 it = iter(make_dataset())     # in a fresh worker process
    next(it)

    %%leakwatch --compare-allocators -t 30 it = iter(make_dataset())
    next(it)
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
import sys
import types

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..engine.arguments import non_negative_int, positive_float, positive_int, size
from ..engine.bisect import run_bisection
from ..engine.kinds import ALLOCATORS
from ..engine.observer import Observer
from ..engine.result import WatchResult
from ..engine.search import BisectResult
from ..engine.spec import WatchSpec
from ..engine.watch import NO_PAUSE, Pause, WatchAlreadyRunning, YieldToLoop, run_sync
from ..engine.workers.cluster import ClusterError, connect
from ..engine.workers.compare import CompareResult, run_compare
from ..engine.workers.isolate import IsolationError, run_watch
from ..stages import Toggles, parse_ids
from . import delivery
from . import display as result_display
from .progress import ProgressLine
from .shipping import ship_cell

PROG = "%%leakwatch"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{PROG}: {message}\n\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None):
        raise UsageError(message or self.format_help())






def _ids(text: str) -> tuple[str, ...]:
    ids = parse_ids(text, "stage ids")
    if not ids:
        raise argparse.ArgumentTypeError("expected comma-separated stage ids or kinds, e.g. map@4,prefetch")
    return ids


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        usage="%(prog)s [options] [setup statement]\n<step: the cell body>",
        description="Run the cell repeatedly while sampling memory; decide leak, plateau or stable.",
        add_help=True,
    )
    p.add_argument("-n", "--iterations", type=positive_int, metavar="N",
                   help="stop after N iterations")
    p.add_argument("-t", "--seconds", type=positive_float, metavar="S",
                   help="stop after S seconds (default: when the verdict is confident, at most 60 s, "
                        "a measure of garbage after the run included)")
    p.add_argument("--warmup", type=non_negative_int, metavar="N",
                   help="treat the first N iterations as warm-up (default: detect it)")
    p.add_argument("--max-rss", type=size, metavar="SIZE",
                   help="stop before the process's RSS exceeds SIZE (e.g. 2GiB, 500M)")
    p.add_argument("--no-widget", action="store_true",
                   help="no live widget: print a progress line and the report")
    p.add_argument("-o", dest="output", metavar="NAME",
                   help="store the result in the variable NAME")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing (use with -o)")
    p.add_argument("--off", type=_ids, default=(), metavar="IDS",
                   help="switch these pipeline stages off (comma-separated ids or kinds)")
    p.add_argument("--serial", type=_ids, default=(), metavar="IDS",
                   help="make these pipeline stages serial and deterministic")
    p.add_argument("--bisect", action="store_true",
                   help="find the stage(s) whose being on makes memory leak")
    p.add_argument("--trace", action="store_true",
                   help="list the growing allocation sites (tracemalloc), traced in more "
                        "iterations after the measured run (up to as long again)")
    p.add_argument("--lines", action="store_true",
                   help="line-by-line memory increments of the step (memory_profiler; slower)")
    p.add_argument("--native", action="store_true",
                   help="call stacks (C/C++ and Python) of native memory allocated and not freed "
                        "in a window of iterations (memray)")
    p.add_argument("--exact-peaks", action="store_true",
                   help="reset the process's peak-RSS mark at every iteration: the exact peak of "
                        "each one, at the price of the process's own peak record (ru_maxrss)")
    p.add_argument("--isolate", action="store_true",
                   help="run the setup and the step in a fresh worker process (the notebook names "
                        "the cell uses travel with it)")
    p.add_argument("--env", type=_env_pair, action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable of the worker process (repeatable; implies --isolate; "
                        "quoted as in a shell: --env XLA_FLAGS=\"--a --b\")")
    p.add_argument("--allocator", choices=ALLOCATORS,
                   help="the worker's malloc: glibc, jemalloc or tcmalloc (implies --isolate)")
    p.add_argument("--compare-allocators", action="store_true",
                   help="run the watch under glibc, MALLOC_ARENA_MAX=2, jemalloc and tcmalloc, "
                        "each in a worker until its verdict is sure (-n: at least, -t: at most), "
                        "overlaid on one chart; a fix is named only when the numbers show it")
    p.add_argument("--jobs", type=positive_int, metavar="N",
                   help="with --bisect or --compare-allocators: N runs at a time, each in its own "
                        "worker process (default: one per free core)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="with --bisect: run the configurations as tasks on the Dask scheduler at ADDRESS")
    return p


# Options that take a value, so the split between options and setup statement is exact.
_VALUED = {"-n", "--iterations", "-t", "--seconds", "--warmup", "--max-rss", "-o", "--off", "--serial",
           "--env", "--allocator", "--jobs", "--cluster"}


# A shell word: unquoted characters, '...', "..." (with backslash escapes) and \x, run together.
_WORD = re.compile(r"""(?:[^\s'"\\]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+""", re.S)


def split_line(line: str) -> tuple[list[str], str]:
    """Split the magic line into option tokens and the verbatim statement that follows them.

    Options come first (like %%timeit) and are quoted as in a shell (``--env A='x y'``,
    ``--env XLA_FLAGS="--a --b"``: one value each, without the quotes); the first token that is
    not an option starts the statement, which is kept exactly as written (quotes, '=' and all).
    """
    tokens: list[str] = []
    pos = 0
    n = len(line)
    expect_value = False
    while pos < n:
        while pos < n and line[pos].isspace():
            pos += 1
        if pos >= n:
            break
        word = _WORD.match(line, pos)
        end = word.end() if word is not None else n
        if end < n and not line[end].isspace():  # an unclosed quote: shlex says so below
            end = n
        raw = line[pos:end]
        if expect_value:
            tokens.append(_unquote(raw))
            expect_value = False
        elif raw == "--":
            pos = end
            break
        elif raw.startswith("-") and len(raw) > 1 and not raw[1].isdigit():
            tok = _unquote(raw)
            tokens.append(tok)
            name = tok.split("=", 1)[0]
            # "--seconds=5" and "-n100" carry their value; "-n 100" takes the next token.
            expect_value = name in _VALUED and "=" not in tok
        else:
            break
        pos = end
    rest = line[pos:].strip()
    return tokens, rest


def _unquote(word: str) -> str:
    """One shell word without its quotes."""
    try:
        return "".join(shlex.split(word))
    except ValueError as exc:  # "No closing quotation"
        raise _usage_error(f"{exc} in {word}") from None


def _usage_error(message: str) -> UsageError:
    return UsageError(f"{PROG}: {message}\n\n{build_parser().format_usage()}")


def parse(line: str) -> tuple[argparse.Namespace, str]:
    tokens, rest = split_line(line)
    args = build_parser().parse_args(tokens)
    if args.bisect and (args.off or args.serial):
        raise _usage_error("--bisect chooses the stages itself; drop --off/--serial")
    if args.output is not None and (not args.output.isidentifier() or keyword.iskeyword(args.output)):
        raise _usage_error(f"-o needs a variable name, not {args.output!r}")
    if args.compare_allocators and (args.bisect or args.allocator):
        raise _usage_error("--compare-allocators runs every allocator itself; drop --bisect/--allocator")
    if args.jobs is not None and not (args.bisect or args.compare_allocators):
        raise _usage_error("--jobs goes with --bisect or --compare-allocators")
    if args.cluster is not None and not args.bisect:
        raise _usage_error("--cluster goes with --bisect")
    return args, rest


def _env_pair(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name.strip(), value


def _help_text() -> str:
    return (__doc__ or "") + "\nOptions:\n" + build_parser().format_help()


class CellRun:
    """One ``%%leakwatch`` / ``%leakwatch`` invocation: parsed, compiled, ready to run."""

    def __init__(self, shell: InteractiveShell, line: str, cell: str | None) -> None:
        self.shell = shell
        self.args, rest = parse(line)
        setup_src, step_src = (rest, cell) if cell is not None else ("", rest)
        if not step_src.strip():
            what = "the cell has no body to repeat" if cell is not None else "give a statement to repeat"
            raise _usage_error(what)
        ns = shell.user_ns
        step_code = self._compile(step_src)
        setup_code = self._compile(setup_src) if setup_src.strip() else None

        def step(_state: object = None) -> None:
            exec(step_code, ns)  # noqa: S102 - this is the user's own cell

        def setup() -> None:
            exec(setup_code, ns)  # noqa: S102

        a = self.args
        if a.isolate or a.env or a.allocator or a.compare_allocators or a.jobs or a.cluster:
            # It runs in worker processes: the code and the notebook names it reads travel.
            sources = [shell.transform_cell(src) for src in (setup_src, step_src) if src.strip()]
            cell = ship_cell(ns, step_code, setup_code, sources, PROG)
            step, setup = cell.step, cell.setup
        self.spec = WatchSpec(
            step=step, setup=setup if setup_code is not None else None, iterations=a.iterations,
            seconds=a.seconds, warmup=a.warmup, max_rss=a.max_rss, toggles=Toggles.parse(a.off, a.serial),
            trace=a.trace, lines=a.lines, native=a.native, code=step_code, exact_peaks=a.exact_peaks,
            isolate=a.isolate, env=tuple(a.env), allocator=a.allocator,
        )
        self.dashboard = None

    def _compile(self, source: str) -> types.CodeType:
        src = self.shell.transform_cell(source)
        filename = self.shell.compile.cache(src, self.shell.execution_count)
        return self.shell.compile(src, filename, "exec")

    def _observers(self) -> list[Observer]:
        if not self.args.no_widget and delivery.in_kernel(self.shell):
            from .dashboard import show_dashboard

            self.dashboard = show_dashboard()
            return [self.dashboard]
        return [] if self.args.quiet else [ProgressLine()]

    async def run(self, pause: Pause) -> WatchResult | BisectResult | CompareResult:
        observers = self._observers()
        a = self.args
        try:
            if a.compare_allocators:
                result = await run_compare(self.spec, observers=observers, pause=pause, jobs=a.jobs)
                self._report_compare(result)
            elif a.bisect:
                client = connect(a.cluster) if a.cluster else None
                try:
                    result = await run_bisection(self.spec, observers=observers, pause=pause,
                                                 jobs=a.jobs, client=client)
                finally:
                    if client is not None:
                        client.close()
                self._report_bisect(result)
            else:
                result = await run_watch(self.spec, observers, pause)
                self._report(result)
        except (WatchAlreadyRunning, IsolationError, ClusterError) as exc:
            raise UsageError(f"{PROG}: {exc}") from None
        return result

    def _store(self, result: WatchResult | BisectResult) -> None:
        if self.args.output:
            self.shell.user_ns[self.args.output] = result

    def _report(self, result: WatchResult) -> None:
        self._store(result)
        a = self.args
        if result.stopped == "worker-died":
            print(f"[leakwatch] {result.error} Its partial result is kept"
                  + (f" in {a.output!r}." if a.output else "."), file=sys.stderr)
        elif result.error is not None:
            # Show the user's traceback as IPython would, then say where the run stopped.
            err = result.error
            if err.__traceback__ is None and result.error_traceback:  # raised in a worker
                print(result.error_traceback, end="", file=sys.stderr)
            else:
                self.shell.showtraceback((type(err), err, err.__traceback__), tb_offset=2)
            where = ("the setup statement" if result.error_iteration is None
                     else f"iteration {result.error_iteration}")
            print(f"[leakwatch] {type(err).__name__} raised in {where}; the run stopped and its "
                  "partial result is kept" + (f" in {a.output!r}." if a.output else "."),
                  file=sys.stderr)
        if a.quiet:
            return
        if self.dashboard is None:
            # In a kernel this shows the text report and a static chart (nbconvert, GitHub);
            # in a terminal, the text.
            from IPython.display import display

            display(result)
        else:
            # Under the dashboard, for viewers without widgets; Run again replaces it in place.
            self.dashboard.show_report(result)

    def _report_compare(self, result: CompareResult) -> None:
        if self.dashboard is not None:
            # The answer is the headline, not the last variant's verdict; Run again runs the cell.
            self.dashboard.show_compare(result, restore=self.spec)
        self._store(result)
        if self.args.quiet:
            return
        from IPython.display import display

        if self.dashboard is None:
            display(result)  # the answer, the table and the overlaid chart
        else:  # under the dashboard, for viewers without widgets: the answer
            display({"text/plain": result.summary}, raw=True)

    def _report_bisect(self, result: BisectResult) -> None:
        if self.dashboard is not None:
            self.dashboard.show_bisect(result)  # culprits marked in the pipeline strip
        self._store(result)
        if not self.args.quiet:
            print(str(result))


async def run_cell_async(line: str, cell: str | None, pause: Pause | None = None) -> None:
    """The magic, awaited: what a rewritten ``%%leakwatch`` cell runs (see delivery)."""
    from IPython import get_ipython

    await CellRun(get_ipython(), line, cell).run(pause or YieldToLoop())


@magics_class
class LeakwatchMagics(Magics):
    @line_cell_magic
    def leakwatch(self, line: str, cell: str | None = None) -> None:
        run_sync(CellRun(self.shell, line, cell).run(NO_PAUSE))


LeakwatchMagics.leakwatch.__doc__ = _help_text()


def load(ipython: InteractiveShell) -> None:
    """Register the magics and, where the kernel can use it, the live click delivery."""
    ipython.register_magics(LeakwatchMagics)
    delivery.install(ipython)
    result_display.register(ipython)


def unload(ipython: InteractiveShell) -> None:
    """Undo load(): remove the magics and the transformer."""
    for kind in ("line", "cell"):
        ipython.magics_manager.magics[kind].pop("leakwatch", None)
    delivery.uninstall(ipython)
    result_display.unregister(ipython)
