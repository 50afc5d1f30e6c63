"""Delivering widget clicks while a ``%%leakwatch`` cell runs.

A Jupyter kernel reads its shell channel — where widget clicks (comm messages) arrive — only
between cells: a running synchronous cell sees no click until it ends. ipykernel >= 7 makes an
exception for *async* cells: while an async cell awaits, comm messages are dispatched at once
(``Kernel.shell_main``). So when the extension loads in such a kernel, :func:`install` adds an
IPython input transformer that rewrites a cell starting with ``%%leakwatch`` into::

    await __import__('leakwidget.live', fromlist=['run_cell_magic']).run_cell_magic(<line>, <cell>)

which awaits ``leakwidget.magics.run_cell_async`` — the same parsing as the synchronous magic,
driving ``Watch.run_async()`` (an ``await asyncio.sleep(0)`` between iterations). Like the
synchronous magic it returns None (no ``Out[n]``); ``-o``, the report and exceptions come from
the same code, so the cell behaves as with the plain magic.
Help (``%%leakwatch?``, ``-h``) is left to the synchronous magic.

Where clicks cannot be delivered (ipykernel < 7, another autoawait runner, ``leakwidget.watch``
called from a synchronous cell) :func:`clicks_delivered` says so and the dashboard shows
:data:`NO_DELIVERY_NOTE` instead of silently ignoring clicks.

Nothing here imports IPython or ipykernel at module import time.
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any

__all__ = [
    "ASYNC_DELIVERY",
    "NO_DELIVERY_NOTE",
    "clicks_delivered",
    "install",
    "installed",
    "kernel_delivers_comms_while_awaiting",
    "rewrite",
    "run_cell_magic",
    "uninstall",
]

NO_DELIVERY_NOTE = (
    "This kernel cannot deliver clicks while the cell runs: Stop and the stage toggles take "
    "effect only after the cell has finished (live controls need ipykernel 7 or later and a "
    "%%leakwatch cell)."
)

# True while a watch runs in a coroutine the kernel keeps serving comms around (set by the
# rewritten cell and by the dashboard's own Run again / Bisect tasks).
ASYNC_DELIVERY: contextvars.ContextVar[bool] = contextvars.ContextVar("leakwidget_async_delivery", default=False)

MAGIC = "leakwatch"
_HELP_FLAGS = {"-h", "--help"}


def _shell() -> Any:
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        return get_ipython()
    except Exception:
        return None


def _ipykernel_major() -> int | None:
    try:
        from importlib.metadata import version

        return int(version("ipykernel").split(".")[0])
    except Exception:
        return None


def kernel_delivers_comms_while_awaiting(shell: Any = None) -> bool:
    """True in an ipykernel >= 7 kernel, which dispatches comm messages while a cell awaits."""
    shell = _shell() if shell is None else shell
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    major = _ipykernel_major()
    return major is not None and major >= 7


def _driven_by_run_async() -> bool:
    """Is Watch.run_async on the current call stack (an awaited watch, not watch.run())?"""
    runner = sys.modules.get("leakwidget.runner")
    fn = getattr(getattr(runner, "Watch", None), "run_async", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def clicks_delivered(shell: Any = None) -> bool:
    """Can a click reach the kernel while the current watch runs?

    Call it from inside the watch (an observer's ``on_start``): it checks both the kernel and
    whether the watch is being awaited (``Watch.run_async``) rather than run synchronously.
    """
    if not kernel_delivers_comms_while_awaiting(shell):
        return False
    return ASYNC_DELIVERY.get() or _driven_by_run_async()


def _asks_for_help(line: str) -> bool:
    return any(tok in _HELP_FLAGS for tok in line.split())


def _loop_runner_is_asyncio(shell: Any) -> bool:
    if not getattr(shell, "autoawait", False):
        return False
    try:
        from IPython.core.async_helpers import _asyncio_runner
    except ImportError:
        return False
    return getattr(shell, "loop_runner", None) is _asyncio_runner


def _magics_can_await() -> bool:
    try:
        from . import magics
    except ImportError:
        return False
    return callable(getattr(magics, "run_cell_async", None))


def rewrite(lines: list[str]) -> list[str] | None:
    """The awaitable form of a ``%%leakwatch`` cell, or None when the cell is not one to rewrite.

    Splits the first line exactly as IPython's own cell-magic transformer does, so the magic
    receives the same ``line`` and ``cell`` strings either way.
    """
    if not lines or not lines[0].startswith("%%"):
        return None
    magic_name, _, first_line = lines[0][2:].rstrip().partition(" ")
    if magic_name != MAGIC or _asks_for_help(first_line):
        return None  # includes %%leakwatch? and %%leakwatch?? (magic_name ends with "?")
    body = "".join(lines[1:])
    return [
        "await __import__('leakwidget.live', fromlist=['run_cell_magic'])"
        f".run_cell_magic({first_line!r}, {body!r})\n"
    ]


class _LeakwatchTransformer:
    """The cleanup transformer registered by :func:`install` (runs before magic handling)."""

    has_side_effects = False  # IPython may call it again while checking completeness

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    def __call__(self, lines: list[str]) -> list[str]:
        new = rewrite(lines)
        if new is None:
            return lines
        # Decided per cell: the user may switch %autoawait off, the lead's magic may be older.
        if not (_loop_runner_is_asyncio(self.shell) and _magics_can_await()):
            return lines
        return new


async def run_cell_magic(line: str, cell: str) -> None:
    """What a rewritten ``%%leakwatch`` cell awaits: the async magic, with clicks delivered.

    Returns None, as the synchronous cell magic does: the magic shows its own output (the
    dashboard or the report) and ``-o`` stores the result, so the cell has no ``Out[n]``.
    """
    from . import magics

    token = ASYNC_DELIVERY.set(True)
    try:
        await magics.run_cell_async(line, cell)
    finally:
        ASYNC_DELIVERY.reset(token)


def installed(shell: Any) -> bool:
    return any(isinstance(t, _LeakwatchTransformer) for t in getattr(shell, "input_transformers_cleanup", ()))


def install(shell: Any) -> bool:
    """Register the ``%%leakwatch`` async rewrite on ``shell`` when its kernel can use it.

    Returns True when the rewrite is active. Idempotent. Plain IPython (no kernel) and
    ipykernel < 7 are left alone: their cells run the synchronous magic.
    """
    if shell is None or not hasattr(shell, "input_transformers_cleanup"):
        return False
    if not kernel_delivers_comms_while_awaiting(shell):
        return False
    if not installed(shell):
        shell.input_transformers_cleanup.append(_LeakwatchTransformer(shell))
    return True


def uninstall(shell: Any) -> None:
    """Remove what :func:`install` added (safe to call when nothing was installed)."""
    transformers = getattr(shell, "input_transformers_cleanup", None)
    if transformers is None:
        return
    transformers[:] = [t for t in transformers if not isinstance(t, _LeakwatchTransformer)]
