"""pytest plugin: ``@pytest.mark.leakwatch`` fails a test whose body leaks memory.

    import pytest

    @pytest.mark.leakwatch(seconds=10)
    def test_parser_does_not_leak(parser):
        parser.parse(SAMPLE)

The marked test's fixtures are set up once; its body then runs again and again while leakwidget
watches the process's memory, and the test fails with the verdict's sentence when that is a leak
(the slope with its 95% interval and the iteration where the growth started, and what grows). A
plateau (a cache filling up) or a stable test passes; an inconclusive one passes with a warning
that says why. The marker takes ``seconds=``, ``iterations=``, ``max_rss=`` (a test whose memory
goes past it fails) and ``warmup=``; without a budget the run ends once the verdict is confident
(at least 10 s, at most 60 s), or after ``--leakwatch-seconds`` (or the ``leakwatch_seconds``
ini option). An exception in the body fails the test as usual; Ctrl-C stops the session. A marker
with wrong arguments errors the test at setup with a one-line message.

The ``pytest11`` entry point (``leakwidget_pytest``, outside the package) declares the marker
and the option and registers this module only when a collected test is marked, so unmarked runs
never import leakwidget.
"""

from __future__ import annotations

import inspect
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from leakwidget_pytest import MARKER, default_seconds

OPTIONS = ("seconds", "iterations", "max_rss", "warmup")
RESULT = pytest.StashKey[Any]()  # item.stash[RESULT]: the WatchResult of a marked test


class LeakwatchInconclusive(UserWarning):
    """A marked test's watch could not decide (the test passes; run it longer)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        _options(marker, item)  # wrong arguments: an error before the fixtures are built


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    options = _options(marker, pyfuncitem)
    fn = pyfuncitem.obj
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        pytest.fail(f"@pytest.mark.leakwatch cannot repeat the async test {pyfuncitem.name}: "
                    "make it a plain function that runs its own loop (asyncio.run)", pytrace=False)
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    result = _watch(lambda: fn(**kwargs), fn, options, pyfuncitem.config)
    # The stash lasts the session; the step's arguments (the fixtures) must end with the test.
    result.let_go_of_the_step()
    kwargs.clear()  # (a failing test's traceback keeps this frame)
    pyfuncitem.stash[RESULT] = result
    pyfuncitem.add_report_section("call", "leakwatch", str(result))
    _judge(result, pyfuncitem.name)
    return True


def _options(marker: pytest.Mark, item: pytest.Item) -> dict[str, Any]:
    """The marker's arguments, checked; a one-line failure for anything wrong."""

    def bad(why: str) -> None:
        pytest.fail(f"@pytest.mark.leakwatch on {item.name}: {why} "
                    f"(it takes seconds=, iterations=, max_rss=, warmup=)", pytrace=False)

    if marker.args:
        bad(f"positional arguments {marker.args!r}: use keywords")
    unknown = sorted(set(marker.kwargs) - set(OPTIONS))
    if unknown:
        bad(f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    opts = dict(marker.kwargs)
    seconds = opts.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not (seconds > 0 and math.isfinite(seconds))):
        bad(f"seconds must be a positive number, not {seconds!r}")
    for name, low in (("iterations", 1), ("warmup", 0)):
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            bad(f"{name} must be a whole number of at least {low}, not {value!r}")
    if opts.get("max_rss") is not None:
        from .engine.units import parse_size

        try:
            opts["max_rss"] = parse_size(opts["max_rss"])
        except ValueError as exc:
            bad(f"max_rss: {exc}")
    return opts


def _watch(step: Callable[[], object], fn: Callable, options: dict[str, Any],
           config: pytest.Config) -> Any:
    from .engine.spec import WatchSpec
    from .engine.watch import Watch

    seconds, iterations = options.get("seconds"), options.get("iterations")
    if seconds is None and iterations is None:
        seconds = default_seconds(config)
    spec = WatchSpec(step=step, iterations=iterations, seconds=seconds,
                     warmup=options.get("warmup"), max_rss=options.get("max_rss"),
                     label=fn.__qualname__, code=fn.__code__)
    return Watch(spec).run()


def _judge(result: Any, name: str) -> None:
    """Fail on a leak, a body that raised or memory past max_rss; warn when inconclusive."""
    if result.stopped == "interrupted":
        raise KeyboardInterrupt
    if result.error is not None:
        # A skip or an xfail is the test's outcome, whose reason pytest shows as written (a
        # note would be printed after the skip's reason); a failure says where it came.
        outcome = isinstance(result.error, (pytest.skip.Exception, pytest.xfail.Exception))
        if sys.version_info >= (3, 11) and not outcome:
            result.error.add_note(f"(raised in iteration {result.error_iteration} of the leakwatch run)")
        raise result.error
    verdict = result.verdict
    att = result.attribution
    what = f" {att.summary}" if att is not None and att.kind != "none" and att.summary else ""
    if verdict.kind == "leak":
        pytest.fail(f"leakwatch: {result.summary}{what}", pytrace=False)
    if result.stopped == "memory-guard":
        guard = next((n for n in result.stage_notes if n.startswith("Stopped by the memory guard")), "")
        pytest.fail(f"leakwatch: memory went past max_rss. {guard} {verdict.summary}".strip(),
                    pytrace=False)
    if verdict.kind == "inconclusive":
        warnings.warn(LeakwatchInconclusive(f"{name}: {verdict.summary}"), stacklevel=1)
