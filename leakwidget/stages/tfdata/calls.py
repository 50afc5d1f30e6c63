"""Who called a patched method, and what a dataset is built from.

A patched method records a stage only when the user's code (or Keras) called it: tf.data's own
internals build datasets too (``sample_from_datasets`` calls ``.batch``/``.map``), and those are
not stages the user wrote.
"""

from __future__ import annotations

import sys
from typing import Any

from ..sites import _HERE
from ..stage import Stage

_TAG = "_leakwidget_stage"  # attribute set on a recorded stage's dataset: the stage id
_PY_FUNC_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})

# TensorFlow files that only forward a user's call (deprecation/dispatch wrappers and the
# tf.data.experimental aliases); a call coming through them is still the user's call.
_TRANSPARENT = (
    "/python/util/deprecation.py",
    "/python/util/dispatch.py",
    "/python/util/traceback_utils.py",
    "/python/data/experimental/ops/interleave_ops.py",
)

# (file, qualified function name prefix) of frames that only forward the user's call:
# ``ds.apply(f)``, the ``_apply_fn`` closures of tf.data.experimental.map_and_batch and
# parallel_interleave, and tf.compat.v1's datasets, whose methods wrap the v2 ones.
_TRANSPARENT_FUNCTIONS = (
    ("/python/data/ops/dataset_ops.py", "DatasetV2.apply"),
    ("/python/data/ops/dataset_ops.py", "DatasetV1."),
    ("/python/data/ops/readers.py", "TFRecordDatasetV1."),
    ("/python/data/experimental/ops/batching.py", "map_and_batch"),
)


def _called_by_user(depth: int) -> bool:
    """Was the patched method called by user code (or Keras), not by TensorFlow's internals?

    ``depth`` counts the frames between the caller of this function and the patched method's
    caller. Calls from autograph-converted user functions (an ``interleave`` lambda) are the
    user's.
    """
    frame = sys._getframe(depth + 1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_HERE):  # the stages package itself (the recorder, the builders)
            frame = frame.f_back
            continue
        norm = name.replace("\\", "/")
        if "/tensorflow/" not in norm or "/autograph/" in norm:
            return True
        if not norm.endswith(_TRANSPARENT) and not _forwards(frame.f_code, norm):
            return False
        frame = frame.f_back
    return True


def _forwards(code: Any, norm: str) -> bool:
    qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.11+ has the class too
    return any(norm.endswith(f) and qualname.startswith(q) for f, q in _TRANSPARENT_FUNCTIONS)


def _upstream(datasets: list[Any], known: set[str], limit: int = 200) -> list[str]:
    """Ids of the nearest recorded stages feeding these datasets (walks ``_inputs()``)."""
    out: list[str] = []
    seen: set[int] = set()
    todo = list(datasets)
    while todo and limit > 0:
        limit -= 1
        ds = todo.pop(0)
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        sid = ds.__dict__.get(_TAG) if hasattr(ds, "__dict__") else None
        if sid in known:
            out.append(sid)
            continue
        try:
            todo.extend(ds._inputs())
        except Exception:  # any dataset type without inputs
            pass
    return out


def _tag(ds: Any, stage: Stage) -> Any:
    try:
        object.__setattr__(ds, _TAG, stage.id)
    except Exception:  # exotic dataset types: recording still works, only the edge is lost
        pass
    return ds


def _executing_eagerly() -> bool:
    from tensorflow.python.eager import context

    return context.executing_eagerly()


def _uses_python(mapped: Any) -> str:
    """'tf.py_function' / 'tf.numpy_function' if the traced map function calls back into Python."""
    try:
        graph_def = mapped._map_func.function.graph.as_graph_def()
    except Exception:
        return ""
    ops = {n.op for n in graph_def.node}
    for fn in graph_def.library.function:
        ops.update(n.op for n in fn.node_def)
    if "EagerPyFunc" in ops:
        return "tf.py_function"
    if ops & _PY_FUNC_OPS:
        return "tf.numpy_function"
    return ""
