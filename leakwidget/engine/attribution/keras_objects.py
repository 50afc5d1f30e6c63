"""Keras objects made every iteration: models, layers or optimizers built inside the loop.

Keras 3 names every layer, model and optimizer it makes from a global counter per kind
(``dense``, ``dense_1``, …: ``keras.src.backend.common.global_state``'s ``object_name_uids``),
and keeps that global state, with what TensorFlow builds for each object, until
``keras.backend.clear_session()`` (Keras's own documentation says memory grows with every model
built in a loop until then). Measured on TensorFlow 2.21 / Keras 3: a small model built and
called each iteration, +149 KiB an iteration of native memory with Python objects flat, flat
with ``clear_session()`` before each build; ``model.compile("adam", "mse")`` each iteration,
+70 KiB (a new optimizer each time). ``fit``, ``predict``, ``evaluate`` and a model's call make
no named object, so the counters say exactly which kinds the step makes.

How it is told: the counters are copied at the start of a watch and read at its end; the
kinds whose counter rose by at least one per iteration of the run are named. Nothing is said
when Keras 3 was not imported (nothing here imports it), or when memory did not grow.
"""

from __future__ import annotations

import sys

STATE_MODULE = "keras.src.backend.common.global_state"


def _counters() -> dict[str, int] | None:
    module = sys.modules.get(STATE_MODULE)
    get = getattr(module, "get_global_attribute", None) if module is not None else None
    if get is None:
        return None
    try:
        uids = get("object_name_uids")
        return {str(k): int(v) for k, v in dict(uids or {}).items()}
    except (TypeError, ValueError, AttributeError):
        return None


class KerasObjects:
    """The collector: :meth:`start` before the run, :meth:`finish` after it."""

    def __init__(self) -> None:
        self._before: dict[str, int] | None = None
        self.made: dict[str, float] = {}  # kind -> objects made per iteration

    def start(self) -> None:
        self.made = {}
        self._before = _counters()

    def finish(self, iterations: int) -> str:
        """Read the counters again (``iterations``: the measured run's); the cause they show."""
        before, self._before = self._before, None
        now = _counters()
        if now is None or iterations < 2:
            return ""
        before = before or {}
        # (The tracker's phases after the run ran the step a few more times: at most a fifth
        # of its seconds, so "at least one per iteration of the run" still holds of a step that
        # makes one each time, and cannot hold of one that made them only at its start.)
        self.made = {k: (n - before.get(k, 0)) / iterations for k, n in now.items()
                     if n - before.get(k, 0) >= iterations}
        return self.cause()

    def cause(self, kept: bool = True) -> str:
        """The sentence naming the kinds made; ``kept=False``: in the words of a growth that
        is garbage (what was made died, in reference cycles: ``keras.models.load_model`` each
        iteration, flat with ``gc.collect()`` every 50 loads, measured apart)."""
        if not self.made:
            return ""
        kinds = sorted(self.made.items(), key=lambda kv: -kv[1])[:4]
        listed = ", ".join(f"{k} (about {n:.2g} an iteration)" for k, n in kinds)
        made = f"Keras objects made every iteration: {listed}, by Keras's own name counters."
        if not kept:
            return (f"{made} Dropped, they are garbage in reference cycles until a full "
                    "collection: make or load models, layers and optimizers once, outside the loop.")
        return (
            f"{made} Keras keeps global state for each object it makes, and TensorFlow what each "
            "one built, until keras.backend.clear_session(): make models, layers and optimizers "
            "once, outside the loop (compile once), or call keras.backend.clear_session() before "
            "each rebuild."
        )
