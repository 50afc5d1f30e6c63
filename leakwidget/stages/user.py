"""``@leakwidget.stage``: make any function a toggleable stage (Keras Sequence loaders, plain
generators, PyTorch-style ``__getitem__``, augmenters...).

    @leakwidget.stage
    def augment(image): ...

    @leakwidget.stage(identity=True, name="resize")
    def resize(image): ...

While a watch runs, the first call records the stage in the active StageSession (id
``name@line`` for cell code, ``name@/path/file.py:line`` elsewhere; the site is where the
function is defined, so the id survives re-running the cell). When the stage is off:

* by default the function runs once, and every later call returns that first result again;
* with ``identity=True`` it returns its input (the first argument after ``self``/``cls``);
* a generator function runs once to the end (its items pass through), then every later call
  yields that run's first item as many times as that run yielded items (forever if the first
  run was never finished).

Outside a watch the decorated function is the plain function, at the cost of one check.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

from .session import active_session
from .stage import Stage

__all__ = ["stage"]

F = TypeVar("F", bound=Callable[..., Any])
_NOTHING = object()


def _stage_name(func: Callable[..., Any]) -> str:
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", "stage")
    # "build.<locals>.augment" -> "augment"; "Loader.__getitem__" stays.
    return qual.rsplit("<locals>.", 1)[-1]


def _input_index(func: Callable[..., Any]) -> int:
    # For methods (Keras Sequence.__getitem__, a Dataset's __getitem__) the input is the
    # argument after self/cls.
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return 0
    return 1 if params and params[0] in ("self", "cls") else 0


@overload
def stage(func: F) -> F: ...
@overload
def stage(*, identity: bool = False, name: str | None = None) -> Callable[[F], F]: ...


def stage(func: Any = None, *, identity: bool = False, name: str | None = None) -> Any:
    """Declare ``func`` a pipeline stage that ``%%leakwatch --off`` and bisection can switch off.

    ``identity=True``: off returns the input unchanged (for transforms whose output has the
    input's structure). ``name``: the stage's name in ids and ``--off`` (default: the function's
    name).
    """
    if func is None:
        return lambda f: stage(f, identity=identity, name=name)
    if not callable(func):
        raise TypeError(f"@leakwidget.stage decorates a function, got {type(func).__name__}")
    if name is not None and (not isinstance(name, str) or not name or "@" in name or "," in name):
        raise ValueError(f"stage name must be a non-empty string without '@' or ',': {name!r}")

    kind = name or _stage_name(func)
    code = getattr(func, "__code__", None)
    site = (code.co_filename, code.co_firstlineno, 0) if code is not None else ("<unknown>", 0, 0)
    index = _input_index(func)
    is_generator = inspect.isgeneratorfunction(func)

    def record() -> tuple[Any, Stage | None]:
        sess = active_session()
        if sess is None:
            return None, None
        st = sess.record(kind, site, args={"identity": identity} if identity else {},
                         toggleable=True, parallel=False)
        return sess, st

    def input_of(args: tuple, kwargs: dict) -> Any:
        if len(args) > index:
            return args[index]
        if kwargs:
            return next(iter(kwargs.values()))
        raise TypeError(f"stage {kind} has identity=True but was called without an input")

    if is_generator:
        @functools.wraps(func)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            sess, st = record()
            if st is None or st.state != "off":
                yield from func(*args, **kwargs)
                return
            if identity:
                yield from input_of(args, kwargs)
                return
            memo = sess.first_results.get(st.id, _NOTHING)
            if memo is _NOTHING:
                first, count = _NOTHING, 0
                sess.first_results[st.id] = (_NOTHING, None)
                for item in func(*args, **kwargs):
                    if first is _NOTHING:
                        first = item
                        sess.first_results[st.id] = (first, None)  # known even if abandoned
                    count += 1
                    yield item
                sess.first_results[st.id] = (first, count)
                return
            first, count = memo
            if first is _NOTHING:  # the first run has not produced anything yet
                yield from func(*args, **kwargs)
                return
            n = 0
            while count is None or n < count:
                yield first
                n += 1

        gen_wrapper.__leakwidget_stage__ = kind  # type: ignore[attr-defined]
        return gen_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sess, st = record()
        if st is None or st.state != "off":
            return func(*args, **kwargs)
        if identity:
            return input_of(args, kwargs)
        first = sess.first_results.get(st.id, _NOTHING)
        if first is _NOTHING:
            first = func(*args, **kwargs)
            sess.first_results[st.id] = first
        return first

    wrapper.__leakwidget_stage__ = kind  # type: ignore[attr-defined]
    return wrapper
