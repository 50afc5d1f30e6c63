"""A module imported when a test first uses it, not when its file is collected.

Every xdist worker collects every test file, so a library a file imports at its top lands in
every worker's heap, and every in-process watch there walks it in its collections and census:
nbformat (142,000 objects with its JSON schemas), distributed (54,000) and Playwright (34,000)
helped make a worker of 352,000 objects before its first test, as many as TensorFlow
(docs/development.md), though the tests that use them run their work in other processes.
"""

from __future__ import annotations

import importlib
from typing import Any


class lazy:  # noqa: N801 - used as a module
    """``lazy("nbformat").read(...)``: the module, imported at the first public attribute read.
    Private and dunder names are not looked up: pytest's collection probes every global of a
    test file (``__test__``, its fixture marker) and would import it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported when first used>"
