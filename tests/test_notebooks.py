"""The notebooks run, and say only what is true of what runs.

Each notebook's markdown promises outcomes in bold right after a ``%%leakwatch ... -o NAME``
cell: ``**Verdict: leak**``, ``**Verdict: not leak**``, ``**Attribution: allocator**``,
``**Culprit: map**``, and for a comparison ``**Answer: fix**`` (its answer's kind) and
``**Best: not glibc**`` (a variant other than glibc is named; ``**Best: none**``: none is). A
leak verdict whose growth ``malloc_trim`` hands back is ``retention``, not ``leak``, as the
result's headline says ("Growing, but not a leak of your code"). These tests execute the
notebook headlessly through a real kernel
(nbclient), read the named results back from that kernel, and check every promise. The
quickstart and the pitfalls notebook are committed without outputs; the allocators notebook and
the course (``notebooks/course/``, one lesson per source document) are committed with theirs, so
GitHub shows the reports and charts: the tests check those outputs are there and free of errors,
and still execute every notebook afresh. Nothing here is compared with stored output.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from lazy import lazy

from leakwidget.notebook.magics import parse

nbformat = lazy("nbformat")  # 142,000 objects: imported by the first test that reads a notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
QUICKSTART = NOTEBOOKS / "quickstart.ipynb"
PITFALLS = NOTEBOOKS / "tfdata_pitfalls.ipynb"
# Committed with its outputs (the comparison's table and chart read on GitHub); run here as well.
ALLOCATORS = NOTEBOOKS / "allocators.ipynb"
COURSE_DIR = NOTEBOOKS / "course"
COURSE_README = COURSE_DIR / "README.md"
# One lesson per source document (docs/course.md); committed with their outputs.
COURSE = [
    COURSE_DIR / "01_pipeline_bisect.ipynb",
    COURSE_DIR / "02_py_function_parallel.ipynb",
    COURSE_DIR / "03_native_leak.ipynb",
    COURSE_DIR / "04_load_all_vs_stream.ipynb",
    COURSE_DIR / "05_buffers_fill.ipynb",
    COURSE_DIR / "06_copy_on_write.ipynb",
]
ALL = [QUICKSTART, PITFALLS, ALLOCATORS, *COURSE]
WITHOUT_OUTPUTS = [QUICKSTART, PITFALLS]
WITH_OUTPUTS = [ALLOCATORS, *COURSE]
MAX_COMMITTED_BYTES = 1_000_000  # static reports and SVG charts, no widget state


def notebook_id(path: Path) -> str:
    """``quickstart``, ``course/01_pipeline_bisect``: ``-k course`` selects the lessons."""
    return path.relative_to(NOTEBOOKS).with_suffix("").as_posix()


PROMISE = re.compile(
    r"\*\*(Verdict|Attribution|Culprit|Best|Answer|Copy-on-write): (not )?([a-z_-]+(?: alone)?)\*\*"
)
KINDS = {
    "verdict": {"leak", "plateau", "stable", "inconclusive", "retention"},
    "attribution": {"python", "native", "allocator", "copy-on-write", "none"},
    "answer": {"fix", "nothing-to-fix", "no-variant-helps", "no-answer"},
    # **Copy-on-write: yes** / **no**: forked workers copying what they share are (not) the
    # story of the growth (``result.copying``).
    "copy-on-write": {"yes", "no"},
}
MIN_ITERATIONS = 50  # every watch in the notebooks runs hundreds of iterations when healthy
PROBE_TAG = "LEAKWIDGET-PROBE "
# Reads the named results back from the kernel that ran the notebook.
PROBE = """
import json as _json

def _leakwidget_probe(obj):
    out = {}
    verdict = getattr(obj, "verdict", None)
    if verdict is not None:
        # A leak verdict whose growth the allocator keeps reads "Growing, but not a leak of
        # your code" in the result's headline: that is what a promise about it holds to.
        out["verdict"] = "retention" if getattr(obj, "retention", False) else verdict.kind
        out["summary"] = verdict.summary
        out["iterations"] = len(getattr(obj, "iterations", ()))
        out["stopped"] = getattr(obj, "stopped", None)
        out["error"] = repr(getattr(obj, "error", None))
    copying = getattr(obj, "copying", None)
    if isinstance(copying, bool):
        out["copy-on-write"] = "yes" if copying else "no"
        # Each forked worker's numbers, for the failure message (MiB; no percent sign in this
        # code: PROBE is formatted with the percent operator).
        found = [c.copying.to_dict() for c in getattr(obj, "children", ()) if c.copying is not None]
        mib = lambda v: "?" if v is None else f"{v / 2**20:.2f}"
        out["copy-on-write_summary"] = "; ".join(
            f"worker {w['number']}: shared fell {mib(w['shared_fall'])} MiB (at 99 in 100 at "
            f"least {mib(w['fall_low'])}), private grew {mib(w['private_growth'])}, faulted "
            f"{mib(w['faulted'])}, copying {w['copying']}" for w in found) or "no worker's readings"
    attribution = getattr(obj, "attribution", None)
    if attribution is not None:
        out["attribution"] = attribution.kind
        out["attribution_summary"] = attribution.summary
    if hasattr(obj, "answer"):  # a comparison: its answer, and the variant it names ("none")
        out["answer"] = obj.answer.kind
        out["best"] = obj.best or "none"
        out["summary"] = obj.summary
    culprits = getattr(obj, "culprits", None)
    if culprits is not None:
        out["culprit"] = [stage.kind for stage in culprits]
        out["summary"] = getattr(obj, "summary", "")
    return out

print(%r + _json.dumps({name: _leakwidget_probe(globals()[name]) for name in %r}))
"""


@dataclass(frozen=True)
class Promise:
    result: str  # the -o variable the promise is about
    what: str  # verdict | attribution | culprit
    value: str
    negated: bool
    cell: int

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.what} of {self.result} is {'not ' if self.negated else ''}{self.value}"


@dataclass(frozen=True)
class WatchCell:
    index: int
    output: str | None
    seconds: float | None
    bisect: bool


def watch_cells(nb) -> list[WatchCell]:
    cells = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith("%%leakwatch"):
            first_line = cell.source.splitlines()[0][len("%%leakwatch") :]
            args, _setup = parse(first_line)
            cells.append(WatchCell(i, args.output, args.seconds, args.bisect))
    return cells


def promises(nb) -> list[Promise]:
    """Every bold promise, tied to the -o result of the nearest %%leakwatch cell above it."""
    found: list[Promise] = []
    current: str | None = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith("%%leakwatch"):
            args, _setup = parse(cell.source.splitlines()[0][len("%%leakwatch") :])
            current = args.output
        elif cell.cell_type == "markdown":
            for m in PROMISE.finditer(cell.source):
                what, negated, value = m.group(1).lower(), bool(m.group(2)), m.group(3)
                if current is None:
                    raise AssertionError(
                        f"cell {i}: promise {m.group(0)} before any %%leakwatch -o NAME cell"
                    )
                if what in KINDS and value not in KINDS[what]:
                    raise AssertionError(
                        f"cell {i}: {m.group(0)}: {value!r} is not one of {sorted(KINDS[what])}"
                    )
                found.append(Promise(current, what, value, negated, i))
    return found


def execute(path: Path, workdir: Path, names: list[str]) -> dict:
    """Run the notebook (plus a probe cell) in a fresh kernel; return the probed results."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE % (PROBE_TAG, names)))
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,
        startup_timeout=120,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()  # raises CellExecutionError, with the traceback, if any cell fails
    text = "".join(
        out.get("text", "") for out in nb.cells[-1].outputs if out.get("name") == "stdout"
    )
    line = next((ln for ln in text.splitlines() if ln.startswith(PROBE_TAG)), None)
    assert line is not None, f"probe printed nothing: {nb.cells[-1].outputs}"
    return json.loads(line[len(PROBE_TAG) :])


def check(promised: list[Promise], probed: dict) -> list[str]:
    failures = []
    for name, result in sorted(probed.items()):
        # A run that never got going "is not a leak" vacuously: that is a failure too.
        if "iterations" in result and result["iterations"] < MIN_ITERATIONS:
            failures.append(
                f"{name}: only {result['iterations']} iterations ran (stopped: {result.get('stopped')},"
                f" error: {result.get('error')}; {result.get('summary', '')})"
            )
    for p in promised:
        got = probed.get(p.result, {}).get(p.what)
        if got is None:
            failures.append(f"{p}: the result has no {p.what}")
            continue
        if p.what == "culprit":
            # **Culprit: none**: the bisection blamed no stage (allocator retention, a plateau
            # too small to bisect, no leak). **Culprit: map alone**: map and nothing else;
            # **Culprit: map**: map, alone or as part of a combination.
            if p.value == "none":
                holds = not got
            elif p.value.endswith(" alone"):
                holds = got == [p.value.removesuffix(" alone")]
            else:
                holds = p.value in got
        elif p.what == "best" and p.negated:
            # **Best: not glibc**: a variant is named, and it is not glibc ("none" is no best).
            holds = got not in ("none", p.value)
        else:
            holds = got == p.value
        if p.negated and p.what != "best":
            holds = not holds
        if not holds:
            detail = probed[p.result].get(f"{p.what}_summary") or probed[p.result].get(
                "summary", ""
            )
            failures.append(f"{p}: got {got!r} ({detail})")
    return failures


@pytest.fixture
def kernel_env(monkeypatch):
    # The kernel nbclient starts must import this working tree's leakwidget, installed or not.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


# ---------------------------------------------------------------------------------------------
# Cheap checks: no kernel


@pytest.mark.parametrize("path", WITHOUT_OUTPUTS, ids=notebook_id)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count)
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"


@pytest.mark.parametrize("path", ALL, ids=notebook_id)
def test_every_watch_keeps_its_result_and_the_markdown_explains_it(path):
    nb = nbformat.read(path, as_version=4)
    watches = watch_cells(nb)
    assert watches, f"{path.name} has no %%leakwatch cell"
    promised = promises(nb)
    explained = {p.result for p in promised}
    for w in watches:
        assert w.output, (
            f"{path.name} cell {w.index}: use -o NAME so the test can check the verdict"
        )
        assert w.output in explained, (
            f"{path.name} cell {w.index}: no **Verdict/Attribution/Culprit** promise for {w.output}"
        )


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# A measured quantity written into prose ("+32 KiB/iteration", "in ~2.1 h"): the course's numbers
# come from the run (printed by a code cell, or read off the report above), never from memory.
MEASURED = re.compile(
    r"[+−-]?\d[\d.,]*\s*(?:B|KiB|MiB|GiB)\s*(?:/\s*it|per iteration)|(?:in|after) ~\d"
)


@pytest.mark.parametrize("path", WITH_OUTPUTS, ids=notebook_id)
def test_notebook_is_committed_with_its_outputs_and_no_errors(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    counts = [c.execution_count for _, c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts}: execute it top to bottom in one kernel and "
        "commit the result (notebooks/course/refresh.py)"
    )
    for i, c in code:
        errors = [o for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{path.name} cell {i}: {errors[0].ename}: {errors[0].evalue}"
        assert not any(WIDGET_VIEW in o.get("data", {}) for o in c.outputs), (
            f"{path.name} cell {i}: a widget view is committed (it shows nothing without the kernel)"
        )
    for w in watch_cells(nb):
        # A quiet watch (-q -o NAME) is shown by a later cell that names its result.
        quiet = " -q" in nb.cells[w.index].source.splitlines()[0]
        shows = [w.index] + [j for j, c in code if quiet and j > w.index and w.output
                             and re.search(rf"\b{re.escape(w.output)}\b", c.source)]
        shown = [o for j in shows[:2] for o in nb.cells[j].outputs
                 if o.output_type in ("display_data", "execute_result", "stream")]
        assert shown, f"{path.name} cell {w.index}: the watch's report is not committed"
    assert "widgets" not in nb.metadata, f"{path.name}: widget state is committed"
    size = path.stat().st_size
    assert size < MAX_COMMITTED_BYTES, f"{path.name}: {size:,} bytes committed"


@pytest.mark.parametrize("path", COURSE, ids=notebook_id)
def test_every_lesson_names_its_source_asks_for_a_prediction_and_is_bounded(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# Lesson"), path.name
    assert "*Source" in first.source, f"{path.name}: name the source document in the first cell"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source.strip() == "%load_ext leakwidget", path.name
    previous = -1
    for w in watch_cells(nb):
        between = nb.cells[previous + 1 : w.index]
        assert any(
            c.cell_type == "markdown" and "Predict before you run" in c.source for c in between
        ), f"{path.name} cell {w.index}: ask the learner to predict before this run"
        previous = w.index
        args, _setup = parse(nb.cells[w.index].source.splitlines()[0][len("%%leakwatch") :])
        assert args.seconds is not None or args.iterations is not None, (
            f"{path.name} cell {w.index}: give the run a budget (-t or -n): CI runs every lesson"
        )
    for i, c in enumerate(nb.cells):
        if c.cell_type == "markdown":
            m = MEASURED.search(c.source)
            assert m is None, f"{path.name} cell {i}: {m.group(0)!r}: print measured numbers from the run"


def test_the_course_is_indexed_and_linked_from_the_quickstart_and_the_readme():
    index = COURSE_README.read_text(encoding="utf-8")
    for path in COURSE:
        assert f"]({path.name})" in index, f"{COURSE_README.name} does not link {path.name}"
    quickstart = nbformat.read(QUICKSTART, as_version=4)
    assert "](course/README.md)" in quickstart.cells[-1].source, "the quickstart ends with the course"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "](notebooks/course/README.md)" in readme, "README.md links the course"


def test_a_measured_number_in_prose_is_caught():
    assert MEASURED.search("Leak: +32 KiB/iteration")
    assert MEASURED.search("grows 1.5 MiB per iteration")
    assert MEASURED.search("out of memory in ~2.1 h")
    assert not MEASURED.search("a 4 MiB temporary per call; 80 elements of 512 KiB")


def test_pitfall_runs_are_short():
    for w in watch_cells(nbformat.read(PITFALLS, as_version=4)):
        assert w.seconds is not None and w.seconds <= 10, f"cell {w.index}: give it -t 10 or less"


def test_quickstart_load_ext_comes_first():
    nb = nbformat.read(QUICKSTART, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source.strip() == "%load_ext leakwidget"
    assert any(w.bisect for w in watch_cells(nb)), "the quickstart shows --bisect"


def test_promises_are_checked_against_results():
    # The checker itself: a broken promise is reported, a kept one is not.
    promised = [
        Promise("a", "verdict", "leak", False, 1),
        Promise("a", "attribution", "allocator", False, 1),
        Promise("b", "verdict", "leak", True, 2),
        Promise("c", "culprit", "map", False, 3),
    ]
    kept = {
        "a": {"verdict": "leak", "attribution": "allocator", "iterations": 400},
        "b": {"verdict": "plateau"},
        "c": {"culprit": ["map"]},
    }
    assert check(promised, kept) == []
    broken = {
        "a": {"verdict": "stable", "attribution": "allocator"},
        "b": {"verdict": "leak"},
        "c": {"culprit": []},
    }
    assert len(check(promised, broken)) == 3
    # "not map alone" holds for a combination that includes map, and for no culprit at all.
    alone = [Promise("d", "culprit", "map alone", True, 4)]
    assert check(alone, {"d": {"culprit": ["interleave", "map"]}}) == []
    assert check(alone, {"d": {"culprit": []}}) == []
    assert len(check(alone, {"d": {"culprit": ["map"]}})) == 1
    assert [p.value for p in promises(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%%leakwatch --bisect -o d\nx"),
        nbformat.v4.new_markdown_cell("**Culprit: not map alone**"),
    ]))] == ["map alone"]
    # A comparison: "not glibc" needs a variant named; "none" that none is.
    best = [Promise("e", "best", "glibc", True, 5), Promise("e", "answer", "fix", False, 5)]
    assert check(best, {"e": {"best": "jemalloc", "answer": "fix"}}) == []
    assert len(check(best, {"e": {"best": "none", "answer": "no-variant-helps"}})) == 2
    assert check([Promise("f", "best", "none", False, 6)], {"f": {"best": "none"}}) == []
    # Copy-on-write: a run whose workers copy, and one whose workers do not.
    cow = [Promise("g", "copy-on-write", "yes", False, 7), Promise("h", "copy-on-write", "no", False, 8)]
    assert check(cow, {"g": {"copy-on-write": "yes"}, "h": {"copy-on-write": "no"}}) == []
    assert len(check(cow, {"g": {"copy-on-write": "no"}, "h": {"copy-on-write": "yes"}})) == 2
    assert [(p.what, p.value) for p in promises(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%%leakwatch -n 5 -o g\nx"),
        nbformat.v4.new_markdown_cell("**Copy-on-write: yes**"),
    ]))] == [("copy-on-write", "yes")]
    # A leak the allocator keeps is read back as "retention": "not leak" holds, "leak" does not.
    ns: dict = {}
    exec(PROBE.split("print(")[0], ns)
    from types import SimpleNamespace

    verdict = SimpleNamespace(kind="leak", summary="Leak: +29 KiB per iteration")
    ran = {"verdict": verdict, "iterations": range(800), "stopped": "seconds", "error": None}
    kept = ns["_leakwidget_probe"](SimpleNamespace(**ran, retention=True))
    grew = ns["_leakwidget_probe"](SimpleNamespace(**ran, retention=False))
    assert (kept["verdict"], grew["verdict"]) == ("retention", "leak")
    assert check([Promise("k", "verdict", "leak", True, 9)], {"k": kept}) == []
    assert len(check([Promise("k", "verdict", "leak", False, 9)], {"k": kept})) == 1
    # "not leak" from a run that never finished an iteration is no evidence.
    assert check(
        [Promise("b", "verdict", "leak", True, 2)],
        {"b": {"verdict": "inconclusive", "iterations": 0}},
    )


# ---------------------------------------------------------------------------------------------
# Executing the notebooks


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", ALL, ids=notebook_id)
def test_notebook_runs_and_its_verdicts_are_true(path, tmp_path, kernel_env):
    nb = nbformat.read(path, as_version=4)
    promised = promises(nb)
    names = sorted({p.result for p in promised})
    probed = execute(path, tmp_path, names)
    failures = check(promised, probed)
    assert not failures, f"{path.name}: the markdown promises what did not happen:\n" + "\n".join(
        failures
    )


def test_refreshing_the_course_refuses_outputs_without_their_charts():
    # refresh.py writes nothing when the kernel could not draw a chart (no matplotlib): the
    # committed lessons would show "No chart: ..." where GitHub should show the picture.
    import importlib.util

    from leakwidget.report.figure import NO_CHART

    spec = importlib.util.spec_from_file_location("refresh", REPO / "notebooks/course/refresh.py")
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(NO_CHART),  # prose may quote it
        nbformat.v4.new_code_cell("display(result)", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/plain": "Leak: ...", "image/png": "iVBORw0KGgo="})]),
        nbformat.v4.new_code_cell("display(result)", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/plain": f"Leak: ...\n{NO_CHART}"})]),
    ])
    assert refresh.missing_charts(nb) == [2]
