"""How to apply a comparison's fix where the user runs: a notebook server, a script, a
container, a watch from the command line.

An allocator setting acts only on a process started with it: ``MALLOC_ARENA_MAX`` is read by
glibc when the process starts, and ``LD_PRELOAD`` loads the library before the program. Setting
``os.environ`` in a running kernel changes nothing, so every line here starts the process.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

__all__ = ["BEFORE_PYTHON", "how_to_apply"]

BEFORE_PYTHON = ("Set it before Python starts: the allocator reads it when the process starts, so "
                 "setting os.environ in a running kernel changes nothing.")


def _assignments(env: Sequence[tuple[str, str]], library: str | None) -> list[str]:
    pairs = list(env) + ([("LD_PRELOAD", library)] if library else [])
    return [f"{name}={shlex.quote(value)}" for name, value in pairs]


def how_to_apply(env: Sequence[tuple[str, str]], allocator: str, library: str | None,
                 package: str | None = None) -> tuple[tuple[str, str], ...]:
    """(where, command) pairs that apply a variant — its extra environment ``env`` and, for
    jemalloc or tcmalloc, the preloaded ``library`` (its real path, as the worker loaded it;
    ``package``: the Debian package that installs it). Say :data:`BEFORE_PYTHON` with them."""
    words = _assignments(env, library)
    if not words:
        return ()
    prefix = " ".join(words)
    dockerfile = [f"RUN apt-get update && apt-get install -y {package}"] if package else []
    dockerfile += [f"ENV {w}" for w in words]
    run = " ".join([*_assignments(env, None), "leakwidget run"]
                   + ([f"--allocator {allocator}"] if library else []) + ["-- python train.py"])
    return (
        ("Jupyter (start the server with it)", f"{prefix} jupyter lab"),
        ("A script", f"{prefix} python train.py"),
        ("A Dockerfile", "\n".join(dockerfile)),
        ("Watched from the command line", run),
    )
