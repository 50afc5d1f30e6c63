"""Fixtures for the browser tests: a real JupyterLab server and headless Debian Chromium.

Everything started here is torn down here, also when a test fails: the server (and with it
its kernels) at the end of the module, the browser at the end of the session, each page and
its notebook's kernel at the end of the test. On failure the test's report gets the page's
screenshot path and the tail of the server log.

Needs Debian's `chromium` at /usr/bin/chromium (scripts/install-system.sh installs it);
`playwright install` is never used.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lazy import lazy

from .lab import CHROMIUM, CHROMIUM_ARGS, REPO, LabServer, NotebookPage

nbformat = lazy("nbformat")  # imported by the first test that writes a notebook (tests/lazy.py)

# Screenshots go to test-results/ (ignored by git); LEAKWIDGET_SCREENSHOTS=docs/screenshots
# refreshes the pictures the README and docs show.
SCREENSHOTS = Path(os.environ.get("LEAKWIDGET_SCREENSHOTS", REPO / "test-results" / "screenshots"))
VIEWPORT = {"width": 1400, "height": 1300}  # the widths: 1400 px and 900 px


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="package")  # stopped before other tests: Playwright runs an event loop
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: run scripts/install-system.sh "
            "(Debian's chromium; `playwright install` cannot download here)",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server whose root is an empty temporary folder; notebooks are added per test.
    One per module: shared by the whole package (to save a 3 CPU-s start each), the stage strip
    was missing from two later tests' dashboards in two runs of three (runs Q and T)."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    server = LabServer(root, base / "state")
    try:
        server.start()
        yield server
    finally:
        server.stop()


def write_notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)


@pytest.fixture
def open_notebook(request, lab, browser, tmp_path):
    """open_notebook(name, cells, width=1400) -> NotebookPage: writes the notebook into the
    server's root and opens it in a fresh browser context ``width`` pixels wide. Closes the page
    and shuts the kernel down after."""
    contexts = []
    console: list[str] = []

    def _open(name: str, cells: list[str], width: int = VIEWPORT["width"]) -> NotebookPage:
        write_notebook(lab.root_dir / name, cells)
        context = browser.new_context(viewport={**VIEWPORT, "width": width})
        contexts.append(context)
        page = context.new_page()
        # Front-end errors (a widget view that fails to render) go into the failure report.
        page.on(
            "console",
            lambda m: m.type in ("error", "warning") and console.append(f"{m.type}: {m.text}"),
        )
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        page.set_default_timeout(30_000)
        return NotebookPage(page, lab, name).open()

    try:
        yield _open
    finally:
        failed = (
            getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
        )
        for context in contexts:
            try:
                if failed and context.pages:
                    shot = tmp_path / "failure.png"
                    context.pages[0].screenshot(path=str(shot), full_page=True)
                    request.node.add_report_section("teardown", "screenshot", str(shot))
            finally:
                context.close()
        if failed:
            request.node.add_report_section("teardown", "jupyterlab log", lab.log_tail())
            request.node.add_report_section("teardown", "browser console", "\n".join(console[-50:]))
        # Kernels outlive their page: end them now rather than at server shutdown.
        for kernel in lab.api("/api/kernels") or []:
            lab.api(f"/api/kernels/{kernel['id']}", method="DELETE", timeout=15.0)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
