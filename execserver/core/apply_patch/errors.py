"""How a patch fails, with the reference's texts."""

from __future__ import annotations

__all__ = [
    "ApplyPatchError",
    "ImplicitInvocation",
    "InvalidHunk",
    "InvalidPatch",
    "PatchParseError",
]


class ApplyPatchError(Exception):
    """Base: ``str(err)`` is the line the reference prints on stderr."""


class PatchParseError(ApplyPatchError):
    pass


class InvalidPatch(PatchParseError):
    def __init__(self, message: str) -> None:
        super().__init__(f"Invalid patch: {message}")
        self.message = message


class InvalidHunk(PatchParseError):
    def __init__(self, message: str, line_number: int) -> None:
        super().__init__(f"Invalid patch hunk on line {line_number}: {message}")
        self.message = message
        self.line_number = line_number


class ImplicitInvocation(ApplyPatchError):
    """A bare patch body was run as a command, without ``apply_patch``."""

    def __init__(self) -> None:
        super().__init__(
            "patch detected without explicit call to apply_patch. "
            'Rerun as ["apply_patch", "<patch>"]'
        )
