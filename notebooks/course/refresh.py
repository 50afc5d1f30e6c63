"""Execute the course's notebooks top to bottom in a fresh kernel and write them back with their
outputs (the text reports and static charts GitHub shows), without widget views or widget state.

A result's chart is a PNG drawn with matplotlib in the kernel (this Python's environment: the
``charts`` extra, which ``make install`` puts in .venv). Without it every chart would be
committed as a line saying it is missing, so nothing is run then, and a lesson whose outputs
still say so is not written.

    python notebooks/course/refresh.py                 # every lesson
    python notebooks/course/refresh.py 03_native_leak  # one
    python notebooks/course/refresh.py notebooks/allocators.ipynb
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from leakwidget.report.figure import NO_CHART

HERE = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_widgets(nb: nbformat.NotebookNode) -> None:
    """Widget views render nothing without their kernel; the report under them stays."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in cell.outputs
                        if not (o.output_type == "display_data" and WIDGET_VIEW in o.get("data", {}))]
        for out in cell.outputs:
            out.get("data", {}).pop(WIDGET_VIEW, None)
    nb.metadata.pop("widgets", None)


def missing_charts(nb: nbformat.NotebookNode) -> list[int]:
    """The code cells whose outputs say a chart could not be drawn."""
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and any(NO_CHART in str(out) for out in cell.get("outputs", []))]


def refresh(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    client = NotebookClient(nb, kernel_name="python3", timeout=600, startup_timeout=120,
                            store_widget_state=False,
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()  # raises on the first failing cell: nothing is written then
    strip_widgets(nb)
    if missing := missing_charts(nb):
        raise SystemExit(f"{path.name}: cells {missing} have no chart (no matplotlib in the kernel): "
                         "pip install -e '.[charts]'; nothing written")
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return time.monotonic() - start


def main(names: list[str]) -> None:
    try:
        import matplotlib  # noqa: F401  (the kernel runs this same Python)
    except ImportError:
        raise SystemExit("the course's charts need matplotlib: pip install -e '.[charts]'") from None
    # The kernel imports this working tree's leakwidget, installed or not.
    root = str(HERE.parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    paths = sorted(HERE.glob("*.ipynb"))
    if names:
        # A lesson's name, or the path of another notebook committed with its outputs
        # (notebooks/allocators.ipynb).
        paths = [p for p in paths if p.stem in names or p.name in names]
        paths += [Path(n).resolve() for n in names if n.endswith(".ipynb") and Path(n).is_file()]
    for path in paths:
        print(f"{path.name}: {refresh(path):.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
