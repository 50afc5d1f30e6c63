"""Sphinx configuration of leakwidget's documentation site: ``make docs`` builds it into
docs/_build/html (MyST Markdown pages, the course notebooks with their committed outputs, the
API from the docstrings, the command line from its argparse parser)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import leakwidget

DOCS = Path(__file__).resolve().parent
NOTEBOOKS = DOCS.parent / "notebooks"


def mirror_notebooks() -> None:
    """Copy notebooks/ (the quickstart, the course) into docs/notebooks/, which is not committed:
    Sphinx reads only its source folder. The copies keep their places relative to each other,
    so their links between notebooks hold; a link out to ../docs/PAGE (right on GitHub) is
    rewritten to the page's place in the site."""
    target = DOCS / "notebooks"
    shutil.rmtree(target, ignore_errors=True)
    for source in [*NOTEBOOKS.glob("*.ipynb"), *NOTEBOOKS.glob("course/*.ipynb"),
                   NOTEBOOKS / "course" / "README.md"]:
        copy = target / source.relative_to(NOTEBOOKS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(re.sub(r"((?:\.\./)+)docs/", r"\1", source.read_text()))


mirror_notebooks()

project = "leakwidget"
author = "the leakwidget developers"
copyright = "2026, the leakwidget developers"
release = version = leakwidget.__version__

extensions = [
    "myst_nb",  # Markdown pages (MyST) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinxarg.ext",  # the CLI reference, from leakwidget.cli.build_parser()
]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# The course's lessons are shown as committed (their outputs are refreshed by
# notebooks/course/refresh.py); building the site never runs them.
nb_execution_mode = "off"
myst_heading_anchors = 3  # links such as workers.md#the-message-table
myst_enable_extensions = ["colon_fence"]

autosummary_generate = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
# The Keras callback's module imports keras at the top: documenting it must not need TensorFlow.
autodoc_mock_imports = ["keras", "tensorflow"]

# -n (nitpicky): every reference must resolve. Names from outside the package have no
# inventory to resolve against (the build is offline), so they are let through by prefix.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|collections|typing|typing_extensions|keras|tensorflow|tf|distributed"
               r"|concurrent|pathlib|os|asyncio|threading|argparse|dataclasses|types)\..*"),
    (r"py:class", r"(Callable|Iterable|Sequence|Mapping|Any|Literal|Path|PathLike|ndarray|T|T_contra"
                  r"|Per|leakwidget\.stages\.user\.F)"),  # type aliases and variables
    (r"py:class", r"leakwidget\.engine\.records\.RecordLog"),  # a result's private record store
    (r"py:class", r"'.*"),  # pieces of quoted annotations that autodoc splits
    (r"py:class", r"(int|float|str|bytes|bool|dict|list|tuple|set|object|None|type|BaseException"
                  r"|Exception|optional)"),
]

html_theme = "pydata_sphinx_theme"
html_title = f"leakwidget {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path: list[str] = []
