"""What a worker process wrote to its stderr, kept instead of printed (a comparison's workers).

Four workers that each import TensorFlow print four copies of its start-up log and its warnings
(oneDNN, AutoGraph); in the cell they bury the answer. A comparison keeps each worker's stderr
here — its Python ``sys.stderr`` and the file descriptor its C libraries write to — and puts it in
the result (``CompareResult.worker_log``); it is printed only for a worker that failed.

Bounded, like everything the tool keeps: the first and the last :data:`KEEP` bytes, and how
many were left out between them.
"""

from __future__ import annotations

import codecs
import os
import threading
from collections import deque

__all__ = ["KEEP", "WorkerLog"]

KEEP = 32 * 1024  # bytes kept at each end


class WorkerLog:
    """A worker's stderr, its head and its tail (thread-safe: the reader thread appends)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._head: list[str] = []
        self._head_size = 0
        self._tail: deque[str] = deque()
        self._tail_size = 0
        self.dropped = 0  # characters left out between the head and the tail
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            if self._head_size < self.keep:
                part = text[: self.keep - self._head_size]
                self._head.append(part)
                self._head_size += len(part)
                text = text[len(part):]
            if not text:
                return
            self._tail.append(text)
            self._tail_size += len(text)
            while self._tail_size > self.keep and len(self._tail) > 1:
                gone = self._tail.popleft()
                self._tail_size -= len(gone)
                self.dropped += len(gone)
            if self._tail_size > self.keep:  # one piece longer than the tail: keep its end
                (only,) = self._tail
                cut = len(only) - self.keep
                self._tail[0] = only[cut:]
                self._tail_size -= cut
                self.dropped += cut

    def text(self) -> str:
        with self._lock:
            middle = [f"\n[... {self.dropped:,} characters left out ...]\n"] if self.dropped else []
            return "".join([*self._head, *middle, *self._tail])

    def read_from(self, fd: int) -> None:
        """Keep what arrives on ``fd`` until its end (a reader thread's target); closes it."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while chunk := os.read(fd, 1 << 16):
                self.write(decoder.decode(chunk))
        except OSError:
            pass
        finally:
            os.close(fd)
