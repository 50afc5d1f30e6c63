"""Static renderings of a result (no widgets): the SVG chart nbconvert and GitHub show.

Importing this package registers the chart as the ``image/svg+xml`` part of every
``WatchResult``'s display, and the self-contained HTML page ``WatchResult.save_html`` writes
(html.py), which the engine cannot import itself.
"""

from __future__ import annotations

from ..engine import result as _result
from ..engine.workers import compare as _compare
from .compare import render_compare_svg
from .html import render_result_html
from .svg import render_svg

_result.RENDERERS["image/svg+xml"] = render_svg
_compare.RENDERERS["image/svg+xml"] = render_compare_svg  # leakwidget.compare's overlaid chart
_result.DOCUMENTS["html"] = render_result_html
