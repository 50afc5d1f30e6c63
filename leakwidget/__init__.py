"""leakwidget — hunt memory leaks interactively in Jupyter, first of all in tf.data pipelines.

    %load_ext leakwidget
    %%leakwatch -t 30 it = iter(make_dataset())
    next(it)

or from Python::

    import leakwidget
    result = leakwidget.watch(step, setup=make_state, seconds=30)
    result.verdict.kind      # "leak", "plateau", "stable" or "inconclusive"

Importing this package imports neither IPython nor TensorFlow: the magics, the widget and the
tf.data stages load only when used.
"""

from __future__ import annotations

__version__ = "0.1.0"

# Imported eagerly (numpy only, no IPython or TensorFlow): the function shares its name with the
# submodule, and a lazy import of the submodule would replace the package attribute.
from .bisect import bisect  # noqa: E402

__all__ = [
    "__version__",
    "watch",
    "bisect",
    "stage",
    "parse_size",
    "load_ipython_extension",
    "unload_ipython_extension",
]


def watch(*args, **kwargs):
    from .runner import watch as _watch

    return _watch(*args, **kwargs)


watch.__doc__ = "Run a step repeatedly and decide whether memory leaks; see leakwidget.runner.watch."


def stage(*args, **kwargs):
    from .stages.user import stage as _stage

    return _stage(*args, **kwargs)


stage.__doc__ = "Declare a function as a toggleable pipeline stage; see leakwidget.stages.user."


def parse_size(value):
    from .runner import parse_size as _parse_size

    return _parse_size(value)


def load_ipython_extension(ipython) -> None:
    """%load_ext leakwidget: register %%leakwatch / %leakwatch."""
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """%unload_ext leakwidget: undo everything loading did."""
    from .magics import unload

    unload(ipython)
