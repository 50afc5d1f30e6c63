"""leakwidget's pytest11 entry point: ``@pytest.mark.leakwatch`` and ``--leakwatch-seconds``.

It declares the marker and the option at once and loads the plugin proper,
:mod:`leakwidget.pytest_plugin`, only when a collected test carries the marker: importing the
``leakwidget`` package (its engine, NumPy, psutil) costs about a second, which no unmarked pytest
run in an environment where leakwidget happens to be installed should pay. It lives outside the
package for that reason: importing ``leakwidget.anything`` runs ``leakwidget/__init__.py`` first.
"""

from __future__ import annotations

import argparse
import math

import pytest

MARKER = "leakwatch"


def seconds(text: str) -> float:
    """A positive, finite number of seconds (the option's type: anything else is a usage error
    at start-up, not a failure inside a test)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def default_seconds(config: pytest.Config) -> float | None:
    """``--leakwatch-seconds``, else the ini option ``leakwatch_seconds``, else None."""
    value = config.getoption("leakwatch_seconds")
    if value is not None:
        return value
    ini = config.getini("leakwatch_seconds")
    if ini in (None, ""):
        return None
    try:
        return seconds(str(ini))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"leakwatch_seconds (ini option): {exc}") from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leakwatch", "leakwidget's memory-leak watch")
    group.addoption("--leakwatch-seconds", type=seconds, default=None, metavar="S",
                    help="how long a @pytest.mark.leakwatch test repeats its body when the marker "
                         "gives no seconds= or iterations= (default: until the verdict is "
                         "confident, 10-60 s)")
    parser.addini("leakwatch_seconds", "default budget of @pytest.mark.leakwatch tests, in seconds",
                  default=None)


def pytest_configure(config: pytest.Config) -> None:
    default_seconds(config)  # a wrong ini value stops the run here, before any test
    config.addinivalue_line(
        "markers",
        "leakwatch(seconds=None, iterations=None, max_rss=None, warmup=None): run the test body "
        "repeatedly while watching memory; fail when it leaks (leakwidget)",
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker(MARKER) is not None for item in items):
        import leakwidget.pytest_plugin as plugin

        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, "leakwidget.pytest_plugin")
