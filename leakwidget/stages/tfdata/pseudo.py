"""The stages TensorFlow adds by itself, switched through ``tf.data.Options``.

They are not built by the user's code: TensorFlow applies them when an iterator is created,
after ``Dataset._apply_debug_options``, so that is where they are recorded (one stage each, id =
name) and, when any is off or serial, options turning them off are added to the dataset.
"""

from __future__ import annotations

import functools
from typing import Any

from .context import TfData

# Stages TensorFlow adds on its own (defaults on in TF 2.21), toggled via tf.data.Options.
PSEUDO_STAGES: dict[str, str] = {
    "autotune": "autotune tunes parallelism and buffer sizes (options.autotune.enabled)",
    "inject_prefetch": "a prefetch TensorFlow appends after the last stage",
    "map_parallelization": "TensorFlow runs stateless maps in parallel",
    "parallel_batch": "TensorFlow copies batch elements in parallel",
    "map_and_batch_fusion": "TensorFlow fuses map + batch into one stage that runs ahead",
}

# The pseudo-stages that are switches of ``options.experimental_optimization``.
_OPTIMIZATIONS = ("inject_prefetch", "map_parallelization", "parallel_batch",
                  "map_and_batch_fusion")


def patch_debug_options(ctx: TfData, owner: Any) -> None:
    """Replace ``owner._apply_debug_options`` (run for every iterator, by TensorFlow itself:
    no call-site check) by the original followed by :func:`apply_pseudo_stages`."""
    apply_debug = ctx.fn["_apply_debug_options"]

    @functools.wraps(apply_debug)
    def apply_debug_options(self: Any) -> Any:
        return apply_pseudo_stages(ctx, apply_debug(self))

    ctx.patches.replace(owner, "_apply_debug_options", apply_debug_options)


def apply_pseudo_stages(ctx: TfData, ds: Any) -> Any:
    """Record the pseudo-stages; ``ds`` with options turning off those not "on"."""
    states = {}
    for name in PSEUDO_STAGES:
        stage = ctx.session.record(name, ("", 0, 0), stage_id=name, toggleable=True,
                                   parallel=True, args={"what": PSEUDO_STAGES[name]})
        states[name] = stage.state
    if ctx.options_cls is None or all(s == "on" for s in states.values()):
        return ds
    options = ctx.options_cls()
    if states["autotune"] != "on":
        options.autotune.enabled = False
    opt = options.experimental_optimization
    for name in _OPTIMIZATIONS:
        if states[name] != "on":
            setattr(opt, name, False)
    return ctx.fn["with_options"](ds, options)
