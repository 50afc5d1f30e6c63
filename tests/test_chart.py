"""The static chart of a result (leakwidget/report/chart.py): what a notebook output, the HTML
report and the course show where no widget runs. Checked on the figure's artists (where each
line lies, where the legend sits), not on pixels."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest_workers import Keepers
from matplotlib.backends.backend_agg import FigureCanvasAgg

from leakwidget.engine.spec import WatchSpec
from leakwidget.engine.units import format_bytes
from leakwidget.engine.watch import Watch
from leakwidget.report.chart import SIZE, draw_chart, render_png, result_mimebundle
from leakwidget.report.colours import KIND_COLOURS, MIB
from leakwidget.report.figure import DPI, new_figure
from leakwidget.report.html import SavedRun
from leakwidget.report.workers import MAX_LINES


def leaking_step(size: int = 256 * 1024):
    kept: list = []
    return lambda: kept.append(np.ones(size, np.uint8))


def drawn(result):
    """The chart of ``result`` as a figure, laid out (its artists have their places)."""
    with new_figure(*SIZE) as fig:
        draw_chart(fig, result)
        FigureCanvasAgg(fig).draw()
        return fig


def by_gid(fig, gid: str) -> list:
    return fig.findobj(lambda a: a.get_gid() == gid)


@pytest.fixture(scope="module")
def leak():
    result = Watch(WatchSpec(step=leaking_step(), iterations=300, warmup=20), []).run()
    assert result.verdict.kind == "leak", result.summary
    return result


def test_a_result_offers_its_chart_as_a_png_beside_its_text(leak) -> None:
    bundle = leak._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "image/png"}
    assert bundle["text/plain"] == str(leak)
    png = base64.b64decode(bundle["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert (width, height) == (round(SIZE[0] * DPI), round(SIZE[1] * DPI))
    assert render_png(leak) == bundle["image/png"]  # no timestamp: the same result, the same file


def test_the_trend_lies_on_the_data_and_the_legend_outside_them(leak) -> None:
    fig = drawn(leak)
    memory, steps = fig.axes
    (rss,) = by_gid(fig, "leakwidget-rss")
    (trend,) = by_gid(fig, "leakwidget-trend")
    t, mib = rss.get_data()
    tt, ty = trend.get_data()
    # The trend runs from the onset to the last iteration, within the data's time and level.
    end = leak.column("end")
    assert tt.min() >= end[0] and tt.max() == pytest.approx(end[-1])
    assert tt.max() - tt.min() > 0.5 * (end[-1] - end[0])
    # (the records' RSS at each iteration's end, which the trend was fitted on)
    records = leak.column("rss")[end >= tt.min()] / MIB
    assert records.min() - 1 <= ty.min() and ty.max() <= records.max() + 1
    assert t.size and mib.size
    assert ty[-1] > ty[0]  # a leak rises
    assert trend.get_color() == KIND_COLOURS["leak"] and trend.get_linestyle() == "--"
    # The scale is the run's: the whole trend is inside the axes.
    lo, hi = memory.get_ylim()
    assert lo <= ty.min() and ty.max() <= hi
    # Setup and warm-up are shaded, and named in the legend.
    assert by_gid(fig, "leakwidget-setup") and by_gid(fig, "leakwidget-warm-up")
    (legend,) = by_gid(fig, "leakwidget-legend")
    labels = [x.get_text() for x in legend.get_texts()]
    assert {"setup", "warm-up", "RSS"} <= set(labels)
    # The legend names the verdict and the run's own slope (about the 256 KiB kept per step).
    assert f"trend: leak, {format_bytes(leak.verdict.slope, signed=True)} per iteration" in labels
    assert leak.verdict.slope == pytest.approx(256 * 1024, rel=0.1)
    # Outside the data: the legend's box overlaps neither chart, and is inside the picture.
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    for ax in (memory, steps):
        assert not box.overlaps(ax.get_window_extent(renderer))
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    # The step times share the time axis.
    (durations,) = by_gid(fig, "leakwidget-duration")
    assert durations.axes is steps and steps.get_xlim() == memory.get_xlim()


def test_the_heading_is_the_whole_verdict_wrapped_inside_the_picture(leak) -> None:
    fig = drawn(leak)
    title = fig._suptitle
    assert title.get_color() == KIND_COLOURS["leak"]
    assert title.get_text().split() == leak.summary.split()  # "runs out" is already said
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1
    assert len(title.get_text().splitlines()) >= 2  # the sentence is long: it wrapped


def test_a_flat_run_is_drawn_flat() -> None:
    result = Watch(WatchSpec(step=lambda: None, iterations=200), []).run()
    fig = drawn(result)
    lo, hi = fig.axes[0].get_ylim()
    assert hi - lo >= 1.0  # MiB: noise must not look like growth
    assert fig.axes[0].get_ylabel() == "RSS (MiB)"


def test_a_run_that_failed_at_once_still_has_a_chart() -> None:
    def broken() -> None:
        raise ZeroDivisionError

    result = Watch(WatchSpec(step=broken, iterations=5), []).run()
    assert result.stopped == "error"
    fig = drawn(result)
    assert "No iteration finished." in [t.get_text() for t in fig.axes[1].texts]
    assert "image/png" in result._repr_mimebundle_()


def test_samples_that_are_not_time_and_rss_leave_the_text_alone() -> None:
    class Odd:
        samples = np.zeros((3, 3))

    with pytest.raises(ValueError, match="samples"):
        render_png(Odd())
    bundle = result_mimebundle(Odd())
    assert set(bundle) == {"text/plain", "text/html"}  # the text always shows, wrapped on words


def test_without_matplotlib_a_result_shows_its_text_and_says_how_to_get_the_chart(tmp_path) -> None:
    # The core install has no matplotlib: it is loaded only when a chart is drawn, and its
    # absence costs the chart, nothing else.
    code = f"""
import sys
sys.modules["matplotlib"] = None  # as if not installed
import leakwidget
r = leakwidget.watch(lambda: None, iterations=20, widget=False)
assert not [m for m, v in sys.modules.items() if m.startswith("matplotlib") and v is not None]
bundle = r._repr_mimebundle_()
assert set(bundle) == {{"text/plain", "text/html"}}, set(bundle)
assert bundle["text/plain"].startswith(str(r))
print(bundle["text/plain"].splitlines()[-1])
r.save_html({str(tmp_path / "page.html")!r})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    hint = "(No chart: it needs matplotlib, pip install 'leakwidget[charts]'.)"
    assert proc.stdout.strip() == hint
    page = (tmp_path / "page.html").read_text()
    assert "pip install &#x27;leakwidget[charts]&#x27;" in page and "<svg" not in page


def test_a_watch_imports_matplotlib_only_when_a_chart_is_drawn() -> None:
    code = """
import sys
import leakwidget
r = leakwidget.watch(lambda: None, iterations=20, widget=False)
assert "matplotlib" not in sys.modules
r._repr_mimebundle_()
assert "matplotlib" in sys.modules and "matplotlib.pyplot" not in sys.modules
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_mimebundle_carries_the_chart_in_mib_of_the_result(leak) -> None:
    # The drawn RSS is the result's own samples, in MiB, decimated but not moved.
    fig = drawn(leak)
    (rss,) = by_gid(fig, "leakwidget-rss")
    _t, mib = rss.get_data()
    samples = leak.samples[:, 1] / MIB
    assert mib.min() == pytest.approx(samples.min()) and mib.max() == pytest.approx(samples.max())


def worker_lines(fig) -> dict[str, np.ndarray]:
    return {a.get_label(): a.get_ydata() for a in fig.findobj(lambda a: str(a.get_gid()).startswith("leakwidget-worker-"))}


def test_a_result_with_workers_charts_each_ones_private_memory_beside_the_total() -> None:
    workers = Keepers([64 * 1024, 192 * 1024, 320 * 1024])  # per iteration, each its own pace
    try:
        result = Watch(WatchSpec(step=workers.step, setup=workers.start, iterations=150), []).run()
        pids = workers.pids
    finally:
        workers.end()
    # (The process may have other children: a resource tracker an earlier pool left, flat.)
    mine = [c for c in result.children if c.pid in pids]
    assert len(mine) == 3 and len(result.children) <= MAX_LINES, str(result)
    fig = drawn(result)
    memory, steps, own = fig.axes  # the workers' on a right-hand axis of their own
    lines = worker_lines(fig)
    # One line each; the others, if any, exec'd a program ("process 1"): not forks of this one.
    # A worker's label says "(copying)" when its copy-on-write is called (forked, it allocates
    # in pages it shares with this process: beside stress-ng --cpu 2 one of three was, run K).
    by_worker = {label.removesuffix(" (copying)"): y for label, y in lines.items()}
    assert len(lines) == len(result.children) and all(f"worker {c.number}" in by_worker for c in mine), sorted(lines)
    for c in mine:  # each line is its worker's private memory
        assert np.max(by_worker[f"worker {c.number}"]) == pytest.approx(c.samples[:, 1].max() / MIB)
    # The same MiB per pixel on both axes: the workers' climbs and the total's compare.
    assert np.diff(memory.get_ylim()) == pytest.approx(np.diff(own.get_ylim()))
    lo, hi = own.get_ylim()
    assert all(lo <= y.min() and y.max() <= hi for y in lines.values())
    (rss,) = by_gid(fig, "leakwidget-rss")
    assert rss.get_label() == "total: this process + its children"
    (legend,) = by_gid(fig, "leakwidget-legend")
    labels = [x.get_text() for x in legend.get_texts()]
    assert {*lines, "total: this process + its children"} <= set(labels)
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    for ax in (memory, steps):
        assert not box.overlaps(ax.get_window_extent(renderer))
    # A saved result draws the same lines (the page, `leakwidget report`).
    doc = json.loads(result.to_json())
    saved = drawn(SavedRun(doc))
    assert {k: v.tolist() for k, v in worker_lines(saved).items()} == {k: v.tolist() for k, v in lines.items()}
    # Ten children: the eight that grew most are drawn, the others counted in the legend; a
    # worker the copy-on-write test found copying is marked so.
    base = [c for c in doc["children"] if c["pid"] in pids]
    doc["children"] = [dict(base[n % 3], number=n + 1, copying={"copying": n == 9},
                            samples=[[t, v * (n + 1)] for t, v in base[n % 3]["samples"]])
                       for n in range(10)]
    ten = drawn(SavedRun(doc))
    assert len(worker_lines(ten)) == MAX_LINES and "worker 10 (copying)" in worker_lines(ten)
    (legend,) = by_gid(ten, "leakwidget-legend")
    assert "+2 more workers not shown" in [x.get_text() for x in legend.get_texts()]
