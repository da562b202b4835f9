"""The package layering of execserver/, read from the source itself.

Walks every module's syntax tree (imports inside functions and under
``TYPE_CHECKING`` count: a lazy import is still a dependency) and fails on

- an import cycle between the top-level units of ``execserver`` (a package
  such as ``execserver.server`` or a top-level module such as
  ``execserver.cli``), and
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
    syntax_tree,
    unit,
    within,
)

EDGES = package_edges()


def _unit_graph() -> dict[str, dict[str, list[ImportEdge]]]:
    graph: dict[str, dict[str, list[ImportEdge]]] = {}
    for edge in EDGES:
        source, target = unit(edge.importer), unit(edge.target)
        graph.setdefault(source, {})
        graph.setdefault(target, {})
        if source != target:
            graph[source].setdefault(target, []).append(edge)
    return graph


def _strongly_connected(graph: dict[str, dict[str, list[ImportEdge]]]) -> list[list[str]]:
    """Tarjan's algorithm; returns the components with more than one unit."""
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
    units = {unit(edge.importer) for edge in EDGES} | {unit(edge.target) for edge in EDGES}
    assert {"execserver.wire", "execserver.client", "execserver.server", "execserver.cli"} <= units
    taken = {(edge.importer, edge.target) for edge in EDGES}
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
    described = []
    for component in cycles:
        members = set(component)
        for source in component:
            for target, edges in graph[source].items():
                if target in members:
                    described.append(
                        f"{source} -> {target} ({', '.join(e.where() for e in edges[:3])})"
                    )
    assert not cycles, "import cycles between packages:\n" + "\n".join(described)


def test_no_private_name_imported_across_packages() -> None:
    leaks = [
        f"{edge.where()} imports {edge.target}{'.' + edge.name if edge.name else ''}"
        for edge in EDGES
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
        for edge in EDGES
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
