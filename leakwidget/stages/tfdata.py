"""tf.data patches: record every stage the user's code builds, and switch stages off or serial.

Imported only by ``StageSession`` once TensorFlow is in ``sys.modules``; never imports
TensorFlow on its own.

The patches are class-level attributes on ``tf.data.Dataset`` (``DatasetV2``) and
``tf.data.TFRecordDataset`` (``TFRecordDatasetV2``): a dataset built while a session is entered
goes through them, and ``Patches.restore()`` puts the very same original objects back.

Neutral substitutes ("off") keep the element structure so the rest of the pipeline still runs:

=====================  ===================================================================
prefetch/shuffle/cache  pass-through (``take(-1)``, which tf.data's noop elimination drops)
interleave              ``flat_map``: one input at a time (experimental ``parallel_interleave``:
                        ``cycle_length=1``, nothing prefetched)
map                     the function runs once per iterator; every element becomes that first
                        output (``zip(input, first.cache().repeat())``), cardinality kept;
                        experimental ``map_and_batch`` the same, still batched
TFRecordDataset         one reader (``num_parallel_reads=None``)
sample/choose_from_…    the first input only
serial                  ``num_parallel_calls=None`` (sequential and deterministic)
autotune, inject_prefetch, map_parallelization, parallel_batch, map_and_batch_fusion
                        stages TensorFlow inserts by itself: turned off through
                        ``tf.data.Options`` on every iterator created during the session
=====================  ===================================================================
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import TYPE_CHECKING, Any

from . import _HERE, caller_site

if TYPE_CHECKING:
    from . import Stage, StageSession

_TAG = "_leakwidget_stage"
_MISSING = object()
_PY_FUNC_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})

# Stages TensorFlow adds on its own (defaults on in TF 2.21), toggled via tf.data.Options.
PSEUDO_STAGES: dict[str, str] = {
    "autotune": "autotune tunes parallelism and buffer sizes (options.autotune.enabled)",
    "inject_prefetch": "a prefetch TensorFlow appends after the last stage",
    "map_parallelization": "TensorFlow runs stateless maps in parallel",
    "parallel_batch": "TensorFlow copies batch elements in parallel",
    "map_and_batch_fusion": "TensorFlow fuses map + batch into one stage that runs ahead",
}

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

_local = threading.local()  # .inner: stack of lists of stage ids recorded inside a call


def _called_by_user(depth: int) -> bool:
    """Was the patched method called by user code (or Keras), not by TensorFlow's internals?

    ``sample_from_datasets`` itself calls ``.batch``/``.map``; those are not stages the user
    wrote. Calls from autograph-converted user functions (an ``interleave`` lambda) are.
    """
    frame = sys._getframe(depth + 1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_HERE):
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


class Patches:
    """The attributes replaced on TensorFlow classes, and how to put them back."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        errors = []
        while self._saved:
            owner, name, original = self._saved.pop()
            try:
                if original is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except Exception as e:  # keep restoring the others
                errors.append(f"{owner.__name__}.{name}: {e}")
        if errors:
            raise RuntimeError("could not restore tf.data attributes: " + "; ".join(errors))


def install(session: StageSession) -> Patches:
    """Patch tf.data for this session; returns the Patches to restore on exit."""
    from tensorflow.python.data.ops import dataset_ops, readers

    D = dataset_ops.DatasetV2
    R = readers.TFRecordDatasetV2
    legacy = _legacy_classes()
    legacy["v1"] = getattr(dataset_ops, "DatasetV1", None)
    legacy["v1_adapter"] = getattr(dataset_ops, "DatasetV1Adapter", None)
    raw = {n: D.__dict__[n] for n in (
        "prefetch", "shuffle", "cache", "map", "interleave", "batch", "padded_batch", "repeat",
        "from_generator", "sample_from_datasets", "choose_from_datasets", "flat_map", "take",
        "with_options", "_apply_debug_options",
    )}
    fn = {n: (v.__func__ if isinstance(v, staticmethod) else v) for n, v in raw.items()}
    zip_ = D.zip
    options_cls = _options_class()
    patches = Patches()
    py_checked: set[str] = set()
    try:
        _install(session, patches, D, R, fn, zip_, options_cls, py_checked, legacy)
    except BaseException:
        patches.restore()  # all or nothing
        raise
    return patches


def _install(session: StageSession, patches: Patches, D: Any, R: Any, fn: dict[str, Any],
             zip_: Any, options_cls: Any, py_checked: set[str], legacy: dict[str, Any]) -> None:
    V1, V1_adapter = legacy.pop("v1", None), legacy.pop("v1_adapter", None)

    def passthrough(ds: Any) -> Any:
        return fn["take"](ds, -1)

    def record(kind: str, site: tuple[str, int, int], a: dict[str, Any], shown: dict[str, Any],
               upstream: list[Any], toggleable: bool, parallel: bool) -> Stage:
        known = {s.id for s in session.stages}
        return session.record(kind, site, args=shown, inputs=_upstream(upstream, known),
                              toggleable=toggleable, parallel=parallel)

    def wrap(owner: Any, name: str, kind: str, build: Any) -> None:
        """Replace owner.name by a recorder around ``build(bound_arguments, site)``."""
        original = owner.__dict__[name]
        func = original.__func__ if isinstance(original, staticmethod) else original
        sig = inspect.signature(func)

        @functools.wraps(func)
        def patched(*args: Any, **kwargs: Any) -> Any:
            if not _called_by_user(1):
                return func(*args, **kwargs)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return func(*args, **kwargs)  # TensorFlow raises its own clear error
            site = caller_site(2)
            stack = getattr(_local, "inner", None)
            if stack is None:
                stack = _local.inner = []
            stack.append([])
            try:
                stage, result = build(func, bound, site)
            finally:
                inner = stack.pop()
            if inner:
                session._adopt_inner(stage, inner)
            if stack:
                stack[-1].append(stage.id)
            return result

        patches.replace(owner, name, staticmethod(patched) if isinstance(original, staticmethod)
                        else patched)

    def call(func: Any, bound: Any, **changes: Any) -> Any:
        a = dict(bound.arguments)
        a.update(changes)
        return func(**a)

    # -- pass-through stages ------------------------------------------------------------------
    def simple(kind: str, shown_keys: tuple[str, ...]) -> Any:
        def build(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
            a = bound.arguments
            stage = record(kind, site, a, {k: a[k] for k in shown_keys if k in a},
                           [a["self"]], True, False)
            ds = passthrough(a["self"]) if stage.state == "off" else func(**a)
            return stage, _tag(ds, stage)
        return build

    wrap(D, "prefetch", "prefetch", simple("prefetch", ("buffer_size",)))
    wrap(D, "shuffle", "shuffle", simple("shuffle", ("buffer_size", "seed")))
    wrap(D, "cache", "cache", simple("cache", ("filename",)))

    # -- map ----------------------------------------------------------------------------------
    # Off: every element becomes the map's first output. Eagerly, that output is computed once
    # per watch and stage and reused by every later build of the same stage, so a pipeline
    # rebuilt every iteration stops building (tracing) the user's function too: building it
    # can be the leak (a py_function registered for each trace). Inside a graph (a dataset
    # built in a tf.function or an interleave's function) the first output is taken lazily.
    first_outputs: dict[str, tuple[Any, Any]] = {}  # stage id -> (input element_spec, output)

    def check_python(stage: Stage, ds: Any) -> None:
        if stage.id not in py_checked:  # reading the traced graph costs: once per stage
            py_checked.add(stage.id)
            python = _uses_python(ds)
            if python:
                stage.args["python"] = python

    def first_output_source(stage: Stage, ds_of: Any, upstream: Any) -> Any:
        spec = upstream.element_spec
        hit = first_outputs.get(stage.id)
        if hit is not None and hit[0] == spec:
            return fn["repeat"](D.from_tensors(hit[1]))
        ds = ds_of()
        check_python(stage, ds)
        if _executing_eagerly():
            for first in fn["take"](ds, 1):
                first_outputs[stage.id] = (spec, first)
                return fn["repeat"](D.from_tensors(first))
            return None  # empty: so is the map's output
        return fn["repeat"](fn["cache"](fn["take"](ds, 1)))

    def map_builder(serial_changes: dict[str, Any], adapt: Any) -> Any:
        """``map``'s recorder; ``adapt`` turns a substitute into the caller's dataset type."""
        def build_map(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
            a = bound.arguments
            npc = a.get("num_parallel_calls")
            shown = {"map_func": a["map_func"]}
            if npc is not None:
                shown["num_parallel_calls"] = npc
            stage = record("map", site, a, shown, [a["self"]], True, npc is not None)

            def serial() -> Any:
                return call(func, bound, **serial_changes)

            if stage.state == "off":
                first = first_output_source(stage, serial, a["self"])
                if first is None:
                    ds = serial()
                else:
                    ds = adapt(fn["map"](zip_((a["self"], first)), lambda _element, constant: constant))
                return stage, _tag(ds, stage)
            ds = func(**a) if stage.state == "on" else serial()
            check_python(stage, ds)
            return stage, _tag(ds, stage)
        return build_map

    wrap(D, "map", "map", map_builder(
        {"num_parallel_calls": None, "deterministic": None, "use_unbounded_threadpool": False},
        lambda ds: ds))
    if V1 is not None and "map" in V1.__dict__:
        # tf.compat.v1's map builds its dataset itself rather than through the v2 method.
        wrap(V1, "map", "map", map_builder({"num_parallel_calls": None, "deterministic": None},
                                           V1_adapter))

    # tf.data.experimental.map_and_batch(...) through .apply: a map (same states) that batches.
    def build_map_and_batch(func: Any, bound: Any, site: Any) -> tuple[Stage, None]:
        a = bound.arguments
        upstream = a["input_dataset"]
        npc = a.get("num_parallel_calls")
        shown = {"form": "tf.data.experimental.map_and_batch", "map_func": a["map_func"],
                 "batch_size": a["batch_size"], "num_parallel_calls": npc}
        stage = record("map", site, a, shown, [upstream], True, True)
        if stage.state == "off":
            first = first_output_source(stage, lambda: fn["map"](upstream, a["map_func"]), upstream)
            if first is None:
                call(func, bound, num_parallel_calls=1)
            else:
                call(func, bound, input_dataset=zip_((upstream, first)), num_parallel_calls=1,
                     map_func=lambda _element, constant: constant)
        else:
            if stage.state == "serial":
                call(func, bound, num_parallel_calls=1)
            else:
                func(**a)
            check_python(stage, a["self"])
        _tag(a["self"], stage)
        return stage, None

    if "map_and_batch" in legacy:
        wrap(legacy["map_and_batch"], "__init__", "map", build_map_and_batch)

    # -- interleave ---------------------------------------------------------------------------
    def build_interleave(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
        a = bound.arguments
        npc = a.get("num_parallel_calls")
        shown = {"map_func": a["map_func"]}
        for k in ("cycle_length", "block_length", "num_parallel_calls"):
            if a.get(k) is not None:
                shown[k] = a[k]
        stage = record("interleave", site, a, shown, [a["self"]], True, npc is not None)
        if stage.state == "off":
            ds = fn["flat_map"](a["self"], a["map_func"])
        elif stage.state == "serial":
            ds = call(func, bound, num_parallel_calls=None, deterministic=None)
        else:
            ds = func(**a)
        return stage, _tag(ds, stage)

    wrap(D, "interleave", "interleave", build_interleave)

    # tf.data.experimental.parallel_interleave(...) through .apply: cycle_length workers. Off
    # is one input at a time (cycle_length 1, nothing prefetched: flat_map's order); it has no
    # serial form that keeps the cycle, so it is on or off.
    def build_parallel_interleave(func: Any, bound: Any, site: Any) -> tuple[Stage, None]:
        a = bound.arguments
        shown = {"form": "tf.data.experimental.parallel_interleave", "map_func": a["map_func"],
                 "cycle_length": a["cycle_length"]}
        for k in ("block_length", "sloppy", "buffer_output_elements", "prefetch_input_elements"):
            if a.get(k) is not None:
                shown[k] = a[k]
        stage = record("interleave", site, a, shown, [a["input_dataset"]], True, False)
        if stage.state == "off":
            call(func, bound, cycle_length=1, block_length=1, sloppy=False,
                 buffer_output_elements=1, prefetch_input_elements=0)
        else:
            func(**a)
        _tag(a["self"], stage)
        return stage, None

    if "parallel_interleave" in legacy:
        wrap(legacy["parallel_interleave"], "__init__", "interleave", build_parallel_interleave)

    # -- batch: structure stays, parallelism can go --------------------------------------------
    def build_batch(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
        a = bound.arguments
        npc = a.get("num_parallel_calls")
        shown = {"batch_size": a["batch_size"]}
        if a.get("drop_remainder"):
            shown["drop_remainder"] = True
        if npc is not None:
            shown["num_parallel_calls"] = npc
        stage = record("batch", site, a, shown, [a["self"]], False, npc is not None)
        if stage.state == "serial":
            ds = call(func, bound, num_parallel_calls=None, deterministic=None)
        else:
            ds = func(**a)
        return stage, _tag(ds, stage)

    wrap(D, "batch", "batch", build_batch)

    def recorded_only(kind: str, shown_keys: tuple[str, ...], upstream_key: str | None) -> Any:
        def build(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
            a = bound.arguments
            shown = {k: a[k] for k in shown_keys if a.get(k) is not None}
            stage = record(kind, site, a, shown, [a[upstream_key]] if upstream_key else [],
                           False, False)
            return stage, _tag(func(**a), stage)
        return build

    wrap(D, "padded_batch", "padded_batch",
         recorded_only("padded_batch", ("batch_size", "drop_remainder"), "self"))
    wrap(D, "repeat", "repeat", recorded_only("repeat", ("count",), "self"))
    wrap(D, "from_generator", "from_generator",
         recorded_only("from_generator", ("generator",), None))

    # -- mixing several datasets ----------------------------------------------------------------
    def mixer(kind: str, shown_keys: tuple[str, ...]) -> Any:
        def build(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
            a = bound.arguments
            datasets = a["datasets"]
            seq = list(datasets) if isinstance(datasets, (list, tuple)) else []
            shown = {"datasets": len(seq)} if seq else {}
            shown.update({k: a[k] for k in shown_keys if a.get(k) is not None})
            stage = record(kind, site, a, shown, seq, bool(seq), False)
            if stage.state == "off" and seq:
                ds = passthrough(seq[0])
            else:
                ds = func(**a)
            return stage, _tag(ds, stage)
        return build

    wrap(D, "sample_from_datasets", "sample_from_datasets",
         mixer("sample_from_datasets", ("weights",)))
    wrap(D, "choose_from_datasets", "choose_from_datasets",
         mixer("choose_from_datasets", ()))

    # -- TFRecordDataset(num_parallel_reads=k) ---------------------------------------------------
    def build_tfrecord(func: Any, bound: Any, site: Any) -> tuple[Stage, Any]:
        a = bound.arguments
        npr = a.get("num_parallel_reads")
        parallel = npr is not None and not (isinstance(npr, int) and npr == 1)
        shown = {"filenames": a["filenames"]}
        if npr is not None:
            shown["num_parallel_reads"] = npr
        stage = record("TFRecordDataset", site, a, shown, [], parallel, parallel)
        if stage.state in ("off", "serial"):
            call(func, bound, num_parallel_reads=None)
        else:
            func(**a)
        self_ = a["self"]
        _tag(self_, stage)
        try:  # the filenames dataset may itself come from a recorded stage
            known = {s.id for s in session.stages}
            session._add_inputs(stage, _upstream(list(self_._inputs()), known))
        except Exception:
            pass
        return stage, None

    wrap(R, "__init__", "TFRecordDataset", build_tfrecord)

    # -- what TensorFlow inserts by itself: via options at iterator creation ---------------------
    apply_debug = fn["_apply_debug_options"]
    with_options = fn["with_options"]

    @functools.wraps(apply_debug)
    def apply_debug_options(self: Any) -> Any:
        ds = apply_debug(self)
        states = {}
        for name in PSEUDO_STAGES:
            stage = session.record(name, ("", 0, 0), stage_id=name, toggleable=True,
                                   parallel=True, args={"what": PSEUDO_STAGES[name]})
            states[name] = stage.state
        if options_cls is None or all(s == "on" for s in states.values()):
            return ds
        options = options_cls()
        if states["autotune"] != "on":
            options.autotune.enabled = False
        opt = options.experimental_optimization
        for name in ("inject_prefetch", "map_parallelization", "parallel_batch",
                     "map_and_batch_fusion"):
            if states[name] != "on":
                setattr(opt, name, False)
        return with_options(ds, options)

    patches.replace(D, "_apply_debug_options", apply_debug_options)


def _legacy_classes() -> dict[str, Any]:
    """The dataset classes behind tf.data.experimental's map_and_batch and parallel_interleave
    (deprecated, still in many reported pipelines), where this TensorFlow has them."""
    out: dict[str, Any] = {}
    try:
        from tensorflow.python.data.experimental.ops import batching

        out["map_and_batch"] = batching._MapAndBatchDataset
    except (ImportError, AttributeError):
        pass
    try:
        from tensorflow.python.data.ops import readers

        out["parallel_interleave"] = readers.ParallelInterleaveDataset
    except (ImportError, AttributeError):
        pass
    return out


def _options_class() -> Any:
    try:
        from tensorflow.python.data.ops import options as options_lib

        return options_lib.Options
    except Exception:
        return None


def patched_attributes() -> list[tuple[Any, str]]:
    """(owner, name) of every attribute ``install`` replaces; tests compare identities."""
    from tensorflow.python.data.ops import dataset_ops, readers

    D = dataset_ops.DatasetV2
    names = ("prefetch", "shuffle", "cache", "map", "interleave", "batch", "padded_batch",
             "repeat", "from_generator", "sample_from_datasets", "choose_from_datasets",
             "_apply_debug_options")
    return ([(D, n) for n in names] + [(readers.TFRecordDatasetV2, "__init__")]
            + [(cls, "__init__") for cls in _legacy_classes().values()]
            + [(dataset_ops.DatasetV1, "map")])

