"""Helpers for the tf.data stage tests: small synthetic TFRecord files written to tmp dirs.

Imported explicitly by tests/test_stages_tfdata.py and tests/test_bisect.py (it is not a
pytest conftest: loading it would import TensorFlow for every test session).
"""

from __future__ import annotations

import sys
import time
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


def pause(ms: float = 3.0) -> None:
    """A step's few milliseconds: a step that takes time, as a training step does, keeps the
    number of iterations per second (and so the memory a leak eats) small. Waited, not
    computed: a training step mostly waits on its ops with the GIL released, and a step that
    computed would keep a core busy for the whole watch (the bisections' fresh processes did,
    half of their CPU time, on a machine the suite already keeps busy)."""
    time.sleep(ms / 1000)
