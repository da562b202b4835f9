"""Apply parsed hunks through a file system, in patch order.

The first error stops the run and nothing is rolled back: the delta returned
with the failure lists what did land. Error texts name the resolved path (the
hunk path joined onto the cwd and normalised), the success summary the path as
the patch spells it — both as the reference prints them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from execserver.core.apply_patch.delta import (
    AddChange,
    AppliedPatchDelta,
    DeleteChange,
    UpdateChange,
)
from execserver.core.apply_patch.derive import derive_new_contents
from execserver.core.apply_patch.errors import ApplyPatchError
from execserver.core.apply_patch.fs import PatchFileSystem, os_error_text
from execserver.core.apply_patch.hunks import AddFile, DeleteFile, Hunk, UpdateFile, resolve

__all__ = ["AffectedPaths", "PatchApplyError", "apply_hunks"]

NO_FILES_MODIFIED = "No files were modified."


class AffectedPaths:
    """Paths as spelled in the patch, per kind, in application order. (Plain
    classes here, not dataclasses: see ``hunks.py``.)"""

    __slots__ = ("added", "deleted", "modified")

    def __init__(self) -> None:
        self.added: list[str] = []
        self.modified: list[str] = []
        self.deleted: list[str] = []


class PatchApplyError(ApplyPatchError):
    """A hunk could not be applied; ``delta`` holds what landed before it."""

    def __init__(self, message: str, delta: AppliedPatchDelta) -> None:
        super().__init__(message)
        self.delta = delta


class _Stop(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Run:
    def __init__(self, fs: PatchFileSystem, cwd: str, follow_symlinks: bool) -> None:
        self.fs = fs
        self.cwd = cwd
        self.follow_symlinks = follow_symlinks
        self.delta = AppliedPatchDelta()
        self.affected = AffectedPaths()

    # -- probes ------------------------------------------------------------

    async def _existing_text(self, path: str) -> str | None:
        """Content of ``path`` if it is a readable text file; marks the delta
        inexact when the path exists but cannot be described exactly."""
        follow = self.follow_symlinks
        try:
            meta = await self.fs.get_metadata(path, follow_symlinks=follow)
        except FileNotFoundError:
            return None
        except OSError:
            self.delta.exact = False
            return None
        if not meta.is_file or meta.is_symlink:
            self.delta.exact = False
            if not meta.is_file:
                return None
        try:
            data = await self.fs.read_file(path, follow_symlinks=follow)
        except OSError:
            self.delta.exact = False
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.delta.exact = False
            return None

    async def _write(self, path: str, data: bytes) -> None:
        """Write, creating missing parent directories on NotFound."""
        follow = self.follow_symlinks
        try:
            await self.fs.write_file(path, data, follow_symlinks=follow)
            return
        except FileNotFoundError:
            pass
        except OSError:
            self.delta.exact = False
            raise _Stop(f"Failed to write file {path}") from None
        parent = posixpath.dirname(path)
        try:
            await self.fs.create_directory(parent, recursive=True, follow_symlinks=follow)
        except OSError:
            raise _Stop(f"Failed to create parent directories for {path}") from None
        try:
            await self.fs.write_file(path, data, follow_symlinks=follow)
        except OSError:
            self.delta.exact = False
            raise _Stop(f"Failed to write file {path}") from None

    # -- hunks -------------------------------------------------------------

    async def add(self, hunk: AddFile) -> None:
        path = resolve(hunk.path, self.cwd)
        previous = await self._existing_text(path)
        await self._write(path, hunk.contents.encode("utf-8"))
        self.delta.record(path, AddChange(hunk.contents, previous))
        self.affected.added.append(hunk.path)

    async def delete(self, hunk: DeleteFile) -> None:
        path = resolve(hunk.path, self.cwd)
        follow = self.follow_symlinks
        try:
            meta = await self.fs.get_metadata(path, follow_symlinks=follow)
        except OSError:
            raise _Stop(f"Failed to delete file {path}") from None
        if meta.is_directory and not meta.is_symlink:
            raise _Stop(f"Failed to delete file {path}")
        content = await self._existing_text(path)
        try:
            await self.fs.remove(path, recursive=False, force=False, follow_symlinks=follow)
        except OSError:
            raise _Stop(f"Failed to delete file {path}") from None
        if content is None:
            self.delta.exact = False
        else:
            self.delta.record(path, DeleteChange(content))
        self.affected.deleted.append(hunk.path)

    async def _read_for_update(self, path: str) -> str:
        follow = self.follow_symlinks
        prefix = f"Failed to read file to update {path}"
        try:
            meta = await self.fs.get_metadata(path, follow_symlinks=follow)
            if not meta.is_file:
                raise _Stop(f"{prefix}: path `{path}` is not a file")
            data = await self.fs.read_file(path, follow_symlinks=follow)
        except OSError as exc:
            raise _Stop(f"{prefix}: {os_error_text(exc)}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Stop(f"{prefix}: stream did not contain valid UTF-8") from None

    async def update(self, hunk: UpdateFile) -> None:
        path = resolve(hunk.path, self.cwd)
        old = await self._read_for_update(path)
        try:
            new = derive_new_contents(old, hunk.chunks, path)
        except ApplyPatchError as exc:
            raise _Stop(str(exc)) from None
        if hunk.move_path is None:
            await self._write(path, new.encode("utf-8"))
            self.delta.record(path, UpdateChange(old, new))
            self.affected.modified.append(hunk.path)
            return
        dest = resolve(hunk.move_path, self.cwd)
        overwritten = await self._existing_text(dest)
        await self._write(dest, new.encode("utf-8"))
        # The destination is committed from here on; should removing the
        # source fail, the delta still shows the new file.
        slot = self.delta.record(dest, AddChange(new, overwritten))
        follow = self.follow_symlinks
        try:
            meta = await self.fs.get_metadata(path, follow_symlinks=follow)
            if meta.is_directory and not meta.is_symlink:
                raise _Stop(f"Failed to remove original {path}")
            await self.fs.remove(path, recursive=False, force=False, follow_symlinks=follow)
        except OSError:
            raise _Stop(f"Failed to remove original {path}") from None
        self.delta.replace(slot, path, UpdateChange(old, new, dest, overwritten))
        self.affected.modified.append(hunk.move_path)


async def apply_hunks(
    hunks: Sequence[Hunk],
    fs: PatchFileSystem,
    cwd: str,
    *,
    follow_symlinks: bool = True,
) -> tuple[AffectedPaths, AppliedPatchDelta]:
    """Apply ``hunks`` with relative paths resolved against ``cwd`` (absolute,
    on the executor). Raises :class:`PatchApplyError` carrying the partial
    delta on the first failure."""
    run = _Run(fs, cwd, follow_symlinks)
    if not hunks:
        raise PatchApplyError(NO_FILES_MODIFIED, run.delta)
    for hunk in hunks:
        try:
            if isinstance(hunk, AddFile):
                await run.add(hunk)
            elif isinstance(hunk, DeleteFile):
                await run.delete(hunk)
            else:
                await run.update(hunk)
        except _Stop as stop:
            raise PatchApplyError(stop.message, run.delta) from None
    return run.affected, run.delta
