"""Is a command an ``apply_patch`` call?

Recognised: ``["apply_patch", PATCH]`` (or ``applypatch``), and a shell
running exactly ``apply_patch <<'EOF' ... EOF``, optionally after ``cd DIR
&&``: ``bash|zsh|sh -c|-lc``, ``pwsh|powershell [-NoProfile] -Command``,
``cmd /c``. Any other script is not an apply_patch call - the reference only
accepts that single statement, so a prefix like ``echo x;`` or a suffix like
``&& echo done`` disqualifies it. A bare patch body run as a command is
refused with the reference's hint.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from execserver.core.apply_patch.errors import ApplyPatchError, ImplicitInvocation
from execserver.core.apply_patch.hunks import ParsedPatch
from execserver.core.apply_patch.parser import parse_patch

__all__ = ["InvocationError", "PatchInvocation", "detect_apply_patch"]

APPLY_PATCH_COMMANDS = ("apply_patch", "applypatch")

_HEREDOC_SCRIPT = re.compile(
    r"""\A\s*
    (?:cd\s+(?:'(?P<raw>[^']*)'|"(?P<quoted>[^"$`\\]*)"|(?P<word>[^\s'"&|;<>()$`\\]+))\s*&&\s*)?
    (?:apply_patch|applypatch)\s*<<\s*(?P<q>['"]?)(?P<tag>\w+)(?P=q)[ \t]*\n
    (?P<body>(?:.*\n)*?)
    (?P=tag)[ \t]*\n?\s*\Z""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class PatchInvocation:
    parsed: ParsedPatch
    # Where relative paths resolve: the call's cwd, or `cd DIR` joined onto it.
    cwd: str


@dataclass(frozen=True)
class InvocationError:
    """An apply_patch call that cannot run (parse error, bare patch body)."""

    error: ApplyPatchError


def _shell_script(argv: Sequence[str]) -> str | None:
    def stem(name: str) -> str:
        base = posixpath.basename(name.replace("\\", "/"))
        return base.rsplit(".", 1)[0].lower() if "." in base else base.lower()

    def script_for(shell: str, flag: str, script: str) -> str | None:
        name = stem(shell)
        if name in ("bash", "zsh", "sh") and flag in ("-c", "-lc"):
            return script
        if name in ("pwsh", "powershell") and flag.lower() == "-command":
            return script
        if name == "cmd" and flag.lower() == "/c":
            return script
        return None

    if len(argv) == 3:
        return script_for(argv[0], argv[1], argv[2])
    if (
        len(argv) == 4
        and stem(argv[0]) in ("pwsh", "powershell")
        and argv[1].lower() == "-noprofile"
    ):
        return script_for(argv[0], argv[2], argv[3])
    return None


def _parses(text: str) -> bool:
    try:
        parse_patch(text)
    except ApplyPatchError:
        return False
    return True


def detect_apply_patch(argv: Sequence[str], cwd: str) -> PatchInvocation | InvocationError | None:
    """``None`` when ``argv`` is not an apply_patch call."""
    script = _shell_script(argv)
    if (len(argv) == 1 and _parses(argv[0])) or (script is not None and _parses(script)):
        return InvocationError(ImplicitInvocation())
    body: str | None = None
    workdir: str | None = None
    if len(argv) == 2 and argv[0] in APPLY_PATCH_COMMANDS:
        body = argv[1]
    elif script is not None:
        match = _HEREDOC_SCRIPT.match(script)
        if match is None:
            return None
        body = match.group("body").rstrip("\n")
        workdir = match.group("raw") or match.group("quoted") or match.group("word")
    if body is None:
        return None
    try:
        parsed = parse_patch(body)
    except ApplyPatchError as exc:
        return InvocationError(exc)
    effective = cwd if workdir is None else posixpath.join(cwd, workdir)
    return PatchInvocation(
        ParsedPatch(parsed.hunks, parsed.patch, workdir), posixpath.normpath(effective)
    )
