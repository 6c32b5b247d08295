"""The shape rules the walls (import-linter contracts) do not cover: no import cycle anywhere
in the package, type-only imports included, and no module over 800 lines nor function over
80 lines of body (a limit kept so that every rule can be read in one sitting)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

SRC = Path(__file__).resolve().parents[1] / "src" / "gpushare"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b"]]


def test_no_import_cycle_anywhere_type_only_imports_included() -> None:
    graph = grimp.build_graph("gpushare", exclude_type_checking_imports=False)
    assert _cycles(graph) == []


def _long_functions(tree: ast.AST) -> list[tuple[str, int]]:
    """Functions whose body (from its first statement, the docstring included; a command's
    long signature of options is not counted) is over the limit."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
            length = node.end_lineno - node.body[0].lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append((node.name, length))
    return found


def test_modules_and_functions_stay_under_their_limits() -> None:
    over: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        name = str(path.relative_to(SRC))
        if lines > MAX_MODULE_LINES:
            over.append(f"{name}: {lines} lines")
        over += [f"{name}: {fn}() {n} lines" for fn, n in _long_functions(ast.parse(text))]
    assert over == []
