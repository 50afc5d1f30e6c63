"""Four forked workers copying a list they share, watched with ``%%leakwatch`` in a real
JupyterLab: the dashboard draws each worker's private memory beside the tree's total, live and
at the end, marks the copying ones, and reads well at 1400 px and at 900 px.

The workers are those of tests/test_copy_on_write.py (and lesson 6): forked while the kernel
holds 40 MiB as a list of page-sized bytes objects, each reading its own quarter a few items per
iteration. One run (about 10 s: the copy-on-write test needs a dozen readings of each worker),
looked at in two widths: the window is narrowed after it, as a person would.
"""

from __future__ import annotations

import re
import time

import pytest

from .chart import geometry_problems, inside, read_geometry
from .lab import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

WORKERS = """
import multiprocessing as mp, time
import numpy as np

ITEM, ITEMS, PER_ITERATION = 4063, 10_240, 8  # a page per item, 40 MiB in all
rng = np.random.default_rng(0)
DATA = [rng.bytes(ITEM) for _ in range(ITEMS)]  # a list of objects: read, it is copied
STARTED = []

def serve(conn):
    while (job := conn.recv()) is not None:
        read = sum(len(DATA[i]) for i in range(*job))
        time.sleep(0.025)  # what decoding the items would take
        conn.send(read)

def start(n):
    ctx = mp.get_context("fork")
    for w in range(n):
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=serve, args=(child_end,), daemon=True)
        p.start()
        STARTED.append([p, parent_end, w * ITEMS // n, 0])

def step():
    for w in STARTED:
        w[1].send((w[2] + w[3], w[2] + w[3] + PER_ITERATION))
        w[3] += PER_ITERATION
    for w in STARTED:
        w[1].recv()

def end():
    for p, conn, *_ in STARTED:
        conn.send(None)
        p.join(10)
    STARTED.clear()
"""
WATCH = "%%leakwatch -n 320 -o cow start(4)\nstep()"
REPORT = ("end()\n"
          "print(cow.copying, sorted(f'worker {w.number}' for w in cow.copy_on_write.workers)"
          " if cow.copy_on_write else [])")
WORKER = ".leakwidget-legend-worker"


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _worker_lines(page, cell) -> dict[str, list]:
    """Each worker's drawn points, by its legend label (matched by colour)."""
    colours = cell.locator(WORKER).evaluate_all(
        "els => els.map(e => [e.innerText.trim(), getComputedStyle(e.firstChild).borderTopColor])")
    g = read_geometry(page)
    by_stroke = {ln["stroke"]: ln["points"] for ln in g["lines"] if not ln["dashed"]}
    return {label: by_stroke.get(stroke, []) for label, stroke in colours}


def _check_picture(page, cell, width: int) -> dict:
    g = read_geometry(page)
    # The run's line comes up from below the plot in the setup (the workers' arrival is in the
    # total; the setup does not set the scale): bqplot clips it there, so only what is drawn counts.
    plot = g["plot"]
    drawn = [{**ln, "points": [p for p in ln["points"] if inside(p, plot)]} for ln in g["lines"]]
    problems = geometry_problems({**g, "lines": drawn}, max_headline_lines=1 if width >= 1400 else 2)
    assert not problems, problems
    lines = _worker_lines(page, cell)
    assert len(lines) == 4, lines.keys()
    total = max((ln for ln in g["lines"] if not ln["dashed"]), key=lambda ln: plot["bottom"] - min(p[1] for p in ln["points"]))
    total_rise = total["points"][0][1] - min(p[1] for p in total["points"])
    for label, points in lines.items():
        assert len(points) >= 5, f"{label}: {len(points)} points drawn"
        # On its data and whole: inside the plot, nothing clipped or covered.
        assert all(inside(p, {**plot, "left": plot["left"] - 1, "right": plot["right"] + 1,
                              "top": plot["top"] - 1, "bottom": plot["bottom"] + 1}) for p in points), label
        # It copied about a quarter of what the tree's total grew by: four workers, four shares.
        rise = points[0][1] - min(p[1] for p in points)
        assert 0.1 * total_rise < rise < 0.5 * total_rise, (label, rise, total_rise)
    return g


def test_four_copying_workers_are_drawn_beside_the_trees_total(open_notebook, screenshots):
    nb = open_notebook("copy_on_write.ipynb", ["%load_ext leakwidget", WORKERS, WATCH, REPORT], width=1400)
    page = nb.page
    nb.run_cells_ok((0, 1))
    nb.run_cell(2)
    cell = nb.cell(2)
    # Live: the four workers' lines are drawn while the cell runs.
    expect(cell.locator(WORKER)).to_have_count(4, timeout=30_000)
    assert nb.prompt(2) == "[*]:", "the workers' lines should be drawn while the cell runs"
    assert not cell.locator(WORKER).filter(has_text="copying").count()  # known at the end only
    nb.wait_cell_done(2, timeout_ms=120_000)
    nb.run_cell(3)
    nb.wait_cell_done(3)
    copying, names = nb.output_text(3).strip().split(" ", 1)
    assert copying == "True", nb.output_text(3)

    expect(cell.locator(".leakwidget-banner [data-kind]")).to_have_attribute("data-kind", "plateau")
    headline = cell.locator(".leakwidget-headline").inner_text().strip()
    assert headline.startswith("Copy-on-write:") and "not a leak" in headline, headline
    # The workers the kernel's result calls copying are the ones the legend marks so.
    marked = sorted(re.sub(r" \(copying\)$", "", t) for t in
                    cell.locator(f"{WORKER}[data-copying='true']").all_inner_texts())
    assert str(marked) == names and len(marked) >= 2, (marked, names)
    for text in cell.locator(f"{WORKER}[data-copying='true']").all_inner_texts():
        assert text.endswith("(copying)"), text
    legend = cell.locator(".leakwidget-legend").inner_text()
    assert "private memory of each child" in legend and "not shown" not in legend, legend
    _check_picture(page, cell, 1400)
    dashboard = cell.locator(".leakwidget-dashboard")
    dashboard.screenshot(path=str(screenshots / "copy-on-write-1400.png"))

    # Narrowed to 900 px: the legend reports the new width and the kernel redraws the axes for
    # it; the picture holds once that has arrived.
    page.set_viewport_size({"width": 900, "height": 1300})
    deadline = time.monotonic() + 15
    while True:
        try:
            _check_picture(page, cell, 900)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            page.wait_for_timeout(250)  # the next frame from the kernel, then look again
    dashboard.screenshot(path=str(screenshots / "copy-on-write-900.png"))
