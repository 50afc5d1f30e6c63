"""The Keras callback watches a real ``model.fit`` (and evaluate / predict) on the CPU.

Verdicts are decided in a fresh interpreter per case (a leaking and a clean fit), as a user's
training script would run; the mechanics (stop flags, per-epoch iterations, evaluate and predict,
a fit that raises) run in this process; Stop during a synchronous ``model.fit`` cell is clicked
in a real kernel through jupyter_client, as JupyterLab would send it.
"""

from __future__ import annotations

import queue
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest_fresh import run_fresh

import leakwidget
from leakwidget.engine.watch import active_watch

MiB = 1024 * 1024

# A tiny model on random data and a Keras PyDataset that keeps every batch it served when
# told to: the leak a data loader with a cache that never forgets makes.
MODEL = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras

KEPT = []

class Batches(keras.utils.PyDataset):
    def __init__(self, n, keep_bytes=0):
        super().__init__()
        self.n, self.keep_bytes = n, keep_bytes
        self.x = np.random.rand(32, 16).astype("float32")
        self.y = np.random.rand(32, 1).astype("float32")

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.keep_bytes:
            KEPT.append(np.ones(self.keep_bytes // 8))
        return self.x, self.y

def make_model():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model
"""

# Collecting the suite imports no TensorFlow (tests/conftest.py): Keras, the callback and the
# model's classes are made when this file's first test runs.
keras: Any = None
LeakWatch: Any = None
Batches: Any = None
make_model: Any = None
RaiseAt: Any = None
KEPT: Any = None  # what Batches keeps when told to


@pytest.fixture(autouse=True, scope="module")
def _keras() -> None:
    global keras, LeakWatch, Batches, make_model, RaiseAt, KEPT
    keras = pytest.importorskip("keras")
    from leakwidget.keras import LeakWatch

    ns: dict[str, Any] = {}
    exec(MODEL, ns)
    Batches, make_model, KEPT = ns["Batches"], ns["make_model"], ns["KEPT"]

    class RaiseAt(keras.callbacks.Callback):
        def __init__(self, batch: int) -> None:
            super().__init__()
            self.batch = batch

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            if batch == self.batch:
                raise Boom("data went bad")


def fit_in_fresh_process(keep_bytes: int, seconds: float) -> dict:
    """A fit on a repeated tf.data dataset; ``keep_bytes``: a callback keeps that much per batch
    in a global list (a metrics logger that never forgets)."""
    code = MODEL + textwrap.dedent(f"""
        import json
        import tensorflow as tf
        from leakwidget.keras import LeakWatch

        class Keep(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if {keep_bytes}:
                    KEPT.append(np.ones({keep_bytes} // 8))

        x = np.random.rand(2048, 16).astype("float32")
        y = np.random.rand(2048, 1).astype("float32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
        model = make_model()
        cb = LeakWatch(seconds={seconds}, quiet=True)
        model.fit(ds, steps_per_epoch=64, epochs=100_000, callbacks=[Keep(), cb], verbose=0)
        r = cb.result
        print(json.dumps({{"kind": r.verdict.kind, "slope": r.verdict.slope, "stopped": r.stopped,
                          "iterations": r.iteration_count, "stop_training": model.stop_training,
                          "summary": r.verdict.summary}}))
    """)
    return run_fresh(code, timeout=180)


def test_a_fit_that_keeps_something_every_batch_is_a_leak_at_its_rate() -> None:
    out = fit_in_fresh_process(keep_bytes=256 * 1024, seconds=8)
    assert out["kind"] == "leak", out["summary"]
    assert 0.8 * 256 * 1024 < out["slope"] < 1.25 * 256 * 1024, out["summary"]
    # The budget ended the watch, and the watch ended the training.
    assert out["stopped"] == "seconds" and out["stop_training"] is True
    assert out["iterations"] > 100


def test_a_clean_fit_is_not_a_leak() -> None:
    out = fit_in_fresh_process(keep_bytes=0, seconds=10)
    # Stable or a plateau (tf.data's and Keras's buffers filling); on a busy machine 10 s may
    # leave it inconclusive — but never a leak, and nowhere near the leaking fit's rate.
    assert out["kind"] in ("stable", "plateau", "inconclusive"), out["summary"]
    assert abs(out["slope"]) < 4 * 1024, out["summary"]
    assert out["stopped"] == "seconds" and out["stop_training"] is True


# ------------------------------------------------------------------ mechanics, in this process


@pytest.fixture(scope="module")
def model() -> Any:
    return make_model()


def test_one_iteration_per_training_batch_and_the_result_is_the_usual_one(model: Any) -> None:
    cb = LeakWatch(quiet=True)
    history = model.fit(Batches(12), epochs=3, callbacks=[cb], verbose=0)
    r = cb.result
    assert len(history.epoch) == 3 and model.stop_training is False  # watched, not stopped
    assert r.iteration_count == 36 and r.stopped == "ended"
    assert r.column("duration").min() > 0 and r.verdict.kind in ("leak", "plateau", "stable", "inconclusive")
    assert r.attribution is not None  # the engine's attribution ran at the end
    assert active_watch() is None


def test_per_epoch_makes_one_iteration_per_epoch(model: Any) -> None:
    cb = LeakWatch(per="epoch", quiet=True)
    model.fit(Batches(4), epochs=5, callbacks=[cb], verbose=0)
    assert cb.result.iteration_count == 5


def test_an_iteration_budget_stops_the_training_cleanly(model: Any) -> None:
    cb = LeakWatch(iterations=7, quiet=True)
    history = model.fit(Batches(5), epochs=50, callbacks=[cb], verbose=0)
    assert model.stop_training is True and cb.result.stopped == "iterations"
    assert cb.result.iteration_count == 7
    assert len(history.epoch) == 2  # the epoch in which the 7th batch ran was the last


def test_max_rss_stops_the_training_before_memory_runs_past_it(model: Any) -> None:
    from leakwidget.engine import sampler

    limit = sampler.rss() + 200 * MiB
    cb = LeakWatch(max_rss=limit, quiet=True)
    history = model.fit(Batches(50, keep_bytes=4 * MiB), epochs=100, callbacks=[cb], verbose=0)
    KEPT.clear()
    assert model.stop_training is True and cb.result.stopped == "memory-guard"
    assert len(history.epoch) < 100
    assert cb.result.column("rss").max() < limit


def test_evaluate_and_predict_are_watched_per_batch(model: Any) -> None:
    cb = LeakWatch(quiet=True)
    model.evaluate(Batches(9), callbacks=[cb], verbose=0)
    assert cb.result.iteration_count == 9
    model.predict(Batches(6), callbacks=[cb], verbose=0)
    assert cb.result.iteration_count == 6
    cb = LeakWatch(iterations=3, quiet=True)
    model.predict(Batches(20), callbacks=[cb], verbose=0)
    assert cb.result.stopped == "iterations" and model.stop_predicting is True


def test_validation_inside_fit_does_not_start_a_second_watch(model: Any) -> None:
    cb = LeakWatch(quiet=True)
    model.fit(Batches(6), validation_data=Batches(4), epochs=2, callbacks=[cb], verbose=0)
    assert cb.result.iteration_count == 12  # training batches only; validation falls between


def test_wrong_arguments_fail_before_any_training() -> None:
    with pytest.raises(ValueError, match="per must be"):
        LeakWatch(per="step")
    with pytest.raises(ValueError, match="not a size"):
        LeakWatch(max_rss="lots")
    with pytest.raises(ValueError, match="seconds must be positive"):
        LeakWatch(seconds=0)


class Boom(Exception):
    pass


def test_a_fit_that_raises_in_ipython_keeps_its_partial_result(model: Any) -> None:
    # Keras calls no on_train_end when fit raises; the cell's end closes the watch instead.
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(history_length=0)
    shell.history_manager.enabled = False
    shell.user_ns.update(model=model, Batches=Batches, LeakWatch=LeakWatch, RaiseAt=RaiseAt)
    shell.run_cell("cb = LeakWatch(quiet=True)\nmodel.fit(Batches(10), epochs=3, callbacks=[cb, RaiseAt(4)], verbose=0)")
    cb = shell.user_ns["cb"]
    assert active_watch() is None
    assert cb.result is not None and cb.result.stopped == "interrupted"
    assert cb.result.iteration_count == 5
    assert any("exception" in n for n in cb.result.stage_notes)


def leakwidget_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("leakwidget")]


def test_outside_ipython_a_fit_that_raises_ends_its_watch_and_its_threads(model: Any) -> None:
    # Keras calls no on_train_end when fit raises. A watch started right after ends the
    # abandoned one first...
    cb = LeakWatch(quiet=True)
    with pytest.raises(Boom):
        model.fit(Batches(10), epochs=1, callbacks=[cb, RaiseAt(2)], verbose=0)
    assert leakwidget.watch(lambda: None, iterations=10, widget=False).iteration_count == 10
    assert cb.result.stopped == "interrupted" and cb.result.iteration_count == 3
    # ... and without one the callback notices by itself, within a fraction of a second.
    with pytest.raises(Boom):
        model.fit(Batches(10), epochs=1, callbacks=[cb, RaiseAt(4)], verbose=0)
    deadline = time.monotonic() + 5
    while (active_watch() is not None or leakwidget_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert active_watch() is None and leakwidget_threads() == []
    assert cb.result.stopped == "interrupted" and cb.result.iteration_count == 5
    assert any("exception" in n for n in cb.result.stage_notes)
    cb.close()  # nothing left to close
    assert cb.result.iteration_count == 5


def test_a_fit_that_runs_to_its_end_is_ended_not_stopped_and_offers_no_bisect(model: Any) -> None:
    from leakwidget.notebook.banner import final_banner

    kept = []

    @leakwidget.stage
    def remember(batch: int) -> int:  # a stage Bisect could switch off, were there a step
        kept.append(bytearray(64 * 1024))
        return batch

    class Remember(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            remember(batch)

    cb = LeakWatch(quiet=True)
    model.fit(Batches(200), epochs=1, callbacks=[Remember(), cb], verbose=0)
    r = cb.result
    assert r.stopped == "ended" and r.verdict.kind == "leak", str(r)
    assert any(s.toggleable for s in r.stages)
    details = " ".join(final_banner(r).details)
    assert "You stopped it" not in details and "Bisect" not in details, details
    assert "ran to its end" in details


def test_the_progress_line_is_printed_per_epoch_beside_keras_own_bar(model: Any, capsys) -> None:
    cb = LeakWatch()
    model.fit(Batches(3), epochs=3, callbacks=[cb], verbose=2)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("leakwidget fit")]
    assert len(lines) == 2, err  # before epochs 2 and 3
    assert "batches" in lines[-1] and "RSS" in lines[-1]
    assert f"leakwidget: {cb.result.verdict.summary}" in err


# ------------------------------------------------------------------ Stop in a real kernel


class Kernel:
    """A real kernel, and the part of a front end the test needs (comm ids, clicks)."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3")
        self.comms: dict[str, str] = {}
        self.notes: list[str] = []

    def absorb(self, msg: dict) -> None:
        if msg["msg_type"] == "comm_open":
            for cls in msg["content"]["data"].get("state", {}).get("_dom_classes", []):
                self.comms[cls] = msg["content"]["comm_id"]
        if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == self.comms.get("leakwidget-note"):
            value = msg["content"]["data"].get("state", {}).get("value")
            if value is not None:
                self.notes.append(value)

    def run(self, code: str, timeout: float = 120) -> str:
        out: list[str] = []

        def hook(msg: dict) -> None:
            self.absorb(msg)
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok", "".join(out)
        return "".join(out)

    def wait(self, pred: Any, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                continue
            self.absorb(msg)
            if pred(msg):
                return msg
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    try:
        k.run(MODEL + "\nfrom leakwidget.keras import LeakWatch\nimport time\nmodel = make_model()")
        yield k
    finally:
        k.close()


FIT_CELL = """
class SeenStop(keras.callbacks.Callback):
    at = None
    def on_train_batch_end(self, batch, logs=None):
        if self.model.stop_training and SeenStop.at is None:
            SeenStop.at = time.monotonic()
cb = LeakWatch()
history = model.fit(Batches(64), epochs=100_000, callbacks=[cb, SeenStop()], verbose=0)
"""


def test_stop_ends_a_synchronous_fit_cell_at_a_batch_end(kernel: Kernel) -> None:
    msg_id = kernel.kc.execute(FIT_CELL)
    # The dashboard is up and batches are being counted (the banner shows the iteration).
    kernel.wait(lambda m: m["msg_type"] == "comm_msg" and "iteration" in str(
        m["content"]["data"].get("state", {}).get("value", "")), 120, "a running dashboard")
    clicked = time.monotonic()
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": kernel.comms["leakwidget-stop"],
                                              "data": {"method": "custom", "content": {"event": "click"}}})
    kernel.kc.shell_channel.send(msg)
    kernel.wait(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                and m["parent_header"].get("msg_id") == msg_id, 60, "the fit cell to end")
    out = kernel.run("print(cb.result.stopped, model.stop_training, len(history.epoch) < 100_000, SeenStop.at)")
    stopped, flag, early, seen = out.split()
    assert (stopped, flag, early) == ("stopped", "True", "True")
    # The fit saw the flag at a batch end after the click (time.monotonic is one clock for every
    # process of this machine). How soon is bench/bench_stop.py's to measure: 14 ms quiet, and
    # 1.54 s once beside CI's load (run 25), when a bound of 1 s asserted here failed.
    assert seen != "None" and float(seen) >= clicked, (seen, clicked)
    print(f"the fit saw Stop {float(seen) - clicked:.2f} s after the click")
    # Clicks could arrive, so the dashboard does not claim otherwise.
    assert not any("cannot deliver clicks" in n for n in kernel.notes), kernel.notes


def test_where_clicks_cannot_reach_a_fit_the_dashboard_says_so(model: Any) -> None:
    # A plain IPython shell has no kernel and so no subshell: the note must say that Stop
    # waits for the cell, and name what works instead.
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.instance(history_length=0)
    cb = LeakWatch(widget=True)
    model.fit(Batches(3), epochs=1, callbacks=[cb], verbose=0)
    note = cb.dashboard.note.value
    assert "cannot deliver clicks while model.fit runs" in note and "max_rss" in note
    assert list(cb.dashboard.controls.children) == [cb.dashboard.stop_button]
