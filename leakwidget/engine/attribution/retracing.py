"""tf.function retracing: memory that grows because TensorFlow traces a function again and again.

A ``tf.function`` traces its Python function into a graph once per new *signature*: each new
Python value (``f(3)``, ``f(4)``: a Python number is part of the signature), each new shape
without ``reduce_retracing``, each new ``tf.function`` made in a loop. Every trace builds a
graph and keeps it in the function's cache for as long as the function lives — graph nodes in
native memory, Python objects around them — so memory grows with every call that traces. It is
among the commonest "memory leaks" reported against TensorFlow, and an RSS chart, a census or
native call stacks alone do not name it.

How it is told, from TensorFlow's own count: for each tf.function, TensorFlow keeps which of its
last 10 calls traced it (the frequent-tracing detector behind its warning "5 out of the last 5
calls to <function> triggered tf.function retracing"). Its state is kept at the start of a
watch; at the end, a function called during the run (its state changed) whose last calls
traced it at least ``RETRACED`` times, and on at least half of them, is named. TensorFlow keys the
count by the Python function's code, so tf.functions made again and again from one ``def`` or
``lambda`` inside the loop (each traced on its first call) count as one function retraced.
Nothing is said when TensorFlow was not imported, when its internals are not where this
version of leakwidget looks, or when memory did not grow.

Nothing here imports TensorFlow: the detector is read only from ``sys.modules``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

DETECTOR_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
RETRACED = 5  # traces among a function's last calls that name it (TensorFlow's own threshold)
RESTORED = "saved_model/function_deserialization.py"  # where a SavedModel's functions are remade


@dataclass(frozen=True)
class Retraced:
    name: str  # the Python function's qualified name
    where: str  # file:line of its definition
    traced: int  # of its last ``calls`` calls, how many traced it
    calls: int


def _manager():
    module = sys.modules.get(DETECTOR_MODULE)
    return getattr(module, "_frequent_tracing_detector_manager", None) if module is not None else None


def _states() -> dict[int, tuple[object, int, tuple[int, ...]]] | None:
    """id(key) -> (key, calls remembered, calls per trace) for every tf.function alive; None
    where TensorFlow's detector is not found."""
    manager = _manager()
    detectors = getattr(manager, "_detectors", None)
    lock = getattr(manager, "_lock", None)
    if detectors is None or lock is None:
        return None
    try:
        with lock:
            return {id(key): (key, int(d._call_count), tuple(d._calls_per_tracings))
                    for key, d in list(detectors.items())}
    except (AttributeError, TypeError):
        return None


def _name(key: object) -> tuple[str, str]:
    code = key if hasattr(key, "co_filename") else getattr(key, "__code__", None)
    if code is None:
        return repr(key)[:60], "?"
    name = getattr(code, "co_qualname", code.co_name)
    return name, f"{code.co_filename}:{code.co_firstlineno}"


class Retracing:
    """The collector: :meth:`start` before the run, :meth:`finish` after it."""

    def __init__(self) -> None:
        self._before: dict[int, tuple[object, int, tuple[int, ...]]] | None = None
        self.retraced: list[Retraced] = []

    def start(self) -> None:
        self.retraced = []
        self._before = _states() if DETECTOR_MODULE in sys.modules else None

    def finish(self) -> str:
        """Read the count again; the cause it shows (:meth:`cause`)."""
        before, self._before = self._before, None
        now = _states()
        if now is None:
            return ""
        before = before or {}
        for ident, (key, calls, per_trace) in now.items():
            old = before.get(ident)
            if old is not None and old[0] is key and (calls, per_trace) == old[1:]:
                continue  # not called during the run
            traced = len(per_trace)  # traces among its last ``calls`` calls
            if traced >= RETRACED and 2 * traced >= calls:
                self.retraced.append(Retraced(*_name(key), traced=traced, calls=calls))
        self.retraced.sort(key=lambda r: -r.traced / max(r.calls, 1))
        return self.cause()

    def cause(self, kept: bool = True) -> str:
        """The sentence that names retracing, or "" when TensorFlow's count does not show it.
        ``kept``: the traces stay alive (a function kept and called with new Python values);
        False when the growth was garbage (garbage.py): traces of a function made in the loop,
        or of a SavedModel loaded in it, die with it and wait for the cycle collector
        (measured: both flat with gc.collect() every 50 iterations)."""
        if not self.retraced:
            return ""
        r = self.retraced[0]
        others = len(self.retraced) - 1
        more = f" (and {others} other tf.function{'s' if others > 1 else ''})" if others else ""
        if RESTORED in r.where.replace("\\", "/"):
            # tf.saved_model.load each iteration: every load restores the model's functions
            # anew, each traced on its first call (+62.5 KiB an iteration on TF 2.21), all
            # from one function of TensorFlow's, which the count names.
            fate = "each is traced on its first call" + (
                ", and kept" if kept else ", and is garbage once the loaded object is dropped")
            return (
                f"A SavedModel loaded again and again: TensorFlow traced its restored functions "
                f"({r.name}, {r.where}) on {r.traced} of their last {r.calls} calls during the "
                f"run{more}; each tf.saved_model.load restores the model's functions anew, and "
                f"{fate}. Load the model once, outside the loop, and call what it returned.")
        if not kept:
            return (
                f"tf.function retracing: TensorFlow traced {r.name} ({r.where}) on {r.traced} of "
                f"its last {r.calls} calls during the run{more}: each call built a new graph, "
                "garbage once its tf.function was dropped (one made in the loop). Make a "
                "tf.function once, outside the loop, not in it.")
        return (
            f"tf.function retracing: TensorFlow traced {r.name} ({r.where}) on {r.traced} of its "
            f"last {r.calls} calls during the run{more}; each trace builds a new graph and keeps "
            "it, so memory grows with every call that traces. Pass tensors instead of Python "
            "numbers (a Python value is part of the signature), give it an input_signature or "
            "reduce_retracing=True for changing shapes, and make a tf.function once, outside "
            "the loop, not in it.")
