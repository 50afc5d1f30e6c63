"""WatchSpec: everything needed to run a watch again (Run again, each bisection configuration)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..stages import AS_WRITTEN, Toggles
from .kinds import ALLOCATORS, Allocator


@dataclass
class WatchSpec:
    """A watch to run: the step and its setup, the budget, the guards, the stage toggles.

    Derive variants with ``dataclasses.replace`` (the bisection does, for each configuration).
    """

    step: Callable
    setup: Callable | None = None
    iterations: int | None = None
    seconds: float | None = None
    # Stop once the verdict is confident, but not before this many iterations; ``seconds`` (or
    # the default budget) stays the ceiling. A comparison's variants run so: as long as a watch
    # needs to be sure, at least as long as the run they are compared for.
    confident_after: int | None = None
    warmup: int | None = None
    max_rss: int | None = None  # bytes
    toggles: Toggles = AS_WRITTEN  # what the run asks of its stages: id or kind -> on/serial/off
    trace: bool = False  # tracemalloc allocation sites
    lines: bool = False  # memory_profiler line-by-line increments
    native: bool = False  # memray: call stacks of native memory allocated and not freed
    # Reset the kernel's high-water mark at every iteration: every iteration's exact peak, at
    # the price of the process's own peak record (ru_maxrss). Off: new highs exact, the rest
    # sampled at 125 Hz, the record kept. Workers always reset theirs (it is nobody else's).
    exact_peaks: bool = False
    label: str = ""  # name of this configuration (bisection, a dashboard's series)
    code: types.CodeType | None = None  # the code --lines reports on (default: the step's own)
    # A fresh worker process (engine/isolate.py) runs the setup and the step; env and allocator
    # act only on a process started with them, so either implies it.
    isolate: bool = False
    env: tuple[tuple[str, str], ...] = ()  # the worker's extra environment (a dict is accepted)
    allocator: Allocator | None = None  # the worker's malloc: glibc's, or jemalloc/tcmalloc preloaded
    # leakwidget calls the step, so Run again and Bisect can repeat it; False where the watched
    # code drives its own iterations (a Keras fit, a program under leakwidget run).
    repeatable: bool = True

    def __post_init__(self) -> None:
        if not callable(self.step):
            raise TypeError(f"step must be callable, not {type(self.step).__name__}")
        for name, fn in (("step", self.step), ("setup", self.setup)):
            if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
                raise TypeError(
                    f"{name} is {'an async' if not inspect.isgeneratorfunction(fn) else 'a generator'} "
                    "function: calling it only creates an object and never runs its body; pass a "
                    "plain function (e.g. lambda: next(gen), or lambda: asyncio.run(step()))"
                )
        if self.setup is not None and not callable(self.setup):
            raise TypeError(f"setup must be callable or None, not {type(self.setup).__name__}")
        if self.iterations is not None and (not isinstance(self.iterations, int) or self.iterations < 1):
            raise ValueError(f"iterations must be a positive integer, not {self.iterations!r}")
        if self.confident_after is not None and (not isinstance(self.confident_after, int)
                                                 or self.confident_after < 0):
            raise ValueError(f"confident_after must be a non-negative integer, not {self.confident_after!r}")
        if self.seconds is not None and not (self.seconds > 0):
            raise ValueError(f"seconds must be positive, not {self.seconds!r}")
        if self.warmup is not None and (not isinstance(self.warmup, int) or self.warmup < 0):
            raise ValueError(f"warmup must be a non-negative integer, not {self.warmup!r}")
        if self.max_rss is not None and (not isinstance(self.max_rss, int) or self.max_rss <= 0):
            raise ValueError(f"max_rss must be a positive number of bytes, not {self.max_rss!r}")
        if not isinstance(self.toggles, Toggles):
            raise TypeError(f"toggles must be a Toggles (Toggles.parse(off=..., serial=...)), "
                            f"not {type(self.toggles).__name__}")
        self.env = _env_pairs(self.env)
        if self.allocator is not None and self.allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}, not {self.allocator!r}")
        if self.env or self.allocator is not None:
            self.isolate = True


def _env_pairs(env: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    """Environment variables as (name, value) pairs, checked: a name the OS would reject is
    an error here, not a worker that fails to start."""
    pairs = list(env.items()) if isinstance(env, Mapping) else list(env or ())
    out = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"env must be a dict or (name, value) pairs, not {pair!r}")
        name, value = pair
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"env: not a variable name: {name!r}")
        if not isinstance(value, str):
            raise ValueError(f"env: the value of {name} must be a string, not {value!r}")
        if "\0" in value:
            raise ValueError(f"env: the value of {name} holds a NUL character (\\0), which no "
                             f"environment variable can: {value!r}")
        out.append((name, value))
    return tuple(out)
