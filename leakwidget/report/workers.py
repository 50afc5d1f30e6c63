"""Each worker's private memory beside the tree's total: which lines a picture draws, and how.

A watch of a process with children samples the tree's total (this process's RSS plus its
children's private memory, :mod:`leakwidget.engine.children`); the pictures draw that total as
the run's line and, beside it, each child's private memory, so N workers each copying the same
data show as N lines that each climb by a share of the total's climb. The live dashboard
(``notebook/worker_lines.py``) and the static chart (:mod:`.chart`) follow the rules here:

- lines only when a child grew by at least :data:`MIN_GROWTH` (children that all stayed flat —
  the ``multiprocessing`` resource tracker a kernel keeps once it used a pool — tell nothing the
  total does not: the picture is then the one without children);
- at most :data:`MAX_LINES` lines, those of the children that grew most (their highest private
  memory in the run less what they held when it began), the others said in one line
  (:func:`not_shown`);
- a forked child is "worker 3", "worker 3 (copying)" once the copy-on-write test found it copying
  (at the end of the run: the test needs the whole series); another child (the program
  ``leakwidget run`` started) is "process 1";
- the workers' colours are the runs' palette after the first run's: never red nor orange.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from .colours import MIB, PALETTE
from .decimate import minmax

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["MAX_LINES", "WORKER_COLOURS", "Child", "draw_workers", "draws_lines", "growth_of", "label",
           "largest", "not_shown", "run_from"]

MAX_LINES = 8  # worker lines drawn at most; the rest are counted in one line of the legend
MIN_GROWTH = 1024.0 * 1024.0  # bytes: a child must grow this much for the children's lines to be drawn
WORKER_COLOURS = PALETTE[1:]
_POINTS = 500  # per worker line in the static chart

K = TypeVar("K", bound=Hashable)


class Child(Protocol):
    """What a picture reads of a child process: a ChildResult, or a saved one (html.SavedChild)."""

    number: int
    samples: np.ndarray  # (seconds, private bytes) rows
    copying: object  # its copy-on-write test (``.copying``: it copies), None: not forked


def label(number: int, forked: bool, copying: bool = False) -> str:
    """'worker 3', 'worker 3 (copying)', or 'process 1' for a child that is not a fork."""
    name = f"worker {number}" if forked else f"process {number}"
    return f"{name} (copying)" if copying else name


def child_label(child: Child) -> str:
    copy = child.copying
    return label(child.number, copy is not None, bool(getattr(copy, "copying", False)))


def largest(growth: Mapping[K, float]) -> list[K]:
    """The keys of the :data:`MAX_LINES` children that grew most (bytes), in their order in
    ``growth``; none when none grew :data:`MIN_GROWTH`."""
    if max(growth.values(), default=0.0) < MIN_GROWTH:
        return []
    top = set(sorted(growth, key=lambda k: -growth[k])[:MAX_LINES])
    return [k for k in growth if k in top]


def not_shown(hidden: int) -> str:
    """'+3 more workers not shown' ('' when all are drawn)."""
    if hidden <= 0:
        return ""
    return f"+{hidden} more worker{'s' if hidden > 1 else ''} not shown"


def run_from(t: np.ndarray, start: float | None) -> int:
    """The index of a child's reading its line counts from: its last at or before ``start``
    (the end of the setup: its memory when the run began), or its first when it came later."""
    return max(0, int(np.searchsorted(t, start, side="right")) - 1) if start is not None else 0


def growth_of(t: np.ndarray, private: np.ndarray, start: float | None) -> tuple[float, float]:
    """(its private memory when the run began, how far above it it rose): readings from
    :func:`run_from` on."""
    i = run_from(t, start)
    run = private[i:]
    if not run.size:
        return 0.0, 0.0
    return float(run[0]), float(run.max() - run[0])


def draws_lines(children: Sequence[Child], start: float | None) -> bool:
    """Whether a picture draws the children's lines (see the module's rules)."""
    return bool(largest({i: growth_of(c.samples[:, 0], c.samples[:, 1], start)[1]
                         for i, c in enumerate(children) if c.samples.size}))


def draw_workers(memory: Axes, children: Sequence[Child], start: float | None) -> None:
    """Each child's private memory (at most :data:`MAX_LINES`) on a right-hand axis with the
    memory axis' MiB per pixel, so a worker's climb and the total's compare by their slopes."""
    series = {i: (c.samples[:, 0], c.samples[:, 1]) for i, c in enumerate(children) if c.samples.size}
    if not series:
        return
    shown = largest({i: growth_of(t, v, start)[1] for i, (t, v) in series.items()})
    if not shown:
        return
    ax = memory.twinx()
    ax.grid(False)
    ax.spines["right"].set_visible(True)
    ax.set_ylabel("each worker's private memory (MiB)")
    lows, highs = [], []
    for k, i in enumerate(shown):
        t, v = series[i]
        x, y = minmax(t, v / MIB, _POINTS)
        ax.plot(x, y, color=WORKER_COLOURS[k % len(WORKER_COLOURS)], lw=1.2,
                label=child_label(children[i]), gid=f"leakwidget-worker-{children[i].number}")
        lows.append(float(y.min()))
        highs.append(float(y.max()))
    hidden = not_shown(len(series) - len(shown))
    if hidden:
        ax.plot([], [], " ", label=hidden)  # a legend line without a swatch
    lo, hi = memory.get_ylim()
    span = max(hi - lo, 1.12 * (max(highs) - min(lows)))
    memory.set_ylim(lo, lo + span)
    bottom = min(lows) - 0.06 * (max(highs) - min(lows))
    ax.set_ylim(bottom, bottom + span)
