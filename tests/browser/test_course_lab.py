"""The course's notebooks as a reader meets them: cloned, so untrusted, opened in a real
JupyterLab, nothing run. Every chart committed in them shows (a decoded PNG, inside its output,
not clipped) with its text report beside it, at 900 px; a screenshot of each is kept.

Untrusted notebooks do not render SVG or HTML that needs trust, which is why a result's chart is
committed as ``image/png`` (issue 32: none of the lessons showed a chart until "Trust Notebook").
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lazy import lazy

from .lab import REPO, NotebookPage

nbformat = lazy("nbformat")  # imported by the first test that reads a notebook (tests/lazy.py)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

NOTEBOOKS = sorted((REPO / "notebooks" / "course").glob("0*.ipynb")) + [REPO / "notebooks" / "allocators.ipynb"]
WIDTH = 900


def committed_charts(path: Path) -> dict[int, int]:
    """Code cell index -> how many PNG charts its committed outputs hold."""
    nb = nbformat.read(path, as_version=4)
    counts = {}
    for i, cell in enumerate(nb.cells):
        n = sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
        if cell.cell_type == "code" and n:
            counts[i] = n
    return counts


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_course_notebook_opened_untrusted_shows_every_chart_beside_its_report(lab, browser, screenshots, path):
    charts = committed_charts(path)
    assert charts, f"{path.name} commits no chart"
    shutil.copy(path, lab.root_dir / path.name)  # a copy no one has trusted
    context = browser.new_context(viewport={"width": WIDTH, "height": 1100})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        nb = NotebookPage(page, lab, path.name).open()
        trusted = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets"
                                ".filter(c => c.model.type === 'code' && c.model.trusted).length")
        assert trusted == 0, f"{path.name}: {trusted} code cells trusted; the test needs an untrusted copy"
        for index, count in charts.items():
            cell = nb.cell(index)
            cell.scroll_into_view_if_needed()
            images = cell.locator(".jp-OutputArea-output img")
            images.first.wait_for(state="visible")
            shown = images.evaluate_all("""imgs => imgs.map(img => {
                const r = img.getBoundingClientRect();
                const area = img.closest('.jp-OutputArea-output').getBoundingClientRect();
                return {png: img.src.startsWith('data:image/png'), natural: img.naturalWidth,
                        width: r.width, left: r.left, right: r.right, areaLeft: area.left,
                        areaRight: area.right};
            })""")
            assert len(shown) == count, (path.name, index, shown)
            for img in shown:
                assert img["png"] and img["natural"] > 0 and img["width"] > 200, (path.name, index, img)
                # whole, inside its output: not cut at the right edge of a 900 px window
                assert img["areaLeft"] - 1 <= img["left"] and img["right"] <= img["areaRight"] + 1, (path.name, img)
            # The text report shows too: a verdict's words, not only the picture.
            text = nb.output_text(index)
            # (Lesson 6's first report opens with "Copy-on-write": its workers copy, not leak.)
            assert any(word in text for word in ("Leak", "Plateau", "Stable", "Inconclusive", "Fix",
                                                 "No allocator", "No variant", "Nothing", "Copy-on-write",
                                                 "Growing")), (path.name, index, text[:300])
        chart = nb.cell(next(iter(charts))).locator(".jp-OutputArea-output img").first
        chart.scroll_into_view_if_needed()
        chart.screenshot(path=str(screenshots / f"course-{path.stem}-{WIDTH}.png"))
    finally:
        context.close()
        for kernel in lab.api("/api/kernels") or []:
            lab.api(f"/api/kernels/{kernel['id']}", method="DELETE", timeout=15.0)
