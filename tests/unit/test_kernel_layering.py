"""Services depend on the kernel, never on the server: the kernel imports no service
and nothing of the server, the services import nothing of the server, and only the
runner (the composition root) imports the services. Imports inside functions and
under TYPE_CHECKING count (tests/support/imports.py walks them; its self-check is in
test_import_graph.py)."""

from __future__ import annotations

import pytest

from tests.support.imports import package_edges, within

SERVICES = ("discovery", "fs", "http_request", "netproxy", "processes")
# The kernel sits on the protocol types and the settings leaf, nothing else of execserver.
KERNEL_MAY_IMPORT = ("execserver.kernel", "execserver.wire", "execserver.config")


def test_the_kernel_imports_only_wire_and_config() -> None:
    offenders = {
        f"{edge.where()}: {edge.target}"
        for edge in package_edges()
        if within(edge.importer, "execserver.kernel")
        and not any(within(edge.target, allowed) for allowed in KERNEL_MAY_IMPORT)
    }
    assert offenders == set()


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_never_imports_the_server(service: str) -> None:
    offenders = {
        f"{edge.where()}: {edge.target}"
        for edge in package_edges()
        if within(edge.importer, f"execserver.{service}")
        and within(edge.target, "execserver.server")
    }
    assert offenders == set()


def test_only_the_runner_imports_every_service() -> None:
    importers = {
        edge.importer
        for edge in package_edges()
        if within(edge.importer, "execserver.server")
        and any(within(edge.target, f"execserver.{s}") for s in SERVICES)
    }
    assert importers == {"execserver.server.runner"}
