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
