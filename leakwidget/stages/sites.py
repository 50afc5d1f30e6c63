"""Call sites: which frame is the user's code, and how stage ids and arguments are written.

Shared by the session (``__init__.py``) and the tf.data patches (``tfdata/``); it imports
nothing from the rest of the package, so both can import it without a cycle.
"""

from __future__ import annotations

import os
import re
import sys
from types import FrameType
from typing import Any

# This folder: every frame of the stages package (tfdata/ included) is never a user's call site.
_HERE = os.path.dirname(os.path.abspath(__file__))
_IPYKERNEL_CELL = re.compile(r"[/\\]ipykernel_\d+[/\\][^/\\]+\.py$")
_ARG_REPR_MAX = 80


def is_cell_file(filename: str) -> bool:
    """True for code typed in a notebook/IPython cell rather than read from a real file.

    IPython names cells ``<ipython-input-N-hash>``; ipykernel names them
    ``/tmp/ipykernel_<pid>/<hash>.py`` (a file that exists only while debugging).
    """
    if filename.startswith("<"):
        return True
    if _IPYKERNEL_CELL.search(filename):
        return True
    return not os.path.isfile(filename)


def _is_internal(filename: str) -> bool:
    # Frames that are never the user's call site: TensorFlow/Keras internals, autograph's
    # generated modules (resolved separately), this package, importlib.
    if filename.startswith(_HERE) or filename.startswith("<frozen"):
        return True
    norm = filename.replace("\\", "/")
    return (
        "/tensorflow/" in norm
        or "/tf_keras/" in norm
        or "/site-packages/keras/" in norm
        or "/contextlib.py" in norm
        or "/functools.py" in norm
    )


def _autograph_origin(frame: FrameType) -> tuple[str, int, int] | None:
    """Map a frame of an autograph-generated module back to the user's source line.

    autograph runs a rewritten copy of e.g. an ``interleave`` lambda from a temporary file; the
    enclosing ``converted_call`` frame holds the converted function, whose ``ag_source_map``
    maps generated lines to original ones.
    """
    f = frame.f_back
    hops = 0
    while f is not None and hops < 12:
        if f.f_code.co_name == "converted_call" and "converted_f" in f.f_locals:
            smap = getattr(f.f_locals["converted_f"], "ag_source_map", None) or {}
            origin = smap.get((frame.f_code.co_filename, frame.f_lineno))
            if origin is not None:
                loc = origin.loc
                return loc.filename, loc.lineno, getattr(loc, "col_offset", 0) or 0
            return None
        f = f.f_back
        hops += 1
    return None


def caller_site(skip: int = 1) -> tuple[str, int, int]:
    """(filename, line, column) of the innermost frame that belongs to the user's code."""
    frame: FrameType | None = sys._getframe(skip)
    first: tuple[str, int, int] | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if "__autograph_generated_file" in filename:
            origin = _autograph_origin(frame)
            if origin is not None and not _is_internal(origin[0]):
                return origin
        elif not _is_internal(filename):
            return filename, frame.f_lineno or 0, _column(frame)
        if first is None:
            first = (filename, frame.f_lineno or 0, 0)
        frame = frame.f_back
    return first or ("<unknown>", 0, 0)


def _column(frame: FrameType) -> int:
    # Python 3.11+: distinguishes two calls of the same kind on one line (a.map(f).map(g)).
    # Chained calls share their start column (that of ``a``), so the end column counts too.
    try:
        positions = list(frame.f_code.co_positions())
        _, _, col, end = positions[frame.f_lasti // 2]
        return int(col or 0) * 100_000 + int(end or 0)
    except (AttributeError, IndexError, TypeError, ValueError):
        return 0


def format_site(filename: str, line: int) -> str:
    return str(line) if is_cell_file(filename) else f"{filename}:{line}"


def short_repr(value: Any) -> str:
    """A short, stable repr: no memory addresses for functions, capped length."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if isinstance(value, str):
        text = value
    elif callable(value) and isinstance(name, str):
        text = name
    else:
        try:
            text = repr(value)
        except Exception:  # a repr that fails must not break the user's pipeline
            text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= _ARG_REPR_MAX else text[: _ARG_REPR_MAX - 1] + "…"
