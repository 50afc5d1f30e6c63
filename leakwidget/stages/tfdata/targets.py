"""Which TensorFlow attribute each builder replaces, in the order they are patched."""

from __future__ import annotations

from typing import Any

from .builders import Mixer, PassThrough, RecordedOnly, build_batch, build_tfrecord
from .context import Builder
from .interleaves import build_interleave, build_parallel_interleave
from .maps import Map, build_map_and_batch


def _unchanged(ds: Any) -> Any:
    return ds


def patch_targets() -> list[tuple[Any, str, Builder]]:
    """(owner, attribute name, builder) for every attribute the recorder replaces."""
    from tensorflow.python.data.ops import dataset_ops, readers

    D = dataset_ops.DatasetV2
    V1 = getattr(dataset_ops, "DatasetV1", None)
    legacy = _legacy_classes()
    out: list[tuple[Any, str, Builder]] = [
        (D, "prefetch", PassThrough("prefetch", ("buffer_size",))),
        (D, "shuffle", PassThrough("shuffle", ("buffer_size", "seed"))),
        (D, "cache", PassThrough("cache", ("filename",))),
        (D, "map", Map({"num_parallel_calls": None, "deterministic": None,
                        "use_unbounded_threadpool": False}, _unchanged)),
    ]
    if V1 is not None and "map" in V1.__dict__:
        # tf.compat.v1's map builds its dataset itself rather than through the v2 method.
        adapter = getattr(dataset_ops, "DatasetV1Adapter", None)
        out.append((V1, "map", Map({"num_parallel_calls": None, "deterministic": None},
                                   adapter)))
    if "map_and_batch" in legacy:
        out.append((legacy["map_and_batch"], "__init__", build_map_and_batch))
    out.append((D, "interleave", build_interleave))
    if "parallel_interleave" in legacy:
        out.append((legacy["parallel_interleave"], "__init__", build_parallel_interleave))
    return out + [
        (D, "batch", build_batch),
        (D, "padded_batch", RecordedOnly("padded_batch", ("batch_size", "drop_remainder"),
                                         "self")),
        (D, "repeat", RecordedOnly("repeat", ("count",), "self")),
        (D, "from_generator", RecordedOnly("from_generator", ("generator",), None)),
        (D, "sample_from_datasets", Mixer("sample_from_datasets", ("weights",))),
        (D, "choose_from_datasets", Mixer("choose_from_datasets", ())),
        (readers.TFRecordDatasetV2, "__init__", build_tfrecord),
    ]


def _legacy_classes() -> dict[str, Any]:
    """The dataset classes behind tf.data.experimental's map_and_batch and parallel_interleave
    (deprecated, still in many reported pipelines), where this TensorFlow has them."""
    out: dict[str, Any] = {}
    try:
        from tensorflow.python.data.experimental.ops import batching

        out["map_and_batch"] = batching._MapAndBatchDataset
    except (ImportError, AttributeError):
        pass
    try:
        from tensorflow.python.data.ops import readers

        out["parallel_interleave"] = readers.ParallelInterleaveDataset
    except (ImportError, AttributeError):
        pass
    return out
