"""What the builders share while a session patches tf.data, and the recorder around a builder.

A *builder* is what a patched method does instead of the original when the user's code calls
it: it records the stage (``TfData.record``) and returns ``(stage, result)``, the result being
the original's, a serial variant, or a neutral substitute, depending on the stage's state.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..sites import caller_site
from ..stage import Stage
from .calls import _called_by_user, _upstream
from .patches import Patches
from .protocols import SessionLike

Site = tuple[str, int, int]  # (filename, line, column) of the user's call


@dataclass
class TfData:
    """One installation of the patches: the session, the originals, the per-stage caches."""

    session: SessionLike
    patches: Patches  # what to restore on exit
    dataset: Any  # tf.data.Dataset (DatasetV2)
    fn: dict[str, Any]  # DatasetV2's original functions by name (take, map, repeat, ...)
    zip_: Any  # the original Dataset.zip
    options_cls: Any  # tf.data.Options, None if this TensorFlow has it elsewhere
    # stage id -> (input element_spec, first output), for ``map`` off (see maps.py)
    first_outputs: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    py_checked: set[str] = field(default_factory=set)  # maps checked for tf.py_function

    @classmethod
    def for_session(cls, session: SessionLike) -> TfData:
        """The context of a new installation: TensorFlow's originals, nothing patched yet."""
        from tensorflow.python.data.ops import dataset_ops

        dataset = dataset_ops.DatasetV2
        fn = {n: _unwrap(dataset.__dict__[n]) for n in _ORIGINALS}
        return cls(session, Patches(), dataset, fn, dataset.zip, _options_class())

    def record(self, kind: str, site: Site, shown: dict[str, Any], upstream: list[Any], *,
               toggleable: bool, parallel: bool) -> Stage:
        """Record the stage built at ``site`` from the ``upstream`` datasets (its inputs are
        the nearest recorded stages among them); its state tells the builder what to build."""
        known = {s.id for s in self.session.stages}
        return self.session.record(kind, site, args=shown, inputs=_upstream(upstream, known),
                                   toggleable=toggleable, parallel=parallel)

    def passthrough(self, ds: Any) -> Any:
        # take(-1): every element, and tf.data's noop elimination drops it from the graph
        return self.fn["take"](ds, -1)

    def wrap(self, owner: Any, name: str, builder: Builder) -> None:
        """Replace ``owner.name`` by a recorder around ``builder``."""
        original = owner.__dict__[name]
        static = isinstance(original, staticmethod)
        func = _unwrap(original)
        recorder = _Recorder(self, func, inspect.signature(func), builder)

        @functools.wraps(func)
        def patched(*args: Any, **kwargs: Any) -> Any:
            return recorder(args, kwargs)

        self.patches.replace(owner, name, staticmethod(patched) if static else patched)


# The DatasetV2 functions the substitutes are made of, taken before anything is patched.
_ORIGINALS = ("take", "map", "repeat", "cache", "flat_map", "with_options", "_apply_debug_options")


def _unwrap(attribute: Any) -> Any:
    return attribute.__func__ if isinstance(attribute, staticmethod) else attribute


def _options_class() -> Any:
    try:
        from tensorflow.python.data.ops import options as options_lib

        return options_lib.Options
    except Exception:
        return None


# builder(context, original function, bound arguments, call site) -> (stage, result)
Builder = Callable[[TfData, Any, inspect.BoundArguments, Site], tuple[Stage, Any]]


def call_with(func: Any, bound: inspect.BoundArguments, **changes: Any) -> Any:
    """The original function called with the user's arguments, some of them changed."""
    a = dict(bound.arguments)
    a.update(changes)
    return func(**a)


class _InnerStages(threading.local):
    """Per thread, one list per builder running: the ids of the stages recorded while it runs
    (a TFRecordDataset built in an interleave's function feeds that interleave)."""

    def __init__(self) -> None:
        self.stack: list[list[str]] = []


_INNER = _InnerStages()


@dataclass(frozen=True)
class _Recorder:
    """What a patched method runs: the original for TensorFlow's own calls, else the builder."""

    context: TfData
    func: Any
    signature: inspect.Signature
    builder: Builder

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Two frames above this one, ``patched`` and then its caller: the user's code or not.
        if not _called_by_user(2):
            return self.func(*args, **kwargs)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return self.func(*args, **kwargs)  # TensorFlow raises its own clear error
        site = caller_site(3)
        stack = _INNER.stack
        stack.append([])
        try:
            stage, result = self.builder(self.context, self.func, bound, site)
        finally:
            inner = stack.pop()
        if inner:
            self.context.session._adopt_inner(stage, inner)
        if stack:
            stack[-1].append(stage.id)
        return result
