"""A real JupyterLab server for the browser tests, and a user's view of one notebook in it.

`LabServer` starts `python -m jupyterlab` on a free localhost port with a random token and a
throw-away root, config, settings and runtime directory, and waits until `/api/status`
answers. `stop()` asks the server to shut down (which shuts its kernels down too), and kills
the process group it started if that does not work in time.

`NotebookPage` drives one open notebook the way a person does: click a cell, press
Shift+Enter, read the prompt and the output area. Every wait is a Playwright wait on a
condition with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from lazy import lazy

# Imported when a test first uses it, not when the suite is collected (tests/lazy.py).
sync_api = lazy("playwright.sync_api")


def expect(*args, **kwargs):
    """Playwright's ``expect``."""
    return sync_api.expect(*args, **kwargs)

REPO = Path(__file__).resolve().parents[2]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# User settings written before the server starts: no news prompt (it covers the notebook in
# screenshots and asks to go online), and every cell rendered (windowing would leave cells
# that are scrolled out of view out of the DOM).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
    },
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """`python -m jupyterlab` on 127.0.0.1, rooted at `root_dir`, isolated under `state_dir`."""

    def __init__(self, root_dir: Path, state_dir: Path, *, startup_timeout: float = 60.0):
        self.root_dir = Path(root_dir)
        self.state_dir = Path(state_dir)
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.state_dir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name, sub in (
            ("JUPYTER_CONFIG_DIR", "config"),
            ("JUPYTER_RUNTIME_DIR", "runtime"),
            ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
            ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
            ("IPYTHONDIR", "ipython"),
        ):
            path = self.state_dir / sub
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        # The kernel starts in root_dir, a temporary folder: let it import the working tree's
        # leakwidget whether or not the package is installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _write_settings(self) -> None:
        base = self.state_dir / "user-settings"
        for rel, value in LAB_SETTINGS.items():
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--LabApp.news_url=None",
            # window.jupyterapp: lets wait_kernel_idle() see the session's real kernel state.
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--ServerApp.allow_root=True")
        return cmd

    def start(self) -> LabServer:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._write_settings()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(),
            env=self._env(),
            cwd=self.root_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() can end kernels too
        )
        self._wait_ready()
        return self

    def api(self, path: str, method: str = "GET", timeout: float = 5.0):
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with code {self.proc.returncode} before it answered;"
                    f" log:\n{self.log_tail()}"
                )
            try:
                status = self.api("/api/status", timeout=2.0)
                if isinstance(status, dict) and "started" in status:
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_error = exc
            # Polling a socket that is not open yet: a short pause between attempts,
            # bounded by the deadline above (not a synchronisation sleep).
            time.sleep(0.2)
        raise TimeoutError(
            f"JupyterLab did not answer /api/status within {self.startup_timeout:.0f}s"
            f" ({last_error}); log:\n{self.log_tail()}"
        )

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def lab_url(self, notebook: str) -> str:
        return f"{self.url}/lab/tree/{notebook}?token={self.token}&reset"

    def stop(self, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                try:
                    self.api("/api/shutdown", method="POST", timeout=5.0)
                except (OSError, urllib.error.URLError, ValueError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
            # Anything left in the group we started (a kernel that ignored the shutdown).
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if proc.poll() is None:
                proc.wait(timeout=timeout)
        finally:
            self.proc = None
            if self._log is not None:
                self._log.close()
                self._log = None


class NotebookPage:
    """One notebook open in JupyterLab in a Playwright page."""

    CELL = ".jp-Notebook .jp-Cell"

    def __init__(self, page, server: LabServer, notebook: str):
        self.page = page
        self.server = server
        self.notebook = notebook

    def open(self, timeout_ms: float = 90_000) -> NotebookPage:
        self.page.goto(self.server.lab_url(self.notebook), wait_until="domcontentloaded")
        self.page.wait_for_selector(f"{self.CELL} .jp-InputArea", timeout=timeout_ms)
        self.wait_kernel_idle(timeout_ms)
        return self

    def wait_kernel_idle(self, timeout_ms: float = 60_000) -> None:
        """The notebook's kernel is connected and idle.

        The toolbar indicator alone is not enough: it can read idle while the session has no
        kernel yet, and a cell run then is silently cleared instead of executed. So this also
        asks the app (exposed by --LabApp.expose_app_in_browser) about the panel's session.
        """
        self.page.wait_for_function(
            """(path) => {
                const app = window.jupyterapp;
                const panel = app && app.shell.currentWidget;
                const ctx = panel && panel.sessionContext;
                const kernel = ctx && ctx.session && ctx.session.kernel;
                const indicator = panel && panel.node.querySelector(
                    '.jp-Notebook-ExecutionIndicator');
                return !!kernel && ctx.path === path && ctx.isReady
                    && kernel.status === 'idle' && kernel.connectionStatus === 'connected'
                    && !!indicator && indicator.dataset.status === 'idle';
            }""",
            arg=self.notebook,
            timeout=timeout_ms,
        )

    def cell(self, index: int):
        return self.page.locator(self.CELL).nth(index)

    def prompt(self, index: int) -> str:
        return self.cell(index).locator(".jp-InputPrompt").inner_text().strip()

    def run_cell(self, index: int, timeout_ms: float = 30_000) -> None:
        """Select the cell and press the toolbar's Run button, as a person does.

        Returns once JupyterLab has queued the cell (its prompt changed to ``[*]:``).
        """
        cell = self.cell(index)
        before = self.prompt(index)
        cell.locator(".jp-InputPrompt").click()
        expect(cell).to_have_class(re.compile(r"\bjp-mod-active\b"), timeout=timeout_ms)
        self.page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) "
            "[data-command='notebook:run-cell-and-select-next']"
        ).click()
        self.page.wait_for_function(
            """([sel, i, before]) => {
                const cell = document.querySelectorAll(sel)[i];
                const p = cell && cell.querySelector('.jp-InputPrompt');
                return !!p && p.textContent.trim() !== before;
            }""",
            arg=[self.CELL, index, before],
            timeout=timeout_ms,
        )

    def run_cells_ok(self, indices, timeout_ms: float = 60_000) -> None:
        """Run each cell in turn, waiting for it to finish, and fail on an error in its output."""
        for i in indices:
            self.run_cell(i)
            self.wait_cell_done(i, timeout_ms=timeout_ms)
            assert "Error" not in self.output_text(i), self.output_text(i)

    def wait_cell_started(self, index: int, timeout_ms: float = 30_000) -> None:
        self._wait_prompt(index, r"^\[\*\]:$", timeout_ms)

    def wait_cell_done(self, index: int, timeout_ms: float = 120_000) -> int:
        """Wait until the cell shows an execution count; returns it."""
        self._wait_prompt(index, r"^\[\d+\]:$", timeout_ms)
        return int(self.prompt(index).strip("[]:"))

    def _wait_prompt(self, index: int, pattern: str, timeout_ms: float) -> None:
        self.page.wait_for_function(
            """([sel, i, pattern]) => {
                const cell = document.querySelectorAll(sel)[i];
                const p = cell && cell.querySelector('.jp-InputPrompt');
                return !!p && new RegExp(pattern).test(p.textContent.trim());
            }""",
            arg=[self.CELL, index, pattern],
            timeout=timeout_ms,
        )

    def output(self, index: int):
        return self.cell(index).locator(".jp-OutputArea-output")

    def output_text(self, index: int) -> str:
        return "\n".join(self.output(index).all_inner_texts())
