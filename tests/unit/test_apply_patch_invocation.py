"""Recognising apply_patch calls."""

from __future__ import annotations

import pytest

from execserver.core.apply_patch.errors import ImplicitInvocation, InvalidPatch
from execserver.core.apply_patch.hunks import AddFile
from execserver.core.apply_patch.invocation import (
    InvocationError,
    PatchInvocation,
    detect_apply_patch,
)

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch"


def _heredoc(prefix: str = "", quote: str = "'") -> str:
    return f"{prefix}apply_patch <<{quote}EOF{quote}\n{PATCH}\nEOF\n"


@pytest.mark.parametrize("name", ["apply_patch", "applypatch"])
def test_direct_invocation(name: str) -> None:
    found = detect_apply_patch([name, PATCH], "/w")
    assert isinstance(found, PatchInvocation)
    assert found.parsed.hunks == (AddFile("a.txt", "x\n"),)
    assert found.cwd == "/w"


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-lc", _heredoc()],
        ["/bin/bash", "-c", _heredoc(quote='"')],
        ["zsh", "-lc", _heredoc(quote="")],
        ["sh", "-c", _heredoc()],
        ["pwsh", "-NoProfile", "-Command", _heredoc()],
        ["powershell.exe", "-command", _heredoc()],
        ["cmd", "/c", _heredoc()],
    ],
)
def test_shell_heredoc_invocations(argv: list[str]) -> None:
    found = detect_apply_patch(argv, "/w")
    assert isinstance(found, PatchInvocation)
    assert found.parsed.patch == PATCH
    assert found.cwd == "/w"


@pytest.mark.parametrize(
    ("prefix", "cwd"),
    [
        ("cd sub && ", "/w/sub"),
        ("cd 'with space' && ", "/w/with space"),
        ('cd "quoted" && ', "/w/quoted"),
        ("cd /abs/dir && ", "/abs/dir"),
    ],
)
def test_cd_prefix_sets_the_patch_cwd(prefix: str, cwd: str) -> None:
    found = detect_apply_patch(["bash", "-lc", _heredoc(prefix)], "/w")
    assert isinstance(found, PatchInvocation)
    assert found.cwd == cwd


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-lc", "echo hi; " + _heredoc()],
        ["bash", "-lc", _heredoc() + "echo done\n"],
        ["bash", "-lc", "cd a || " + _heredoc()],
        ["bash", "-lc", "ls -la"],
        ["bash", "-x", _heredoc()],
        ["python", "-c", _heredoc()],
        ["apply_patch"],
        ["ls", "-la"],
    ],
)
def test_other_commands_are_not_apply_patch(argv: list[str]) -> None:
    assert detect_apply_patch(argv, "/w") is None


def test_bare_patch_body_is_refused() -> None:
    for argv in ([PATCH], ["bash", "-lc", PATCH]):
        found = detect_apply_patch(argv, "/w")
        assert isinstance(found, InvocationError)
        assert isinstance(found.error, ImplicitInvocation)
        assert str(found.error) == (
            'patch detected without explicit call to apply_patch. Rerun as ["apply_patch", '
            '"<patch>"]'
        )


def test_unparsable_patch_is_a_correctness_error() -> None:
    found = detect_apply_patch(["apply_patch", "*** Begin Patch\n+x"], "/w")
    assert isinstance(found, InvocationError)
    assert isinstance(found.error, InvalidPatch)
