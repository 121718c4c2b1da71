"""The code's shape, held as a test: rooms small enough to read, functions short enough to follow, no cycles.

import-linter keeps the layers; these checks keep what it does not: a module that has grown past ~600 lines, a
function past 120, and import cycles between modules of one package (which a layers contract cannot see inside a
layer, and which lazy imports hide from a reader).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = {"gem_operator": ROOT / "operator" / "gem_operator", "gem_workloads": ROOT / "workloads" / "gem_workloads"}
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120


def _sources() -> list[Path]:
    return sorted(p for root in PRODUCT.values() for p in root.rglob("*.py"))


def test_no_product_file_over_the_limit() -> None:
    too_long = {str(p.relative_to(ROOT)): n for p in _sources() if (n := p.read_text().count("\n")) > MAX_FILE_LINES}
    assert not too_long, f"split these by concern (over {MAX_FILE_LINES} lines): {too_long}"


def test_no_function_over_the_limit() -> None:
    too_long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not too_long, f"split these into named steps (over {MAX_FUNCTION_LINES} lines): {too_long}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that import each other, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


@pytest.mark.parametrize("package", sorted(PRODUCT))
def test_no_import_cycles(package: str) -> None:
    graph = grimp.build_graph(package)
    # Module to module, lazy (function-level) imports included: a cycle held by a lazy import is still a cycle.
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    # A package's __init__ re-exporting its children is not a cycle of design; leave those edges out.
    edges = {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in edges.items()}
    cycles = _strongly_connected(edges)
    assert not cycles, f"import cycles in {package}: {cycles}"


def test_cycle_finder_finds_a_cycle() -> None:
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []
