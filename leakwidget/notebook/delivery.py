"""Delivering widget clicks while a ``%%leakwatch`` cell runs.

A Jupyter kernel reads its shell channel — where widget clicks (comm messages) arrive — only
between cells: a running synchronous cell sees no click until it ends. ipykernel >= 7 makes an
exception for *async* cells: while an async cell awaits, comm messages are dispatched at once
(``Kernel.shell_main``). So when the extension loads in such a kernel, :func:`install` adds an
IPython input transformer that rewrites a cell starting with ``%%leakwatch`` into::

    await __import__('leakwidget.notebook.magics', fromlist=['run_cell_async']).run_cell_async(<line>, <cell>)

which runs the very same invocation as the synchronous magic, awaiting the event loop between
iterations instead of never pausing. Like the synchronous magic it returns None (no ``Out[n]``);
``-o``, the report and exceptions come from the same code, so the cell behaves as with the
plain magic. Help (``%%leakwatch?``, ``-h``) is left to the synchronous magic.

Where clicks cannot be delivered (ipykernel < 7, another autoawait runner, ``leakwidget.watch``
called from a synchronous cell) :func:`clicks_delivered` says so and the dashboard shows
:data:`NO_DELIVERY_NOTE` instead of silently ignoring clicks.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from IPython.core.async_helpers import _asyncio_runner
from IPython.core.interactiveshell import InteractiveShell

from ..engine.observer import RunControl

__all__ = [
    "NO_DELIVERY_NOTE",
    "clicks_delivered",
    "in_kernel",
    "install",
    "installed",
    "kernel_delivers_comms_while_awaiting",
    "rewrite",
    "uninstall",
]

NO_DELIVERY_NOTE = (
    "This kernel cannot deliver clicks while the cell runs: Stop and the stage toggles take "
    "effect only after the cell has finished (live controls need ipykernel 7 or later and a "
    "%%leakwatch cell)."
)

MAGIC = "leakwatch"
_HELP_FLAGS = {"-h", "--help"}


def in_kernel(shell: InteractiveShell | None) -> bool:
    """Is this shell a Jupyter kernel's (where a front end may render widgets)?"""
    return shell is not None and getattr(shell, "kernel", None) is not None


def _ipykernel_major() -> int | None:
    try:
        return int(version("ipykernel").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def kernel_delivers_comms_while_awaiting(shell: InteractiveShell | None) -> bool:
    """True in an ipykernel >= 7 kernel, which dispatches comm messages while a cell awaits."""
    if not in_kernel(shell):
        return False
    major = _ipykernel_major()
    return major is not None and major >= 7


def clicks_delivered(run: RunControl, shell: InteractiveShell | None) -> bool:
    """Can a click reach the kernel while ``run`` runs? Only if the kernel dispatches comms while
    a cell awaits, and the run awaits the loop between iterations."""
    return run.yields_to_loop and kernel_delivers_comms_while_awaiting(shell)


def _asks_for_help(line: str) -> bool:
    return any(tok in _HELP_FLAGS for tok in line.split())


def _loop_runner_is_asyncio(shell: InteractiveShell) -> bool:
    return bool(shell.autoawait) and shell.loop_runner is _asyncio_runner


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
        "await __import__('leakwidget.notebook.magics', fromlist=['run_cell_async'])"
        f".run_cell_async({first_line!r}, {body!r})\n"
    ]


class _LeakwatchTransformer:
    """The cleanup transformer registered by :func:`install` (runs before magic handling)."""

    has_side_effects = False  # IPython may call it again while checking completeness

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell

    def __call__(self, lines: list[str]) -> list[str]:
        new = rewrite(lines)
        if new is None:
            return lines
        # Decided per cell: the user may switch %autoawait off.
        if not _loop_runner_is_asyncio(self.shell):
            return lines
        return new


def installed(shell: InteractiveShell) -> bool:
    return any(isinstance(t, _LeakwatchTransformer) for t in shell.input_transformers_cleanup)


def install(shell: InteractiveShell) -> bool:
    """Register the ``%%leakwatch`` async rewrite on ``shell`` when its kernel can use it.

    Returns True when the rewrite is active. Idempotent. Plain IPython (no kernel) and
    ipykernel < 7 are left alone: their cells run the synchronous magic.
    """
    if not kernel_delivers_comms_while_awaiting(shell):
        return False
    if not installed(shell):
        shell.input_transformers_cleanup.append(_LeakwatchTransformer(shell))
    return True


def uninstall(shell: InteractiveShell) -> None:
    """Remove what :func:`install` added (safe to call when nothing was installed)."""
    transformers = shell.input_transformers_cleanup
    transformers[:] = [t for t in transformers if not isinstance(t, _LeakwatchTransformer)]
