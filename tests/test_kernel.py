"""Behaviour that only a real Jupyter kernel shows: interrupts and the memory guard."""

from __future__ import annotations

import queue
import re
import time

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
from jupyter_client.manager import start_new_kernel  # noqa: E402


@pytest.fixture
def kernel():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc, code: str, timeout: float = 120, on_output=None) -> tuple[dict, str]:
    """Run code; return (execute_reply content, all stream text)."""
    msg_id = kc.execute(code)
    text = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no idle status within {timeout} s; output so far: {''.join(text)}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "stream":
            text.append(msg["content"]["text"])
            if on_output is not None:
                on_output("".join(text))
        elif kind in ("execute_result", "display_data"):
            text.append(msg["content"]["data"].get("text/plain", ""))
        elif kind == "error":
            text.append("\n".join(msg["content"]["traceback"]))
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=10)
    return reply["content"], "".join(text)


def evaluate(kc, expr: str):
    reply, text = execute(kc, f"print(repr({expr}))")
    assert reply["status"] == "ok", text
    return text.strip().splitlines()[-1]


def test_interrupt_stops_within_one_iteration_and_keeps_the_partial_result(kernel):
    km, kc = kernel
    execute(kc, "%load_ext leakwidget")
    interrupted_at = {}

    def interrupt_when_running(text: str) -> None:
        # The progress line comes every half second of the watch (its setup counted): the
        # interrupt is sent once it has counted five iterations, however slow the machine.
        done = [int(n.replace(",", "")) for n in re.findall(r"\[leakwatch\] ([\d,]+) iterations", text)]
        if done and done[-1] >= 5 and not interrupted_at:
            interrupted_at["t"] = time.monotonic()
            km.interrupt_kernel()

    reply, text = execute(
        kc,
        "%%leakwatch -t 60 --no-widget -o r import time; keep = []\n"
        "keep.append(bytearray(b'x' * 200_000)); time.sleep(0.05)\n",
        on_output=interrupt_when_running,
    )
    assert interrupted_at, text
    assert reply["status"] == "ok", text
    assert evaluate(kc, "r.stopped") == "'interrupted'"
    n = int(evaluate(kc, "r.iteration_count"))
    elapsed = float(evaluate(kc, "r.elapsed"))
    assert 5 <= n and elapsed < 30
    assert "Leak" in text or "Inconclusive" in text  # the partial verdict is shown
    # Nothing left behind: no sampler thread, no active watch, and a new run works.
    threads = evaluate(kc, "[t.name for t in __import__('threading').enumerate()]")
    assert "leakwidget-sampler" not in threads
    assert evaluate(kc, "__import__('leakwidget.engine.watch').engine.watch.active_watch()") == "None"
    reply, _ = execute(kc, "%%leakwatch -n 3 -q -o r2\npass\n")
    assert reply["status"] == "ok" and evaluate(kc, "r2.iteration_count") == "3"


def test_memory_guard_stops_a_200_mib_per_iteration_leak_under_2_2_gib(kernel):
    km, kc = kernel
    execute(kc, "%load_ext leakwidget")
    reply, text = execute(
        kc,
        "%%leakwatch -n 100 --max-rss 2GiB --no-widget -o r import numpy as np; keep = []\n"
        "keep.append(np.ones(200 * 2**20 // 8))\n",
        timeout=300,
    )
    assert reply["status"] == "ok", text
    assert evaluate(kc, "r.stopped") == "'memory-guard'"
    peak = int(evaluate(kc, "int(r.column('peak_rss').max())"))
    assert peak < 2.2 * 2**30
    assert int(evaluate(kc, "r.iteration_count")) >= 5
    reply, _ = execute(kc, "keep.clear(); 1 + 1")
    assert reply["status"] == "ok"  # the kernel still answers


def test_a_watch_in_a_kernel_leaves_its_peak_rss_record_alone(kernel):
    # Issue 17: a watch reset the kernel's peak-RSS record (ru_maxrss 533 -> 47 MiB). VmHWM is
    # that record for the kernel's own memory; ru_maxrss is the larger of it and the peak of the
    # process the kernel was exec'd from (this test process: in a full run, over a GiB).
    km, kc = kernel
    execute(kc, "%load_ext leakwidget\nimport resource\n"
                "def hwm():\n"
                "    with open('/proc/self/status') as f:\n"
                "        return int(f.read().split('VmHWM:')[1].split()[0])\n"
                "def maxrss():\n"
                "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
                "spike = len(b'x' * (300 * 2**20))  # the kernel's peak is now far above its RSS")
    before, maxrss = int(evaluate(kc, "hwm()")), int(evaluate(kc, "maxrss()"))
    reply, text = execute(kc, "%%leakwatch -n 50 -o r\nx = bytearray(2**20)\n")
    assert reply["status"] == "ok", text
    assert evaluate(kc, "r.iteration_count") == "50"
    assert int(evaluate(kc, "hwm()")) >= before
    assert int(evaluate(kc, "maxrss()")) >= maxrss
    # Asked for, exact peaks cost the record, and the test can see it.
    reply, text = execute(kc, "%%leakwatch -n 5 -q --exact-peaks\npass\n")
    assert reply["status"] == "ok", text
    assert int(evaluate(kc, "hwm()")) < before - 200 * 1024


def test_a_result_shows_its_text_and_its_chart_as_two_outputs(kernel) -> None:
    # A front end shows the richest type of each output: text and PNG in one output would show
    # the chart alone, hiding the report that says what it means.
    _, kc = kernel
    outputs = []
    msg_id = kc.execute("%load_ext leakwidget\nimport leakwidget\n"
                        "r = leakwidget.watch(lambda: None, iterations=40, widget=False)\nr")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] in ("display_data", "execute_result"):
            outputs.append(msg["content"]["data"])
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert len(outputs) == 2, [sorted(o) for o in outputs]
    text, chart = outputs
    assert "image/png" not in text and "40 iterations" in text["text/plain"]
    assert "word-break: normal" in text["text/html"] and "40 iterations" in text["text/html"]
    assert set(chart) == {"image/png", "text/plain"}
