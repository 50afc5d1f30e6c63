"""The live progress line in a terminal (rich): RSS, the slope so far, the verdict so far.

Used by ``leakwidget run`` / ``attach`` and by the Keras callback outside a notebook. An
:class:`~leakwidget.engine.observer.Observer` like the dashboard: it keeps its own bounded copy
of the stream, and rich redraws the line from it four times a second in its own thread (so a
long step or a quiet program still shows time passing). On a terminal the line disappears at
the end, leaving the final report to whoever prints it; elsewhere (a log file, CI) it prints
nothing, so logs stay clean.

A program that ``leakwidget run`` starts would write to the same terminal row the line redraws.
:class:`ProgramOutput` gives it a pseudo-terminal instead (so it still sees a terminal: line
buffering, colours) and prints what it writes above the line; the line it has not finished yet
(a progress bar of its own, redrawn with ``\r``) is shown live just above ours.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import pty
import sys
import termios
import threading
import time
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from .engine.observer import BaseObserver, RunControl
from .engine.records import IterationRecord, RecordLog
from .engine.result import WatchResult
from .engine.units import format_bytes, format_duration
from .engine.verdict import Verdict
from .report.colours import KIND_COLOURS
from .report.rates import rates

REFRESH_PER_SECOND = 4


class LiveLine(BaseObserver):
    """``label``: what is watched ("pid 1234", "fit"); ``unit``: what an iteration is, as the
    line counts them ("iterations", "batches"). ``live=False``: no redrawn line; whoever drives
    it prints the line at moments of its choosing (:meth:`print_status`), for when another
    progress bar already owns the terminal's last line (Keras's)."""

    def __init__(self, label: str = "", unit: str = "iterations", stream: TextIO | None = None,
                 *, live: bool = True) -> None:
        self.label = label
        self.unit = unit
        self.live = live
        self.console = Console(file=stream or sys.stderr, highlight=False)
        self._log = RecordLog(capacity=4096)  # the rates need the end times; older ones thinned
        self._verdict = Verdict("inconclusive")
        self._rss = 0
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._live: Live | None = None
        self.partial = ""  # the watched program's unfinished output line (ProgramOutput)
        self._phase = ""  # what the run does after its measured part (Watch's phases)

    # ------------------------------------------------------------------ the stream
    def on_start(self, run: RunControl) -> None:
        self._t0 = time.monotonic()
        if not self.live:
            return
        self._live = Live(console=self.console, get_renderable=self._renderable, transient=True,
                          refresh_per_second=REFRESH_PER_SECOND, redirect_stdout=False,
                          redirect_stderr=False)
        self._live.start()

    def on_samples(self, t, rss) -> None:
        if len(rss):
            self._rss = int(rss[-1])

    def on_iteration(self, record: IterationRecord) -> None:
        with self._lock:
            self._log.append(record)
        self._rss = record.rss

    def on_verdict(self, verdict: Verdict) -> None:
        self._verdict = verdict

    def on_phase(self, what: str) -> None:
        self._phase = what

    def on_finish(self, result: WatchResult) -> None:
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def print_status(self) -> None:
        """The line as it is now, printed once (with a newline)."""
        self.console.print(self.render())

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, soft_wrap=True)  # the terminal wraps, not rich

    def program_line(self, text: str) -> None:
        """A line the watched program wrote, printed above the live line."""
        self.console.print(Text.from_ansi(text), soft_wrap=True)

    def _renderable(self) -> RenderableType:
        partial = self.partial
        return Group(Text.from_ansi(partial), self.render()) if partial else self.render()

    # ------------------------------------------------------------------ the line
    def render(self) -> Text:
        v = self._verdict
        with self._lock:
            n = self._log.total
            r = rates(v, self._log.column("index"), self._log.column("end")) if n >= 2 else None
        line = Text()
        if self.label:
            line.append(f"{self.label}  ", style="bold")
        line.append(f"{format_duration(time.monotonic() - self._t0)}  {n:,} {self.unit}")
        if self._rss:
            line.append(f"  RSS {format_bytes(self._rss)}")
        if r is not None and v.slope_low != v.slope_high:
            slope = (f"{format_bytes(r.per_second, signed=True)}/s" if r.per_second is not None
                     else f"{format_bytes(r.per_iteration, signed=True)}/iteration")
            line.append(f"  slope {slope}")
        line.append("  ")
        # An inconclusive verdict without an interval is one that lacks iterations yet.
        collecting = not v.iterations or (v.kind == "inconclusive" and v.slope_low == v.slope_high)
        line.append("collecting data" if collecting else f"{v.kind} so far",
                    style=f"bold {KIND_COLOURS.get(v.kind, KIND_COLOURS['inconclusive'])}")
        if v.kind == "leak" and v.exhaust_seconds is not None:
            line.append(f", out of memory in ~{format_duration(v.exhaust_seconds)}")
        if self._phase:
            line.append(f"  {self._phase}")
        return line


class ProgramOutput:
    """A pseudo-terminal for a program's stdout and stderr, read by a thread that prints each
    line the program writes above ``line`` (see the module's docstring).

    Give ``slave`` to the program (``subprocess.Popen(stdout=..., stderr=...)``), then
    ``start()``; ``close()`` once the program has ended prints what is left.
    """

    def __init__(self, line: LiveLine) -> None:
        self.line = line
        self.master, self.slave = pty.openpty()
        try:  # the program formats its output for our terminal's width
            size = fcntl.ioctl(sys.stderr.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(self.slave, termios.TIOCSWINSZ, size)
        except OSError:
            pass
        self._thread = threading.Thread(target=self._pump, name="leakwidget-output", daemon=True)

    @staticmethod
    def wanted(quiet: bool) -> bool:
        """Only where the program's output would have gone to the terminal the line is on."""
        return not quiet and sys.stdout.isatty() and sys.stderr.isatty()

    def start(self) -> None:
        os.close(self.slave)  # the program holds it now; its end is our end of file
        self.slave = -1
        self._thread.start()

    def _pump(self) -> None:
        decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        pending = ""
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            *lines, pending = (pending + decode(data)).split("\n")
            # The unfinished line first: printing redraws the live part at once, and it must
            # not show a line that has just been finished.
            self.line.partial = pending.rsplit("\r", 1)[-1]
            for text in lines:
                self.line.program_line(text.rstrip("\r").rsplit("\r", 1)[-1])
        if pending.strip("\r"):
            self.line.program_line(pending.rsplit("\r", 1)[-1])
        self.line.partial = ""

    def close(self, timeout: float = 2.0) -> None:
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1
        if self._thread.ident is None:  # the program never started
            os.close(self.master)
            return
        # A daemon the program left behind may keep the terminal open: do not wait for it.
        self._thread.join(timeout)
        if not self._thread.is_alive():
            os.close(self.master)
