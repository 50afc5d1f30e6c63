"""Widget clicks reach a running ``%%leakwatch`` cell in a real kernel.

A real ipykernel is started with jupyter_client; the test plays the front end: it reads the
widgets' comm ids from the iopub ``comm_open`` messages (found by their DOM classes) and sends
``comm_msg`` messages on the shell channel exactly as JupyterLab would for a click.
"""

from __future__ import annotations

import collections
import json
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
from jupyter_client.manager import start_new_kernel  # noqa: E402

CLICK = {"method": "custom", "content": {"event": "click"}}

SETUP = """
import leakwidget
_junk = []

@leakwidget.stage
def grow(x):
    _junk.append(bytearray(4096))
    return x
"""


class FrontEnd:
    """The part of a front end the test needs: comm ids by DOM class, and waiting on messages."""

    def __init__(self, kc: Any) -> None:
        self.kc = kc
        self.pid = 0  # the kernel's process
        self.comms: dict[str, str] = {}  # DOM class -> comm id of the newest widget with it
        self.log: list[dict] = []

    def _absorb(self, msg: dict, keep: bool = True) -> None:
        if keep:
            self.log.append(msg)
        if msg["msg_type"] == "comm_open":
            state = msg["content"]["data"].get("state", {})
            for cls in state.get("_dom_classes", []):
                self.comms[cls] = msg["content"]["comm_id"]

    def wait_for(self, pred: Callable[[dict], bool], timeout: float, what: str, keep: bool = True) -> dict:
        """Read iopub until ``pred(msg)``; fail with ``what`` after ``timeout`` seconds.
        ``keep=False``: read as a front end does, without keeping the messages."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self._absorb(msg, keep)
            if pred(msg):
                return msg

    def send_comm(self, dom_class: str, data: dict) -> float:
        comm_id = self.comms[dom_class]
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.kc.shell_channel.send(msg)
        return time.monotonic()

    def click(self, dom_class: str) -> float:
        return self.send_comm(dom_class, CLICK)

    def is_update(self, msg: dict, dom_class: str, key: str) -> Any:
        """The new value of ``key`` if msg is a state update of the widget with ``dom_class``,
        or the opening of a new one with it (the pipeline strip is drawn anew, not updated)."""
        if msg["msg_type"] not in ("comm_msg", "comm_open") or msg["content"]["comm_id"] != self.comms.get(dom_class):
            return None
        data = msg["content"]["data"]
        if msg["msg_type"] == "comm_msg" and data.get("method") not in ("update", "echo_update"):
            return None
        return data.get("state", {}).get(key)

    def banner(self, msg: dict) -> str | None:
        return self.is_update(msg, "leakwidget-banner", "value")

    def execute(self, code: str, timeout: float = 60) -> dict:
        """Run code to completion; returns the execute_reply content (stdout in ['stdout'])."""
        out: list[str] = []
        reply = self.kc.execute_interactive(
            code, timeout=timeout, output_hook=lambda m: (self._absorb(m), _collect(m, out))
        )
        content = dict(reply["content"])
        content["stdout"] = "".join(out)
        return content

    def wait_reply(self, msg_id: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no execute_reply within {timeout} s")
            try:
                reply = self.kc.get_shell_msg(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply


def _collect(msg: dict, out: list[str]) -> None:
    if msg["msg_type"] == "stream":
        out.append(msg["content"]["text"])
    elif msg["msg_type"] == "error":
        out.append("\n".join(msg["content"]["traceback"]))


@pytest.fixture(scope="module")
def front() -> Iterator[FrontEnd]:
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        fe = FrontEnd(kc)
        fe.pid = km.provisioner.process.pid
        reply = fe.execute("%load_ext leakwidget\n" + SETUP)
        assert reply["status"] == "ok", reply["stdout"]
        yield fe
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _running(banner: str | None) -> bool:
    # The dashboard reports the live iteration count once iterations are running.
    return bool(banner) and 'data-running="true"' in banner and "iteration" in banner


def test_the_rewrite_is_installed_in_an_ipykernel_7_kernel(front: FrontEnd) -> None:
    reply = front.execute(
        "from leakwidget.notebook import delivery as live\n"
        "print(live.installed(get_ipython()), repr(get_ipython().transform_cell('%%leakwatch -n 3\\nx=1\\n')))"
    )
    assert reply["stdout"].startswith("True"), reply["stdout"]
    assert "await __import__('leakwidget.notebook.magics'" in reply["stdout"]


def test_stop_click_ends_a_running_cell(front: FrontEnd) -> None:
    # Each step notes when it ended on the machine's monotonic clock (the test's clock too).
    msg_id = front.kc.execute("%%leakwatch -t 20 -o stop_res\ngrow(1)\n"
                              "_stepped = __import__('time').monotonic()\n")
    front.wait_for(lambda m: _running(front.banner(m)), 30, "the dashboard to show a running watch")
    first_update = time.monotonic()
    clicked = front.click("leakwidget-stop")
    reply = front.wait_reply(msg_id, timeout=25)
    ended = time.monotonic()
    assert reply["content"]["status"] == "ok"
    # The banner ends in a final (not running) state, and the result says it was stopped.
    front.wait_for(
        lambda m: (front.banner(m) or "").find('data-running="false"') >= 0, 5, "the final banner"
    )
    # What Stop promises: the run ends at the next iteration boundary. How soon after the click
    # is bench/bench_stop.py's to measure (0.03 s quiet, 0.07 s beside two busy processes); a
    # bound asserted here would be a timed test, which a loaded CI machine breaks (a Keras fit
    # saw Stop 1.54 s after the click there once).
    last_step = float(front.execute("print(_stepped)", timeout=10)["stdout"])
    print(f"the last step ended {last_step - clicked:.2f} s after Stop")
    # Then the final verdict and attribution, which take CPU time (0.3-0.6 s on a quiet machine,
    # seconds beside a CPU hog: a benchmark's matter): the run ended by the click, not its -t 20.
    stopped, elapsed = front.execute("print(stop_res.stopped, stop_res.elapsed)", timeout=10)["stdout"].split()
    assert stopped == "stopped" and float(elapsed) < 20, (stopped, elapsed)
    print(f"the cell ended {ended - clicked:.2f} s after Stop")
    # Like the synchronous magic, the rewritten cell has no Out[n]: the dashboard is the output.
    assert not [
        m for m in front.log if m["msg_type"] == "execute_result" and m["parent_header"].get("msg_id") == msg_id
    ]
    check = front.execute("print(stop_res.stopped, stop_res.iteration_count > 0)", timeout=10)
    assert check["status"] == "ok"
    assert check["stdout"].split() == ["stopped", "True"]
    print(f"clicked {clicked - first_update:.2f} s after the first running banner")


def test_front_end_traffic_during_a_run_is_bounded(front: FrontEnd) -> None:
    # A tight loop (thousands of iterations per second) for 3 s: what reaches the front end is
    # bounded by the refresh rate and the per-series point cap, not by the iteration count.
    msg_id = front.kc.execute("%%leakwatch -t 3\nx = 1\n")
    start = len(front.log)
    front.wait_for(
        lambda m: m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"]["execution_state"] == "idle",
        30,
        "the run to end",
    )
    front.wait_reply(msg_id, timeout=5)
    msgs = [m for m in front.log[start:] if m["msg_type"] == "comm_msg"]
    times = [m["header"]["date"] for m in msgs]
    span = (max(times) - min(times)).total_seconds()
    size = sum(len(json.dumps(m["content"])) + sum(len(b) for b in m["buffers"]) for m in msgs)
    points = [
        b.nbytes // 4 if hasattr(b, "nbytes") else len(b) // 4  # float32 arrays on the wire
        for m in msgs
        for b in m["buffers"]
    ]
    assert span > 2.0
    assert max(points) <= 2000 * 2  # warm-up band: 2 x 2; series: <= 2000 points
    print(f"{len(msgs)} comm messages, {size:,} bytes in {span:.2f} s: {size / span:,.0f} B/s, max points {max(points)}")
    assert size / span < 200_000, f"{size / span:,.0f} bytes/s sent to the front end"


def test_a_synchronous_watch_says_clicks_cannot_arrive(front: FrontEnd) -> None:
    # leakwidget.watch() in an ordinary cell runs synchronously: the kernel reads no click
    # until the cell ends, and the dashboard must say so rather than ignore clicks silently.
    start = len(front.log)
    reply = front.execute("import leakwidget\n_r = leakwidget.watch(lambda: None, iterations=5)")
    assert reply["status"] == "ok", reply["stdout"]
    notes = [front.is_update(m, "leakwidget-note", "value") for m in front.log[start:]]
    assert any("cannot deliver clicks" in (n or "") for n in notes), notes


def test_the_chart_moves_during_one_long_step(front: FrontEnd) -> None:
    # One iteration that keeps the CPU busy for 3.2 s: on_iteration cannot redraw before it
    # ends, so any RSS update sent well before the end came from the dashboard's live thread
    # (which draws once the loop has not for 1.5 refresh intervals, 1.5 s).
    code = (
        "%%leakwatch -n 1\n"
        "import time as _t\n_end = _t.perf_counter() + 3.2\n"
        "while _t.perf_counter() < _end:\n    pass\n"
    )
    msg_id = front.kc.execute(code)
    start = len(front.log)
    front.wait_reply(msg_id, timeout=30)
    done = front.wait_for(
        lambda m: m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"]["execution_state"] == "idle",
        10,
        "the cell to end",
    )
    end = done["header"]["date"]
    early = [
        m for m in front.log[start:]
        if m["msg_type"] == "comm_msg"
        and m["buffers"]
        and "x" in m["content"]["data"].get("state", {})
        and (end - m["header"]["date"]).total_seconds() > 0.4
    ]
    assert len(early) >= 2, f"{len(early)} chart updates during the long step"


def test_toggle_click_changes_the_stage_and_run_again_applies_it(front: FrontEnd) -> None:
    msg_id = front.kc.execute("%%leakwatch -t 20\ngrow(1)\n")

    def stages_update(m: dict) -> list | None:
        return front.is_update(m, "leakwidget-pipeline", "stages")

    msg = front.wait_for(lambda m: bool(stages_update(m)), 30, "the pipeline strip to show stages")
    (stage,) = stages_update(msg)
    assert stage["kind"] == "grow" and stage["state"] == "on" and stage["toggleable"]

    # The strip's click writes the wish back, as js/src/pipeline.js does via save_changes().
    front.send_comm(
        "leakwidget-pipeline",
        {"method": "update", "state": {"states": {stage["id"]: "off"}}, "buffer_paths": []},
    )
    front.wait_for(
        lambda m: "Next configuration" in (front.is_update(m, "leakwidget-note", "value") or ""),
        5,
        "the note acknowledging the toggle while the cell runs",
    )
    front.click("leakwidget-stop")
    assert front.wait_reply(msg_id, timeout=5)["content"]["status"] == "ok"

    # Run again (the cell has ended: the kernel is idle) runs the toggled configuration as a
    # background task; the new run records the stage as off.
    front.click("leakwidget-run-again")
    msg = front.wait_for(
        lambda m: any(s.get("state") == "off" for s in (stages_update(m) or [])),
        30,
        "the second run to record the stage switched off",
    )
    assert [s["id"] for s in stages_update(msg)] == [stage["id"]]
    front.wait_for(lambda m: _running(front.banner(m)), 30, "the second run to be running")

    # Stop still works during a run started from the widget, and the kernel stays responsive.
    clicked = front.click("leakwidget-stop")
    front.wait_for(
        lambda m: 'data-running="false"' in (front.banner(m) or ""), 5, "the second run to stop"
    )
    print(f"the second run stopped {time.monotonic() - clicked:.2f} s after the click")
    check = front.execute(
        "import leakwidget.engine.watch as r\nprint(r.active_watch() is None, 1 + 1)", timeout=10
    )
    assert check["stdout"].split() == ["True", "2"]


# ------------------------------------------------------------------------- the dashboard's footprint


def kernel_rss(pid: int) -> int:
    """The kernel's resident set size, read from outside (/proc), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


QUIET_STEP = "import time as _time\n_time.sleep(0.001)\n"
# The growth since the warm-up: records of a long run are thinned, so the warm-up's end is found
# by iteration number, not by position.
QUIET_CHECK = (
    "_i, _rss = _quiet.column('index'), _quiet.column('rss')\n"
    "_k = min(int(__import__('numpy').searchsorted(_i, _i[0] + _quiet.verdict.warmup)), _i.size - 1)\n"
    "print(_quiet.verdict.kind, _quiet.iteration_count, int(_rss[-1] - _rss[_k]))\n"
    "print(_quiet.verdict.summary)\n"
    # What is in use, read at checkpoints (-1 elsewhere): Python's blocks and malloc's bytes,
    # the median of the first and of the last ten readings after the warm-up.
    "for _c in ('blocks', 'malloc_in_use'):\n"
    "    _v = _quiet.column(_c)[_k:]; _v = _v[_v >= 0]\n"
    "    print(_c, _v.size, int(__import__('numpy').median(_v[-10:]) - __import__('numpy').median(_v[:10])) if _v.size else 0)"
)


def watch_a_quiet_step(front: FrontEnd, seconds: float, keep_log: bool = True) -> tuple[list[str], int, int]:
    """Watch a 1 ms sleep for ``seconds`` with the live dashboard, reading every message the
    front end would; returns (verdict kind, iterations, in-run growth; summary) and the kernel's
    RSS, read from outside, at the first and at the last live redraw of the run."""
    msg_id = front.kc.execute(f"%%leakwatch -t {seconds:g} -o _quiet\n{QUIET_STEP}")
    front.wait_for(lambda m: _running(front.banner(m)), 60, "the dashboard to show the running watch")
    during = kernel_rss(front.pid)
    # The kernel's RSS as each live redraw is read, the newest three: the run, not the analysis
    # after it. Read when the message arrives, which beside a busy machine can be after the loop
    # ended: CI once read 2.8 MiB more at the last one (the final verdict's temporaries) in a run
    # whose own series grew 12 KiB. Temporaries only add, so the least of the three stands.
    last = collections.deque([during], maxlen=3)

    def ended(m: dict) -> bool:
        if _running(front.banner(m)):
            last.append(kernel_rss(front.pid))
        return (m["msg_type"] == "status" and m["parent_header"].get("msg_id") == msg_id
                and m["content"]["execution_state"] == "idle")

    # Every message read as it comes, as JupyterLab does: unread ones would pile up in the
    # kernel's own send queue and be counted as its growth.
    front.wait_for(ended, seconds + 120, "the run to end", keep=keep_log)
    after = min(last)
    assert front.wait_reply(msg_id, timeout=10)["content"]["status"] == "ok"
    check = front.execute(QUIET_CHECK, timeout=30)
    assert check["status"] == "ok", check["stdout"][-3000:]
    return check["stdout"].split("\n"), during, after


def test_the_live_dashboard_does_not_measure_itself(front: FrontEnd) -> None:
    # A step that allocates nothing, watched with the live dashboard drawing 2.5 times a second:
    # whatever the dashboard allocates would be the only growth. Measured before this test
    # existed: +1.7-3.4 MiB in 25 s, called plateau or inconclusive 3 times out of 3.
    # A process's first watch with a dashboard pays one-time costs (threads' first buffers, the
    # first messages' buffers, the verdict's first working memory): this kernel has had one.
    watch_a_quiet_step(front, 3)
    lines, during, after = watch_a_quiet_step(front, 20)
    kind, iterations, grown = lines[0].split()
    print(f"kernel RSS {during / 2**20:.1f} -> {after / 2**20:.1f} MiB; in-run growth "
          f"{int(grown) / 1024:.0f} KiB over {iterations} iterations; {lines[1]}")
    assert int(grown) < 1 << 20, f"the run measured {int(grown) / 2**20:.2f} MiB of growth"
    assert after - during < 1 << 20, f"the kernel grew by {(after - during) / 2**20:.2f} MiB"
    # No growth is reported. In 20 s the verdict cannot always tell the ~200 KiB that its own live
    # verdicts leave with the allocator (the same with --no-widget) from a trickle, so besides
    # "stable" it may say "inconclusive ... too little to call a leak"; never leak or plateau.
    # The soak below runs 10 minutes (and says what it measured there).
    assert kind in ("stable", "inconclusive"), lines[1]


def soak(front: FrontEnd, seconds: float, most: int) -> None:
    """A quiet step watched ``seconds`` with the live dashboard, every redraw sent and read: the
    run grows by under ``most`` bytes, measured inside and from outside, and the verdict says
    "stable", or at most that a steady creep was shown too small to call a leak."""
    watch_a_quiet_step(front, 3)
    lines, during, after = watch_a_quiet_step(front, seconds, keep_log=False)
    kind, iterations, grown = lines[0].split()
    in_use = {name: (int(n), int(d)) for name, n, d in (line.split() for line in lines[2:4])}
    print(f"kernel RSS {during / 2**20:.1f} -> {after / 2**20:.1f} MiB; in-run growth "
          f"{int(grown) / 1024:.0f} KiB over {iterations} iterations; in use (readings, growth): "
          f"{in_use}; {lines[1]}")
    # Issue 17's bar was stable and under 1 MiB. Measured before the dashboard redrew once a
    # second (1/60 of the run's time after the first minute) and the sampler's series compacted
    # in place: 0.9-2.5 MiB, plateau or inconclusive. After: 250-584 KiB, and in CI three times
    # in 100 s a steady trickle of about 1 B/iteration (60 KiB), "too little to call a leak"
    # (once numpy's cache of small freed buffers filling with the redraws' masks, fixed since);
    # locally 8-52 KiB, "stable". Not explained yet: tracemalloc from 20 s to 95 s of a run finds
    # Python's heap flat (-15 KB), while Python's blocks and malloc's bytes in use rose between
    # the run's first and last ten checkpoints (+2,310 blocks, +130 KB). So the verdict may say a
    # creep of that size is too little to call a leak (its own words for it), never leak, plateau
    # or another doubt, and the 100 s run's growth is held to a quarter of the old bar.
    assert int(grown) < most, f"the run measured {int(grown) / 1024:.0f} KiB of growth"
    assert after - during < most, f"the kernel grew by {(after - during) / 1024:.0f} KiB"
    assert kind == "stable" or (kind == "inconclusive" and "too little to call a leak" in lines[1]), lines[1]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_minutes_of_the_live_dashboard_stay_flat(front: FrontEnd) -> None:
    # The suite's soak: long enough for the dashboard's redraws to slow to their long-run pace
    # (after the first minute) and for a trickle of its own to show; `make soak` runs ten.
    soak(front, 100, 256 << 10)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_ten_minutes_of_the_live_dashboard_stay_flat(front: FrontEnd) -> None:
    # `make soak` (docs/reliability.md has its last result): ten minutes of the same.
    soak(front, 600, 1 << 20)
