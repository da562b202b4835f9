"""``Sandbox``: build the ``FileSystemSandboxContext`` of a request without
writing its nested wire shape by hand.

    Sandbox.workspace_write("/work/repo")   # read everything, write the repo and /tmp
    Sandbox.workspace_write("/work/repo", network=True, deny_read=["/work/repo/.env"])
    Sandbox.read_only()                     # read everything, write nothing

The executor decides how to enforce it (on Linux: bubblewrap + seccomp); a
request whose sandbox cannot be built fails instead of running unsandboxed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from execserver.wire.sandbox import (
    DisabledPermissions,
    ExecFileSystemSandboxEntry,
    FileSystemSandboxContext,
    ManagedPermissions,
    PathPath,
    RestrictedFileSystem,
    RootSpecial,
    SlashTmpSpecial,
    SpecialFsPath,
)
from execserver.wire.uri import path_to_uri

__all__ = ["Sandbox", "sandbox_param", "to_uri"]

PathLike = str | os.PathLike[str]


def _absolute(path: PathLike) -> str:
    text = os.fspath(path)
    if not text.startswith("/"):
        # The sandbox is enforced on the executor; a relative path would be
        # resolved against a directory the caller cannot see.
        raise ValueError(f"sandbox paths must be absolute paths on the executor, got {text!r}")
    return text


def _path_entry(path: PathLike, access: Literal["write", "none"]) -> ExecFileSystemSandboxEntry:
    uri = path_to_uri(_absolute(path))
    return ExecFileSystemSandboxEntry(path=PathPath(path=uri), access=access)


def _special_entry(
    value: RootSpecial | SlashTmpSpecial, access: Literal["read", "write"]
) -> ExecFileSystemSandboxEntry:
    return ExecFileSystemSandboxEntry(path=SpecialFsPath(value=value), access=access)


@dataclass(frozen=True)
class Sandbox:
    """A ready-made sandbox context; pass it as ``sandbox=`` to ``run``,
    ``start_process`` or ``client.fs.with_sandbox``."""

    context: FileSystemSandboxContext

    @classmethod
    def workspace_write(
        cls,
        root: PathLike,
        *,
        network: bool = False,
        deny_read: Iterable[PathLike] = (),
        writable: Iterable[PathLike] = (),
        tmp_writable: bool = True,
    ) -> Sandbox:
        """Read the whole file system, write ``root`` (and ``writable``, and /tmp
        unless ``tmp_writable=False``); ``deny_read`` paths can be neither read nor
        written. ``network=False`` cuts the network off."""
        entries = [_special_entry(RootSpecial(), "read")]
        entries.append(_path_entry(root, "write"))
        entries.extend(_path_entry(path, "write") for path in writable)
        if tmp_writable:
            entries.append(_special_entry(SlashTmpSpecial(), "write"))
        entries.extend(_path_entry(path, "none") for path in deny_read)
        root_uri = path_to_uri(_absolute(root))
        return cls(
            FileSystemSandboxContext(
                permissions=ManagedPermissions(
                    file_system=RestrictedFileSystem(entries=entries),
                    network="enabled" if network else "restricted",
                ),
                windows_sandbox_level="disabled",
                cwd=root_uri,
                workspace_roots=[root_uri],
            )
        )

    @classmethod
    def read_only(cls, *, network: bool = False, deny_read: Iterable[PathLike] = ()) -> Sandbox:
        """Read the whole file system (except ``deny_read``), write nothing."""
        entries = [_special_entry(RootSpecial(), "read")]
        entries.extend(_path_entry(path, "none") for path in deny_read)
        return cls(
            FileSystemSandboxContext(
                permissions=ManagedPermissions(
                    file_system=RestrictedFileSystem(entries=entries),
                    network="enabled" if network else "restricted",
                ),
                windows_sandbox_level="disabled",
            )
        )

    @classmethod
    def disabled(cls) -> Sandbox:
        """Launched through the executor's sandbox helper, but with no restrictions."""
        return cls(
            FileSystemSandboxContext(
                permissions=DisabledPermissions(), windows_sandbox_level="disabled"
            )
        )


# The sandbox param of a request without one: the wire's ``null``.
NULL_SANDBOX: Final = msgspec.Raw(b"null")


def sandbox_param(sandbox: object) -> msgspec.Raw:
    """A ``FileSystemSandboxContext`` (Struct or plain mapping) as raw JSON, or ``null``."""
    if sandbox is None:
        return NULL_SANDBOX
    if isinstance(sandbox, msgspec.Raw):
        return sandbox
    if isinstance(sandbox, Sandbox):
        sandbox = sandbox.context
    return msgspec.Raw(msgspec.json.encode(sandbox))


def to_uri(path: str | os.PathLike[str]) -> str:
    """Accept a ``file:`` URI as is, otherwise an absolute native path."""
    text = os.fspath(path)
    if text.startswith("file:"):
        return text
    return path_to_uri(text)
