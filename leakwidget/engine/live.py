"""Live verdicts: decided while the run goes on, without taking memory the run would measure.

A verdict's working memory is ~1–1.8 MiB of NumPy temporaries whose sizes change with the
records it reads, and the run measures this very process. Decided on the loop's thread, the
temporaries took pages of the heap the user's step allocates from, a few at a time: the holes
the clean-up before iteration 0 handed back (settle_memory), found again by calls of new sizes
(perf's page-fault records put every page a calm step's run gained in a live verdict: 50–150
KiB in 20 s, once 330 KiB). Worse, those pages then lay free and resident where a leak's next
allocations went: taken out of the series, a 2 KiB-per-iteration leak read as stable.

So live verdicts are decided on a thread of their own (glibc gives it an arena of its own,
where no step allocates) on records read into buffers allocated once (:class:`SpreadRows`),
and :func:`rehearse` takes their working memory there before iteration 0, on made-up runs of
the record counts and shapes whose working memory is the largest. The loop waits for each
verdict: nothing else changes, only where its memory comes from. (Where a process has more
threads than glibc makes arenas, 8 per core, the thread shares one: no worse than before.)
The final verdict, after the run, is decided where it is asked for.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from .records import RecordLog, SpreadRows
from .verdict import Verdict, decide

T = TypeVar("T")

# Records a live verdict reads at most. Its working memory grows with the records it reads, and
# the run measures that memory: read in full, a fast step's 12,000 records of 20 s lifted a flat
# run by ~1 MiB and made it "inconclusive"; read in sizes that varied from call to call, it
# crept up by 1.6 MiB over 10 minutes. LIVE_RECORDS evenly spread records (their iteration
# numbers stay true) keep it bounded and the same at every call; the final verdict reads all.
LIVE_RECORDS = 4096
# Record counts rehearsed: below 1,000 records the working memory peaks near 600 (Theil–Sen
# on 300 bucket medians), then grows with the count up to LIVE_RECORDS.
REHEARSED_COUNTS = (600, LIVE_RECORDS)


def judge(rows: RecordLog | np.ndarray, headroom: int | None, warmup: int | None) -> Verdict:
    """The verdict on a log's records, or on a table of them (a spread, a rehearsal)."""
    def col(name: str) -> np.ndarray:
        return rows.column(name) if isinstance(rows, RecordLog) else rows[name]

    return decide(
        col("index"), col("rss"), durations=col("duration"), warmup=warmup, headroom=headroom,
        blocks=col("blocks"), peaks=col("peak_rss"), in_use=col("malloc_in_use"),
    )


_spread: SpreadRows | None = None  # the buffers a spread is read into: one per process


def _spread_rows() -> SpreadRows:
    global _spread
    if _spread is None:
        _spread = SpreadRows(LIVE_RECORDS)
    return _spread


class LiveVerdicts:
    """The thread one watch's live verdicts are decided on (``leakwidget-verdict``).

    Its lifetime is the watch's: started by ``Watch.start``, stopped and joined by its teardown
    on every way out (the end of the budget, Stop, an exception in the step, an interrupt, the
    memory guard, a Keras loop that raised): a kernel keeps no thread of a watch that ended.
    A new thread takes the arena its predecessor left (glibc hands an exited thread's arena to
    the next one), where the rehearsal before iteration 0 takes the verdicts' memory again."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, args=(self._jobs,),
                                        name="leakwidget-verdict", daemon=True)
        self._thread.start()
        self.cost = 0.0  # CPU seconds the last verdict took on its thread

    def verdict(self, log: RecordLog, headroom: int | None, warmup: int | None) -> Verdict:
        """The live verdict on ``log``: at most LIVE_RECORDS records, evenly spread."""
        def job() -> Verdict:
            began = time.thread_time()
            try:
                return judge(self._rows(log), headroom, warmup)
            finally:
                self.cost = time.thread_time() - began

        return self.call(job)

    def rehearse(self) -> None:
        """Made-up runs (flat, leaking, filling) of REHEARSED_COUNTS records, decided as live
        verdicts are: their working memory is then taken, and reused by the run's verdicts
        (~50 ms; the first time in a process it also imports what they import)."""
        self.call(self._rehearsal)

    def close(self) -> None:
        """Stop the thread and wait for it (a verdict it is deciding ends first: ~10 ms)."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    @staticmethod
    def _rows(log: RecordLog) -> RecordLog | np.ndarray:
        if log.n <= LIVE_RECORDS:
            return log
        return _spread_rows().of(log)

    @staticmethod
    def _rehearsal() -> None:
        for count in REHEARSED_COUNTS:
            rows = _spread_rows().rows[:count]
            index = np.arange(count)
            for rss in ((1 << 27) + (index % 3) * 4096, (1 << 27) + index * 8192,
                        (1 << 27) + np.minimum(index, count // 4) * 8192):
                rows["index"] = index
                rows["rss"] = rss
                rows["peak_rss"] = rss + 4096
                rows["duration"] = 1e-3
                rows["blocks"] = np.where(index % 8 == 0, 1000 + index // 2, -1)
                rows["malloc_in_use"] = np.where(index % 8 == 0, (1 << 24) + index * 100, -1)
                judge(rows, 1 << 33, None)
        # A log past LIVE_RECORDS read as a spread (np.take into the buffers): the path every
        # live verdict past 4,096 records takes, first taken inside the run otherwise.
        log = RecordLog(LIVE_RECORDS + 1)
        for i in range(LIVE_RECORDS + 1):
            log.append_row((i, i * 1e-3, i * 1e-3 + 1e-3, 1 << 27, (1 << 27) + 4096, 1e-3, -1, 0, -1))
        judge(LiveVerdicts._rows(log), 1 << 33, None)

    def call(self, job: Callable[[], T]) -> T:
        """``job()`` on this thread, waited for (its exception raised here): a live verdict,
        or a view's redraw (``Watch.aside``)."""
        if not self._thread.is_alive():
            raise RuntimeError("the watch's live verdicts were closed")
        done = threading.Event()
        box: list = []
        self._jobs.put((job, box, done))
        while not done.wait(0.5):
            if not self._thread.is_alive():  # closed meanwhile, from another thread
                raise RuntimeError("the watch's live verdicts were closed")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        while (item := jobs.get()) is not None:
            job, box, done = item
            try:
                box.append(job())
            except BaseException as exc:  # handed to the caller, raised there
                box.append(exc)
            done.set()
            del item, job, box, done  # nothing of a finished verdict is kept alive here
