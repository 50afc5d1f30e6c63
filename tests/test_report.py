"""``result.save_html(path)``: one self-contained page, opened offline in headless Chromium.

The browser is offline for the page: every request other than the file itself is recorded and
refused, so a page that needs the network fails here as it would on a plane.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import leakwidget
from leakwidget.report.chart import samples_of
from leakwidget.report.html import render_html
from leakwidget.report.render import text_bundle

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

KEPT: list = []


@leakwidget.stage
def parse(x: int) -> bytes:
    KEPT.append(bytes(64 * 1024))  # the leak: every parsed record is kept
    return b"%d" % x


@pytest.fixture(scope="module")
def leak() -> leakwidget.WatchResult:
    # A count, not a time: the census is then always taken, whatever the heap of the process
    # running the tests (in a time budget, a large one makes it too dear and it is skipped).
    # 5 ms a step, so that the run, not the setup before it, fills the chart's time axis.
    r = leakwidget.watch(lambda: (parse(1), time.sleep(0.005)), iterations=400, widget=False,
                         label="parser")
    KEPT.clear()
    assert r.verdict.kind == "leak"
    return r


@pytest.fixture(scope="module")
def page() -> Iterator:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"Chromium not found at {CHROMIUM}: run scripts/install-system.sh", pytrace=False)
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    try:
        yield browser
    finally:
        browser.close()
        pw.stop()


def open_offline(browser, path: Path):
    """The page at ``path`` with every other request refused; (page, requests it tried)."""
    context = browser.new_context(viewport={"width": 1100, "height": 900}, offline=True)
    tried: list[str] = []

    def route(r) -> None:
        if r.request.url == path.as_uri():
            r.continue_()
        else:
            tried.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    return page, tried, errors


@pytest.mark.slow
def test_the_report_opens_offline_with_charts_verdict_tables_and_environment(
        leak: leakwidget.WatchResult, page, tmp_path: Path) -> None:
    path = tmp_path / "leak.html"
    leak.save_html(path)
    html = path.read_text()
    names = ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink")  # names, not fetches
    assert "<script" not in html and "<link" not in html
    assert "http" not in html.replace(names[0], "").replace(names[1], "")
    p, tried, errors = open_offline(page, path)
    try:
        assert tried == [] and errors == []
        banner = p.locator("section.verdict")
        assert banner.get_attribute("data-kind") == "leak"
        text = banner.inner_text()
        assert leak.verdict.summary.split(";")[0] in text and "/s" in text and "/h" in text
        # The chart drew each part: the RSS line with its trend, and the step times.
        boxes = {part: p.locator(f"#chart #leakwidget-{part} path").bounding_box()
                 for part in ("rss", "trend", "duration")}
        rss, duration = boxes["rss"], boxes["duration"]
        assert rss["width"] > 300 and rss["height"] > 5, boxes
        # Step times start at the first iteration's end, after the setup and its census, which
        # beside CI's load took most of this short run (drawn 285 px wide): drawn, to the end.
        assert duration["width"] > 30 and duration["height"] > 5, boxes
        # Each line ends at its data's last time on the shared axis: the RSS line at the last
        # sample, which comes up to a sampling interval after the last iteration's end (4.9 px
        # beside a CPU hog), the step times at that end.
        t, _ = samples_of(leak.samples)
        px_per_s = rss["width"] / float(t[-1] - t[0])
        last_end = (rss["x"] + rss["width"]) - (float(t[-1]) - float(leak.column("end")[-1])) * px_per_s
        assert abs((duration["x"] + duration["width"]) - last_end) < 3, (boxes, last_end)
        # The trend runs from the leak's onset to the run's end: late in a long-lived process,
        # whose first kept records reuse memory freed before (CI: drawn 287 px wide).
        trend = boxes["trend"]
        assert trend["width"] > 30 and trend["height"] > 5, boxes
        assert abs((trend["x"] + trend["width"]) - last_end) < 3, (boxes, last_end)
        body = p.locator("body").inner_text()
        assert "What grows" in body and leak.attribution.summary[:40] in body
        assert "parse@" in body and "Pipeline stages" in body  # the @stage function's row
        assert "label\tparser" in body  # configuration
        for word in ("Environment", "allocator", "machine memory", "leakwidget"):
            assert word in body
    finally:
        p.context.close()


def test_a_saved_result_with_attribution_and_stages_passes_the_report_check(
        leak: leakwidget.WatchResult) -> None:
    from leakwidget.report.saved import check_saved

    doc = json.loads(leak.to_json())
    assert doc["attribution"]["top_types"] and doc["stages"]  # every part of the page is there
    check_saved(doc)


def test_a_verdict_made_of_numpy_comparisons_is_saved_as_json_booleans(
        leak: leakwidget.WatchResult) -> None:
    # The hypotheses compare numpy numbers: a short run under load saved "np.False_", and
    # `leakwidget report` refused its own file.
    import dataclasses

    import numpy as np

    from leakwidget.engine.result import json_default
    from leakwidget.report.saved import check_saved

    verdict = dataclasses.replace(leak.verdict, confident=np.float64(1.0) > 2, slowing=np.bool_(True))
    assert verdict.confident is False and verdict.slowing is True
    assert [json_default(v) for v in (np.bool_(False), np.int64(3), np.float64("nan"), np.arange(2))] == [
        False, 3, None, [0, 1]]
    doc = json.loads(leak.to_json())
    doc["verdict"] = json.loads(json.dumps(dataclasses.asdict(verdict), default=json_default))
    check_saved(doc)


def test_a_saved_result_renders_like_the_live_one(leak: leakwidget.WatchResult, tmp_path: Path) -> None:
    # leakwidget report RESULT.json renders the exported form; the page must be the same.
    live = render_html(json.loads(leak.to_json()))
    saved = json.loads(leak.to_json())
    (tmp_path / "r.json").write_text(json.dumps(saved))
    again = render_html(json.loads((tmp_path / "r.json").read_text()))

    def strip_time(s: str) -> str:
        return s[s.index("</div>", s.index('class="sub"')):]

    assert strip_time(live) == strip_time(again)


def test_a_run_that_failed_early_still_renders(page, tmp_path: Path) -> None:
    def step() -> None:
        raise RuntimeError("broken input")

    r = leakwidget.watch(step, iterations=10, widget=False)
    path = tmp_path / "failed.html"
    r.save_html(path)
    p, tried, errors = open_offline(page, path)
    try:
        assert tried == [] and errors == []
        assert "broken input" in p.locator(".error").inner_text()
        assert "No iteration finished" in p.locator("#chart").inner_text()
    finally:
        p.context.close()


def test_an_unwritable_path_raises_and_leaves_nothing(leak: leakwidget.WatchResult, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        leak.save_html(tmp_path / "missing" / "r.html")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.geteuid() != 0:  # root writes anywhere
            with pytest.raises(PermissionError):
                leak.save_html(locked / "r.html")
            assert list(locked.iterdir()) == []
    finally:
        locked.chmod(stat.S_IRWXU)
    # A write that fails at the last step (the name is taken by a folder) leaves no temporary
    # file behind either.
    (tmp_path / "taken.html").mkdir()
    with pytest.raises(IsADirectoryError):
        leak.save_html(tmp_path / "taken.html")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["locked", "taken.html"]
    assert list((tmp_path / "taken.html").iterdir()) == []


@pytest.mark.slow
def test_save_html_writes_through_a_symlink_a_fifo_and_a_device(tmp_path: Path) -> None:
    import threading

    r = leakwidget.watch(lambda: None, iterations=20, widget=False)
    (tmp_path / "link.html").symlink_to("page.html")
    r.save_html(tmp_path / "link.html")
    assert (tmp_path / "link.html").is_symlink() and "<svg" in (tmp_path / "page.html").read_text()
    os.mkfifo(tmp_path / "fifo.html")
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append((tmp_path / "fifo.html").read_bytes()))
    reader.start()
    r.save_html(tmp_path / "fifo.html")
    reader.join(timeout=10)
    assert (tmp_path / "fifo.html").is_fifo() and read and b"<svg" in read[0]
    if os.geteuid() != 0:
        return  # making a device node needs root
    # A node like /dev/full (1, 7): every write fails with ENOSPC. It is written into, and the
    # error raised; before, as root, the node was replaced by a regular file.
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    with pytest.raises(OSError, match="No space left on device"):
        r.save_html(full)
    assert stat.S_ISCHR(full.stat().st_mode)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["fifo.html", "full", "link.html", "page.html"]


JUPYTERLAB_CSS = Path(sys.prefix) / "share/jupyter/nbconvert/templates/lab/static/index.css"


def test_text_that_shows_alone_wraps_between_words_under_jupyterlabs_styles(page, tmp_path: Path) -> None:
    # JupyterLab styles an output's <pre> with word-break: break-all ("stea" / "dy" at the edge
    # of a 900-px notebook); the text/html a text-only result offers must wrap between words.
    # A table's rows (indented) stay whole: wrapped, a figure fell under the next row's name.
    row = "  tensorflow.python.eager.context.ContextSwitch   +0.01       +0.81 B       ?"
    text = "Stable: memory grew by 5.5 MiB over iterations 1 to 343, then held steady.\n" * 8 + row
    bundle = text_bundle(text)
    assert bundle["text/plain"] == text
    doc = tmp_path / "output.html"
    doc.write_text(f'<html><head><style>{JUPYTERLAB_CSS.read_text()}</style></head><body>'
                   f'<div class="jp-OutputArea-output jp-RenderedHTMLCommon" style="width:430px">'
                   f'{bundle["text/html"]}</div></body></html>')
    p, tried, errors = open_offline(page, doc)
    try:
        split = p.evaluate("""() => {
            const pre = document.querySelector('pre');
            const text = pre.firstChild, split = [];
            const re = /(?<!\\S)\\S{1,30}(?!\\S)/g;  // words that fit a line (a long path may not)
            let m, lines = new Set();
            while ((m = re.exec(text.data))) {
                const range = document.createRange();
                range.setStart(text, m.index);
                range.setEnd(text, m.index + m[0].length);
                const tops = new Set(Array.from(range.getClientRects(), r => Math.round(r.top)));
                tops.forEach(t => lines.add(t));
                if (tops.size > 1) split.push(m[0]);
            }
            const row = pre.querySelector('span');
            return {split, lines: lines.size, width: pre.getBoundingClientRect().width,
                    row: row.getClientRects().length, rowText: row.textContent};
        }""")
        assert split["width"] <= 430 and split["lines"] > 10  # it did wrap, many times
        assert split["split"] == []  # and never inside a word
        assert split["rowText"] == row and split["row"] == 1  # the row on one line, scrolled to
    finally:
        p.context.close()
