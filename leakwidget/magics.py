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
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any

from .runner import Watch, WatchAlreadyRunning, WatchSpec, _resolve_widget, parse_size

PROG = "%%leakwatch"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        from IPython.core.error import UsageError

        raise UsageError(f"{PROG}: {message}\n\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None):
        from IPython.core.error import UsageError

        raise UsageError(message or self.format_help())


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ids(text: str) -> tuple[str, ...]:
    ids = tuple(t.strip() for t in text.split(",") if t.strip())
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
    p.add_argument("-n", "--iterations", type=_positive_int, metavar="N",
                   help="stop after N iterations")
    p.add_argument("-t", "--seconds", type=_positive_float, metavar="S",
                   help="stop after S seconds (default: when the verdict is confident, at most 60 s)")
    p.add_argument("--warmup", type=_non_negative_int, metavar="N",
                   help="treat the first N iterations as warm-up (default: detect it)")
    p.add_argument("--max-rss", type=_size, metavar="SIZE",
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
                   help="trace allocations with tracemalloc and list the growing sites")
    p.add_argument("--lines", action="store_true",
                   help="line-by-line memory increments of the step (memory_profiler; slower)")
    return p


# Options that take a value, so the split between options and setup statement is exact.
_VALUED = {"-n", "--iterations", "-t", "--seconds", "--warmup", "--max-rss", "-o", "--off", "--serial"}


def split_line(line: str) -> tuple[list[str], str]:
    """Split the magic line into option tokens and the verbatim statement that follows them.

    Options come first (like %%timeit); the first token that is not an option starts the
    statement, which is kept exactly as written (quotes, '=' and all).
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
        end = pos
        while end < n and not line[end].isspace():
            end += 1
        tok = line[pos:end]
        if expect_value:
            tokens.append(tok)
            expect_value = False
        elif tok == "--":
            pos = end
            break
        elif tok.startswith("-") and len(tok) > 1 and not tok[1].isdigit():
            tokens.append(tok)
            name = tok.split("=", 1)[0]
            # "--seconds=5" and "-n100" carry their value; "-n 100" takes the next token.
            expect_value = name in _VALUED and "=" not in tok
        else:
            break
        pos = end
    rest = line[pos:].strip()
    return tokens, rest


def parse(line: str) -> tuple[argparse.Namespace, str]:
    tokens, rest = split_line(line)
    args = build_parser().parse_args(tokens)
    if args.bisect and (args.off or args.serial):
        from IPython.core.error import UsageError

        raise UsageError(f"{PROG}: --bisect chooses the stages itself; drop --off/--serial\n\n"
                         + build_parser().format_usage())
    if args.output is not None and not args.output.isidentifier():
        from IPython.core.error import UsageError

        raise UsageError(f"{PROG}: -o needs a variable name, not {args.output!r}\n\n"
                         + build_parser().format_usage())
    return args, rest


def _help_text() -> str:
    return (__doc__ or "") + "\nOptions:\n" + build_parser().format_help()


class _Progress:
    """A one-line progress report for plain IPython and --no-widget runs."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        self._last = 0.0
        self._shown = False

    def on_iteration(self, watch, record) -> None:
        if record.end - self._last < 0.5:
            return
        self._last = record.end
        v = watch.verdict
        self.stream.write(
            f"\r[leakwatch] {record.index + 1:,} iterations, {record.end:.0f} s, "
            f"RSS {record.rss / 2**20:,.1f} MiB \u2014 {v.kind}".ljust(78)
        )
        self.stream.flush()
        self._shown = True

    def on_finish(self, watch, result) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


class Runner:
    """Compiles a magic invocation into a WatchSpec and runs it (sync or async)."""

    def __init__(self, shell, line: str, cell: str | None) -> None:
        self.shell = shell
        self.cell_mode = cell is not None
        self.args, rest = parse(line)
        if self.cell_mode:
            setup_src, step_src = rest, cell
        else:
            setup_src, step_src = "", rest
            if not step_src.strip():
                from IPython.core.error import UsageError

                raise UsageError(f"%leakwatch: give a statement to repeat\n\n{build_parser().format_usage()}")
        self.step_src = step_src
        self.setup_src = setup_src
        ns = shell.user_ns
        step_code = self._compile(step_src)
        setup_code = self._compile(setup_src) if setup_src.strip() else None

        def step(_state: Any = None) -> None:
            exec(step_code, ns)  # noqa: S102 - this is the user's own cell

        step.__code__cell__ = step_code  # type: ignore[attr-defined]  # for --lines
        setup = None
        if setup_code is not None:

            def setup() -> None:
                exec(setup_code, ns)  # noqa: S102

        a = self.args
        self.spec = WatchSpec(
            step=step, setup=setup, iterations=a.iterations, seconds=a.seconds, warmup=a.warmup,
            max_rss=a.max_rss, off=a.off, serial=a.serial, trace=a.trace, lines=a.lines,
        )
        self.step_code = step_code

    def _compile(self, source: str):
        shell = self.shell
        src = shell.transform_cell(source) if hasattr(shell, "transform_cell") else source
        try:
            filename = shell.compile.cache(src, getattr(shell, "execution_count", 0))
        except Exception:
            filename = "<leakwatch>"
        return shell.compile(src, filename, "exec")

    # ------------------------------------------------------------------ display
    def _observers(self) -> tuple[list, Any]:
        obs: list = []
        dash = None
        if not self.args.no_widget:
            dash = _resolve_widget(None)
            if dash is not None:
                obs.append(dash)
        if dash is None and not self.args.quiet:
            obs.append(_Progress())
        return obs, dash

    def _report(self, result) -> None:
        a = self.args
        if a.output:
            self.shell.user_ns[a.output] = result
        if result.error is not None:
            # Show the user's traceback as IPython would, then say where the run stopped.
            err = result.error
            try:
                self.shell.showtraceback((type(err), err, err.__traceback__), tb_offset=2)
            except Exception:
                traceback.print_exception(type(err), err, err.__traceback__)
            where = ("the setup statement" if result.error_iteration is None
                     else f"iteration {result.error_iteration}")
            print(f"[leakwatch] {type(err).__name__} raised in {where}; the run stopped and its "
                  "partial result is kept" + (f" in {a.output!r}." if a.output else "."),
                  file=sys.stderr)
        if not a.quiet:
            if self._dash is None:
                # In a kernel this shows the text report and a static chart (nbconvert, GitHub);
                # in a terminal, the text.
                from IPython.display import display

                display(result)
            else:
                print(result.verdict.summary)

    def run(self):
        obs, self._dash = self._observers()
        if self.args.bisect:
            return self._bisect(obs)
        result = Watch(self.spec, obs).run()
        self._report(result)
        return result

    async def run_async(self):
        obs, self._dash = self._observers()
        if self.args.bisect:
            return await self._bisect_async(obs)
        result = await Watch(self.spec, obs).run_async()
        self._report(result)
        return result

    def _bisect_kwargs(self) -> dict:
        s = self.spec
        return dict(setup=s.setup, iterations=s.iterations, max_rss=s.max_rss,
                    seconds_per_config=s.seconds, warmup=s.warmup)

    def _bisect(self, obs):
        from .bisect import bisect

        result = bisect(self.spec.step, observers=obs, **self._bisect_kwargs())
        self._report_bisect(result)
        return result

    async def _bisect_async(self, obs):
        from .bisect import bisect_async

        result = await bisect_async(self.spec.step, observers=obs, **self._bisect_kwargs())
        self._report_bisect(result)
        return result

    def _report_bisect(self, result) -> None:
        if self._dash is not None and hasattr(self._dash, "show_bisect"):
            self._dash.show_bisect(result)  # culprits coloured in the pipeline strip
        if self.args.output:
            self.shell.user_ns[self.args.output] = result
        if not self.args.quiet:
            print(str(result))


def _run(shell, line: str, cell: str | None):
    try:
        runner = Runner(shell, line, cell)
    except SyntaxError:
        raise
    try:
        return runner.run()
    except WatchAlreadyRunning as exc:
        from IPython.core.error import UsageError

        raise UsageError(str(exc)) from None


async def run_cell_async(line: str, cell: str | None):
    """The async twin of the cell magic, used when the kernel can deliver clicks mid-run."""
    from IPython import get_ipython

    shell = get_ipython()
    runner = Runner(shell, line, cell)
    try:
        return await runner.run_async()
    except WatchAlreadyRunning as exc:
        from IPython.core.error import UsageError

        raise UsageError(str(exc)) from None


def _make_magic():
    def leakwatch_magic(line: str, cell: str | None = None):
        from IPython import get_ipython

        _run(get_ipython(), line, cell)

    leakwatch_magic.__doc__ = _help_text()
    leakwatch_magic.__name__ = "leakwatch"
    return leakwatch_magic


_loaded: dict[int, dict] = {}


def load(ipython) -> None:
    """Register the magics (and, where it helps, the live click delivery)."""
    if id(ipython) in _loaded:
        return
    magic = _make_magic()
    ipython.register_magic_function(magic, magic_kind="line_cell", magic_name="leakwatch")
    state: dict = {"live": None}
    try:
        from . import live

        state["live"] = live.install(ipython)
    except ImportError:
        state["live"] = None
    _loaded[id(ipython)] = state


def unload(ipython) -> None:
    """Undo load(): remove the magics and any transformer installed."""
    state = _loaded.pop(id(ipython), None)
    mm = ipython.magics_manager
    for kind in ("line", "cell"):
        mm.magics[kind].pop("leakwatch", None)
    if state and state.get("live") is not None:
        from . import live

        live.uninstall(ipython)

