"""Watch a real Keras training run: ``model.fit(..., callbacks=[LeakWatch()])``.

    from leakwidget.keras import LeakWatch

    cb = LeakWatch()                        # one iteration per training batch
    model.fit(ds, epochs=5, callbacks=[cb])
    cb.result.verdict.kind                  # "leak", "plateau", "stable" or "inconclusive"

In a notebook the live dashboard shows RSS, the verdict so far, the time until memory runs out
and, at the end, what grows (the attribution); its Stop button ends the training cleanly after
the current batch (``model.stop_training``), also while ``fit`` runs as an ordinary synchronous
cell: in ipykernel 7 the button's clicks are handled in a kernel subshell
(:mod:`leakwidget.notebook.subshell`). Outside a notebook a progress line (rich) does the same
on stderr. ``model.evaluate`` and ``model.predict`` are watched per batch the same way when
given the callback (``stop_evaluating`` / ``stop_predicting``).

``per="epoch"`` makes one iteration per epoch (the verdict then needs at least ~10 epochs).
``seconds`` / ``iterations`` / ``max_rss`` end the watch — and the training — when reached;
without them the watch lasts as long as the training. The engine does the rest: it is the
push-driven form of the same :class:`~leakwidget.engine.watch.Watch` that ``%%leakwatch`` runs.
"""

from __future__ import annotations

import math
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal

import keras

from .engine.observer import Observer
from .engine.result import WatchResult
from .engine.spec import WatchSpec
from .engine.units import parse_size
from .engine.watch import Watch, WatchAlreadyRunning

__all__ = ["LeakWatch"]

Per = Literal["batch", "epoch"]
Phase = Literal["train", "test", "predict"]
_STOP_FLAG: dict[Phase, str] = {"train": "stop_training", "test": "stop_evaluating",
                                "predict": "stop_predicting"}
LOOP_CHECK_SECONDS = 0.25  # outside IPython, how often the Keras loop is looked for on its stack
_NO_CLICKS_NOTE = (
    "This kernel cannot deliver clicks while model.fit runs (that needs ipykernel 7 or later, "
    "whose subshells handle them): Stop takes effect only after the cell has finished. "
    "LeakWatch(max_rss=..., seconds=...) stops the training from inside."
)


def _no_step() -> None:
    """The spec's step: Keras drives the iterations itself (begin/end around each batch)."""


class LeakWatch(keras.callbacks.Callback):
    """A Keras callback that watches memory while the model trains (or evaluates, or predicts).

    ``per``: "batch" (default) or "epoch" — what one iteration of the watch is during ``fit``.
    ``seconds`` / ``iterations``: stop the watch and the training after that many (default:
    the whole run). ``max_rss`` ("2GiB", "500M" or bytes): stop the training before the process
    grows past it. ``warmup``: iterations to treat as warm-up (default: detected). ``widget``:
    None shows the dashboard in a Jupyter kernel and a progress line elsewhere; True / False
    force it. ``quiet``: no progress line. ``trace``: tracemalloc allocation sites in the
    attribution (slow). The result of the last watched call is ``cb.result``.
    """

    def __init__(self, per: Per = "batch", *, seconds: float | None = None,
                 iterations: int | None = None, max_rss: int | str | None = None,
                 warmup: int | None = None, widget: bool | None = None, quiet: bool = False,
                 trace: bool = False, label: str = "") -> None:
        super().__init__()
        if per not in ("batch", "epoch"):
            raise ValueError(f"per must be 'batch' or 'epoch', not {per!r}")
        self.per: Per = per
        # Checked now, so a wrong value fails before the training starts.
        self.spec = WatchSpec(
            step=_no_step, iterations=iterations,
            seconds=seconds if seconds is not None else (math.inf if iterations is None else None),
            warmup=warmup, max_rss=parse_size(max_rss) if max_rss is not None else None,
            trace=trace, label=label, repeatable=False,
        )
        self.widget = widget
        self.quiet = quiet
        self.result: WatchResult | None = None
        self.dashboard: Any = None  # the notebook dashboard of the last watch, if any
        self._watch: Watch | None = None
        self._phase: Phase | None = None
        self._open = False  # an iteration has begun and not ended
        self._stopping = False
        self._epochs = 0  # epochs begun in this watch
        self._route: Any = None  # the Stop button's subshell route (notebook)
        self._line: Any = None  # the progress line (outside a notebook)
        self._hook: Any = None  # IPython's post_run_cell hook that ends an abandoned watch
        self._loop: KerasLoop | None = None  # the Keras call driving the watch
        self._lock = threading.RLock()  # the watch ends once, whoever notices first

    # ------------------------------------------------------------------ Keras's hooks
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._begin("train")

    def on_train_end(self, logs: dict | None = None) -> None:
        self._finish("train")

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self._line is not None and not self._line.live and self._epochs:
            self._line.print_status()  # Keras's bar has just ended the last epoch's line
        self._epochs += 1
        if self.per == "epoch":
            self._step_begin("train")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.per == "epoch":
            self._step_end("train")

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self.per == "batch":
            self._step_begin("train")

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.per == "batch":
            self._step_end("train")

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._begin("test")

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._step_begin("test")

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._step_end("test")

    def on_test_end(self, logs: dict | None = None) -> None:
        self._finish("test")

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._begin("predict")

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._step_begin("predict")

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._step_end("predict")

    def on_predict_end(self, logs: dict | None = None) -> None:
        self._finish("predict")

    # ------------------------------------------------------------------ the watch
    def _begin(self, phase: Phase) -> None:
        if self._watch is not None:
            if self._phase == "train" and phase != "train":
                return  # validation inside fit: its batches fall between training iterations
            self._abandon()  # an earlier call that ended with an exception
        label = self.spec.label or {"train": "fit", "test": "evaluate", "predict": "predict"}[phase]
        watch = Watch(self.spec, self._observers(label), live_verdict=True)
        watch.driver = f"the LeakWatch callback's watch of {label}"
        watch.release_if_abandoned = self._release_if_abandoned
        self._route_clicks()
        # The run does not await between batches, but clicks reach it through the subshell:
        # the dashboard must not say they cannot.
        watch.yields_to_loop = self._route is not None
        try:
            watch.start()
        except WatchAlreadyRunning as exc:
            self._close_route()
            warnings.warn(f"LeakWatch does not watch this {label}: {exc}", RuntimeWarning, stacklevel=3)
            return
        if self._route is not None:
            self._route.refresh()  # the dashboard's on_start sent the button from the main thread
        elif self.dashboard is not None:
            from .notebook.banner import note_html

            self.dashboard.note.value = note_html(_NO_CLICKS_NOTE)
        watch.settle()  # and the baseline object census, before batch 0
        self._watch, self._phase = watch, phase
        self._open = self._stopping = False
        self._epochs = 0
        self._loop = KerasLoop.calling()
        self._end_if_abandoned()

    def _step_begin(self, phase: Phase) -> None:
        if self._watch is not None and phase == self._phase and not self._open and not self._stopping:
            self._watch.begin_iteration()
            self._open = True

    def _step_end(self, phase: Phase) -> None:
        if not self._open or phase != self._phase:
            return
        self._open = False
        if self._route is not None:
            self._route.refresh()
        if not self._watch.end_iteration():  # Stop, the budget, or max_rss
            self._stopping = True
            setattr(self.model, _STOP_FLAG[phase], True)

    def _finish(self, phase: Phase) -> None:
        with self._lock:
            if self._watch is None or phase != self._phase:
                return
            watch, self._watch, self._phase, self._open = self._watch, None, None, False
            if self._loop is not None:
                self._loop.close()  # (its frame, and all it holds, are not ours to keep)
                self._loop = None
            self._close_route()
            self._unhook()
            self.result = watch.finish()
            self._tell()

    def _tell(self) -> None:
        """The verdict and what grows, on the progress line's stream (outside a notebook)."""
        if self._line is not None:
            self._line.say(f"leakwidget: {self.result.summary}")
            att = self.result.attribution
            if att is not None and att.kind != "none" and att.summary:
                self._line.say(f"leakwidget: {att.summary}")
            self._line = None

    def close(self) -> None:
        """End a watch that a ``fit`` / ``evaluate`` / ``predict`` which raised left open. It
        ends by itself: in IPython when the cell ends, elsewhere within a fraction of a second
        (a thread looks for the Keras loop on its stack), or when another watch starts.
        ``cb.result`` then holds what was measured."""
        self._abandon()

    def _abandon(self) -> None:
        """The Keras loop raised (an interrupt, an error in the data) and never called its
        ``on_*_end``: end the watch, keeping what it measured."""
        with self._lock:
            if self._watch is None:
                return
            self._watch.request_stop("interrupted")
            self._finish(self._phase)
            self.result.stage_notes.append(
                "The Keras loop ended with an exception: the result covers the iterations before it."
            )

    def _release_if_abandoned(self) -> bool:
        """End the watch if its Keras loop has ended without telling the callback; True if the
        watch is over (a watch started meanwhile may go ahead)."""
        with self._lock:
            if self._watch is not None and (self._loop is None or self._loop.running):
                return False
            self._abandon()
            return True

    # ------------------------------------------------------------------ views
    def _observers(self, label: str) -> list[Observer]:
        self.dashboard = self._line = None
        if self.widget is True or (self.widget is None and _in_kernel()):
            from .notebook.dashboard import show_dashboard

            dash = show_dashboard()
            # Run again and Bisect would repeat the callback's empty step: only Stop applies.
            dash.controls.children = (dash.stop_button,)
            self.dashboard = dash
            return [dash]
        if self.quiet:
            return []
        from .console import LiveLine

        unit = "epochs" if self.per == "epoch" and label == "fit" else "batches"
        # Keras's own progress bar redraws the terminal's last line: ours would fight it for
        # that line, so while it shows, ours is printed once per epoch instead.
        keras_bar = self.params.get("verbose", 0) not in (0, None)
        self._line = LiveLine(f"leakwidget {label}", unit=unit, live=not keras_bar)
        return [self._line]

    def _route_clicks(self) -> None:
        """Make Stop work while the synchronous fit cell runs (ipykernel 7 subshells)."""
        self._route = None
        if self.dashboard is not None:
            from .notebook.subshell import route_to_subshell

            self._route = route_to_subshell(self.dashboard.stop_button)

    def _close_route(self) -> None:
        if self._route is not None:
            self._route.close()
            self._route = None

    def _end_if_abandoned(self) -> None:
        """End a watch the Keras loop abandoned (Ctrl-C, an exception) so that ``cb.result``
        is set: in an IPython cell when the cell ends (the dashboard then draws the result on
        the kernel's thread), elsewhere as soon as a thread sees the loop gone."""
        shell = _running_cell()
        if shell is None:
            if self._loop is not None:  # (IPython's cell end does it in a cell)
                self._loop.when_gone(self._release_if_abandoned)
            return

        def after_cell(*_: object) -> None:
            self._abandon()
            self._unhook()

        self._hook = (shell, after_cell)
        shell.events.register("post_run_cell", after_cell)

    def _unhook(self) -> None:
        if self._hook is not None:
            shell, fn = self._hook
            self._hook = None
            try:
                shell.events.unregister("post_run_cell", fn)
            except ValueError:
                pass


class KerasLoop:
    """The Keras call (``fit`` / ``evaluate`` / ``predict``) that drives a watch, seen on its
    thread's stack: over once its outermost Keras frame has left it — which Keras does not tell
    a callback when the call raises."""

    def __init__(self, thread: int, frame: FrameType) -> None:
        self.thread, self.frame = thread, frame
        self._done = threading.Event()

    @classmethod
    def calling(cls) -> KerasLoop | None:
        """The Keras call that called the callback this runs in (None: not called by Keras)."""
        frame, outermost = sys._getframe(1), None
        while frame is not None and frame.f_globals.get("__name__", "").startswith(__name__):
            frame = frame.f_back  # this module's own frames
        while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "keras":
            outermost, frame = frame, frame.f_back
        return None if outermost is None else cls(threading.get_ident(), outermost)

    @property
    def running(self) -> bool:
        frame = sys._current_frames().get(self.thread)
        while frame is not None and frame is not self.frame:
            frame = frame.f_back
        return frame is not None

    def when_gone(self, then: Callable[[], object]) -> None:
        """A thread that calls ``then`` soon after the call has ended (every
        ``LOOP_CHECK_SECONDS``), unless closed first."""

        def check() -> None:
            while not self._done.wait(LOOP_CHECK_SECONDS):
                if not self.running:
                    then()
                    return

        threading.Thread(target=check, name="leakwidget-keras-loop", daemon=True).start()

    def close(self) -> None:
        self._done.set()
        self.frame = None


def _running_cell() -> Any:
    """The IPython shell running the cell this code runs in (on this thread), or None."""
    if "IPython" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return None
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") != "IPython.core.interactiveshell":
        frame = frame.f_back
    if frame is None:  # IPython is loaded, but this is no cell of it (a script, a test)
        return None
    from IPython import get_ipython

    return get_ipython()


def _in_kernel() -> bool:
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    from .notebook.delivery import in_kernel

    return in_kernel(get_ipython())
