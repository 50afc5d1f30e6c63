"""``leakwidget run`` / ``attach`` / ``report``: real programs in real processes.

Each watch is short (``--interval 0.1`` and a few seconds). The programs are small Python
scripts: one keeps 1 MiB every 50 ms, one allocates and frees, one marks its steps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

CLI = [sys.executable, "-m", "leakwidget.cli"]

LEAKY = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid())) if len(sys.argv) > 1 else None
while os.environ.get("GO") and not os.path.exists(os.environ["GO"]):  # told when to start
    time.sleep(0.01)
keep = []
for i in range(int(os.environ.get("STEPS", "100000"))):
    keep.append(bytearray(1 << 20))
    time.sleep(0.05)
sys.exit(int(os.environ.get("STATUS", "0")))
"""

STEADY = """
import time
for i in range(100000):
    x = bytearray(1 << 20)
    del x
    time.sleep(0.05)
"""

MARKED = """
import time
import leakwidget
keep = []
time.sleep(0.3)
for i in range(100):
    keep.append(bytearray(256 << 10))
    time.sleep(0.02)
    leakwidget.mark()
"""


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    for name, text in (("leaky.py", LEAKY), ("steady.py", STEADY), ("marked.py", MARKED)):
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def leakwidget(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_leaking_program_exits_1_with_the_verdict_rates_and_files(programs: Path) -> None:
    out = programs / "out"
    out.mkdir()
    pidfile = programs / "pid"
    p = leakwidget("run", "--interval", "0.1", "--seconds", "4", "--json", str(out / "r.json"),
                   "--csv", str(out / "r.csv"), "--html", str(out / "r.html"), "--",
                   sys.executable, str(programs / "leaky.py"), str(pidfile))
    assert p.returncode == 1, p.stderr
    assert "leakwidget: Leak: +" in p.stderr and "runs out in about" in p.stderr
    assert "/s" in p.stderr and "/h" in p.stderr and "0.1 s windows" in p.stderr
    doc = json.loads((out / "r.json").read_text())
    assert doc["verdict"]["kind"] == "leak" and doc["stopped"] == "seconds"
    # 1 MiB every 50 ms is 2 MiB per 0.1 s window.
    assert 1.6 * 2**20 < doc["verdict"]["slope"] < 2.4 * 2**20
    assert doc["program"]["how"] == "started by leakwidget run" and doc["program"]["marks"] == 0
    assert 25 <= doc["iteration_count"] <= 45
    assert len((out / "r.csv").read_text().splitlines()) == doc["iteration_count"] + 1
    assert 'data-kind="leak"' in (out / "r.html").read_text()
    assert sorted(f.name for f in out.iterdir()) == ["r.csv", "r.html", "r.json"]  # no temp files
    assert gone(int(pidfile.read_text()))  # the budget ended the watch, and the program


def test_a_steady_program_exits_0(programs: Path) -> None:
    # 20 s, not 4: "stable" claims that even the slope's 95% upper bound would not use the memory
    # in 30 days, and 40 windows of 0.1 s leave a bound of several KiB per window (4 s: exit 2,
    # "run longer", about half the time; 10 s: stable 4 times out of 4 on a loaded machine, but
    # "inconclusive, run longer" twice when three other test processes shared the two cores).
    # The program sleeps: the 20 s cost the suite no CPU.
    # On a busy machine even 20 s can leave the bound above that (CI, once: "Inconclusive ...
    # no significant growth ... run longer", exit 2; once "memory grew, but not steadily", a
    # 120 KiB jump). What holds under load, and is asserted: never a leak, exit 0 exactly when
    # the verdict is stable or a plateau, and an inconclusive one carries its 95% interval.
    p = leakwidget("run", "--interval", "0.1", "--seconds", "20", "--",
                   sys.executable, str(programs / "steady.py"))
    said = p.stderr.splitlines()[0] if p.stderr else ""
    if p.returncode == 2:
        assert said.startswith("leakwidget: Inconclusive") and "95%" in said, p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert said.startswith(("leakwidget: Stable", "leakwidget: Plateau")), p.stderr


def test_run_with_an_allocator_starts_the_program_with_it_preloaded(tmp_path: Path) -> None:
    # What a comparison's answer tells the user to run: the program gets jemalloc before Python
    # starts, and the saved result says which malloc it ran with.
    probe = "print('jemalloc mapped:', any('libjemalloc' in line for line in open('/proc/self/maps')))"
    out = tmp_path / "r.json"
    p = leakwidget("run", "--allocator", "jemalloc", "--interval", "0.1", "--seconds", "1", "--json", str(out),
                   "--", sys.executable, "-c", f"import time; {probe}; time.sleep(3)")
    assert "jemalloc mapped: True" in p.stdout, (p.stdout, p.stderr)
    assert json.loads(out.read_text())["environment"]["allocator"] == "jemalloc"
    bad = leakwidget("run", "--allocator", "mimalloc", "--", sys.executable, "-c", "pass")
    assert bad.returncode == 4 and "invalid choice: 'mimalloc'" in bad.stderr


def test_a_program_that_exits_early_ends_the_watch_with_its_partial_verdict(programs: Path) -> None:
    t0 = time.monotonic()
    p = leakwidget("run", "--interval", "0.1", "--seconds", "60", "--json", str(programs / "r.json"),
                   "--", sys.executable, str(programs / "leaky.py"), env={**os.environ, "STEPS": "80"})
    assert time.monotonic() - t0 < 30
    assert p.returncode == 1, p.stderr  # its verdict: a leak
    assert "The program exited with status 0" in p.stderr and "(stopped: ended)" in p.stderr
    # Its exit freed everything: iterations that saw that are in the records, not the verdict.
    doc = json.loads((programs / "r.json").read_text())
    rss = [r["rss"] for r in doc["iterations"]]
    if rss[-1] < max(rss) / 2:
        assert "in which the program was exiting" in p.stderr


def test_the_memory_a_program_frees_as_it_exits_is_left_out_of_the_verdict(tmp_path: Path) -> None:
    prog = tmp_path / "frees.py"
    prog.write_text(textwrap.dedent("""
        import time
        keep = []
        for i in range(40):
            keep.append(bytearray(1 << 20))
            time.sleep(0.05)
        keep.clear()          # what an interpreter's teardown does, only slower
        time.sleep(1.0)           # (1 s: read at least once on a busy machine)
    """))
    p = leakwidget("run", "--interval", "0.1", "--json", str(tmp_path / "r.json"), "--", sys.executable, str(prog))
    doc = json.loads((tmp_path / "r.json").read_text())
    rss = [r["rss"] for r in doc["iterations"]]
    assert rss[-1] < max(rss) - 30 * 2**20  # the records keep the fall
    assert p.returncode == 1 and doc["verdict"]["kind"] == "leak", p.stderr
    assert "in which the program was exiting (its memory falling by" in p.stderr


def test_a_program_that_fails_exits_3(programs: Path) -> None:
    p = leakwidget("run", "--interval", "0.1", "--",
                   sys.executable, str(programs / "leaky.py"), env={**os.environ, "STEPS": "10", "STATUS": "5"})
    assert p.returncode == 3, p.stderr
    assert "The program exited with status 5" in p.stderr


def test_marks_make_one_iteration_per_mark(programs: Path) -> None:
    # A long --interval: the program's start-up, before its first mark, is a single window.
    p = leakwidget("run", "--interval", "10", "--json", str(programs / "m.json"), "--",
                   sys.executable, str(programs / "marked.py"))
    doc = json.loads((programs / "m.json").read_text())
    assert doc["program"]["iterations"] == "one per leakwidget.mark()" and doc["program"]["marks"] == 100
    # One iteration per mark, and the time before the first mark as one more. (100 of them: with
    # 60, a loaded machine's late readings left the leak "inconclusive" at 95%.)
    assert 92 <= doc["iteration_count"] <= 101, doc["iteration_count"]
    assert p.returncode == 1 and "iterations: marks" in p.stderr, p.stderr
    assert 0.8 * 256 * 1024 < doc["verdict"]["slope"] < 1.25 * 256 * 1024


def test_marks_faster_than_the_watch_are_folded_and_said_so(tmp_path: Path) -> None:
    prog = tmp_path / "fast.py"
    prog.write_text("import time, leakwidget\nt = time.monotonic()\n"
                    "while time.monotonic() - t < 1.5:\n    leakwidget.mark()\n")
    p = leakwidget("run", "--interval", "10", "--json", str(tmp_path / "f.json"), "--", sys.executable, str(prog))
    doc = json.loads((tmp_path / "f.json").read_text())
    marks, folded = doc["program"]["marks"], doc["program"]["marks_folded"]
    assert marks > 10_000 and folded > 0.9 * marks, doc["program"]
    assert doc["iteration_count"] <= marks - folded + 1
    assert f"{folded:,} of {marks:,} marks were folded" in p.stderr


@pytest.mark.parametrize("marks_env", [None, "/nonexistent/leakwidget-marks"])
def test_mark_outside_leakwidget_run_is_a_no_op(marks_env: str | None) -> None:
    # Not under leakwidget run, or under one that has ended (its counter file is gone).
    code = ("import leakwidget, leakwidget.marks as m; [leakwidget.mark() for _ in range(1000)]; "
            "print(m._counter is None)")
    env = {k: v for k, v in os.environ.items() if k != "LEAKWIDGET_MARKS"}
    if marks_env:
        env["LEAKWIDGET_MARKS"] = marks_env
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr


def test_max_rss_stops_the_program_before_it_grows_past_it(programs: Path) -> None:
    pidfile = programs / "pid"
    p = leakwidget("run", "--interval", "0.1", "--max-rss", "120MiB", "--json", str(programs / "r.json"),
                   "--", sys.executable, str(programs / "leaky.py"), str(pidfile))
    doc = json.loads((programs / "r.json").read_text())
    assert doc["stopped"] == "memory-guard" and p.returncode == 1, p.stderr
    assert max(r["rss"] for r in doc["iterations"]) < 120 * 2**20
    assert gone(int(pidfile.read_text()))


def test_attach_watches_a_running_process_and_leaves_it_running(programs: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(programs / "leaky.py")])
    try:
        time.sleep(0.5)
        p = leakwidget("attach", str(proc.pid), "--interval", "0.1", "--seconds", "3",
                       "--json", str(programs / "a.json"))
        assert p.returncode == 1, p.stderr
        assert proc.poll() is None  # still running
        doc = json.loads((programs / "a.json").read_text())
        assert doc["program"]["how"] == "attached" and doc["program"]["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_attach_to_a_process_that_vanishes_exits_3(programs: Path) -> None:
    # The program starts its 20 steps (1 s) once leakwidget has made its marks file, the last
    # thing before it looks up the pid: so it ends while watched, however long the start-up
    # took (beside a CPU hog, longer than the 80 steps it used to have: "no process", exit 4).
    pidfile, go, tmp = programs / "pid", programs / "go", programs / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, str(programs / "leaky.py"), str(pidfile)],
                            env={**os.environ, "STEPS": "20", "GO": str(go)})
    w = None
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        w = subprocess.Popen([*CLI, "attach", str(proc.pid), "--interval", "0.1"],
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)})
        deadline = time.monotonic() + 60
        while not list(tmp.glob("leakwidget-marks-*")) and w.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        _, err = w.communicate(timeout=60)
        assert w.returncode == 3, err
        assert f"Process {proc.pid} ended after" in err
    finally:
        go.touch()
        if w is not None and w.poll() is None:  # communicate() timed out: leave nothing running
            w.kill()
            w.wait()
        proc.wait()


@pytest.mark.parametrize("to_group", [False, True], ids=["to-leakwidget", "to-the-terminal-group"])
def test_ctrl_c_ends_the_watch_keeps_the_result_and_stops_the_program(programs: Path, to_group: bool) -> None:
    # A terminal's Ctrl-C reaches the whole foreground group: leakwidget and the program.
    pidfile = programs / "pid"
    w = subprocess.Popen([*CLI, "run", "--interval", "0.1", "--json", str(programs / "r.json"), "--",
                          sys.executable, str(programs / "leaky.py"), str(pidfile)],
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    if to_group:
        os.killpg(w.pid, signal.SIGINT)
    else:
        w.send_signal(signal.SIGINT)
    _, err = w.communicate(timeout=30)
    assert w.returncode == 130, err
    assert json.loads((programs / "r.json").read_text())["stopped"] == "interrupted"
    assert gone(int(pidfile.read_text()))


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum, status, background", [
    (signal.SIGTERM, 143, False), (signal.SIGHUP, 129, False), (signal.SIGTERM, 143, True),
], ids=["SIGTERM", "SIGHUP", "SIGTERM-to-a-background-job"])
def test_sigterm_and_sighup_end_the_watch_keep_the_result_and_stop_the_program(
        programs: Path, signum: int, status: int, background: bool) -> None:
    # What a CI timeout, kill, a closed terminal or a job scheduler sends: as Ctrl-C, with the
    # exit status saying which signal came; also for a script's background job, which starts
    # with SIGINT ignored.
    pidfile = programs / "pid"
    w = subprocess.Popen([*CLI, "run", "--interval", "0.1", "--json", str(programs / "r.json"), "--",
                          sys.executable, str(programs / "leaky.py"), str(pidfile)],
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=_sigint_ignored if background else None)
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        w.send_signal(signum)
        _, err = w.communicate(timeout=30)
    finally:  # a leakwidget that ignored the signal must not leave its leaking program running
        w.kill()
        if pidfile.exists() and not gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert w.returncode == status, err
    doc = json.loads((programs / "r.json").read_text())
    assert doc["stopped"] == "interrupted" and doc["iteration_count"] >= 5
    assert f"received {signal.Signals(signum).name}" in err
    assert gone(int(pidfile.read_text()))


DAEMON = """
import os, sys, time
if os.fork() == 0:  # the classic double fork: the grandchild is nobody's child but init's
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1], "w").write(str(os.getpid()))
        keep = []
        for i in range(300):  # bounded: 300 MiB and 15 s if nothing stops it
            keep.append(bytearray(1 << 20))
            time.sleep(0.05)
    os._exit(0)
"""


def test_a_program_that_daemonizes_is_watched_and_ended_with_what_it_left(tmp_path: Path) -> None:
    (tmp_path / "daemon.py").write_text(textwrap.dedent(DAEMON))
    pidfile = tmp_path / "pid"
    p = leakwidget("run", "--interval", "0.1", "--seconds", "3", "--json", str(tmp_path / "r.json"), "--",
                   sys.executable, str(tmp_path / "daemon.py"), str(pidfile))
    assert p.returncode == 1, p.stderr  # the daemon's leak, not the launcher's quick exit
    assert json.loads((tmp_path / "r.json").read_text())["stopped"] == "seconds"
    assert gone(int(pidfile.read_text()))


def test_a_program_whose_first_process_exits_is_watched_until_what_it_left_ends(tmp_path: Path) -> None:
    t0 = time.monotonic()
    p = leakwidget("run", "--interval", "0.1", "--json", str(tmp_path / "r.json"), "--",
                   "bash", "-c", "sleep 1.5 & exit 0")
    assert p.returncode in (0, 2), p.stderr  # its verdict (a sleep's flat line), not a failure
    assert 1.4 < time.monotonic() - t0 < 20
    # Its windows cover the second and a half the sleep lived on (10 windows of 0.1 s when
    # quiet; beside `stress-ng --cpu 2` the same time held 9: run AZ), not the moment bash took.
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["iteration_count"] >= 5 and saved["iterations"][-1]["end"] >= 1.0, saved["iterations"][-1]
    assert "exited with status 0 after" in p.stderr and "the processes it left running ended" in p.stderr
    # With a budget, what is left is stopped with the rest.
    marker = tmp_path / "left"
    p = leakwidget("run", "--interval", "0.1", "--seconds", "1", "--", "bash", "-c",
                   f"(sleep 301; touch {marker}) & echo $! > {tmp_path / 'pid'}; exit 0")
    assert p.returncode in (0, 2), p.stderr
    assert gone(int((tmp_path / "pid").read_text()))


def test_what_a_program_leaves_behind_is_collected_when_it_ends(tmp_path: Path) -> None:
    # Thirty orphans that end at once: leakwidget, their subreaper, collects each, or they stay
    # zombies (a program that leaves one per step would fill the process table).
    started = tmp_path / "started"
    w = subprocess.Popen([*CLI, "run", "--interval", "0.1", "--seconds", "4", "-q", "--", "bash", "-c",
                          f"for i in $(seq 30); do (sleep 0.01 &); done; echo $$ > {started}; sleep 10"])
    try:
        deadline = time.monotonic() + 20
        while not (started.exists() and started.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        program = int(started.read_text())

        def orphans(status: str) -> int:
            count = 0
            for p in psutil.Process(w.pid).children():
                try:  # one collected between the listing and its status is gone: not counted
                    ended = p.status() == psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    continue
                count += p.pid != program and ended == (status == "ended")
            return count

        deadline = time.monotonic() + 2
        while (orphans("running") or orphans("ended")) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert w.poll() is None, "the watch ended before the orphans could be counted"
        assert orphans("ended") == 0
    finally:
        w.wait(timeout=30)


def test_outputs_that_are_a_symlink_or_a_fifo_are_written_through_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "link.json").symlink_to("target.json")
    os.mkfifo(tmp_path / "fifo.csv")
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append((tmp_path / "fifo.csv").read_bytes()))
    reader.start()
    p = leakwidget("run", "--interval", "0.1", "--seconds", "1", "--json", str(tmp_path / "link.json"),
                   "--csv", str(tmp_path / "fifo.csv"), "--", "sleep", "5")
    reader.join(timeout=30)
    # A sleeping program for 1 s: stable, or on a busy machine too few windows to say (2);
    # what is tested is the files, and that writing them was no error (4).
    assert p.returncode in (0, 2), p.stderr
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "fifo.csv").is_fifo()
    assert json.loads((tmp_path / "target.json").read_text())["stopped"] == "seconds"
    assert read and read[0].startswith(b"index,start,end,rss")


def test_an_output_folder_removed_during_the_run_is_one_line_and_exit_4(tmp_path: Path) -> None:
    out, started = tmp_path / "out", tmp_path / "started"
    out.mkdir()
    w = subprocess.Popen([*CLI, "run", "--interval", "0.1", "--seconds", "2", "--json", str(out / "r.json"),
                          "--", sys.executable, "-c",
                          f"import time; open({str(started)!r}, 'w'); time.sleep(5)"],
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:  # the paths have been checked
        time.sleep(0.02)
    shutil.rmtree(out)
    _, err = w.communicate(timeout=30)
    assert w.returncode == 4, err
    assert err.strip().splitlines()[-1] == (
        f"leakwidget: error: cannot write --json {out / 'r.json'}: No such file or directory")
    assert "Traceback" not in err and "(stopped: seconds)" in err  # the verdict was still said


# ------------------------------------------------------------------ bad input: one line, status 4


def one_error_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 4 and len(lines) == 1, p.stderr
    return lines[0]


def test_a_pid_that_does_not_exist() -> None:
    pid = 4_000_000  # above Linux's pid_max
    assert "no process with pid 4000000" in one_error_line(leakwidget("attach", str(pid)))


def test_a_pid_of_another_user(tmp_path: Path) -> None:
    # As user nobody, a process of root's is not ours to read.
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    roots = subprocess.Popen(["sleep", "30"])
    try:
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI,
                            "attach", str(roots.pid)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        roots.kill()
        roots.wait()
    assert "not allowed to read" in one_error_line(p) and "another user" in p.stderr


def test_attach_refuses_a_kernel_thread_and_what_leakwidget_runs_under() -> None:
    assert "process 2 (kthreadd) is a kernel thread: it has no memory of its own to watch" in (
        one_error_line(leakwidget("attach", "2")))
    # init, and this test's process: each one's tree holds leakwidget itself.
    assert "process 1 is init, the system's first process: its tree includes leakwidget itself" in (
        one_error_line(leakwidget("attach", "1")))
    line = one_error_line(leakwidget("attach", str(os.getpid())))
    assert f"process {os.getpid()} is python" in line and "which leakwidget runs under" in line


def test_the_same_file_for_two_outputs_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    line = one_error_line(leakwidget("run", "--json", str(tmp_path / "x"), "--html", str(tmp_path / "x"),
                                     "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"))
    assert "--json and --html name the same file" in line and not marker.exists()
    (tmp_path / "r.json").write_text('{"verdict": {"kind": "stable"}}')
    (tmp_path / "same.json").symlink_to("r.json")
    for html in ("r.json", "same.json"):
        line = one_error_line(leakwidget("report", str(tmp_path / "r.json"), "--html", str(tmp_path / html)))
        assert "RESULT.json and --html name the same file" in line
    assert (tmp_path / "r.json").read_text() == '{"verdict": {"kind": "stable"}}'


def test_a_program_that_is_not_found(tmp_path: Path) -> None:
    line = one_error_line(leakwidget("run", "--", "no-such-program-here"))
    assert line == "leakwidget: error: cannot run no-such-program-here: No such file or directory"


def test_an_unwritable_output_path_refuses_before_the_program_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    line = one_error_line(leakwidget("run", "--json", str(tmp_path / "missing" / "r.json"), "--",
                                     sys.executable, "-c", f"open({str(marker)!r}, 'w')"))
    assert "cannot write --json" in line and "No such file or directory" in line
    assert not marker.exists() and not (tmp_path / "missing").exists()
    line = one_error_line(leakwidget("run", "--html", str(tmp_path), "--", "true"))
    assert "it is a directory" in line


@pytest.mark.parametrize("args, message", [
    (["run", "--seconds", "-1", "--", "true"], "argument --seconds/-t: must be a positive number"),
    (["run", "--max-rss", "lots", "--", "true"], "argument --max-rss: not a size"),
    (["attach", "twelve"], "argument pid: not a whole number"),
    (["watch"], "invalid choice: 'watch'"),
])
def test_wrong_options_print_the_usage_and_exit_4(args: list[str], message: str) -> None:
    p = leakwidget(*args)
    assert p.returncode == 4 and p.stderr.startswith("usage: leakwidget") and message in p.stderr, p.stderr


def test_run_without_a_program() -> None:
    assert "no program to run" in one_error_line(leakwidget("run", "--interval", "0.1"))


# ------------------------------------------------------------------ report, and the console script


def test_report_renders_a_saved_result_and_refuses_what_is_not_one(programs: Path) -> None:
    p = leakwidget("run", "--interval", "0.1", "--seconds", "2", "--json", str(programs / "r.json"), "--",
                   sys.executable, str(programs / "leaky.py"))
    assert p.returncode in (1, 2), p.stderr
    r = leakwidget("report", str(programs / "r.json"), "--html", str(programs / "r.html"))
    assert r.returncode == 0, r.stderr
    page = (programs / "r.html").read_text()
    assert "<svg" in page and "Watched program" in page and "leaky.py" in page
    (programs / "bad.json").write_text("[1, 2]")
    assert "is not a leakwidget result" in one_error_line(
        leakwidget("report", str(programs / "bad.json"), "--html", str(programs / "x.html")))
    assert not (programs / "x.html").exists()


@pytest.fixture(scope="module")
def saved() -> dict:
    import leakwidget

    return json.loads(leakwidget.watch(lambda: None, iterations=20, widget=False).to_json())


@pytest.mark.parametrize("field, value, message", [
    ("verdict", 5, "verdict must be an object, not 5"),
    ("verdict.kind", 5, "verdict.kind must be one of leak, plateau, stable, inconclusive, not 5"),
    ("iterations", "x", "iterations must be a list, not 'x'"),
    ("iterations.0.rss", None, "iterations[0].rss is missing"),
    ("environment", [1], "environment must be an object, not [1]"),
    ("elapsed", "3 s", "elapsed must be a number, not '3 s'"),
    ("iteration_count", "20", "iteration_count must be a whole number, not '20'"),
    ("samples", [[1, 2, 3]], "samples[0] must be a pair of numbers, not [1, 2, 3]"),
    ("stages", [{"kind": "map"}], "stages[0].id is missing"),
    ("attribution", "python", "attribution must be an object, not 'python'"),
    ("config.max_rss", "2GiB", "config.max_rss must be a number, not '2GiB'"),
])
def test_report_names_the_field_a_saved_result_gets_wrong(saved: dict, tmp_path: Path, field: str,
                                                         value: object, message: str) -> None:
    doc = json.loads(json.dumps(saved))
    *parents, last = field.split(".")
    where = doc
    for key in parents:
        where = where[int(key)] if isinstance(where, list) else where[key]
    if value is None:
        del where[last]
    else:
        where[last] = value
    (tmp_path / "r.json").write_text(json.dumps(doc))
    line = one_error_line(leakwidget("report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")))
    assert line.endswith(f"is not a leakwidget result (saved with --json or result.to_json()): {message}")
    assert not (tmp_path / "r.html").exists()


def test_the_console_script_is_installed_with_help() -> None:
    script = Path(sys.executable).parent / "leakwidget"
    p = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    for word in ("run", "attach", "report", "Exit status: 0 stable or plateau, 1 leak, 2 inconclusive"):
        assert word in p.stdout
    p = subprocess.run([str(script), "run", "--help"], capture_output=True, text=True, timeout=60)
    assert "--interval S" in p.stdout and "--max-rss SIZE" in p.stdout and "--html PATH" in p.stdout


def on_a_terminal(*args: str) -> tuple[int, str]:
    """leakwidget with a (pseudo-)terminal for stdin, stdout and stderr: its status and screen."""
    import pty

    master, slave = pty.openpty()
    w = subprocess.Popen([*CLI, *args], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: leakwidget (and its program) closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    w.wait(timeout=30)
    os.close(master)
    return w.returncode, b"".join(chunks).decode(errors="replace")


def test_in_a_terminal_the_programs_output_is_printed_above_the_live_line(tmp_path: Path) -> None:
    # A program that prints lines and redraws a progress line of its own: every line arrives
    # once, in order, with its colours, before the report. Each line in one write: a line
    # written in two (print("\\nlast line") flushes before its newline) is shown meanwhile
    # as the unfinished line in the live part, and counted again at each redraw.
    prog = tmp_path / "chatty.py"
    prog.write_text(textwrap.dedent("""
        import sys, time
        print("\\033[32mfirst line\\033[0m", flush=True)
        for i in range(20):
            sys.stderr.write(f"\\rstep {i + 1}/20"); sys.stderr.flush()
            time.sleep(0.05)
        sys.stderr.write("\\n"); sys.stderr.flush()
        print("last line", flush=True)
    """))
    status, screen = on_a_terminal("run", "--interval", "0.1", "--", sys.executable, str(prog))
    assert status in (0, 1, 2), screen
    first, last, report = screen.find("first line"), screen.find("last line"), screen.find("leakwidget: ")
    assert -1 < first < last < report, screen
    assert screen.count("first line") == 1 and screen.count("last line") == 1
    assert "step 20/20" in screen and "\x1b[32mfirst line" in screen


def test_in_a_terminal_a_program_that_is_not_found_is_one_line_too() -> None:
    status, screen = on_a_terminal("run", "--", "no-such-program-here")
    assert status == 4
    assert screen.strip() == "leakwidget: error: cannot run no-such-program-here: No such file or directory"


def test_the_version_is_one_number_for_the_command_the_package_and_its_metadata() -> None:
    from importlib.metadata import version

    import leakwidget

    script = Path(sys.executable).parent / "leakwidget"
    p = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert p.stdout.split() == ["leakwidget", leakwidget.__version__]
    assert version("leakwidget") == leakwidget.__version__
    changelog = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    assert f"## [{leakwidget.__version__}]" in changelog
