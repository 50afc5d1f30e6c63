"""Static renderings of a result (no widgets): the SVG chart nbconvert and GitHub show.

Importing this package registers the chart as the ``image/svg+xml`` part of every
``WatchResult``'s display, which the engine cannot import itself.
"""

from __future__ import annotations

from ..engine import result as _result
from .svg import render_svg

_result.RENDERERS["image/svg+xml"] = render_svg
