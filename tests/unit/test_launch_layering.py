"""The launch pipeline's layering: processes/ -> sandbox/ (planners, the one
LaunchPlan) and processes/ -> netproxy/ (routes, the proxy); netproxy/ -> sandbox/
only for the ProxyRoutes value type. Imports inside functions and under
TYPE_CHECKING count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "execserver"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names) of every import in the file, lazy ones too."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base, tuple(a.name for a in node.names)))
    return found


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "execserver" else None


def _edges(package: str) -> list[tuple[str, int, str, tuple[str, ...]]]:
    return [
        (f"{path.relative_to(PACKAGE.parent)}", line, target, names)
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for line, target, names in _imports(path)
    ]


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
        f"{where}:{line} imports {target}"
        for where, line, target, _ in _edges(package)
        if _top(target) in forbidden
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["processes", "sandbox", "netproxy"])
def test_no_private_name_is_imported_from_another_package(package: str) -> None:
    bad = []
    for where, line, target, names in _edges(package):
        top = _top(target)
        if top is None or top == package:
            continue
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        if private or any(part.startswith("_") for part in target.split(".")[1:]):
            bad.append(f"{where}:{line} imports {private or target} from {target}")
    assert not bad, "\n".join(bad)


def test_one_launch_plan_type() -> None:
    """Exactly one class is called LaunchPlan, and every planner returns it."""
    from execserver.processes import launch
    from execserver.sandbox import plan, planner, proxy_routed

    defined = [
        f"{path.relative_to(PACKAGE.parent)}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "LaunchPlan"
    ]
    assert defined == ["execserver/sandbox/plan.py"]
    for function in (
        launch.plan_unsandboxed,
        plan.plan_for_policy,
        planner.plan_sandboxed,
        proxy_routed.plan_proxy_routed,
    ):
        assert function.__annotations__["return"] == "LaunchPlan", function
