"""One TurnContext: defined once, imported publicly as ``execserver.core.TurnContext``.

Two classes of that name would make an ``isinstance`` or a type annotation
disagree with what another module builds; a re-export is the only other way a
module may offer it.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import execserver.core
from execserver.core import TurnContext
from tests.support.imports import PACKAGE_ROOT, modules, syntax_tree


def test_the_public_path_gives_the_class_the_core_uses() -> None:
    from execserver.core.runtime import TurnContext as Defined

    assert TurnContext is Defined
    assert "TurnContext" in execserver.core.__all__
    assert TurnContext.__module__ == "execserver.core.runtime"


def test_exactly_one_class_named_turn_context_in_the_package() -> None:
    definitions = [
        f"{path.relative_to(PACKAGE_ROOT.parent)}:{node.lineno}"
        for path in modules().values()
        for node in ast.walk(syntax_tree(path))
        if isinstance(node, ast.ClassDef) and node.name == "TurnContext"
    ]
    assert definitions == [f"execserver/core/runtime.py:{_defined_line()}"]


def test_every_module_offering_turn_context_offers_the_same_object() -> None:
    offering = {}
    for name in modules():
        if not name.startswith("execserver.core"):
            continue
        module = importlib.import_module(name)
        value = module.__dict__.get("TurnContext")
        if value is not None:
            offering[name] = value
    assert "execserver.core.runtime" in offering
    assert {id(value) for value in offering.values()} == {id(TurnContext)}


def test_importing_the_package_alone_loads_no_runtime() -> None:
    """The package resolves TurnContext on first use: a tool that imports one
    submodule (the one-shot ``execserver patch``) does not load the orchestrator."""
    code = (
        "import sys, execserver.core\n"
        "assert 'execserver.core.runtime' not in sys.modules, 'loaded eagerly'\n"
        "execserver.core.TurnContext\n"
        "assert 'execserver.core.runtime' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE_ROOT.parent)


def _defined_line() -> int:
    tree = syntax_tree(modules()["execserver.core.runtime"])
    (line,) = [
        node.lineno
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "TurnContext"
    ]
    return line
