"""Runs in other processes: how a watch crosses a process boundary.

A watch that runs elsewhere (an isolated watch, a bisection's configurations with ``jobs``, a
comparison's variants, a Dask task) travels as its :class:`~leakwidget.engine.spec.WatchSpec`,
cloudpickled: the step and setup by value when the notebook defined them, modules by name. The
worker (:mod:`.worker`, spawned by :mod:`.isolate` in a process group of its own; or a Dask
worker, :mod:`.cluster`) runs an ordinary :class:`~leakwidget.engine.watch.Watch` and streams its
events back as messages (:mod:`.channel`: length-prefixed pickles over a pipe). In the parent, one
:class:`~.hub.Hub` queue takes every run's messages, and the caller's thread replays them into the
observers, so a view follows a run elsewhere exactly as one in this process; a
:class:`~leakwidget.engine.observer.RunControl` sends Stop the other way. :mod:`.parallel` runs a
bisection's configurations several at a time, :mod:`.compare` one watch under several
allocators, and :mod:`.sequence` shows parallel runs to a view one after another.

What crosses is pickled by reference to its module (this package, the engine, the stages): a
worker imports the same leakwidget, found through ``PYTHONPATH``. Details and the message table:
docs/workers.md.
"""
