"""``leakwidget.mark()``: a program marks its own steps for ``leakwidget run``.

    import leakwidget
    for batch in loader:
        train_step(batch)
        leakwidget.mark()          # one iteration of the watch per mark

Under ``leakwidget run`` the runner creates a small counter file and passes its path in the
environment variable :data:`ENV`; the first ``mark()`` maps that file into memory and every
``mark()`` then adds one to the counter in it (one 8-byte store, a fraction of a microsecond). The
runner reads the counter from outside and ends an iteration each time it has moved. Anywhere else
(no variable set) ``mark()`` returns at once: it costs about as much as calling an empty function.

This module imports nothing but the standard library: ``import leakwidget`` stays light.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile

ENV = "LEAKWIDGET_MARKS"
SIZE = 8  # one unsigned 64-bit counter

_counter: ctypes.c_uint64 | None = None
_looked = False  # the environment has been read (once per process: a fork inherits the map)


def mark() -> None:
    """End one iteration of the watch that ``leakwidget run`` keeps of this program.

    A no-op when the program does not run under ``leakwidget run``. Safe to call in a hot loop
    (once per batch); marks from several processes of the program share the one counter.
    """
    counter = _counter
    if counter is not None:
        counter.value += 1
    elif not _looked:
        _open()
        if _counter is not None:
            _counter.value += 1


def _open() -> None:
    global _counter, _looked
    _looked = True
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), SIZE)
    except (OSError, ValueError):
        return  # not under a live runner any more (the file is gone): marking is a no-op
    _counter = ctypes.c_uint64.from_buffer(mapped)


class MarkCounter:
    """The runner's side: a fresh counter file (``path``, for :data:`ENV`) and its value.

    ``close()`` removes the file; a program that marks after that keeps its own mapping and
    harms nothing.
    """

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="leakwidget-marks-")
        try:
            os.write(fd, bytes(SIZE))
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._value = ctypes.c_uint64.from_buffer(self._map)

    def count(self) -> int:
        """Marks so far."""
        return self._value.value

    def close(self) -> None:
        if self._value is not None:
            self._value = None  # the map cannot close while a ctypes view of it exists
            self._map.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> MarkCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
