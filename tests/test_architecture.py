"""The layers of docs/ARCHITECTURE.md, checked on the source: imports point down, no cycles.

Every import counts, including the ones inside functions (a lazy import is still a dependency;
it only moves the moment the cycle bites). A new top-level module or subpackage must be given a
layer here and in docs/ARCHITECTURE.md, or this test fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mlbaseline"

# unit → layer; a unit may import units of its own layer or below, never above
LAYERS = {
    "__main__": 3,
    "cli": 3,
    "runners": 2,
    "measure": 1,
    "workloads": 1,
    "envinfo": 1,
    "subset": 1,
    "report": 1,
    "comparison": 1,
    "history": 1,
    "api": 2,
    "": 0,  # the package root: name and version
    "errors": 0,
    "progress": 0,
    "formatting": 0,
    "stats": 0,
    "config": 0,
    "config_build": 0,
    "config_cost": 0,
    "yamlread": 0,
    "results": 0,
    "safewrite": 0,
    "stopping": 0,
    "folderlock": 0,
    "scratch": 0,
    "documents": 0,
    "redact": 0,
}
# within layer 1, only these edges between units (docs/ARCHITECTURE.md's "may import" column)
LAYER1_EDGES = {
    "workloads": {"measure"},
    "envinfo": {"measure"},
    "report": {"comparison", "subset"},
    "history": {"comparison"},
}
# what DESIGN.md asks to stay free of torch: statistics, results and the report never measure
NO_TORCH = (
    "stats",
    "results",
    "documents",
    "report",
    "formatting",
    "comparison",
    "config",
    "config_build",
    "config_cost",
    "errors",
    "redact",
)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return ""
    head = parts[0]
    # comparison may be a module or a package; either way one unit
    return head


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # `from mlbaseline import stats` imports the module mlbaseline.stats
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _graph() -> tuple[dict[str, set[str]], dict[str, Path]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        deps = {d for d in _imports(path, module) if d in files and d != module}
        graph[module] = deps
    return graph, files


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer() -> None:
    graph, _ = _graph()
    unknown = sorted({_unit(m) for m in graph} - set(LAYERS))
    assert not unknown, f"give these a layer in docs/ARCHITECTURE.md and here: {unknown}"


def test_no_import_cycle_between_modules() -> None:
    graph, _ = _graph()
    assert _cycles(graph) == []


def test_no_import_cycle_between_units() -> None:
    graph, _ = _graph()
    units: dict[str, set[str]] = {}
    for module, deps in graph.items():
        u = _unit(module)
        units.setdefault(u, set()).update(_unit(d) for d in deps if _unit(d) != u)
    # the package root only carries the name and version: it is imported by all, imports none
    assert _cycles(units) == []


def test_imports_point_down() -> None:
    graph, _ = _graph()
    upward = [
        f"{m} → {d}"
        for m, deps in graph.items()
        for d in deps
        if LAYERS.get(_unit(d), 0) > LAYERS.get(_unit(m), 0)
    ]
    assert upward == []


def test_layer_one_units_import_only_what_the_table_allows() -> None:
    graph, _ = _graph()
    sideways = sorted(
        f"{m} → {d}"
        for m, deps in graph.items()
        for d in deps
        if LAYERS.get(_unit(m)) == 1
        and LAYERS.get(_unit(d)) == 1
        and _unit(d) != _unit(m)
        and _unit(d) not in LAYER1_EDGES.get(_unit(m), set())
    )
    assert sideways == []


@pytest.mark.parametrize("unit", NO_TORCH)
def test_no_torch_where_nothing_is_measured(unit: str) -> None:
    _, files = _graph()
    offenders = [
        m
        for m, path in files.items()
        if _unit(m) == unit and any(i.split(".")[0] == "torch" for i in _imports(path, m))
    ]
    assert offenders == []


def test_cycle_finder_finds_a_cycle() -> None:
    # the checks above pass on an empty list: make sure the finder can say something
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
