"""The copy-on-write rules of engine/copying.py on made-up readings (the live workers are in
test_copy_on_write.py): what counts as the tree's growth, and when the copies are its story."""

from __future__ import annotations

import numpy as np

from leakwidget.engine.copying import WorkerCopy, copy_on_write, tree_growth

MiB = 1024 * 1024


def _run(n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    ends = np.linspace(0.01, 10.0, n)  # seconds of each iteration's end
    return ends, np.full(n, 500.0 * MiB)  # the parent, flat


def test_a_worker_that_starts_during_the_run_brings_its_start_up_not_growth() -> None:
    ends, rss = _run()
    later = ends > 2.0  # a worker is first read at 2 s with 20 MiB private, then copies 10 MiB
    private = 20 * MiB + 10 * MiB * np.clip((ends[later] - 2.0) / 6.0, 0, 1)  # until 8 s
    rss[later] += private
    worker = np.column_stack([ends[later], private])
    assert tree_growth(rss) == 30 * MiB  # without the workers' readings: all of it
    # Its arrival (its first reading: 20 MiB and the first copies) is left out.
    assert tree_growth(rss, ends, [worker]) == 30 * MiB - private[0]


def test_a_worker_there_from_the_start_or_gone_before_the_end_brings_nothing_to_subtract() -> None:
    ends, rss = _run()
    rss[ends > 5.0] += 40 * MiB  # the parent grows 40 MiB half way
    early = np.column_stack([ends, np.full(ends.size, 20 * MiB)])  # read from the first iteration
    gone = np.column_stack([ends[(ends > 2) & (ends < 6)], np.full(int(((ends > 2) & (ends < 6)).sum()), 8 * MiB)])
    assert tree_growth(rss, ends, [early, gone]) == 40 * MiB


def test_copies_that_are_less_than_half_of_a_leaking_trees_growth_are_not_its_story() -> None:
    worker = WorkerCopy(pid=1, number=1, readings=20, private_growth=9 * MiB, shared_fall=9 * MiB,
                        fall_low=5 * MiB, fall_high=10 * MiB, bound=300 * MiB, span=(0, 9), copying=True)
    assert copy_on_write([worker], growth=12 * MiB, leaking=True).explains
    found = copy_on_write([worker], growth=30 * MiB, leaking=True)
    assert not found.explains and "something else leaks too" in str(found)
    assert copy_on_write([worker], growth=30 * MiB, leaking=False).explains  # no leak to explain
    # A stable run has no growth for the copies to be the story of: they are kept, not told.
    assert not copy_on_write([worker], growth=0.0, leaking=False, stable=True).explains


def test_every_forked_worker_alive_at_once_bounds_the_copies_and_those_not_shown_copying_are_named() -> None:
    def worker(number: int, copying: bool, span: tuple[float, float], **more) -> WorkerCopy:
        fields = dict(readings=20, private_growth=9 * MiB, shared_fall=9 * MiB if copying else 0.5 * MiB,
                      fall_low=5 * MiB, fall_high=10 * MiB, bound=300 * MiB)
        return WorkerCopy(pid=100 + number, number=number, span=span, copying=copying, **{**fields, **more})

    # Four workers read at once; two were shown copying, one copied too little to tell, one
    # was read too few times (workers 1 and 2 of a Keras run read as they started, in CI).
    workers = [worker(1, False, (0.5, 9.0)), worker(2, False, (0.5, 9.0), readings=7,
                                                    missing="only 7 readings of its memory"),
               worker(3, True, (1.0, 9.0)), worker(4, True, (1.0, 9.5)),
               worker(5, False, (9.6, 10.0))]  # a fifth, started after the others had ended
    found = copy_on_write(workers, growth=20 * MiB, leaking=False)
    assert [w.number for w in found.workers] == [3, 4]
    assert found.at_once == 4 and "with 4 workers that is up to 4\u00d7 the dataset" in found.summary
    assert found.headline.startswith("Copy-on-write: 2 workers copy")
    others = [d for d in found.details if d.startswith("Not shown copying: ")]
    assert len(others) == 1, found.details
    assert "worker 1 (pid 101, 20 readings: private +9.0 MiB, shared \u2212512 KiB)" in others[0]
    assert "worker 2 (pid 102, only 7 readings of its memory)" in others[0]
    assert "worker 5 (pid 105" in others[0] and "worker 3" not in others[0]


def test_a_worker_that_made_copies_itself_is_copying_however_many_more_its_parent_wrote() -> None:
    # CI: a worker read 10 MiB of a list (its faults: 10.9 MiB of pages beyond its own growth)
    # while its shared memory fell 23.2 MiB, the parent's own writes turning the rest private
    # in it without a fault; "at least half the fall" called it not copying, one run in four.
    from leakwidget.engine.copying import worker_copy
    from leakwidget.engine.sampler import PAGE_SIZE

    n = 32
    t = np.linspace(0.5, 13.0, n)
    fell = np.linspace(0.0, 23.2 * MiB, n)
    private, shared = 5 * MiB + fell, 400 * MiB - fell
    pages = np.linspace(0, 10.9 * MiB / PAGE_SIZE, n).round()
    found = worker_copy(1, 1, t, private, shared, pages)
    # (its faults are under half the fall: the rule before called it not copying)
    assert 10 * MiB < found.faulted < 0.5 * found.shared_fall and found.copying, found
    # The same fall in a worker that faulted 1 MiB: the pages were made private by the others'
    # writes, not by its reading; it copied too little itself to be called copying.
    idle = worker_copy(2, 2, t, private, shared, pages * 1.0 / 10.9)
    assert not idle.copying, idle


def test_what_the_tree_grew_in_the_verdicts_warm_up_is_not_growth_for_the_copies_to_explain() -> None:
    # A forking program loads its 40 MiB dataset before its first mark; a loaded host read the
    # tree's first iteration before it, the verdict's warm-up took the jump (runs AN and AQ; 39
    # iterations: one reading at either end).
    ends, rss = _run(39)
    rss[1:] += 40 * MiB
    rss += np.linspace(0, 10 * MiB, rss.size)  # then 10 MiB of copies
    assert tree_growth(rss) > 45 * MiB  # the whole run: the dataset counted
    assert 9 * MiB < tree_growth(rss, ends, warmup=1) < 11 * MiB
    assert tree_growth(rss[:2], warmup=1) == rss[1] - rss[0]  # too short to leave the warm-up out
