"""Where a watch ran: versions, the allocator, the machine's memory.

A leak report is read later, often on another machine: whether glibc's arenas were capped
(``MALLOC_ARENA_MAX``), whether jemalloc or tcmalloc was preloaded, and how much memory the
machine had change what a verdict means. Captured when a result is made (cheap: versions come
from modules already imported, nothing is imported to find one).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

from . import sampler

# Environment variables that change how the C allocator keeps memory.
ALLOCATOR_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                       "LD_PRELOAD", "PYTHONMALLOC")
# Libraries whose version matters to a memory report, when the watched process has them loaded.
LIBRARIES = ("leakwidget", "numpy", "tensorflow", "keras", "torch", "jax", "psutil")


def environment(variables: Mapping[str, str] | None = None) -> dict:
    """What to record beside a result. ``variables``: the watched process's environment
    (another process's, for the command line); by default this process's."""
    env = os.environ if variables is None else variables
    try:
        available, total = sampler.memory_status()
    except Exception:  # psutil failing must not cost the result
        available = total = None
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": _platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_total": total,
        "memory_available": available,
        "libc": " ".join(platform.libc_ver()).strip(),
        "allocator": allocator_name(env),
        "allocator_variables": {k: env[k] for k in ALLOCATOR_VARIABLES if env.get(k)},
        "libraries": _loaded_versions() if variables is None else {},
    }


def _platform() -> str:
    """``platform.platform()``'s text ("Linux-6.1.0-x86_64-with-glibc2.36") without running
    ``uname -p``, as it does: that child would be found by the watch and reported as the user's."""
    u = os.uname() if hasattr(os, "uname") else None
    if u is None:
        return platform.system()
    libc, version = platform.libc_ver()
    return f"{u.sysname}-{u.release}-{u.machine}" + (f"-with-{libc}{version}" if libc else "")


def allocator_name(env: Mapping[str, str]) -> str:
    """'jemalloc', 'tcmalloc' or 'mimalloc' when preloaded, else the C library's malloc."""
    preload = env.get("LD_PRELOAD", "")
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if name in preload:
            return name
    libc = platform.libc_ver()[0]
    return f"{libc} malloc" if libc else "the C library's malloc"


def _loaded_versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        if isinstance(version, str):
            out[name] = version
    return out


def process_variables(pid: int) -> dict[str, str] | None:
    """Another process's environment (``/proc/PID/environ``), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out
