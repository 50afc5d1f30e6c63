"""The documentation site builds with no warning, and every link inside it leads somewhere.

``make docs`` runs the same build: Sphinx with ``-n`` (every cross-reference resolves) and
``-W`` (any warning fails). Then each relative link of every built page is followed to its
file, and a link with ``#anchor`` to an element with that id."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Page(HTMLParser):
    """The links (href, src) and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name in ("href", "src") and value:
                self.links.append(value)


def read(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(site: Path) -> list[str]:
    # (_static/ holds the theme's files: templates among them, not pages)
    pages: dict[Path, Page] = {p: read(p) for p in site.rglob("*.html")
                               if "_static" not in p.relative_to(site).parts}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            url = urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("mailto:", "data:", "javascript:")):
                continue  # not inside the site
            target = (path.parent / unquote(url.path)).resolve() if url.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(site)}: {link} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else read(target).ids
                if unquote(url.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    return broken


@pytest.mark.slow
def test_the_site_builds_without_a_warning_and_every_internal_link_resolves(tmp_path: Path) -> None:
    site = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q",
         str(ROOT / "docs"), str(site), "-d", str(tmp_path / "doctrees")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.strip() == "", proc.stderr[-4000:]
    for page in ("index.html", "magic.html", "verdict.html", "cli.html", "api/index.html",
                 "benchmarks.html", "changelog.html", "notebooks/course/01_pipeline_bisect.html"):
        assert (site / page).exists(), page
    # The references came from the code: the CLI's options and the API's docstrings.
    assert "--max-rss" in (site / "cli.html").read_text()
    assert "Run ``step`` repeatedly" not in (site / "api/generated/leakwidget.watch.html").read_text()
    assert "Run <code" in (site / "api/generated/leakwidget.watch.html").read_text()
    # The lessons are shown with the outputs they were committed with, not run again.
    lesson = (site / "notebooks/course/01_pipeline_bisect.html").read_text()
    assert "files in /tmp/leakwidget-course" in lesson  # a printed line
    assert '<img alt="../../_images/' in lesson  # a result's chart
    assert broken_links(site) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<p id="here"><a href="b.html#nowhere">b</a>'
                                     '<a href="#here">me</a><a href="c.html">c</a>'
                                     '<a href="https://example.org/x">out</a></p>')
    (tmp_path / "b.html").write_text('<p id="somewhere">b</p>')
    assert broken_links(tmp_path) == ["a.html: b.html#nowhere (no such anchor)",
                                      "a.html: c.html (no such file)"]
