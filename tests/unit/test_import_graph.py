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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "execserver"


@dataclass(frozen=True)
class ImportEdge:
    importer: str  # dotted module name
    target: str  # dotted module name imported from
    name: str | None  # the name taken with ``from target import name``
    line: int

    def where(self) -> str:
        return f"{self.importer}:{self.line}"


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE_ROOT.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _edges(modules: dict[str, Path]) -> Iterator[ImportEdge]:
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("execserver"):
                        yield ImportEdge(name, alias.name, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                target = (
                    _resolve_relative(name, is_package, node.level, node.module)
                    if node.level
                    else (node.module or "")
                )
                if not target.startswith("execserver"):
                    continue
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    if submodule in modules:
                        yield ImportEdge(name, submodule, None, node.lineno)
                    else:
                        yield ImportEdge(name, target, alias.name, node.lineno)


def _unit(module: str) -> str:
    """The layering unit: ``execserver.<first component>`` or the root package."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


EDGES = list(_edges(_modules()))


def _unit_graph() -> dict[str, dict[str, list[ImportEdge]]]:
    graph: dict[str, dict[str, list[ImportEdge]]] = {}
    for edge in EDGES:
        source, target = _unit(edge.importer), _unit(edge.target)
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
    units = set(_unit_graph())
    # A broken walk would pass every check below; these units exist and import each other.
    assert {"execserver.wire", "execserver.client", "execserver.server", "execserver.cli"} <= units
    assert any(
        _unit(e.importer) == "execserver.client" and _unit(e.target) == "execserver.wire"
        for e in EDGES
    )


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
        if _unit(edge.importer) != _unit(edge.target)
        and (
            (edge.name is not None and _is_private(edge.name))
            or any(_is_private(part) for part in edge.target.split("."))
        )
    ]
    assert not leaks, "private names imported across packages:\n" + "\n".join(leaks)


# The bottom of the stack stays clean: what each layer may import.
ALLOWED = {
    "execserver.wire": set(),
    "execserver.client": {"execserver.wire"},
    "execserver.core": {"execserver.client", "execserver.wire"},
}


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_lower_layers_import_only_below_them(unit: str) -> None:
    allowed = ALLOWED[unit] | {unit}
    reaching = [
        f"{edge.where()} imports {edge.target}"
        for edge in EDGES
        if _unit(edge.importer) == unit and _unit(edge.target) not in allowed
    ]
    assert not reaching, f"{unit} reaches outside its layer:\n" + "\n".join(reaching)


def test_every_module_declares_its_public_names() -> None:
    # As aiohttp does in every module: ``__all__`` says what a module offers, so
    # a reader (and ``from x import *``) sees the public surface at a glance.
    missing = []
    for name, path in _modules().items():
        if name.endswith("__main__"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
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
