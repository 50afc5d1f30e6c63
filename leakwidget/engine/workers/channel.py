"""Messages between a worker process and its parent: length-prefixed pickles over a pipe.

Each message is an 8-byte big-endian length and that many bytes of pickle. The worker pickles
with cloudpickle (a class or function the user defined in the cell travels by value); the parent
reads them with the standard unpickler. A pipe, not the worker's stdout: what the user's code
prints must not corrupt the stream.
"""

from __future__ import annotations

import os
import pickle
import struct
import threading
from typing import Any

import cloudpickle

_HEADER = struct.Struct("!Q")


class Sender:
    """Writes messages to a file descriptor; several threads may send (one lock)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()
        self.closed = False

    def send_bytes(self, data: bytes) -> None:
        with self._lock:
            if self.closed:
                raise BrokenPipeError("the channel is closed")
            view = memoryview(_HEADER.pack(len(data)) + data)
            while view:
                view = view[os.write(self.fd, view):]

    def send(self, message: Any, *, by_value: bool = False) -> None:
        """``by_value``: cloudpickle (what the user defined travels by value); else the faster
        standard pickle, for the stream's plain data."""
        dumps = cloudpickle.dumps if by_value else pickle.dumps
        self.send_bytes(dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)


class Receiver:
    """Reads messages from a file descriptor; ``recv`` raises EOFError when the writer is gone."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "rb", buffering=1 << 16)

    def recv_bytes(self) -> bytes:
        header = self._file.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise EOFError("the other end closed the channel")
        (size,) = _HEADER.unpack(header)
        data = self._file.read(size)
        if len(data) < size:
            raise EOFError("the other end closed the channel mid-message")
        return data

    def recv(self) -> Any:
        return pickle.loads(self.recv_bytes())

    def close(self) -> None:
        self._file.close()
