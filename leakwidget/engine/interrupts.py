"""Interrupts (Ctrl-C, a Jupyter kernel's interrupt) while a watch runs.

While the step (or setup) runs, SIGINT raises KeyboardInterrupt at once, wherever the step
is — in a ``time.sleep``, in ``while True: pass`` — also in a kernel whose own handler would
only cancel the cell at its next ``await``. Between steps the previous handler is in place, so
an interrupt that lands while the loop awaits the kernel's event loop is the kernel's own. While the result is put together, a second interrupt is noted
and ignored: the run has already stopped, and the result must not be lost. The previous handler
is put back on every way out. Signal handlers belong to the main thread: a watch running in
another thread leaves them alone.
"""

from __future__ import annotations

import signal
import threading

try:
    # CPython's C-level signal(): the same call as signal.signal without its enum conversions,
    # which cost ~3 us each way. The handler is swapped twice per iteration; a 1 ms step pays it.
    from _signal import signal as _set_handler
except ImportError:  # another interpreter: the public one
    _set_handler = signal.signal
from types import FrameType
from typing import Any


class Interrupts:
    def __init__(self) -> None:
        self._saved: Any = None
        self._installed = False
        self.ignored = 0  # interrupts that arrived while the result was being put together

    def arm(self) -> None:
        """At the start: note the handler in place (main thread only; others leave it)."""
        if threading.current_thread() is threading.main_thread() and not self._installed:
            saved = signal.getsignal(signal.SIGINT)
            # SIG_IGN / SIG_DFL come back as signal.Handlers members; the C-level call takes
            # only the plain ints (an idle ipykernel ignores SIGINT: Run again starts there).
            self._saved = int(saved) if isinstance(saved, signal.Handlers) else saved
            self._installed = True

    def raise_at_once(self) -> None:
        """From now on SIGINT raises KeyboardInterrupt (main thread only)."""
        self.arm()
        self.enter_step()

    def enter_step(self) -> None:
        """While the step runs, SIGINT raises KeyboardInterrupt."""
        if self._installed:
            _set_handler(signal.SIGINT, signal.default_int_handler)

    def leave_step(self) -> None:
        if self._installed:
            _set_handler(signal.SIGINT, self._previous())

    def _previous(self) -> Any:
        # None: the handler was not set from Python; the default one is the best stand-in.
        return self._saved if self._saved is not None else signal.default_int_handler

    def hold(self) -> None:
        """From now on SIGINT is noted and ignored (while the result is put together)."""
        if self._installed:
            signal.signal(signal.SIGINT, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.ignored += 1

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous())
            self._installed = False
