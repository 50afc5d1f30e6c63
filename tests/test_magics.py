"""%%leakwatch and %leakwatch in a real IPython shell."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

from leakwidget.notebook.magics import build_parser, split_line


def shell_instance():
    """The process's one IPython shell: the one other test modules made (a plain
    InteractiveShell, a singleton), else a terminal shell started here."""
    from IPython import get_ipython
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        return InteractiveShell.instance()
    return start_ipython() or get_ipython()


@pytest.fixture
def ip():
    shell = shell_instance()
    shell.run_line_magic("load_ext", "leakwidget")
    yield shell
    shell.run_line_magic("unload_ext", "leakwidget")
    for name in ("r", "keep", "counter", "r2"):
        shell.user_ns.pop(name, None)


def run(ip, cell):
    res = ip.run_cell(cell)
    return res


def test_cell_magic_runs_the_body_repeatedly_after_the_setup_statement(ip, capsys):
    res = run(ip, "%%leakwatch -n 40 --no-widget -o r keep = []; counter = [0]\n"
                  "keep.append(b'x' * 1_000_000); counter[0] += 1\n")
    assert res.error_in_exec is None and res.error_before_exec is None
    r = ip.user_ns["r"]
    assert ip.user_ns["counter"] == [40]
    assert r.iteration_count == 40 and r.stopped == "iterations"
    assert r.verdict.kind == "leak"
    out = capsys.readouterr().out
    assert "Leak:" in out


def test_the_progress_line_is_shown_but_not_kept_in_ipythons_record_of_the_cells_output(ip, capsys):
    # IPython 9 keeps every write a cell makes to sys.stdout (HistoryManager.outputs) for the
    # kernel's life: the progress line, rewritten twice a second, would be memory of the tool's
    # growing under the user's step. It is shown; what the user's code prints is still recorded.
    ip.history_manager.outputs.clear()  # what earlier tests' cells printed in this shared shell
    run(ip, "%%leakwatch -t 1.5 --no-widget -o r print('the setup ran')\nsum(range(100))\n")
    shown = capsys.readouterr().out
    assert "[leakwatch] starting" in shown and " iterations, " in shown
    recorded = "".join("".join(o.bundle.get("stream", ())) for outputs in
                       ip.history_manager.outputs.values() for o in outputs)
    assert "the setup ran" in recorded
    assert "[leakwatch]" not in recorded


def test_line_magic_repeats_a_statement(ip):
    ip.user_ns["counter"] = [0]
    res = run(ip, "%leakwatch -n 12 -q -o r counter[0] += 1")
    assert res.error_in_exec is None
    assert ip.user_ns["counter"] == [12]
    assert ip.user_ns["r"].iteration_count == 12


def test_quiet_prints_nothing(ip, capsys):
    run(ip, "%%leakwatch -n 5 -q -o r\npass\n")
    assert capsys.readouterr().out == ""
    assert ip.user_ns["r"].iteration_count == 5


@pytest.mark.parametrize(
    "line",
    [
        "--bogus",
        "-n 0",
        "-n many",
        "-t -5",
        "--max-rss lots",
        "--warmup -1",
        "-o 3x",
        "--bisect --off map",
        "--off ,",
    ],
)
def test_bad_options_raise_usage_error_with_usage_and_run_nothing(ip, line):
    ip.user_ns["counter"] = [0]
    res = run(ip, f"%%leakwatch {line}\ncounter[0] += 1\n")
    assert isinstance(res.error_in_exec, UsageError), res
    assert "usage: %%leakwatch" in str(res.error_in_exec)
    assert ip.user_ns["counter"] == [0]


def test_line_magic_without_a_statement_is_a_usage_error(ip):
    res = run(ip, "%leakwatch -n 3")
    assert isinstance(res.error_in_exec, UsageError)


def test_exact_peaks_is_opt_in(ip):
    def mark() -> int:
        with open("/proc/self/status") as f:
            return int(f.read().split("VmHWM:")[1].split()[0]) * 1024

    run(ip, "len(b'x' * (400 * 2**20))")  # the process's peak is now far above its RSS
    before = mark()
    run(ip, "%%leakwatch -n 5 -q -o r\npass\n")
    assert not ip.user_ns["r"].spec.exact_peaks and mark() >= before
    run(ip, "%%leakwatch -n 5 -q --exact-peaks -o r\npass\n")
    assert ip.user_ns["r"].spec.exact_peaks and mark() < before - 200 * 2**20


def test_help_lists_every_option(ip):
    doc = ip.find_cell_magic("leakwatch").__doc__
    for action in build_parser()._actions:
        for opt in action.option_strings:
            assert opt in doc


def test_exception_in_the_cell_shows_traceback_and_keeps_partial_result(ip, capsys):
    res = run(ip, "%%leakwatch -n 50 --no-widget -o r keep = []\n"
                  "keep.append(1)\n"
                  "if len(keep) == 9: raise RuntimeError('cell broke')\n")
    captured = capsys.readouterr()
    r = ip.user_ns["r"]
    assert r.stopped == "error" and r.error_iteration == 8 and r.iteration_count == 8
    text = captured.out + captured.err
    assert "cell broke" in text and "iteration 8" in text
    assert res.error_in_exec is None  # the run ended cleanly, with its result


def test_exception_in_the_setup_statement_is_reported_as_such(ip, capsys):
    ip.user_ns["counter"] = [0]
    run(ip, "%%leakwatch -n 5 --no-widget -o r 1 / 0\ncounter[0] += 1\n")
    captured = capsys.readouterr()
    r = ip.user_ns["r"]
    assert r.stopped == "error" and r.error_iteration is None
    assert isinstance(r.error, ZeroDivisionError)
    assert "setup statement" in captured.err
    assert ip.user_ns["counter"] == [0]


def test_split_line_keeps_the_setup_statement_verbatim():
    tokens, rest = split_line("-n 5 --max-rss=2GiB -t3 it = iter(ds.map(lambda x: x * 2))  # hi")
    assert tokens == ["-n", "5", "--max-rss=2GiB", "-t3"]
    assert rest == "it = iter(ds.map(lambda x: x * 2))  # hi"
    assert split_line("-- -x = 1") == ([], "-x = 1")


def test_unload_removes_the_magics():
    shell = shell_instance()
    shell.run_line_magic("load_ext", "leakwidget")
    assert shell.find_cell_magic("leakwatch") is not None
    shell.run_line_magic("unload_ext", "leakwidget")
    assert shell.find_cell_magic("leakwatch") is None
    assert shell.find_line_magic("leakwatch") is None
    shell.run_line_magic("load_ext", "leakwidget")  # and it loads again
    assert shell.find_cell_magic("leakwatch") is not None
    shell.run_line_magic("unload_ext", "leakwidget")
