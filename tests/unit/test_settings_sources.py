"""Settings are resolved once, on the command line: no module of execserver/ reads
an ``EXECSERVER_*`` variable from the environment except cli.py (which maps them
onto ServerConfig) and config.py (which lists them).

The daemon's own environment may still be what children inherit or what names
an upstream proxy; only ``EXECSERVER_*`` settings are checked here. The client's
command lines read theirs in client/cli_options.py (``--token`` defaulting to
$EXECSERVER_TOKEN, the control masters' directory).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "execserver"
ALLOWED = {"cli.py", "config.py", "client/cli_options.py"}
PREFIX = "EXECSERVER_"


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "..."`` assignments (how variable names are spelled)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        value = getattr(node, "value", None)
        if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(value, ast.Constant):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and isinstance(value.value, str):
                found[target.id] = value.value
    return found


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id == "environ"


def _is_getenv(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in ("getenv", "getenvb")
    return isinstance(node, ast.Name) and node.id == "getenv"


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every read of an EXECSERVER_* variable from the environment:
    ``os.environ.get(X)``, ``os.environ[X]``, ``X in os.environ``, ``os.getenv(X)``,
    X a literal or a module constant."""
    tree = ast.parse(source)
    constants = _string_constants(tree)

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    reads: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        keys: list[ast.AST] = []
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault"):
                if _is_environ(func.value):
                    keys.append(node.args[0])
            elif _is_getenv(func):
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            keys.append(node.left)
        for key in keys:
            name = name_of(key)
            if name is not None and name.startswith(PREFIX):
                reads.append((getattr(node, "lineno", 0), name))
    return reads


def test_the_checker_finds_every_spelling_of_a_read() -> None:
    source = (
        "import os\n"
        "from os import environ, getenv\n"
        'NAME = "EXECSERVER_X"\n'
        'a = os.environ.get("EXECSERVER_A")\n'
        "b = os.environ[NAME]\n"
        'c = "EXECSERVER_C" in os.environ\n'
        'd = os.getenv("EXECSERVER_D", "1")\n'
        'e = environ.get("EXECSERVER_E")\n'
        'f = getenv("EXECSERVER_F")\n'
        'g = os.environ.get("PATH")\n'
    )
    names = [name for _, name in environment_reads(source)]
    assert names == [
        "EXECSERVER_A",
        "EXECSERVER_X",
        "EXECSERVER_C",
        "EXECSERVER_D",
        "EXECSERVER_E",
        "EXECSERVER_F",
    ]


def test_no_execserver_setting_is_read_outside_the_command_line() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED:
            continue
        for line, name in environment_reads(path.read_text()):
            offenders.append(f"execserver/{relative}:{line} reads {name}")
    assert not offenders, "\n".join(offenders)


def test_every_mapped_variable_is_read_by_cli_and_documented() -> None:
    """config.ENVIRONMENT_SETTINGS is the table of variables cli.py maps onto settings:
    each one is named in cli.py and in docs/settings.md's table of settings."""
    from execserver.config import ENVIRONMENT_SETTINGS

    cli = ast.parse((PACKAGE / "cli.py").read_text())
    named = {
        node.value
        for node in ast.walk(cli)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    settings_page = (PACKAGE.parent / "docs" / "settings.md").read_text()
    for variable in ENVIRONMENT_SETTINGS:
        assert variable in named, f"cli.py does not read {variable}"
        assert f"`{variable}`" in settings_page, f"docs/settings.md does not document {variable}"
