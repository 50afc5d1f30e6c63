"""The suite's own scheduling: tests that share a module fixture run in one xdist worker.

tests/conftest.py groups them (``xdist_group``) so that a kernel, a JupyterLab or a TensorFlow
process is set up once per module; if the grouping silently stops working (pytest 9.2 with
pytest-xdist 3.8 did, pytest-dev/pytest-xdist#1386) each worker sets them up again and the suite
takes minutes longer, with more processes competing for two cores.
"""

from __future__ import annotations

import os
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


# Stands for a file of TF_HERE_FILES: each test "imports TensorFlow" in its own process. The module
# put in sys.modules is what the rule reads (a real import costs seconds per worker, and what is
# tested is where tests run, not TensorFlow).
IMPORTS_TF = '''
import os, sys, types, pytest

@pytest.mark.parametrize("i", range(4))
def test_imports_it(i):
    sys.modules.setdefault("tensorflow", types.ModuleType("tensorflow"))
'''
LIGHT = '''
import os, sys, pytest

@pytest.mark.parametrize("i", range(8))
def test_never_sees_it(i):
    # (gw0, the one worker of four that may import it, takes other tests once its own are done.)
    assert "tensorflow" not in sys.modules or os.environ["PYTEST_XDIST_WORKER"] == "gw0"
'''


def _run(tmp_path: Path, workers: int, files: dict[str, str]) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # (As `make test` runs: `make check`'s rule, that no test imports TensorFlow, is another.)
    env = {k: v for k, v in os.environ.items() if k != "LEAKWIDGET_FAST_ONLY"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n",
                           str(workers), "--dist", "loadgroup", "-v", *files],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_tests_importing_tensorflow_run_only_in_the_first_quarter_of_the_workers(tmp_path: Path):
    proc = _run(tmp_path, 4, {"test_keras.py": IMPORTS_TF, "test_light.py": LIGHT})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED (test_\w+)\.py", proc.stdout)
    assert len(ran) == 12, proc.stdout[-3000:]
    assert {w for w, f in ran if f == "test_keras"} == {"gw0"}, ran
    # The light tests are not held back: the other workers run them (here, all of them, since
    # gw0 starts with the TensorFlow group).
    assert {w for w, f in ran if f == "test_light"} & {"gw1", "gw2", "gw3"}, ran


def test_a_test_importing_tensorflow_in_a_worker_kept_free_of_it_fails_and_says_where_it_belongs(
        tmp_path: Path):
    # Two workers: gw0 takes the TensorFlow group first, so gw1 gets the stray test.
    proc = _run(tmp_path, 2, {"test_keras.py": IMPORTS_TF,
                              "test_stray.py": IMPORTS_TF.replace("range(4)", "range(1)")})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"test_stray\.py::test_imports_it\[0\] imported TensorFlow in gw1, a worker "
                     r"kept free of it: ask for the `tf` fixture", proc.stdout), proc.stdout[-3000:]
    assert len(re.findall(r"\[gw[01]\] \[ *\d+%\] PASSED test_keras\.py", proc.stdout)) == 4
