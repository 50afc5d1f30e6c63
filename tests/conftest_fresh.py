"""A test's code run in a fresh Python process, its answer read back as JSON."""

from __future__ import annotations

import json
import subprocess
import sys


def run_fresh(code: str, *args: str, timeout: float = 300, **popen) -> dict:
    """Run ``code`` with ``args`` in a fresh interpreter (``popen``: cwd, env, ...); it must exit
    0 (its stderr's end is the failure message) and print its answer as the last line of JSON."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, **popen)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
