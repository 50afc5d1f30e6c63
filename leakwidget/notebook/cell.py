"""A notebook cell as a step and a setup that can travel to a worker process.

An isolated ``%%leakwatch`` cannot run its code in the notebook's namespace: it ships the
compiled setup and step and the notebook names they use (cloudpickle: modules by name, functions
and data by value), and the worker executes them in a namespace of their own. The source lines
travel too, so tracebacks, stage sites and autograph (which reads a function's source) work as in
the notebook.

It is the notebook floor's idea (:mod:`.shipping` makes it), so it lives here; the worker only
unpickles it, which imports this module by name. Hence it imports nothing but the standard
library: unpickling a cell in a worker loads no IPython, no widgets, nothing the worker would
then measure as the user's.
"""

from __future__ import annotations

import linecache
import types
from dataclasses import dataclass, field


@dataclass
class CellCode:
    step_code: types.CodeType
    setup_code: types.CodeType | None = None
    namespace: dict = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)  # filename -> lines (linecache)

    def setup(self) -> None:
        exec(self.setup_code, self.namespace)  # noqa: S102 - the user's own cell

    def step(self, _state: object = None) -> None:
        exec(self.step_code, self.namespace)  # noqa: S102

    def __setstate__(self, state: dict) -> None:
        # In the worker: the cell's lines are known to linecache before any of its code runs.
        self.__dict__.update(state)
        for filename, lines in self.sources.items():
            linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)
