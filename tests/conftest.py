"""How the suite is scheduled: what kind of test each is, and which run first.

Every test is one of: fast (pure logic, recorded runs, short in-process watches without
TensorFlow), or marked with what makes it slow — ``tf`` (runs real TensorFlow), ``kernel`` (a
real Jupyter kernel), ``browser`` (JupyterLab in Chromium), ``slow`` (a minute or more).
``make check`` runs the fast ones; ``make test`` runs them all, several at a time with
pytest-xdist (``-n 3 --dist loadgroup``): most of the suite waits on kernels, workers, browsers and
time-boxed watches rather than computing, so three at a time fit two cores.

The marks are set here from what a test uses (its file, its fixtures), so a new test in a slow
file is marked without anyone remembering to; ``LEAKWIDGET_FAST_ONLY=1`` (set by ``make check``)
fails a test that imports TensorFlow anyway, so the fast set stays fast.

Tests that share an expensive or stateful fixture across a module (one kernel, one JupyterLab,
one Dask cluster, one Keras model) run in one worker, in file order (``xdist_group``). The
slowest files are sent first, so the long tests do not start last and leave the other workers
idle. Nothing here imports TensorFlow or IPython.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Files whose every test runs TensorFlow, or drives a real kernel.
TF_FILES = {"test_bisect.py", "test_stages_tfdata.py", "test_keras.py", "test_native.py"}
KERNEL_FILES = {"test_kernel.py", "test_live_kernel.py", "test_notebooks.py"}
# Fixtures that start a kernel, a JupyterLab or a TensorFlow pipeline.
KERNEL_FIXTURES = {"front", "kernel", "kernel_env", "lab", "open_notebook"}
TF_FIXTURES = {"tfrecords", "model"}
# Modules whose tests share one stateful fixture: one worker runs all of a module's tests.
GROUPED_FILES = {"test_live_kernel.py", "test_keras.py", "test_cluster.py", "test_reliability.py"}
# Roughly slowest first (measured: docs/development.md); the rest keep their order after these.
FIRST = ["test_notebooks.py", "browser", "test_bisect.py", "test_live_kernel.py", "test_cluster.py",
         "test_keras.py", "test_native.py", "test_verdict.py", "test_runner.py",
         "test_attribution.py"]


def _where(item: pytest.Item) -> tuple[str, str]:
    path = Path(str(item.fspath))
    return path.parent.name, path.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder, name = _where(item)
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder == "browser":
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.xdist_group("browser"))
        if name in KERNEL_FILES or fixtures & KERNEL_FIXTURES:
            item.add_marker(pytest.mark.kernel)
        if name in TF_FILES or fixtures & TF_FIXTURES:
            item.add_marker(pytest.mark.tf)
        if name in GROUPED_FILES:
            item.add_marker(pytest.mark.xdist_group(name))

    if not os.environ.get("LEAKWIDGET_SOAK"):
        for item in items:
            if item.get_closest_marker("soak"):
                item.add_marker(pytest.mark.skip(reason="ten-minute soak: `make soak` runs it"))

    def rank(item: pytest.Item) -> int:
        folder, name = _where(item)
        key = "browser" if folder == "browser" else name
        return FIRST.index(key) if key in FIRST else len(FIRST)

    # A stable sort by file keeps each module's tests together (module fixtures are set up once).
    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _fast_tests_stay_fast(request: pytest.FixtureRequest):
    """Under ``make check``, a test that imports TensorFlow is a slow test left unmarked."""
    had = "tensorflow" in sys.modules
    yield
    if os.environ.get("LEAKWIDGET_FAST_ONLY") and not had and "tensorflow" in sys.modules:
        pytest.fail(f"{request.node.nodeid} imported TensorFlow: mark it `tf` (tests/conftest.py)",
                    pytrace=False)
