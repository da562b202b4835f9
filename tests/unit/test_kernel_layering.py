"""Services depend on the kernel, never on the server: the kernel imports no service
and nothing of the server, the services import nothing of the server, and only the
runner (the composition root) imports the services."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import execserver

PACKAGE = Path(execserver.__file__).parent
SERVICES = ("discovery", "fs", "http_request", "netproxy", "processes")
# The kernel sits on the protocol types and the settings leaf, nothing else of execserver.
KERNEL_MAY_IMPORT = ("execserver.kernel", "execserver.wire", "execserver.config")


def _imports(path: Path) -> set[str]:
    """Every execserver module a file imports, including lazy and TYPE_CHECKING imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("execserver.")}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_kernel_imports_only_wire_and_config() -> None:
    offenders = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "kernel").rglob("*.py")
        for name in _imports(path)
        if not any(_within(name, allowed) for allowed in KERNEL_MAY_IMPORT)
    }
    assert offenders == set()


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_never_imports_the_server(service: str) -> None:
    offenders = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / service).rglob("*.py")
        for name in _imports(path)
        if _within(name, "execserver.server")
    }
    assert offenders == set()


def test_only_the_runner_imports_every_service() -> None:
    importers = {
        str(path.relative_to(PACKAGE))
        for path in (PACKAGE / "server").rglob("*.py")
        if any(_within(name, f"execserver.{s}") for name in _imports(path) for s in SERVICES)
    }
    assert importers == {"server/runner.py"}


def test_the_walk_sees_imports() -> None:
    # A broken walk would pass every check above.
    assert "execserver.kernel.context" in _imports(PACKAGE / "processes" / "service.py")
    assert "execserver.processes" in _imports(PACKAGE / "server" / "runner.py")
