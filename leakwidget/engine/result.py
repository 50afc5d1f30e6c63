"""What a watch leaves: the verdict, the records, the samples, the attribution, and exports."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..report.chart import result_mimebundle
from ..report.html import PAGE
from ..stages import Stage
from .attribution import Attribution, DeviceMemory
from .children import ChildResult
from .copying import CopyOnWrite, tree_sentence
from .environment import environment
from .kinds import Reading, StopReason, reading
from .records import FIELDS, IterationRecord, RecordLog
from .spec import WatchSpec
from .units import rss_travel
from .verdict import Verdict, read_summary


def _step_not_restored(*args: object) -> None:
    """Stands in for the step of an unpickled result: functions of a session do not travel."""
    raise RuntimeError("this result was unpickled: its step and setup (functions of the session "
                       "that ran it) did not travel with it; run the watch again where they exist")


def _without_functions(spec: WatchSpec) -> WatchSpec:
    return dataclasses.replace(spec, step=_step_not_restored, code=None,
                               setup=None if spec.setup is None else _step_not_restored)


@dataclass
class WatchResult:
    spec: WatchSpec
    verdict: Verdict
    stopped: StopReason
    error: BaseException | None = None
    error_iteration: int | None = None
    error_traceback: str = ""
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    stages: list[Stage] = field(default_factory=list)
    stage_notes: list[str] = field(default_factory=list)
    attribution: Attribution | None = None
    # GPU memory's own series and verdict, or why it was not measured (None: no attribution)
    device: DeviceMemory | None = None
    elapsed: float = 0.0
    baseline_rss: int = 0
    environment: dict = field(default_factory=environment)  # versions, allocator, machine memory
    # Child processes of the watched process: each one's memory and verdict (engine/children.py)
    children: list[ChildResult] = field(default_factory=list)
    # Forked children copying what they share with this process (engine/copying.py), or None
    copy_on_write: CopyOnWrite | None = None
    # A result made without a log (a run that ended before its first iteration) has an empty
    # one, of the smallest size a log can have.
    _log: RecordLog = field(default_factory=lambda: RecordLog(4), repr=False)

    @property
    def iterations(self) -> list[IterationRecord]:
        return self._log.records()

    @property
    def iteration_count(self) -> int:
        return self._log.total

    def column(self, name: str) -> np.ndarray:
        """One field of the iteration records as a numpy array (cheaper than .iterations)."""
        return self._log.column(name).copy()

    # -- pickling: everything but the functions, which belong to the session that ran them --
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["spec"] = _without_functions(self.spec)
        return state

    def let_go_of_the_step(self) -> None:
        """Drop the step and setup, and all they hold (a pytest test's fixtures, through the
        arguments its step was called with), from a result kept longer than they may live;
        they are replaced as for pickling. Run again cannot work from it afterwards."""
        self.spec = _without_functions(self.spec)

    # -- export --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        att = self.attribution
        return {
            "verdict": self.verdict.to_dict(),
            "stopped": self.stopped,
            "error": None if self.error is None else repr(self.error),
            "error_iteration": self.error_iteration,
            "iterations": [dict(zip(FIELDS, r.values(), strict=True)) for r in self.iterations],
            "iteration_count": self.iteration_count,
            "samples": self.samples.tolist(),
            "stages": [s.to_dict() for s in self.stages],
            "stage_notes": list(self.stage_notes),
            "attribution": att.to_dict() if att is not None else None,
            "device": self.device.to_dict() if self.device is not None else None,
            "config": {"off": list(self.spec.toggles.off), "serial": list(self.spec.toggles.serial),
                       "label": self.spec.label, "iterations": self.spec.iterations,
                       "seconds": _finite(self.spec.seconds), "warmup": self.spec.warmup,
                       "max_rss": self.spec.max_rss},
            "elapsed": self.elapsed,
            "baseline_rss": self.baseline_rss,
            # Each child's private memory too (at most members.SERIES_CAPACITY readings): the
            # page of a saved result charts it as the live view did.
            "children": [{"pid": c.pid, "number": c.number, "cmdline": c.cmdline,
                          "verdict": c.verdict.to_dict(), "samples": c.samples.tolist(),
                          "copying": c.copying.to_dict() if c.copying is not None else None}
                         for c in self.children],
            "copy_on_write": self.copy_on_write.to_dict() if self.copy_on_write is not None else None,
            "environment": dict(self.environment),
        }

    def to_json(self, **kwargs) -> str:
        d = self.to_dict()
        v = d["verdict"]
        for k in ("slope_low", "slope_high"):
            if isinstance(v[k], float) and not math.isfinite(v[k]):
                v[k] = None
        return json.dumps(d, default=json_default, **kwargs)

    def to_csv(self, path) -> None:
        """One row per iteration (the records' fields); the file appears whole or not at all."""
        f = io.StringIO(newline="")
        w = csv.writer(f)
        w.writerow(FIELDS)
        cols = [self._log.column(k).tolist() for k in FIELDS]
        w.writerows(zip(*cols, strict=True))
        write_whole(path, f.getvalue())

    def save_html(self, path) -> None:
        """Write the report as one self-contained HTML page (charts, verdict, attribution,
        stages, configuration, environment; no network needed to open it). The file appears
        whole or not at all."""
        write_whole(path, PAGE.render(self))

    # -- display -------------------------------------------------------------------------
    @property
    def reading(self) -> Reading | None:
        """How the leak verdict reads with the attribution (kinds.reading): "retention",
        "unsettled", or None (as the verdict says)."""
        att = self.attribution
        return reading(self.verdict.kind, att and att.kind, att and att.kept_unsettled)

    @property
    def retention(self) -> bool:
        """RSS grew like a leak, but the attribution found memory the program does not keep
        (kinds.NOT_KEPT): memory the allocator keeps (freed by the program, handed back by
        malloc_trim), or garbage awaiting the cycle collector with nothing unsettled kept past
        it: not a leak of the user's code."""
        return self.reading == "retention"

    @property
    def unsettled(self) -> bool:
        """RSS grew like a leak, mostly garbage awaiting the cycle collector, and the heap kept a
        part past it that the run was too short to call a leak or not
        (Attribution.kept_unsettled)."""
        return self.reading == "unsettled"

    @property
    def copying(self) -> bool:
        """Forked children copying what they share with this process (copy-on-write) are the
        story of the growth: a plateau per worker, not a leak."""
        return self.copy_on_write is not None and self.copy_on_write.explains

    @property
    def summary(self) -> str:
        """The verdict's sentence as it reads with the attribution (words.read_summary): for
        retention or an unsettled reading, the numbers of the growth without the word "leak";
        for copy-on-write, the copies."""
        if self.copying:
            return self.copy_on_write.summary
        att = self.attribution
        return read_summary(self.verdict, self.reading, att and att.kept_unsettled, att and att.kept_behind)

    @property
    def tree_summary(self) -> str:
        """The verdict's sentence, as it reads beside a copy-on-write summary."""
        return tree_sentence(self.verdict.summary or f"Verdict: {self.verdict.kind}")

    def __str__(self) -> str:
        n = self.iteration_count
        lines = [self.summary, *([self.tree_summary] if self.copying else [])]
        rss = self._log.column("rss")
        if rss.size:
            lines.append(
                f"{n:,} iterations in {self.elapsed:.1f} s (stopped: {self.stopped}); "
                + rss_travel(self.baseline_rss, rss[0], rss[-1], self._log.column("peak_rss").max()) + "."
            )
        else:
            lines.append(f"No iteration finished (stopped: {self.stopped}).")
        if self.error is not None:
            where = ("the setup" if self.error_iteration is None
                     else f"iteration {self.error_iteration}")
            lines.append(f"{type(self.error).__name__} in {where}: {self.error}")
        if self.attribution is not None and self.attribution.summary:
            text = str(self.attribution)
            if self.copying:  # its sentence is the summary, first already
                text = text.partition("\n")[2]
            lines.extend([text] if text else [])
        if self.device is not None and self.device.measured:
            lines.append(str(self.device))
        if self.stages:
            lines.append("Stages: " + ", ".join(s.id for s in self.stages))
        if self.copy_on_write is not None and not self.copying:  # (else it is the attribution)
            lines.extend(self.copy_on_write.lines())
        lines.extend(f"Child process {c}" for c in self.children)
        lines.extend(self.stage_notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<WatchResult {self.verdict.kind} after {self.iteration_count} iterations, stopped: {self.stopped}>"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """Its text and its chart (nbconvert and GitHub show the chart without widgets)."""
        return result_mimebundle(self)


def write_whole(path, text: str) -> None:
    """Write ``text`` to ``path``. A regular file, or a new one, is written through a temporary
    file in its folder, renamed into place: a reader never sees half a file, and a failure leaves
    nothing behind. A symlink is followed: the file it points to is replaced, the link stays.
    What :func:`written_in_place` names (a FIFO, a terminal, a device, /dev/stdout) is written
    into, never replaced."""
    if written_in_place(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    target = os.path.realpath(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".leakwidget-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def written_in_place(path) -> bool:
    """Is ``path`` something to write into rather than replace: anything there that is not a
    regular file (a FIFO, a terminal, a device; a directory fails as it would), and whatever
    /dev and /proc name (/dev/stdout is the caller's own descriptor: the file a shell appends
    to behind it must not be replaced)?"""
    path = os.path.abspath(os.fspath(path))
    if path.startswith(("/dev/", "/proc/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)  # (follows a symlink)
    except FileNotFoundError:
        return False


def json_default(o: Any) -> Any:
    """JSON for what ``json`` cannot write, in every saved result: numpy booleans and numbers
    (a non-finite one as null), arrays as lists, anything else as its repr."""
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.ndarray):
        return o.tolist()
    return repr(o)


def _finite(v: float | None) -> float | None:
    """None for no limit (a watch that runs until it is stopped has seconds=inf)."""
    return v if v is None or math.isfinite(v) else None
