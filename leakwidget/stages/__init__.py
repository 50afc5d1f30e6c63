"""Stages: the parts of an input pipeline that leakwidget can record, switch off or make serial.

``session(toggles)`` (or ``session(off=..., serial=...)``) returns a :class:`StageSession`, a
context manager the runner enters around setup and every step; :class:`Toggles` (toggles.py) is
what a run asks of its stages, and :class:`Stage` (stage.py) holds the on / serial / off rules.
While it is entered:

* if TensorFlow is imported (or gets imported by the user's code), ``tf.data`` is patched at
  class level so every stage the code builds is recorded, and the stages named in ``off`` /
  ``serial`` are replaced by neutral substitutes (see ``tfdata/`` and docs/stages.md);
* functions decorated with ``@leakwidget.stage`` (``user.py``) record themselves and obey the
  same toggles.

The session never imports TensorFlow itself: importing it costs seconds and hundreds of MB, so
if the user's code does not import it, nothing is patched. On every way out of the ``with``
block (return, exception, KeyboardInterrupt) every patched attribute is put back, identical to
the original object.

A stage id is ``kind@line`` for code typed in a notebook cell and ``kind@/path/file.py:line``
elsewhere, so the same cell run again yields the same ids; a bare kind (``prefetch``) in
``off``/``serial`` names every stage of that kind.
"""

from __future__ import annotations

from .session import StageSession, active_session, session
from .sites import caller_site, format_site, is_cell_file, short_repr
from .stage import STAGE_STATES, WHY_NO_SERIAL, Stage, StageState
from .toggles import AS_WRITTEN, Toggles, parse_ids

__all__ = [
    "AS_WRITTEN", "STAGE_STATES", "WHY_NO_SERIAL", "Stage", "StageSession", "StageState", "Toggles",
    "active_session", "caller_site", "format_site", "is_cell_file", "parse_ids", "session",
    "short_repr",
]
