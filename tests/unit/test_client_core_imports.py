"""client/ and core/ keep their shape: no import cycle between their modules
(imports inside functions and under TYPE_CHECKING count) and no private name taken
from another package. The layering (client/ imports only wire/, core/ only client/
and wire/, wire/ nothing outside itself) is test_import_graph.py's
test_lower_layers_import_only_below_them; both walk with tests/support/imports.py."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tests.support.imports import ImportEdge, modules, package_edges, unit


def _cycles(package: str, edges: Iterable[ImportEdge]) -> list[list[str]]:
    prefix = f"execserver.{package}"
    graph: dict[str, set[str]] = {
        module: set() for module in modules() if module.startswith(prefix + ".")
    }
    for edge in edges:
        # ``from execserver.client.x import y``: the walker points at x.y when y is a module.
        if edge.importer in graph and edge.target in graph and edge.target != edge.importer:
            graph[edge.importer].add(edge.target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


@pytest.mark.parametrize("package", ["client", "core"])
def test_no_import_cycle_between_modules(package: str) -> None:
    assert _cycles(package, package_edges()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    back = ImportEdge("execserver.client.fs", "execserver.client.connection", "ExecServerClient", 1)
    assert _cycles("client", [*package_edges(), back]) != []


def test_no_private_name_crosses_into_or_out_of_client_and_core() -> None:
    offenders = [
        f"{edge.where()}: {edge.target}.{edge.name or ''}"
        for edge in package_edges()
        if {unit(edge.importer), unit(edge.target)} & {"execserver.client", "execserver.core"}
        and unit(edge.importer) != unit(edge.target)
        and (
            (edge.name or "").startswith("_")
            or any(part.startswith("_") for part in edge.target.split("."))
        )
    ]
    assert offenders == []
