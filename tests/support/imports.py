"""Read the imports of a source tree from its syntax trees, for the layering tests.

Every import counts, wherever it stands: inside a function, under ``if
TYPE_CHECKING:``, in a ``try`` block (a lazy import is still a dependency).
Relative imports are resolved to absolute module names, and
``from package import name`` points at ``package.name`` when that is a module of
the walked tree, at ``package`` (with ``name``) otherwise.

A string can import too: ``importlib.import_module("execserver.x")``, ``-m
execserver.x``, a route table of ``"execserver.x:function"``, a lazy ``__getattr__``
table. ``string_imports`` finds every string literal (docstrings aside) that names a
module of the walked tree below the root package, alone or as ``module:attribute``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPOSITORY_ROOT / "execserver"
PACKAGE = "execserver"


@dataclass(frozen=True)
class ImportEdge:
    importer: str  # dotted module name of the importing module
    target: str  # dotted module name imported (from)
    name: str | None  # the name taken with ``from target import name``, else None
    line: int
    # Named by a string literal (``string_imports``), not by an import statement.
    by_string: bool = False

    def where(self) -> str:
        return f"{self.importer}:{self.line}"


def module_name(path: Path, root: Path = PACKAGE_ROOT) -> str:
    """``root/a/b.py`` -> ``root.a.b``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every ``*.py`` below root, by dotted module name, in path order."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


@cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute module of ``from <level dots><module> import ...`` in importer."""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_in(
    tree: ast.Module, importer: str, is_package: bool, known: dict[str, Path]
) -> Iterator[ImportEdge]:
    """Every import anywhere in tree (of module importer), one edge a name taken."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield ImportEdge(importer, alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = (
                resolve_relative(importer, is_package, node.level, node.module)
                if node.level
                else (node.module or "")
            )
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in known:
                    yield ImportEdge(importer, submodule, None, node.lineno)
                else:
                    yield ImportEdge(importer, target, alias.name, node.lineno)


@cache
def import_edges(root: Path = PACKAGE_ROOT) -> tuple[ImportEdge, ...]:
    """Every import edge of every module below root, whatever it imports."""
    known = modules(root)
    return tuple(
        edge
        for name, path in known.items()
        for edge in imports_in(syntax_tree(path), name, path.name == "__init__.py", known)
    )


# ``execserver.a.b`` or ``execserver.a.b:attr.attr``; the bare root package is left
# out (it is also the program's and the loggers' name).
_NAMED_MODULE = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?::(?P<attr>[\w.]+))?")


def strings_in(tree: ast.Module) -> Iterator[ast.Constant]:
    """Every string literal of tree but the docstrings (a string statement)."""
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                yield node


def string_imports_in(
    tree: ast.Module, importer: str, known: dict[str, Path]
) -> Iterator[ImportEdge]:
    """The modules of ``known`` that string literals of tree name (``by_string``)."""
    for node in strings_in(tree):
        assert isinstance(node.value, str)
        match = _NAMED_MODULE.fullmatch(node.value.strip())
        if match is not None and match["module"] in known:
            yield ImportEdge(importer, match["module"], match["attr"], node.lineno, by_string=True)


@cache
def string_imports(root: Path = PACKAGE_ROOT) -> tuple[ImportEdge, ...]:
    """Every module of the walked tree named by a string literal below root."""
    known = modules(root)
    return tuple(
        edge
        for name, path in known.items()
        for edge in string_imports_in(syntax_tree(path), name, known)
    )


def package_edges() -> list[ImportEdge]:
    """The edges between modules of execserver/ (imports of anything else left out)."""
    return [edge for edge in import_edges(PACKAGE_ROOT) if within(edge.target, PACKAGE)]


def within(module: str, package: str) -> bool:
    """module is package or one of its submodules."""
    return module == package or module.startswith(package + ".")


def unit(module: str) -> str:
    """The layering unit: ``execserver.<first component>`` or the root package."""
    return ".".join(module.split(".")[:2])


def is_private(name: str) -> bool:
    """``_name``, not a ``__dunder__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


__all__ = [
    "PACKAGE",
    "PACKAGE_ROOT",
    "REPOSITORY_ROOT",
    "ImportEdge",
    "import_edges",
    "imports_in",
    "is_private",
    "module_name",
    "modules",
    "package_edges",
    "resolve_relative",
    "string_imports",
    "string_imports_in",
    "strings_in",
    "syntax_tree",
    "unit",
    "within",
]
