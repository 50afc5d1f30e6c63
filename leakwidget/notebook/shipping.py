"""Shipping a ``%%leakwatch`` cell to a worker process: its code and the notebook names it uses.

The compiled setup and step travel with the values of the notebook names they read (found with
``ast``: names loaded anywhere in the cell, nested functions and comprehensions included), each
checked with cloudpickle on its own so that a name that cannot travel — an open iterator, a
TensorFlow dataset built in an earlier cell — is named in the error. Modules travel by name,
functions, classes and data defined in the notebook by value. A name the cell assigns itself is
built in the worker: if its notebook value cannot travel, it is simply left behind.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
import types

import cloudpickle
from IPython.core.error import UsageError

from .cell import CellCode

# IPython's own names in a user namespace: never what a cell means to ship.
_SHELL_NAMES = {"In", "Out", "_", "__", "___", "_ih", "_oh", "_dh", "_ii", "_iii", "exit", "quit",
                "__builtins__", "__builtin__", "__name__", "__doc__", "__spec__", "__loader__",
                "__package__"}


def names_in(source: str) -> tuple[set[str], set[str]]:
    """(names read, names assigned) anywhere in ``source``."""
    read, written = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else written).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            written.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            written.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            read.add(node.target.id)
    return read, written


def ship_cell(user_ns: dict, step_code: types.CodeType, setup_code: types.CodeType | None,
              sources: list[str], prog: str) -> CellCode:
    """A :class:`CellCode` for a worker: the code, the notebook values its ``sources`` (the
    transformed setup and step) read, and the cells' lines. Raises UsageError naming a value
    that cannot travel."""
    read, written = set(), set()
    for src in sources:
        r, w = names_in(src)
        read |= r
        written |= w
    namespace: dict = {"__name__": "__main__"}
    for name in sorted(read - _SHELL_NAMES):
        if name not in user_ns or (name in vars(builtins) and user_ns[name] is vars(builtins)[name]):
            continue
        value = user_ns[name]
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            if name in written:
                continue  # the cell builds it again
            raise UsageError(
                f"{prog}: {name!r} ({type(value).__name__}) cannot travel to the worker process "
                f"({type(exc).__name__}: {exc}). Build it in the cell or its setup statement, "
                "so the worker makes its own."
            ) from None
        namespace[name] = value
    return CellCode(step_code, setup_code, namespace, _cell_lines())


def _cell_lines() -> dict[str, list[str]]:
    """The lines of every cell IPython has compiled (linecache entries without a file or a
    modification time): a function defined in any earlier cell may travel by value, and
    tracebacks and autograph read its source."""
    return {name: list(entry[2]) for name, entry in list(linecache.cache.items())
            if len(entry) == 4 and entry[1] is None and not os.path.isfile(name)}
