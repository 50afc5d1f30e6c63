"""Operations added to TensorFlow's default graph every iteration: the TF1-style leak.

In graph mode (``tf.compat.v1`` with eager execution disabled) every ``tf.constant``,
``tf.reduce_sum`` … called inside the loop adds operations to the default graph, and a graph
keeps every operation added to it for as long as it lives. Measured on TensorFlow 2.21: a step
that runs ``sess.run(tf.reduce_sum(tf.constant(x) * 2.0))`` grew 70 KiB an iteration, read as
"Python objects kept alive … kept alive by __main__.sess" (the session holds the graph), with
nothing to say that the ops were the cause.

How it is told: ``Graph.version`` (public: it rises as operations are added) of the default
graph is read at the start of the watch and at its end, in the watch's thread, where the step
runs; operations added at least once per iteration of the run are named, with the fix. Nothing
is said when TensorFlow was not imported (nothing here imports it), in eager mode (eager
operations are not added to it), or when memory did not grow.
"""

from __future__ import annotations

import sys
import weakref

OPS_MODULE = "tensorflow.python.framework.ops"


def _default_graph():
    ops = sys.modules.get(OPS_MODULE)
    if ops is None:
        return None
    try:
        if ops.executing_eagerly_outside_functions():
            return None
        return ops.get_default_graph()
    except Exception:  # a TensorFlow without these: nothing to say
        return None


class GraphOps:
    """The collector: :meth:`start` before the run, :meth:`finish` after it."""

    def __init__(self) -> None:
        # A weak reference: a watch whose finish is not called (nothing grew) must not keep a
        # graph the user resets afterwards alive.
        self._graph: weakref.ref | None = None
        self._version = 0
        self.per_iteration = 0.0  # operations added per iteration of the run (0: none named)

    def start(self) -> None:
        self.per_iteration = 0.0
        graph = _default_graph()
        self._graph = weakref.ref(graph) if graph is not None else None
        self._version = int(getattr(graph, "version", 0) or 0)

    def finish(self, iterations: int) -> str:
        """Read the graph's version again (``iterations``: the measured run's); the cause."""
        ref, self._graph = self._graph, None
        graph = ref() if ref is not None else None
        if graph is None or iterations < 2:
            return ""
        added = int(getattr(graph, "version", 0) or 0) - self._version
        # (The phases after the run ran the step a few more times: at most a fifth of its
        # seconds, so a step that adds one each time still adds one per iteration of the run.)
        if added < iterations:
            return ""
        self.per_iteration = added / iterations
        return (
            f"Operations added to TensorFlow's graph every iteration: about "
            f"{self.per_iteration:,.3g} an iteration ({added:,} in the run), and a graph keeps "
            "every operation added to it. Build the operations once, outside the loop, and only "
            "run them inside it (sess.run with a feed_dict or placeholders); graph.finalize() "
            "after building makes TensorFlow raise where one is added."
        )
