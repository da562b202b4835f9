"""The package layering of execserver/, read from the source itself.

Walks every module's syntax tree (imports inside functions and under
``TYPE_CHECKING`` count: a lazy import is still a dependency) and fails on

- an import cycle between the top-level units of ``execserver`` (a package
  such as ``execserver.server`` or a top-level module such as
  ``execserver.cli``),
- an import cycle between the modules of one unit (``server/audit`` ->
  ``server/runtime`` -> ``server/audit``, even type-only: such a pair is one
  module split in two files, typed ``object`` to dodge the cycle),
- a string import: a string literal naming ``module:attribute`` (the "import
  whatever you are sent" of a route table), or a module of another unit that
  no import statement of the same module names (an edge this graph would not
  see otherwise; a lazy ``__getattr__`` table mirrored by its ``TYPE_CHECKING``
  imports passes). A string naming a module of its own unit passes: a helper
  program its package runs with ``-m`` (another process, not an import).
  Strings built at run time (f-strings, concatenation) are not seen.
- an import of a ``_private`` name (or a ``_private`` module) from another
  unit.

docs/architecture.md draws the layers this test keeps.
"""

from __future__ import annotations

import ast

import pytest

from tests.support.imports import (
    ImportEdge,
    imports_in,
    is_private,
    modules,
    package_edges,
    string_imports,
    string_imports_in,
    syntax_tree,
    unit,
    within,
)


def _unit_graph() -> dict[str, dict[str, list[ImportEdge]]]:
    graph: dict[str, dict[str, list[ImportEdge]]] = {}
    for edge in package_edges():
        source, target = unit(edge.importer), unit(edge.target)
        graph.setdefault(source, {})
        graph.setdefault(target, {})
        if source != target:
            graph[source].setdefault(target, []).append(edge)
    return graph


def _module_graph(edges: list[ImportEdge]) -> dict[str, dict[str, list[ImportEdge]]]:
    """Module -> module within each unit (a unit's own imports only)."""
    graph: dict[str, dict[str, list[ImportEdge]]] = {}
    for edge in edges:
        if unit(edge.importer) != unit(edge.target) or edge.importer == edge.target:
            continue
        graph.setdefault(edge.importer, {}).setdefault(edge.target, []).append(edge)
        graph.setdefault(edge.target, {})
    return graph


def _describe(graph: dict[str, dict[str, list[ImportEdge]]], cycles: list[list[str]]) -> list[str]:
    described = []
    for component in cycles:
        members = set(component)
        for source in component:
            for target, edges in graph[source].items():
                if target in members:
                    described.append(
                        f"{source} -> {target} ({', '.join(e.where() for e in edges[:3])})"
                    )
    return described


def _strongly_connected(graph: dict[str, dict[str, list[ImportEdge]]]) -> list[list[str]]:
    """Tarjan's algorithm; returns the components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_walk_sees_the_whole_package() -> None:
    # The one self-check of tests/support/imports.py, which every layering test
    # walks with: a broken walk would pass every check of those tests.
    units = {unit(edge.importer) for edge in package_edges()} | {
        unit(edge.target) for edge in package_edges()
    }
    assert {"execserver.wire", "execserver.client", "execserver.server", "execserver.cli"} <= units
    taken = {(edge.importer, edge.target) for edge in package_edges()}
    assert any(unit(i) == "execserver.client" and unit(t) == "execserver.wire" for i, t in taken)
    assert ("execserver.core.orchestrator", "execserver.client.errors") in taken
    assert ("execserver.processes.service", "execserver.kernel.context") in taken
    assert any(
        i == "execserver.server.runner" and within(t, "execserver.processes") for i, t in taken
    )


def test_the_walk_sees_lazy_relative_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from execserver.wire import Frame\n"
        "def later() -> None:\n"
        "    import execserver.server.runner\n"
        "from . import sibling\n"
        "from ..client import _private\n"
    )
    known = {"execserver.core.sibling": modules()["execserver.core"]}
    edges = list(imports_in(ast.parse(source), "execserver.core.attempt", False, known))
    assert [(e.target, e.name, e.line) for e in edges] == [
        ("typing", "TYPE_CHECKING", 1),
        ("execserver.core.sibling", None, 6),
        ("execserver.client", "_private", 7),
        ("execserver.wire", "Frame", 3),
        ("execserver.server.runner", None, 5),
    ]


def test_no_import_cycle_between_packages() -> None:
    graph = _unit_graph()
    cycles = _strongly_connected(graph)
    assert not cycles, "import cycles between packages:\n" + "\n".join(_describe(graph, cycles))


def test_no_import_cycle_between_the_modules_of_a_package() -> None:
    graph = _module_graph(package_edges())
    cycles = _strongly_connected(graph)
    assert not cycles, "import cycles inside a package:\n" + "\n".join(_describe(graph, cycles))


def test_a_cycle_inside_a_package_is_found_even_type_only() -> None:
    # The check's own check: the cycle server/audit and server/runtime once had.
    source = {
        "execserver.server.audit": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from execserver.server.runtime import ServerRuntime\n"
        ),
        "execserver.server.runtime": "from execserver.server.audit import AuditLog\n",
        "execserver.server.runner": "from execserver.server.runtime import ServerRuntime\n",
    }
    known = modules()
    edges = [
        edge
        for name, text in source.items()
        for edge in imports_in(ast.parse(text), name, False, known)
    ]
    graph = _module_graph(edges)
    assert _strongly_connected(graph) == [["execserver.server.audit", "execserver.server.runtime"]]


def _hidden_string_imports(strings: list[ImportEdge]) -> list[str]:
    static = {(edge.importer, edge.target) for edge in package_edges()}
    return [
        f"{edge.where()} names {edge.target}{':' + edge.name if edge.name else ''} in a string"
        for edge in strings
        if edge.name is not None
        or (unit(edge.importer) != unit(edge.target) and (edge.importer, edge.target) not in static)
    ]


def test_no_module_is_imported_by_a_string_the_graph_cannot_see() -> None:
    hidden = _hidden_string_imports(list(string_imports()))
    assert not hidden, "string imports:\n" + "\n".join(hidden)


def test_string_imports_are_found_in_route_tables_and_argv() -> None:
    source = (
        '"""Docstrings may name execserver.fs.ops_read."""\n'
        '_ROUTES = {"read": "execserver.fs.ops_read:read_file"}\n'
        'ARGV = ["-m", "execserver.fs.service"]\n'
        'HELPER = "execserver.sandbox.bridge"\n'
        'log = "execserver"\n'
    )
    found = string_imports_in(ast.parse(source), "execserver.sandbox.plan", modules())
    strings = sorted(found, key=lambda edge: edge.line)
    assert [(e.target, e.name, e.line) for e in strings] == [
        ("execserver.fs.ops_read", "read_file", 2),
        ("execserver.fs.service", None, 3),
        ("execserver.sandbox.bridge", None, 4),
    ]
    # The route and the -m of another unit are hidden edges; the own unit's helper
    # program is not.
    assert [line.split(" ")[0] for line in _hidden_string_imports(strings)] == [
        "execserver.sandbox.plan:2",
        "execserver.sandbox.plan:3",
    ]


def test_no_private_name_imported_across_packages() -> None:
    leaks = [
        f"{edge.where()} imports {edge.target}{'.' + edge.name if edge.name else ''}"
        for edge in package_edges()
        if unit(edge.importer) != unit(edge.target)
        and (
            (edge.name is not None and is_private(edge.name))
            or any(is_private(part) for part in edge.target.split("."))
        )
    ]
    assert not leaks, "private names imported across packages:\n" + "\n".join(leaks)


# The bottom of the stack stays clean: what each layer may import. So core/, a
# client of executors and never part of one, imports nothing of execserver.server.
ALLOWED = {
    "execserver.aio": set(),
    "execserver.wire": set(),
    "execserver.client": {"execserver.aio", "execserver.wire"},
    "execserver.core": {"execserver.aio", "execserver.client", "execserver.wire"},
}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_lower_layers_import_only_below_them(layer: str) -> None:
    allowed = ALLOWED[layer] | {layer}
    reaching = [
        f"{edge.where()} imports {edge.target}"
        for edge in package_edges()
        if unit(edge.importer) == layer and unit(edge.target) not in allowed
    ]
    assert not reaching, f"{layer} reaches outside its layer:\n" + "\n".join(reaching)


def test_every_module_declares_its_public_names() -> None:
    # As aiohttp does in every module: ``__all__`` says what a module offers, so
    # a reader (and ``from x import *``) sees the public surface at a glance.
    missing = []
    for name, path in modules().items():
        if name.endswith("__main__"):
            continue
        tree = syntax_tree(path)
        declares = any(
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(target, ast.Name) and target.id == "__all__"
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            for node in tree.body
        )
        if not declares:
            missing.append(name)
    assert not missing, "modules without __all__: " + ", ".join(missing)
