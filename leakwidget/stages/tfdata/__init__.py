"""tf.data patches: record every stage the user's code builds, and switch stages off or serial.

Imported only by ``StageSession`` once TensorFlow is in ``sys.modules``; never imports
TensorFlow on its own.

The patches are class-level attributes on ``tf.data.Dataset`` (``DatasetV2``) and
``tf.data.TFRecordDataset`` (``TFRecordDatasetV2``): a dataset built while a session is entered
goes through them, and ``Patches.restore()`` puts the very same original objects back.

Neutral substitutes ("off") keep the element structure so the rest of the pipeline still runs:

=====================  ===================================================================
prefetch/shuffle/cache  pass-through (``take(-1)``, which tf.data's noop elimination drops)
interleave              ``flat_map``: one input at a time (experimental ``parallel_interleave``:
                        ``cycle_length=1``, nothing prefetched)
map                     the function runs once per iterator; every element becomes that first
                        output (``zip(input, first.cache().repeat())``), cardinality kept;
                        experimental ``map_and_batch`` the same, still batched
TFRecordDataset         one reader (``num_parallel_reads=None``)
sample/choose_from_…    the first input only
serial                  ``num_parallel_calls=None`` (sequential and deterministic)
autotune, inject_prefetch, map_parallelization, parallel_batch, map_and_batch_fusion
                        stages TensorFlow inserts by itself: turned off through
                        ``tf.data.Options`` on every iterator created during the session
=====================  ===================================================================

Modules: ``context`` (what the builders share, the recorder a patch runs), one builder per stage
kind in ``builders``, ``maps``, ``interleaves`` and ``pseudo``, ``targets`` (which attribute
each builder replaces), ``calls`` (who called, what a dataset is built from), ``patches``.
"""

from __future__ import annotations

from typing import Any

from .context import TfData
from .patches import Patches
from .protocols import SessionLike
from .pseudo import PSEUDO_STAGES, patch_debug_options
from .targets import patch_targets

__all__ = ["PSEUDO_STAGES", "Patches", "install", "patched_attributes"]


def install(session: SessionLike) -> Patches:
    """Patch tf.data for this session; returns the Patches to restore on exit."""
    ctx = TfData.for_session(session)
    try:
        for owner, name, builder in patch_targets():
            ctx.wrap(owner, name, builder)
        patch_debug_options(ctx, ctx.dataset)
    except BaseException:
        ctx.patches.restore()  # all or nothing
        raise
    return ctx.patches


def patched_attributes() -> list[tuple[Any, str]]:
    """(owner, name) of every attribute ``install`` replaces; tests compare identities."""
    from tensorflow.python.data.ops import dataset_ops

    return ([(owner, name) for owner, name, _ in patch_targets()]
            + [(dataset_ops.DatasetV2, "_apply_debug_options")])
