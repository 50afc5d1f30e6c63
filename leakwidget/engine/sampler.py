"""Reading the process's memory, cheaply and continuously, in bounded space.

No IPython and no TensorFlow here: this is the bottom of the house.

- :func:`rss` reads the resident set size from ``/proc/self/statm`` (about 13 µs) and falls back
  to psutil on systems without procfs.
- :class:`PeakMeter` reads the kernel's high-water mark of RSS (``VmHWM``). Left alone, it shows a
  new high exactly; with ``resets=True`` (opt-in, ``exact_peaks``) it is reset at each
  iteration's start (``/proc/self/clear_refs``), giving the exact peak of every iteration at the
  price of the process's own record of its peak (``ru_maxrss``).
- :class:`Sampler` is a daemon thread reading RSS at a fixed rate into a :class:`Series` whose
  size is capped: when it is full, neighbouring samples are merged pairwise, keeping the larger
  value, so a run of any length keeps a whole-run picture and every spike.
- :func:`headroom` is the memory the process may still take before the machine (or its cgroup)
  runs out.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

import numpy as np

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _open_statm() -> int | None:
    try:
        return os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return None


_statm = _open_statm()  # one descriptor, read with pread: no seek, so threads need no lock


def _libc_keeping_the_gil() -> tuple | None:
    """libc's ``pread`` and ``pwrite`` called without releasing the GIL (``ctypes.PyDLL``).

    ``os.pread`` releases the GIL for the system call, and while any other Python thread is
    alive (our sampler), the first release after the step held the GIL for a millisecond or
    more costs 8-10 µs on its own (measured: 1.9 µs without another thread, 9.5 µs with one
    that wakes at 10 Hz; a second read right after is fast again). Our reads take 1-2 µs in
    the kernel and never block, so keeping the GIL through them is cheaper than handing it on.
    """
    try:
        libc = ctypes.PyDLL(None)
        pread, pwrite = libc.pread, libc.pwrite
    except (OSError, AttributeError, TypeError):
        return None
    pread.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
    pread.restype = ctypes.c_ssize_t
    pwrite.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
    pwrite.restype = ctypes.c_ssize_t
    return pread, pwrite


_LIBC = _libc_keeping_the_gil() if _statm is not None else None
_buffers = threading.local()  # each thread reads into its own buffer


def rss() -> int:
    """Resident set size of this process, in bytes."""
    if _LIBC is not None:
        buf = getattr(_buffers, "statm", None)
        if buf is None:
            buf = _buffers.statm = ctypes.create_string_buffer(64)
        n = _LIBC[0](_statm, buf, 64, 0)
        if n > 0:
            return int(buf.raw[:n].split()[1]) * PAGE_SIZE
    if _statm is not None:
        return int(os.pread(_statm, 64, 0).split()[1]) * PAGE_SIZE
    import psutil

    return psutil.Process().memory_info().rss


class PeakMeter:
    """The kernel's high-water mark of this process's RSS (``VmHWM``; ``ru_maxrss`` reports the
    larger of it and the peak of the process this one was exec'd from).

    By default it is only read: a reading above the previous one is the exact peak of what ran
    in between, and the process's own record of its peak is left as it was (other tools and the
    user read it). With ``resets=True``, :meth:`reset` writes ``5`` to ``/proc/self/clear_refs``,
    which sets the mark to the current RSS, so a spike shorter than the sampling interval is seen
    in every iteration; the process's earlier peak is then lost. Where Linux offers neither,
    ``available`` is False and callers use the sampler's maximum. Files stay open: this runs
    once or twice per iteration.
    """

    def __init__(self, resets: bool = False) -> None:
        self.available = False
        self.resets = resets
        self._clear = self._status = None
        self._buf = bytearray(2048)
        self._rusage = False
        try:
            self._status = os.open("/proc/self/status", os.O_RDONLY)
            if resets:
                self._clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
                os.write(self._clear, b"5")
            self.available = self.peak() is not None
        except OSError:
            self.close()
        if self.available and resource is not None:
            # getrusage reports max(hiwater, the maximum RSS of the image this process was
            # exec'd from): use it only if it reads the same mark as the status file. Without
            # resets the mark only rises, so agreeing now means agreeing from now on.
            status = self.peak()
            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self._rusage = status is not None and abs(maxrss - status) <= 1 << 20

    def close(self) -> None:
        self.available = False
        for fd in (self._clear, self._status):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._clear = self._status = None

    def __del__(self) -> None:
        self.close()

    def reset(self) -> None:
        if self.available and self.resets:
            if _LIBC is not None and _LIBC[1](self._clear, b"5", 1, 0) == 1:
                return  # written keeping the GIL (see _libc_keeping_the_gil)
            try:
                os.write(self._clear, b"5")
            except OSError:
                self.close()

    def peak(self) -> int | None:
        if self._status is None:
            return None
        if self._rusage:
            # The same high-water mark through getrusage(): reading and parsing the status
            # file after every iteration slowed a pure-Python step by ~4% (measured in
            # bench/bench_overhead.py; getrusage does not).
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        buf = self._buf
        try:
            n = os.preadv(self._status, [buf], 0)
        except OSError:
            return None
        i = buf.find(b"VmHWM:", 0, n)
        if i < 0:
            return None
        return int(buf[i + 6 : buf.index(b"kB", i, n)]) * 1024


_COMPACT_CHUNK = 1024  # elements moved at a time when a Series compacts


class Series:
    """A bounded (time, value) series.

    Appends are O(1). When ``capacity`` points are held, the oldest ``capacity // 2`` pairs are
    merged into ``capacity // 4`` points (time of the first, maximum of the values), so memory
    stays fixed while the whole run stays visible, older parts at a coarser grain.
    """

    def __init__(self, capacity: int = 40_000) -> None:
        if capacity < 16:
            raise ValueError("capacity must be at least 16")
        self.capacity = capacity
        # Written once now, so the pages are resident before the run and the watcher's own
        # memory does not grow while it measures.
        self._t = np.ones(capacity, dtype=np.float64)
        self._v = np.ones(capacity, dtype=np.int64)
        self._n = 0
        self.total = 0  # samples ever appended
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        with self._lock:
            self._n = 0
            self.total = 0

    def append(self, t: float, v: int) -> None:
        with self._lock:
            if self._n == self.capacity:
                self._compact()
            n = self._n
            # Two threads append (the sampler and the runner's iteration-end readings); each
            # takes its time stamp before reading /proc, which releases the GIL, so a reading
            # can arrive just after a later one. Insert it in place: the series stays in time
            # order, which the plots rely on. Usually no move, at most a few.
            i = n
            while i > 0 and self._t[i - 1] > t:
                i -= 1
            if i < n:
                self._t[i + 1 : n + 1] = self._t[i:n].copy()
                self._v[i + 1 : n + 1] = self._v[i:n].copy()
            self._t[i] = t
            self._v[i] = v
            self._n = n + 1
            self.total += 1

    def _compact(self) -> None:
        # In place, a chunk at a time: whole-array temporaries (160 KiB at the default capacity)
        # were taken from the heap at the first compaction, 5 minutes into a run at 125 Hz, and
        # the allocator kept them: a flat step's kernel RSS rose by 120-450 KiB at that moment
        # in two 10-minute soaks. Chunks are small enough to be reused from the allocator's
        # free lists. Front to back is safe: chunk [a, b) reads [2a, 2b), never behind a write,
        # and the tail moves down by capacity // 4, more than a chunk.
        half = self.capacity // 2
        t, v = self._t, self._v
        q = half // 2
        for a in range(0, q, _COMPACT_CHUNK):
            b = min(q, a + _COMPACT_CHUNK)
            t[a:b] = t[2 * a : 2 * b : 2]
            np.maximum(v[2 * a : 2 * b : 2], v[2 * a + 1 : 2 * b : 2], out=v[a:b])
        rest = self._n - 2 * q
        for a in range(0, rest, _COMPACT_CHUNK):
            b = min(rest, a + _COMPACT_CHUNK)
            t[q + a : q + b] = t[2 * q + a : 2 * q + b]
            v[q + a : q + b] = v[2 * q + a : 2 * q + b]
        self._n = q + rest

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the (time, value) arrays."""
        with self._lock:
            return self._t[: self._n].copy(), self._v[: self._n].copy()

    def since(self, t0: float) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the samples taken after ``t0`` (seconds since the start)."""
        with self._lock:
            n = self._n
            i = int(np.searchsorted(self._t[:n], t0, side="right"))
            return self._t[i:n].copy(), self._v[i:n].copy()


_glibc: list = []  # [(malloc_trim, mallinfo2)] once looked up; either may be None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _glibc_functions() -> tuple:
    """glibc's ``malloc_trim`` and ``mallinfo2`` through ctypes; None for what this C library
    lacks (musl, macOS, Windows; mallinfo2 needs glibc 2.33)."""
    if not _glibc:
        trim_fn = info_fn = None
        try:
            # The C library this process already runs on, not ctypes.util.find_library("c"):
            # that runs ldconfig, a child the watch then finds and reports as the user's.
            libc = ctypes.CDLL(None)
            trim_fn = getattr(libc, "malloc_trim", None)
            if trim_fn is not None:
                trim_fn.argtypes = [ctypes.c_size_t]
                trim_fn.restype = ctypes.c_int
            info_fn = getattr(libc, "mallinfo2", None)
            if info_fn is not None:
                info_fn.argtypes = []
                info_fn.restype = _MallInfo2
        except (OSError, AttributeError, TypeError):
            trim_fn = info_fn = None
        _glibc.append((trim_fn, info_fn))
    return _glibc[0]


def malloc_trim() -> bool:
    """Ask glibc to return free heap memory to the system (``malloc_trim(0)``).

    Returns False where there is no glibc (macOS, musl): callers say so rather than guess.
    """
    fn = _glibc_functions()[0]
    if fn is None:
        return False
    fn(0)
    return True


def malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back (``mallinfo2``: in-use heap chunks
    plus mmapped ones), or None without glibc 2.33+.

    Unlike RSS it does not move when freed memory is reused or kept by the allocator, so it
    shows a leak that is filling holes left by earlier frees. It walks every arena under their
    locks (~0.1–0.5 ms in a TensorFlow process): call it at checkpoints, not every iteration.
    With jemalloc or tcmalloc preloaded it sees only what still goes through glibc.
    """
    fn = _glibc_functions()[1]
    if fn is None:
        return None
    info = fn()
    return int(info.uordblks) + int(info.hblkhd)


def malloc_free() -> int | None:
    """Bytes free inside glibc's arenas (``mallinfo2``'s ``fordblks``): memory malloc may hand
    out again without asking the system for more, or None without glibc 2.33+. Right after
    ``malloc_trim`` most of its pages are not resident: handing it out touches them again."""
    fn = _glibc_functions()[1]
    return None if fn is None else int(fn().fordblks)


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup v2 (or v1) memory limit, if one is set."""
    candidates = [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ]
    for limit_path, usage_path in candidates:
        try:
            with open(limit_path) as f:
                raw = f.read().strip()
            if raw == "max":
                return None
            limit = int(raw)
            if limit >= 1 << 60:  # "unlimited" on cgroup v1
                return None
            with open(usage_path) as f:
                usage = int(f.read().strip())
            return max(0, limit - usage)
        except (OSError, ValueError):
            continue
    return None


def memory_status() -> tuple[int, int]:
    """(available bytes, total bytes) for this process: the system's, or its cgroup's if tighter."""
    import psutil

    vm = psutil.virtual_memory()
    available, total = vm.available, vm.total
    cg = _cgroup_headroom()
    if cg is not None and cg < available:
        available = cg
    return int(available), int(total)


def headroom() -> int:
    """Bytes this process may still allocate before memory runs out."""
    return memory_status()[0]


class Sampler:
    """A daemon thread sampling RSS at ``hz`` into a bounded :class:`Series`.

    It also watches for memory exhaustion: ``guard`` is called with each sample (and, every
    ``guard_every`` seconds, with fresh system headroom) and may return a reason string to trip;
    ``on_trip`` then runs in the sampler thread at each sample over the limit. Tripping never
    blocks sampling. ``read`` is what a sample reads (this process's RSS by default).
    """

    def __init__(
        self,
        hz: float = 125.0,
        capacity: int = 40_000,
        guard: Callable[[int, int | None], str | None] | None = None,
        on_trip: Callable[[str], None] | None = None,
        guard_every: float = 0.1,
        read: Callable[[], int] = rss,
    ) -> None:
        if hz <= 0:
            raise ValueError("hz must be positive")
        self.read = read
        self.interval = 1.0 / hz
        self.buffer = Series(capacity)
        self.t0 = time.perf_counter()
        self._guard = guard
        self._on_trip = on_trip
        self._guard_every = guard_every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tripped: str | None = None
        self.last_t = -1.0  # seconds since start of the newest sample, from either thread
        self.offered_t = -1.0  # ... of the newest one the main thread offered
        self.last_value = 0
        # The highest reading of this thread since the window opened (open_window()): the
        # peak of an iteration, kept as (window, value) as samples arrive, so the iteration's
        # end reads it without scanning the series or taking its lock.
        self.window = 0
        self.window_max = (0, 0)
        self.held = False  # while the watch's own census runs: its temporaries are not sampled

    def open_window(self) -> int:
        """Start a new window of readings (an iteration begins); its number."""
        self.window += 1
        return self.window

    def window_peak(self, window: int) -> int | None:
        """The highest reading this thread took in ``window``, None if it took none."""
        w, value = self.window_max
        return value if w == window else None

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start(self) -> Sampler:
        self.t0 = time.perf_counter()
        self.last_value = self.read()
        self.last_t = 0.0
        self.buffer.append(0.0, self.last_value)
        self._thread = threading.Thread(target=self._loop, name="leakwidget-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        interval = self.interval
        next_due = time.perf_counter()
        next_guard = 0.0
        series = self.buffer
        t0 = self.t0
        while not self._stop.is_set():
            next_due += interval
            now = time.perf_counter()
            if next_due > now:
                if self._stop.wait(next_due - now):
                    break
            elif now - next_due > 4 * interval:
                # Far behind (a long GIL hold in native code): resynchronise, don't burst.
                next_due = now
            t = time.perf_counter()
            if t - t0 - self.offered_t < interval or self.held:
                # The main thread sampled at an iteration end just now: it is stepping faster
                # than we sample. Taking the GIL from it would only cost it time, so check
                # back later (the series keeps its rate from the main thread's samples). Or
                # the watch's census runs (held): its temporaries are no reading of the run.
                value = self.last_value
                next_due += 3 * interval
            else:
                # The window is noted before the reading: a reading taken before an iteration
                # began is never counted in its peak.
                window = self.window
                value = self.read()
                series.append(t - t0, value)
                self.last_t, self.last_value = t - t0, value
                w, best = self.window_max
                if w != window or value > best:
                    self.window_max = (window, value)
            if self._guard is not None:
                available = None
                if t >= next_guard:
                    next_guard = t + self._guard_every
                    try:
                        available = headroom()
                    except Exception:  # psutil failing must not kill the sampler
                        available = None
                reason = self._guard(value, available)
                if reason:
                    # Called at every sample that is over the limit, not once: a step that
                    # swallowed the first interrupt is interrupted again.
                    self.tripped = self.tripped or reason
                    if self._on_trip is not None:
                        self._on_trip(reason)

    def offer(self, t: float, value: int) -> None:
        """A reading the caller made anyway (the runner, at each iteration end), in seconds
        since the start; kept when it is at least one sampling interval after the last."""
        if t - self.last_t >= self.interval:
            self.buffer.append(t, value)
            self.last_t, self.last_value = t, value
            self.offered_t = t

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def keep(self, t: float, value: int) -> None:
        """The last iteration's reading (after :meth:`stop`), kept whatever the interval since
        the last sample (:meth:`offer` may have left it out): the series holds the run's last
        reading, which in a run of a few milliseconds one interval is a good part of."""
        if not self.alive and t != self.offered_t:
            self.buffer.append(t, value)  # (in time order, even before a later sample)
            self.offered_t = t
            if t > self.last_t:
                self.last_t, self.last_value = t, value

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """(seconds since start, RSS bytes) copies of the bounded series."""
        return self.buffer.arrays()
