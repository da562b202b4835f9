"""client/ and core/ keep their shape: no import cycle between their modules
(imports inside functions and under TYPE_CHECKING count), no private name taken
from another package, and the layering: client/ imports only wire/, core/ only
client/ and wire/, wire/ nothing outside itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import execserver

ROOT = Path(execserver.__file__).parent
ALLOWED = {"wire": {"wire"}, "client": {"client", "wire"}, "core": {"core", "client", "wire"}}


def _module_name(path: Path) -> str:
    parts = ("execserver", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, imported name) for every import anywhere in the file."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, alias.name) for alias in node.names)
    return [(module, name) for module, name in found if module.startswith("execserver")]


MODULES = {_module_name(path): _imports(path) for path in ROOT.rglob("*.py")}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(package: str) -> list[list[str]]:
    prefix = f"execserver.{package}."
    graph: dict[str, set[str]] = {}
    for module, imports in MODULES.items():
        if not module.startswith(prefix):
            continue
        targets = set()
        for target, name in imports:
            # ``from execserver.client.x import y``: y may be a submodule too.
            for candidate in (f"{target}.{name}", target):
                if candidate in MODULES and candidate.startswith(prefix):
                    targets.add(candidate)
                    break
        graph[module] = targets - {module}
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
    assert _cycles(package) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    MODULES["execserver.client.fs"].append(("execserver.client.connection", "ExecServerClient"))
    try:
        assert _cycles("client") != []
    finally:
        MODULES["execserver.client.fs"].pop()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layering(package: str) -> None:
    offenders = [
        f"{module} imports {target}"
        for module, imports in MODULES.items()
        if _package(module) == package
        for target, _ in imports
        if _package(target) not in ALLOWED[package]
    ]
    assert offenders == []


def test_no_private_name_crosses_into_or_out_of_client_and_core() -> None:
    offenders = [
        f"{module}: {target}.{name}"
        for module, imports in MODULES.items()
        for target, name in imports
        if {_package(module), _package(target)} & {"client", "core"}
        and _package(module) != _package(target)
        and (name.startswith("_") or any(p.startswith("_") for p in target.split(".")))
    ]
    assert offenders == []
