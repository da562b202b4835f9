"""The file-system calls the applier makes.

:class:`execserver.client.RemoteFileSystem` provides them over ``fs/*``; the
applier depends only on this shape so it does not care which executor (or
which sandbox context) is behind it.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["Metadata", "PatchFileSystem", "os_error_text"]


class Metadata(Protocol):
    @property
    def is_file(self) -> bool: ...

    @property
    def is_directory(self) -> bool: ...

    @property
    def is_symlink(self) -> bool: ...


class PatchFileSystem(Protocol):
    async def get_metadata(self, path: str, *, follow_symlinks: bool = True) -> Metadata: ...

    async def read_file(self, path: str, *, follow_symlinks: bool = True) -> bytes: ...

    async def write_file(self, path: str, data: bytes, *, follow_symlinks: bool = True) -> None: ...

    async def create_directory(
        self, path: str, *, recursive: bool = True, follow_symlinks: bool = True
    ) -> None: ...

    async def remove(
        self,
        path: str,
        *,
        recursive: bool = True,
        force: bool = True,
        follow_symlinks: bool = True,
    ) -> None: ...


def os_error_text(exc: OSError) -> str:
    """An OS error as the reference (Rust's io::Error) prints it: the OS text
    with its number; an executor's own refusal (no OS error behind it) as the
    executor worded it."""
    if exc.errno and exc.strerror in (None, os.strerror(exc.errno)):
        return f"{os.strerror(exc.errno)} (os error {exc.errno})"
    return exc.strerror or str(exc)
