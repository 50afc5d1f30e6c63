"""Interrupts (Ctrl-C, a Jupyter kernel's interrupt) while a watch runs.

While the step (or setup) runs, SIGINT raises KeyboardInterrupt at once, wherever the step
is — in a ``time.sleep``, in ``while True: pass`` — also in a kernel whose own handler would
only cancel the cell at its next ``await``. Between steps the previous handler decides, so an
interrupt that lands while the loop awaits the kernel's event loop is the kernel's own. While
the result is put together, a second interrupt is noted and ignored: the run has already
stopped, and the result must not be lost. The previous handler is put back on every way out.
Signal handlers belong to the main thread: a watch running in another thread leaves them alone.

One handler is installed for the whole run, at the first step, and a flag says whether a step
is running: swapping handlers around every step cost two ``sigaction`` system calls per
iteration, the first of them right after the step, when the kernel's code is out of the caches
(10–15 µs on a 5 ms step). Where the handler in place already raises KeyboardInterrupt (a plain
Python process), nothing is installed at all.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any


class Interrupts:
    def __init__(self) -> None:
        self._saved: Any = None
        self._armed = False  # the previous handler is noted (main thread)
        self._hooked = False  # our handler is installed
        self.stepping = False  # a step (or the setup) is running: SIGINT raises at once
        self.ignored = 0  # interrupts that arrived while the result was being put together

    def arm(self) -> None:
        """At the start: note the handler in place (main thread only; others leave it)."""
        if threading.current_thread() is threading.main_thread() and not self._armed:
            saved = signal.getsignal(signal.SIGINT)
            # SIG_IGN / SIG_DFL come back as signal.Handlers members: keep the plain ints.
            self._saved = int(saved) if isinstance(saved, signal.Handlers) else saved
            self._armed = True

    def raise_at_once(self) -> None:
        """From now on SIGINT raises KeyboardInterrupt (main thread only)."""
        self.arm()
        self.enter_step()

    def enter_step(self) -> None:
        """While the step runs, SIGINT raises KeyboardInterrupt."""
        self.stepping = True
        self.install()

    def install(self) -> None:
        """Our handler, once for the run (a loop that calls this first may set ``stepping``
        itself around each step)."""
        if self._armed and not self._hooked and self._saved is not signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)
            self._hooked = True

    def leave_step(self) -> None:
        self.stepping = False

    def _on_sigint(self, signum: int, frame: FrameType | None) -> Any:
        if self.stepping:
            raise KeyboardInterrupt
        previous = self._previous()
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_DFL:  # what the default disposition does: end the process
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return None  # SIG_IGN

    def _previous(self) -> Any:
        # None: the handler was not set from Python; the default one is the best stand-in.
        return self._saved if self._saved is not None else signal.default_int_handler

    def hold(self) -> None:
        """From now on SIGINT is noted and ignored (while the result is put together). (A watch
        finished from another thread, the Keras callback's when its loop raised, leaves the
        handler alone: only the main thread may set it.)"""
        self.stepping = False
        if self._armed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._note)
            self._hooked = True

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.ignored += 1

    def restore(self) -> None:
        self.stepping = False
        if self._armed:
            if self._hooked:
                signal.signal(signal.SIGINT, self._previous())
            self._armed = self._hooked = False
