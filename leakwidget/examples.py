"""Synthetic steps with known memory behaviour, for demos, teaching, tests and benchmarks.

Each factory returns ``(setup, step)`` for :func:`leakwidget.watch`: ``setup()`` builds fresh
state (so repeated runs are independent) and ``step(state)`` does one iteration.

- :func:`python_leak` keeps ``rate`` bytes of small Python objects (2-tuples) per iteration.
- :func:`native_leak` ``malloc``s ``rate`` bytes through ctypes, touches them, never frees them.
- :func:`numpy_leak` keeps a numpy array of ``rate`` bytes per iteration.
- :func:`capped_list` keeps the last ``cap`` payloads: grows for ``cap`` iterations, then flat.
- :func:`bounded_cache` caches a payload per key over ``keys`` distinct keys: a plateau.
- :func:`steady` allocates and frees only.
- :func:`allocator_retention` grows RSS with nothing live: glibc keeping freed memory. It
  returns ``(setup, step, release)``; call ``release()`` when done.
- :func:`arena_growth` grows RSS in glibc's per-thread arenas for as long as it runs, and much
  less with ``MALLOC_ARENA_MAX=2``: what ``leakwidget.compare`` names a fix for.

``noise`` (bytes) adds, every iteration, a numpy array of random size up to ``noise`` that is
allocated, written and freed — the churn that makes real RSS curves hard to read.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import numpy as np

NODE_BYTES = 64  # a 2-tuple is 56 B, served from a 64 B pymalloc block (16-byte alignment)


def _noise(rng: np.random.Generator, noise: int) -> None:
    if noise > 0:
        a = np.ones(int(rng.integers(0, noise)) // 8 + 1)
        a[::512] = 2.0  # used, so the allocation is real
        del a


def _factory(keep_fn: Callable, noise: int, seed: int | None):
    def setup():
        return {"keep": [], "cache": {}, "i": 0, "rng": np.random.default_rng(seed)}

    def step(state):
        keep_fn(state)
        _noise(state["rng"], noise)
        state["i"] += 1

    return setup, step


def python_leak(rate: int, noise: int = 0, seed: int | None = None):
    """Small Python objects only: a chain of 2-tuples, each holding the one before.

    No large container, so every byte comes from pymalloc arenas and the rate is exact.
    """
    n = max(1, rate // NODE_BYTES)

    def keep(state):
        node = state.get("chain")
        for _ in range(n):
            node = (node, None)
        state["chain"] = node

    return _factory(keep, noise, seed)


_libc = None


def _libc_handle():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)  # the loaded C library: find_library would run ldconfig
        _libc.malloc.restype = ctypes.c_void_p
        _libc.malloc.argtypes = [ctypes.c_size_t]
        _libc.free.argtypes = [ctypes.c_void_p]
        _libc.memset.restype = ctypes.c_void_p
        _libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    return _libc


def native_leak(rate: int, noise: int = 0, seed: int | None = None):
    libc = _libc_handle()

    def keep(state):
        p = libc.malloc(rate)
        libc.memset(p, 1, rate)  # touched, so it is resident

    return _factory(keep, noise, seed)


def numpy_leak(rate: int, noise: int = 0, seed: int | None = None):
    def keep(state):
        state["keep"].append(np.ones(max(1, rate // 8)))

    return _factory(keep, noise, seed)


def capped_list(rate: int, cap: int, noise: int = 0, seed: int | None = None):
    def keep(state):
        state["keep"].append(np.ones(max(1, rate // 8)))
        if len(state["keep"]) > cap:
            state["keep"].pop(0)

    return _factory(keep, noise, seed)


def bounded_cache(rate: int, keys: int, noise: int = 0, seed: int | None = None):
    def keep(state):
        key = state["i"] % keys
        if key not in state["cache"]:
            state["cache"][key] = np.ones(max(1, rate // 8))

    return _factory(keep, noise, seed)


def steady(noise: int = 0, seed: int | None = None):
    return _factory(lambda state: None, noise, seed)


def allocator_retention(block: int = 512, blocks: int = 4096):
    """Growth that is no leak: each iteration a new thread (with glibc, a new malloc arena)
    allocates ``blocks`` blocks of ``block`` bytes and frees all but the last, which pins the
    freed memory below it. RSS grows by about ``block * blocks`` per iteration, nothing is live,
    and only ``malloc_trim(0)`` gives it back. The threads wait, so arenas are not reused, until
    ``release()`` lets them end and frees the pins. Returns ``(setup, step, release)``; keep
    runs short (one thread per iteration).
    """
    libc = _libc_handle()
    done = threading.Event()
    threads: list[threading.Thread] = []
    pins: list[int] = []

    def worker(ready: threading.Event) -> None:
        got = [libc.malloc(block) for _ in range(blocks)]
        for p in got[:-1]:
            libc.free(p)
        pins.append(got[-1])
        # Nothing of the list lives on while the thread waits: its 4,096 ints and 32 KiB array
        # kept beside the pin were memory in use (bytes in use at half RSS's rate, "python").
        del got
        ready.set()
        done.wait()

    def setup():
        return {}

    def step(state=None):
        ready = threading.Event()
        t = threading.Thread(target=worker, args=(ready,), daemon=True, name="leakwidget-arena")
        t.start()
        threads.append(t)
        if not ready.wait(30):
            raise RuntimeError("the allocating thread did not finish")

    def release():
        done.set()
        for t in threads:
            t.join(30)
        threads.clear()
        while pins:
            libc.free(pins.pop())

    return setup, step, release


def arena_growth(threads: int = 16, block: int = 512, grow: int = 16):
    """Allocator retention that keeps growing, as a comparison must see it: a pool of
    ``threads`` threads (with glibc, one malloc arena each) takes turns; each turn the thread
    allocates a burst of ``block``-byte blocks, ``grow`` more than its turn before, keeps one
    small block (it pins the arena's top) and frees the rest. Each arena keeps the largest burst
    its thread made, so RSS grows by about ``grow * block`` per iteration with glibc (8 KiB),
    and by a fraction of it with ``MALLOC_ARENA_MAX=2`` (two arenas shared), while
    what is live grows by 32 bytes an iteration. ``malloc`` is looked up in the process's global
    scope, so a preloaded jemalloc or tcmalloc serves it. Returns ``(setup, step)``; the
    threads wait for work as daemons and end with the process (run it in a worker).
    """

    def setup():
        import queue

        libc = ctypes.CDLL(None)  # the global scope: a preloaded allocator's malloc, not libc's own
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]

        def worker(inbox: queue.Queue, done: queue.Queue) -> None:
            turns, pins = 0, []
            while inbox.get() is not None:
                turns += 1
                burst = [libc.malloc(block) for _ in range(64 + turns * grow)]
                pins.append(libc.malloc(32))
                for p in burst:
                    libc.free(p)
                done.put(turns)

        pool = []
        for _ in range(threads):
            inbox, done = queue.Queue(), queue.Queue()
            threading.Thread(target=worker, args=(inbox, done), daemon=True, name="leakwidget-arena").start()
            pool.append((inbox, done))
        return {"pool": pool, "i": 0}

    def step(state):
        inbox, done = state["pool"][state["i"] % len(state["pool"])]
        state["i"] += 1
        inbox.put(1)
        done.get(timeout=30)

    return setup, step


CASES = {
    "python": python_leak,
    "native": native_leak,
    "numpy": numpy_leak,
}
