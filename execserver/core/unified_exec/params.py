"""The tools' parameters as the reference defines them.

:class:`ExecCommandParams` and :class:`WriteStdinParams` are the typed form a
caller builds. ``from_json`` decodes the dict a tool call hands in: forgiving
about absent values (defaults), strict about wrong types and unknown keys (a
clear error to the model rather than a guess: a misspelt ``yield_time_ms``
would otherwise run the command with the default yield).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import SandboxPermissions

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ExecCommandArgs",
    "ExecCommandParams",
    "ParamError",
    "WriteStdinArgs",
    "WriteStdinParams",
    "clamp_exec_yield",
    "clamp_write_yield",
]

DEFAULT_EXEC_YIELD_MS = 10_000
DEFAULT_WRITE_YIELD_MS = 250
MIN_YIELD_MS = 250
MAX_YIELD_MS = 30_000
MIN_EMPTY_POLL_MS = 5_000
DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS = 300_000
WINDOWS_MIN_INITIAL_YIELD_MS = 2_000
DEFAULT_MAX_OUTPUT_TOKENS = 10_000


class ParamError(ValueError):
    """A tool argument the model got wrong; the text goes back to the model."""


def _int(args: Mapping[str, object], name: str, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"`{name}` must be an integer")
    return value


def _opt_int(args: Mapping[str, object], name: str) -> int | None:
    return None if args.get(name) is None else _int(args, name, 0)


def _bool(args: Mapping[str, object], name: str, default: bool) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ParamError(f"`{name}` must be a boolean")
    return value


def _refuse_unknown(args: Mapping[str, object], cls: type, tool: str) -> None:
    known = [f.name for f in fields(cls)]
    unknown = [key for key in args if key not in known]
    if unknown:
        expected = ", ".join(f"`{name}`" for name in known)
        raise ParamError(
            f"unknown field `{unknown[0]}` in {tool} arguments, expected one of {expected}"
        )


def _opt_str(args: Mapping[str, object], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParamError(f"`{name}` must be a string")
    return value


def clamp_exec_yield(requested: int, *, windows: bool = False) -> int:
    floor = WINDOWS_MIN_INITIAL_YIELD_MS if windows else MIN_YIELD_MS
    return max(floor, min(requested, MAX_YIELD_MS))


def clamp_write_yield(
    requested: int | None,
    *,
    empty: bool,
    max_background_terminal_timeout_ms: int = DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS,
) -> int:
    if empty:
        # A poll may wait long: nothing else is happening until output comes.
        ceiling = max(MIN_EMPTY_POLL_MS, max_background_terminal_timeout_ms)
        value = MIN_EMPTY_POLL_MS if requested is None else requested
        return max(MIN_EMPTY_POLL_MS, min(value, ceiling))
    value = DEFAULT_WRITE_YIELD_MS if requested is None else requested
    return max(MIN_YIELD_MS, min(value, MAX_YIELD_MS))


@dataclass(frozen=True)
class ExecCommandParams:
    """The arguments of one ``exec_command`` call."""

    cmd: str
    workdir: str | None = None
    shell: str | None = None
    login: bool | None = None  # None: not given (defaults to true)
    tty: bool = False
    yield_time_ms: int = DEFAULT_EXEC_YIELD_MS
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    additional_permissions: AdditionalPermissions | None = None
    justification: str | None = None
    prefix_rule: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, args: Mapping[str, object]) -> ExecCommandParams:
        _refuse_unknown(args, cls, "exec_command")
        cmd = _opt_str(args, "cmd")
        if not cmd:
            raise ParamError("missing command line for unified exec request")
        perms_raw = _opt_str(args, "sandbox_permissions") or SandboxPermissions.USE_DEFAULT.value
        try:
            perms = SandboxPermissions(perms_raw)
        except ValueError:
            raise ParamError(f"unknown sandbox_permissions value {perms_raw!r}") from None
        extra = args.get("additional_permissions")
        additional = AdditionalPermissions.from_json(extra) if isinstance(extra, Mapping) else None
        prefix = args.get("prefix_rule")
        login = args.get("login")
        return cls(
            cmd=cmd,
            workdir=_opt_str(args, "workdir"),
            shell=_opt_str(args, "shell"),
            login=None if login is None else _bool(args, "login", True),
            tty=_bool(args, "tty", False),
            yield_time_ms=_int(args, "yield_time_ms", DEFAULT_EXEC_YIELD_MS),
            max_output_tokens=_int(args, "max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
            sandbox_permissions=perms,
            additional_permissions=additional,
            justification=_opt_str(args, "justification"),
            prefix_rule=tuple(str(p) for p in prefix) if isinstance(prefix, list) else None,
        )


@dataclass(frozen=True)
class WriteStdinParams:
    """The arguments of one ``write_stdin`` call (empty ``chars``: a poll)."""

    session_id: int
    chars: str = ""
    yield_time_ms: int | None = None
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS

    @classmethod
    def from_json(cls, args: Mapping[str, object]) -> WriteStdinParams:
        _refuse_unknown(args, cls, "write_stdin")
        session = args.get("session_id")
        if isinstance(session, bool) or not isinstance(session, int):
            raise ParamError("`session_id` must be an integer")
        return cls(
            session_id=session,
            chars=_opt_str(args, "chars") or "",
            yield_time_ms=_opt_int(args, "yield_time_ms"),
            max_output_tokens=_int(args, "max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
        )


# The earlier names of the same classes, so existing imports keep working.
ExecCommandArgs = ExecCommandParams
WriteStdinArgs = WriteStdinParams
