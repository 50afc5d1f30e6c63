"""Known holders: a library's container whose growth has a known cause and a known fix.

A reference path (paths.py) that climbs through one of them names the cause, as retracing.py
names tf.function retracing: the path is the evidence — it reaches objects of a growing row
from a root — and the sentence says what to change. Nothing is said without such a path.

- **TensorFlow's ``_py_funcs_used_in_graph``.** Every ``tf.py_function``,
  ``tf.numpy_function`` and ``Dataset.from_generator`` (which runs on ``numpy_function``) that
  TensorFlow traces is appended to a list on the outermost graph, to keep it alive as long as the
  graph lives (``script_ops._internal_py_func``). In eager mode that graph is the global default
  graph, which lives as long as the process: a pipeline built again each step (a new dataset per
  epoch or per call, a ``py_function`` in its ``map``) adds its functions, their closures and
  what they hold to that list every time. Measured: ``Dataset.from_generator`` built and
  iterated each step, +21 KiB per iteration, the path ``..._default_graph_stack ... ['_global_default_graph']
  Graph → ['_py_funcs_used_in_graph'] list → function`` found in 1.5 s of the search's CPU time.
"""

from __future__ import annotations

from collections.abc import Iterable

from .result import RefPath

# (what a path's words contain, the sentence that names the cause and what to change)
KNOWN = (
    ("['_py_funcs_used_in_graph']",
     "TensorFlow keeps every tf.py_function, tf.numpy_function and Dataset.from_generator it "
     "traces in its global graph's _py_funcs_used_in_graph list for the life of the process "
     "(the path below reaches the growing objects through it), so a pipeline or tf.function "
     "traced again on every step keeps its functions and all they hold. Build the dataset "
     "(and any tf.function) once, outside the loop, and iterate it again each epoch."),
)


def reword(paths: Iterable[RefPath]) -> tuple[RefPath, ...]:
    """Each path through a known holder told from the holder on, with the root it was reached
    from in brackets: the search climbs to the first root it meets, and any dataset the user
    keeps in a global refers to TensorFlow's global graph ("__main__.train_ds (_BatchDataset) →
    ._graph_attr Graph → ..." named the user's dataset as what holds the growth)."""
    out = []
    for p in paths:
        at = next((p.text.index(marker) for marker, _ in KNOWN if marker in p.text), None)
        if at is not None:
            p = RefPath(p.target, p.root, f"a TensorFlow graph (reached from {p.root}) \u2192 "
                        f"{p.text[at:]}", p.length)
        out.append(p)
    return tuple(out)


def cause(paths: Iterable[RefPath]) -> str:
    """The sentence of the first known holder a path passes through, or ""."""
    texts = [p.text for p in paths]
    return next((sentence for marker, sentence in KNOWN if any(marker in t for t in texts)), "")
