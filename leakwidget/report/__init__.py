"""Static renderings of a result (no widgets): the SVG chart nbconvert and GitHub show, the
self-contained HTML page ``save_html`` writes, a comparison's overlaid chart.

Renderers follow one small Protocol (:class:`.render.Renderer`) and are imported where they are
used; nothing registers itself. They read a result through Protocols of what they draw
(``svg.Drawable``, ``html.Exported``, ``compare.Compared``) and need of the engine only its words
(``engine.kinds``, ``engine.units``, ``engine.verdict``), so the engine's results can draw themselves with them.
"""
