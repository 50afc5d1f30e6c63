"""What a saved result (``--json``, ``result.to_json()``) must hold for its page to be drawn.

``leakwidget report`` reads a file someone may have edited, truncated or written by hand: each
field the page reads is checked against :data:`SAVED` first, and the first that does not fit
is named (``verdict.kind must be one of leak, plateau, stable, inconclusive, not 5``) instead of
failing somewhere inside the page's drawing. Fields may be missing unless marked ``Required``
(the page shows a dash, or leaves the section out); ``Maybe`` fields may also be null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..engine.kinds import VERDICT_KINDS


class Required(NamedTuple):
    spec: Any


class Maybe(NamedTuple):
    spec: Any


class Choice(NamedTuple):
    words: tuple[str, ...]


NUMBER = "a number"
PAIR = "a pair of numbers"

_TEXTS = [str]
_ROW = {name: Required(NUMBER) for name in ("index", "end", "rss", "peak_rss", "duration")}
_VERDICT = {
    "kind": Required(Choice(VERDICT_KINDS)), "slope": NUMBER, "slope_low": Maybe(NUMBER),
    "slope_high": Maybe(NUMBER), "onset": Maybe(NUMBER), "warmup": int,
    "exhaust_iterations": Maybe(NUMBER), "exhaust_seconds": Maybe(NUMBER), "confident": bool,
    "slowing": bool, "earlier_slope": Maybe(NUMBER), "fit": [PAIR], "climbing": bool, "summary": str,
    "iterations": int, "reason": str,
}
_ATTRIBUTION = {
    "kind": str, "summary": Maybe(str), "rss_slope": Maybe(NUMBER), "python_slope": Maybe(NUMBER),
    "native_slope": Maybe(NUMBER), "python_source": Maybe(str), "reclaimed_bytes": Maybe(NUMBER),
    "in_use_slope": Maybe(NUMBER), "growth_bytes": Maybe(NUMBER), "notes": _TEXTS,
    "garbage": Maybe({"bytes": Required(NUMBER)}), "kept_unsettled": Maybe(NUMBER),
    "kept_behind": Maybe(NUMBER),
    "free_at_start": Maybe(NUMBER), "refilling": bool,
    "top_types": [{"name": Required(str), "per_iteration": Required(NUMBER),
                   "bytes_per_iteration": Required(NUMBER), "steady": Maybe(bool)}],
    "top_sites": [{"site": Required(str), "bytes_per_iteration": Required(NUMBER),
                   "blocks_per_iteration": Required(NUMBER), "source": str}],
    "lines": [{"filename": Required(str), "lineno": Required(int),
               "total_increment": Required(NUMBER), "grew_share": Required(NUMBER), "source": str}],
}
_STAGE = {"id": Required(str), "kind": Required(str), "state": Required(str), "parallel": bool,
          "toggleable": bool, "inputs": _TEXTS, "args": dict}
_CONFIG = {"label": Maybe(str), "off": _TEXTS, "serial": _TEXTS, "iterations": Maybe(int),
           "seconds": Maybe(NUMBER), "warmup": Maybe(int), "max_rss": Maybe(NUMBER)}
_CHILD = {"pid": int, "number": int, "samples": [PAIR], "copying": Maybe({"copying": bool})}
_COPY_ON_WRITE = {"summary": str, "explains": bool}
_ENVIRONMENT = {"memory_total": Maybe(NUMBER), "memory_available": Maybe(NUMBER),
                "allocator_variables": dict, "libraries": dict}

# The saved form (WatchResult.to_dict(), plus "program" from the command line), as the page
# reads it.
SAVED = {
    "verdict": Required(_VERDICT), "stopped": Maybe(str), "error": Maybe(str),
    "error_iteration": Maybe(int), "iterations": [_ROW], "iteration_count": int,
    "samples": [PAIR], "stages": [_STAGE], "stage_notes": _TEXTS, "attribution": Maybe(_ATTRIBUTION),
    "config": _CONFIG, "elapsed": Maybe(NUMBER), "baseline_rss": Maybe(NUMBER),
    "environment": Maybe(_ENVIRONMENT), "program": Maybe(dict), "children": [_CHILD],
    "copy_on_write": Maybe(_COPY_ON_WRITE),
}


def check_saved(doc: object) -> None:
    """Raise ValueError naming the first field of ``doc`` that the page cannot read."""
    _check(doc, SAVED, "the file")


def _check(value: object, spec: Any, path: str) -> None:
    if isinstance(spec, Maybe):
        if value is None:
            return
        spec = spec.spec
    if isinstance(spec, Required):
        spec = spec.spec
    if isinstance(spec, dict):
        _expect(isinstance(value, Mapping), path, "an object", value)
        for key, sub in spec.items():
            where = key if path == "the file" else f"{path}.{key}"
            if key in value:
                _check(value[key], sub, where)
            elif isinstance(sub, Required):
                raise ValueError(f"{where} is missing")
    elif isinstance(spec, list):
        _expect(isinstance(value, list), path, "a list", value)
        for i, item in enumerate(value):
            _check(item, spec[0], f"{path}[{i}]")
    elif isinstance(spec, Choice):
        _expect(value in spec.words, path, f"one of {', '.join(spec.words)}", value)
    elif spec is NUMBER:
        _expect(_number(value), path, NUMBER, value)
    elif spec is PAIR:
        _expect(isinstance(value, list) and len(value) == 2 and all(map(_number, value)), path, PAIR,
                value)
    else:  # a type; true and false are not numbers here
        _expect(isinstance(value, spec) and not (spec is int and isinstance(value, bool)), path,
                _TYPE_WORDS[spec], value)


_TYPE_WORDS = {str: "text", int: "a whole number", bool: "true or false", dict: "an object"}


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expect(ok: bool, path: str, what: str, value: object) -> None:
    if not ok:
        shown = repr(value)
        raise ValueError(f"{path} must be {what}, not {shown[:60]}{'…' if len(shown) > 60 else ''}")
