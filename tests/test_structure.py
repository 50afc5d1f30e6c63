"""The package's layout is its design: floors whose imports point one way, and rooms small enough
to read. Read from the source with ``ast`` (every import counts, also inside functions and under
``TYPE_CHECKING``), so nothing has to be imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "leakwidget"
JUPYTER = ("IPython", "ipykernel", "ipywidgets", "bqplot", "anywidget", "comm", "jupyter_client")
# What each floor may not import: the engine and the stages know nothing of notebooks; the
# static report knows nothing of widgets; the stages are beneath the engine. The report sits
# beside the engine: the engine's results draw themselves with its renderers (imported where
# used), and it needs of the engine only the words below, reading results through Protocols.
FORBIDDEN = {
    "leakwidget.stages": ("leakwidget.engine", "leakwidget.report", "leakwidget.notebook", *JUPYTER),
    "leakwidget.engine": ("leakwidget.notebook", *JUPYTER),
    "leakwidget.report": ("leakwidget.notebook", *JUPYTER),
}
# The engine's words (kinds: the verdict and stop words, declared once), units and verdicts.
REPORT_READS = ("leakwidget.engine.kinds", "leakwidget.engine.units", "leakwidget.engine.verdict")
MAX_FUNCTION_LINES = 100
MAX_CLASS_LINES = 250
# A stage's states: the rules that compare them live in leakwidget/stages/ only (stage.py).
STAGE_STATE_WORDS = {"on", "serial", "off"}


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _stem(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` reads from, resolved."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module name this module imports (package modules resolved, others as written)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            stem = _stem(name, path, node)
            found.add(stem)
            found.update(f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in modules)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        deps = {d for d in _imports(name, path, modules) if d in modules and d != name}
        # A package and its own submodules may import each other's names (re-exports).
        graph[name] = {d for d in deps if not (d.startswith(name + ".") or name.startswith(d + "."))}
    return graph


def test_there_is_no_import_cycle_in_the_package() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("floor", sorted(FORBIDDEN))
def test_a_floor_imports_nothing_above_it(floor: str) -> None:
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if name != floor and not name.startswith(floor + "."):
            continue
        for imported in _imports(name, path, modules):
            if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN[floor]):
                bad.append(f"{name} imports {imported}")
    assert not bad, "\n".join(bad)


def test_the_engine_floor_exists_and_is_imported_by_the_notebook_floor() -> None:
    graph = _graph()
    assert any(n.startswith("leakwidget.engine.") for n in graph)
    notebook_deps = {d for n, deps in graph.items() if n.startswith("leakwidget.notebook") for d in deps}
    assert any(d.startswith("leakwidget.engine") for d in notebook_deps)


def test_no_function_or_class_is_too_long_to_read() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            size = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} def {node.name}: {size} lines")
            elif isinstance(node, ast.ClassDef) and size > MAX_CLASS_LINES:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} class {node.name}: {size} lines")
    assert not long, "\n".join(long)


def _words(node: ast.AST) -> set[str]:
    """The string constants a comparison operand is, or lists (``x in ("on", "off")``)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def test_stage_states_are_compared_only_in_the_stages_package() -> None:
    stages = PACKAGE / "stages"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(stages):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                words = set().union(*map(_words, [node.left, *node.comparators]))
            elif isinstance(node, ast.MatchValue):
                words = _words(node.value)
            else:
                continue
            if words & STAGE_STATE_WORDS:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} compares with "
                             f"{sorted(words & STAGE_STATE_WORDS)}")
    assert not found, "stage states are compared outside leakwidget/stages/ (ask the Stage or the Toggles):\n" + "\n".join(found)



def test_the_report_needs_of_the_engine_only_its_words() -> None:
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith("leakwidget.report"):
            continue
        for imported in _imports(name, path, modules):
            if imported.startswith("leakwidget.engine") and not any(
                    imported == w or imported.startswith(w + ".") for w in REPORT_READS):
                bad.append(f"{name} imports {imported}")
    assert not bad, "\n".join(bad)


def test_nothing_registers_itself_by_being_imported() -> None:
    """No module fills another module's attributes or tables when it is imported: what is used
    is imported where it is used (renderers too)."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases = set()  # names this module binds to modules of the package
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    target = a.name if isinstance(node, ast.Import) else f"{_stem(name, path, node)}.{a.name}"
                    if target in modules:
                        aliases.add((a.asname or a.name).split(".")[0])
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                root = target
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if root is not target and isinstance(root, ast.Name) and root.id in aliases:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} writes into {root.id}")
    assert not found, "\n".join(found)
