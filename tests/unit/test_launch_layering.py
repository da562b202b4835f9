"""The launch pipeline's layering: processes/ -> sandbox/ (planners, the one
LaunchPlan) and processes/ -> netproxy/ (routes, the proxy); netproxy/ -> sandbox/
only for the ProxyRoutes value type. Imports inside functions and under
TYPE_CHECKING count: a lazy import is still a dependency (tests/support/imports.py
walks them; its self-check is in test_import_graph.py).
"""

from __future__ import annotations

import ast

import pytest

from tests.support.imports import ImportEdge, modules, package_edges, syntax_tree, unit, within


def _edges(package: str) -> list[ImportEdge]:
    return [edge for edge in package_edges() if within(edge.importer, f"execserver.{package}")]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        # netproxy -> server (sessions, rpc) is the service kernel's to cut.
        ("netproxy", {"processes", "fs"}),
        ("sandbox", {"processes", "netproxy", "server", "fs"}),
    ],
)
def test_launch_packages_do_not_import_upwards(package: str, forbidden: set[str]) -> None:
    bad = [
        f"{edge.where()} imports {edge.target}"
        for edge in _edges(package)
        if unit(edge.target) in {f"execserver.{name}" for name in forbidden}
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["processes", "sandbox", "netproxy"])
def test_no_private_name_is_imported_from_another_package(package: str) -> None:
    bad = []
    for edge in _edges(package):
        if unit(edge.target) in ("execserver", f"execserver.{package}"):
            continue
        name = edge.name or ""
        private = name.startswith("_") and not name.startswith("__")
        if private or any(part.startswith("_") for part in edge.target.split(".")[1:]):
            bad.append(f"{edge.where()} imports {name or edge.target} from {edge.target}")
    assert not bad, "\n".join(bad)


def test_one_launch_plan_type() -> None:
    """Exactly one class is called LaunchPlan, and every planner returns it."""
    from execserver.processes import launch
    from execserver.sandbox import plan, planner, proxy_routed

    defined = [
        module
        for module, path in modules().items()
        for node in ast.walk(syntax_tree(path))
        if isinstance(node, ast.ClassDef) and node.name == "LaunchPlan"
    ]
    assert defined == ["execserver.sandbox.plan"]
    for function in (
        launch.plan_unsandboxed,
        plan.plan_for_policy,
        planner.plan_sandboxed,
        proxy_routed.plan_proxy_routed,
    ):
        assert function.__annotations__["return"] == "LaunchPlan", function
