"""The applier's file-system calls (:class:`PatchFileSystem`) over a
:class:`BlockingRpcSession`, for the one-shot ``execserver patch``.

The same fs/* requests :class:`execserver.client.RemoteFileSystem` sends (every
key written, in the wire structs' order; ``tests/unit/test_blocking_fs.py``
compares them) and the same ``OSError`` for a server error
(:func:`execserver.client.fs_errors.fs_error`). The methods are ``async def``
because the applier awaits them, but each one blocks until its answer is in:
the applier's coroutine runs to its end under
:func:`execserver.client.blocking_rpc.run_blocking`.
"""

from __future__ import annotations

import base64
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from execserver.client.blocking_rpc import BlockingRpcSession
from execserver.client.errors import ExecServerError, MethodNotFound, PayloadTooLarge
from execserver.client.fs_errors import fs_error
from execserver.wire.uri import path_to_uri

__all__ = ["BlockingFileSystem", "BlockingMetadata"]

# execserver.client.fs's WRITE_FILE_INLINE_LIMIT and WRITE_BLOCK_LIMIT (not imported:
# that module costs a one-shot command its start-up; a unit test keeps them equal).
# A write beyond the first would not fit the protocol's 64 MiB message once base64
# encoded; it goes through a handle in blocks of the second.
WRITE_FILE_INLINE_LIMIT = 32 * 1024 * 1024
WRITE_BLOCK_LIMIT = 1024 * 1024


class BlockingMetadata:
    """The part of an fs/getMetadata answer the applier reads."""

    __slots__ = ("is_directory", "is_file", "is_symlink")

    def __init__(self, result: Mapping[str, Any]) -> None:
        self.is_directory = bool(result["isDirectory"])
        self.is_file = bool(result["isFile"])
        self.is_symlink = bool(result["isSymlink"])


def _native(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"remote paths must be absolute: {path!r}")
    return posixpath.normpath(path)


class BlockingFileSystem:
    """fs/* calls of one session, all under ``sandbox`` (a
    FileSystemSandboxContext as plain JSON values; None: unsandboxed)."""

    def __init__(self, session: BlockingRpcSession, sandbox: Mapping[str, Any] | None) -> None:
        self._session = session
        self._sandbox = sandbox

    def _path_params(self, path: str, follow_symlinks: bool) -> dict[str, Any]:
        return {
            "path": path_to_uri(path),
            "sandbox": self._sandbox,
            "followSymlinks": follow_symlinks,
        }

    def _call(self, method: str, path: str, params: dict[str, Any]) -> Any:
        try:
            return self._session.call(method, params)
        except ExecServerError as exc:
            raise fs_error(exc, path) from exc

    async def get_metadata(self, path: str, *, follow_symlinks: bool = True) -> BlockingMetadata:
        p = _native(path)
        params = self._path_params(p, follow_symlinks)
        return BlockingMetadata(self._call("fs/getMetadata", p, params))

    async def read_file(self, path: str, *, follow_symlinks: bool = True) -> bytes:
        p = _native(path)
        params = self._path_params(p, follow_symlinks)
        result = self._call("fs/readFile", p, params)
        return base64.b64decode(result["dataBase64"], validate=True)

    async def write_file(self, path: str, data: bytes, *, follow_symlinks: bool = True) -> None:
        p = _native(path)
        if len(data) > WRITE_FILE_INLINE_LIMIT:
            self._write_streamed(p, data, follow_symlinks=follow_symlinks)
            return
        params = {
            "path": path_to_uri(p),
            "dataBase64": base64.b64encode(data).decode("ascii"),
            "sandbox": self._sandbox,
            "followSymlinks": follow_symlinks,
        }
        self._call("fs/writeFile", p, params)

    def _write_streamed(self, path: str, data: bytes, *, follow_symlinks: bool) -> None:
        """As RemoteFileSystem.write_file beyond the inline limit: ``fs/open``
        "replace", then ``fs/writeBlock`` after ``fs/writeBlock``, then ``fs/close``
        (a failure part-way leaves the file partly written)."""
        if not follow_symlinks:
            raise PayloadTooLarge(
                f"writing {path} ({len(data)} bytes) with follow_symlinks=False: only up to "
                f"{WRITE_FILE_INLINE_LIMIT} bytes fit one fs/writeFile, and the handle it "
                "streams through otherwise cannot refuse a symlink"
            )
        handle = os.urandom(16).hex()  # the servers take at most 32 bytes
        params: dict[str, Any] = {
            "handleId": handle,
            "path": path_to_uri(path),
            "mode": "replace",
            "sandbox": self._sandbox,
        }
        try:
            self._session.call("fs/open", params)
        except MethodNotFound as exc:  # the reference has no file handles
            raise PayloadTooLarge(
                f"writing {path} ({len(data)} bytes): only up to "
                f"{WRITE_FILE_INLINE_LIMIT} bytes fit one fs/writeFile, and this server "
                "has no fs/open to stream it through; copy the file another way"
            ) from exc
        except ExecServerError as exc:
            raise fs_error(exc, path) from exc
        view = memoryview(data)
        try:
            for offset in range(0, len(data), WRITE_BLOCK_LIMIT):
                block = view[offset : offset + WRITE_BLOCK_LIMIT]
                chunk = base64.b64encode(block).decode("ascii")
                self._call(
                    "fs/writeBlock",
                    path,
                    {"handleId": handle, "offset": offset, "chunk": chunk},
                )
        finally:
            self._call("fs/close", path, {"handleId": handle})

    async def create_directory(
        self, path: str, *, recursive: bool = True, follow_symlinks: bool = True
    ) -> None:
        p = _native(path)
        params = {
            "path": path_to_uri(p),
            "recursive": recursive,
            "sandbox": self._sandbox,
            "followSymlinks": follow_symlinks,
        }
        self._call("fs/createDirectory", p, params)

    async def remove(
        self,
        path: str,
        *,
        recursive: bool = True,
        force: bool = True,
        follow_symlinks: bool = True,
    ) -> None:
        p = _native(path)
        params = {
            "path": path_to_uri(p),
            "recursive": recursive,
            "force": force,
            "sandbox": self._sandbox,
            "followSymlinks": follow_symlinks,
        }
        self._call("fs/remove", p, params)
