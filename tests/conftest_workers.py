"""Worker processes a test starts by hand, each with its pipe: ended after the test."""

from __future__ import annotations


def end_pipe_workers(started: list) -> None:
    """Send each ``[process, connection, ...]`` of ``started`` None (its signal to return), wait
    for it (10 s, then kill it), close its pipe, and empty ``started``."""
    for p, conn, *_ in started:
        try:
            conn.send(None)
        except OSError:
            pass
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
        conn.close()
    started.clear()


def _keep(conn, size: int) -> None:
    """A forked worker: keeps ``size`` more bytes of its own for every job it is sent, and
    works 10 ms on it (the watch reads its children about ten times a second)."""
    import time

    import numpy as np

    kept = []
    while conn.recv() is not None:
        kept.append(np.ones(size // 8))
        time.sleep(0.01)
        conn.send(len(kept))


class Keepers:
    """Forked workers, the i-th keeping ``sizes[i]`` bytes more per iteration of :meth:`step`
    (a leak in each, of a size of its own): the children a watch's pictures draw."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.started: list = []

    def start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        for size in self.sizes:
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=_keep, args=(child_end, size), daemon=True)
            p.start()
            self.started.append([p, parent_end])

    def step(self, _=None) -> None:
        for _p, conn in self.started:
            conn.send(1)
        for _p, conn in self.started:
            conn.recv()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p, _conn in self.started]

    def end(self) -> None:
        end_pipe_workers(self.started)
