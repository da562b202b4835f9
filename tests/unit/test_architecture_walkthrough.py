"""docs/architecture.md follows a process launch and a sandboxed file read hop by
hop, each hop as a file and a function (`` `fs/dispatch.py` `run_fs_op` ``): every
one must still be defined there, so the walkthrough cannot drift from the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "execserver"
WALKTHROUGHS = ("## One process launch", "## One sandboxed file read")
HOP = re.compile(r"`([\w/]+\.py)`\s+`([A-Za-z_][\w.]*)`")


def _sections() -> list[str]:
    text = DOC.read_text()
    found = []
    for heading in WALKTHROUGHS:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        found.append(text[start : end if end >= 0 else len(text)])
    return found


def hops(text: str) -> list[tuple[str, str]]:
    # A hop may wrap: join the lines so a pair split by a line break is still one.
    return HOP.findall(" ".join(text.split()))


def _defined(tree: ast.Module, dotted: str) -> bool:
    scope: list[ast.stmt] = tree.body
    for part in dotted.split("."):
        match: ast.stmt | None = None
        for node in scope:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == part:
                    match = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    match = node
        if match is None:
            return False
        scope = match.body if isinstance(match, ast.ClassDef) else []
    return True


def test_each_walkthrough_names_many_hops() -> None:
    for section in _sections():
        assert len(hops(section)) >= 12, section[:60]


def test_every_hop_is_defined_where_the_walkthrough_says() -> None:
    missing = []
    for section in _sections():
        for file, name in hops(section):
            path = PACKAGE / file
            if not path.is_file():
                missing.append(f"{file} (no such file) for {name}")
            elif not _defined(ast.parse(path.read_text()), name):
                missing.append(f"{file}: {name} is not defined there")
    assert not missing, "docs/architecture.md names hops the code does not have:\n" + "\n".join(
        missing
    )


def test_the_check_sees_a_wrong_hop() -> None:
    tree = ast.parse("class A:\n    def b(self): ...\nX = 1\ndef f(): ...\n")
    assert _defined(tree, "A.b") and _defined(tree, "X") and _defined(tree, "f")
    assert not _defined(tree, "A.c") and not _defined(tree, "g") and not _defined(tree, "f.x")
    assert hops("`a/b.py`\n   `C.d` and `e.py` `f`") == [("a/b.py", "C.d"), ("e.py", "f")]
