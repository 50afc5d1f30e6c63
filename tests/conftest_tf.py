"""Helpers for the tf.data stage tests: small synthetic TFRecord files written to tmp dirs.

Imported explicitly by tests/test_stages_tfdata.py and tests/test_bisect.py (it is not a
pytest conftest: loading it would import TensorFlow for every test session).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def write_tfrecords(folder: Path, files: int = 3, records: int = 20) -> list[str]:
    """``files`` TFRecord files of ``records`` records each; record j of file i is b"i-j"."""
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = folder / f"part-{i}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for j in range(records):
                writer.write(f"{i}-{j}".encode())
        paths.append(str(path))
    return paths


def patched_identities() -> dict[tuple[str, str], object]:
    """The current objects behind every attribute the stage session patches (by class name)."""
    from leakwidget.stages import tfdata

    return {(owner.__name__, name): owner.__dict__.get(name)
            for owner, name in tfdata.patched_attributes()}


def busy(n: int = 60_000) -> int:
    """A few milliseconds of CPU work: a step that takes time, as a training step does, keeps
    the number of iterations per second (and so the memory a leak eats) small."""
    total = 0
    for i in range(n):
        total += i * i
    return total
