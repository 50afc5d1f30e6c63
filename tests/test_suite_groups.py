"""The suite's own scheduling: tests that share a module fixture run in one xdist worker.

tests/conftest.py groups them (``xdist_group``) so that a kernel, a JupyterLab or a TensorFlow
process is set up once per module; if the grouping silently stops working (pytest 9.2 with
pytest-xdist 3.8 did, pytest-dev/pytest-xdist#1386) each worker sets them up again and the suite
takes minutes longer, with more processes competing for two cores.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = '''
import os, pytest

@pytest.fixture(scope="module")
def shared():
    return os.getpid()

@pytest.mark.parametrize("i", range(6))
def test_uses_the_module_fixture(shared, i):
    assert shared == os.getpid()
'''


def test_tests_sharing_a_module_fixture_run_in_one_xdist_worker(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_grouped.py").write_text(MODULE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", "-v", "test_grouped.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers = re.findall(r"\[(gw\d+)\].*PASSED", proc.stdout)
    assert len(workers) == 6 and len(set(workers)) == 1, proc.stdout[-2000:]
