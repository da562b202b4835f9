"""RemoteFileSystem: the fs/* methods with a pathlib-flavoured Python API.

Paths are native absolute paths of the executor host (a ``file:`` URI is
accepted too); conversion to and from ``PathUri`` happens here only. Server
errors become ``OSError`` subclasses the way a local call would raise them:
the OS error number in the message picks the subclass
(``Directory not empty (os error 39)`` -> ``OSError(ENOTEMPTY)``), -32004 is
``FileNotFoundError``, a lost transport is ``BrokenPipeError``. The original
``ExecServerError`` is chained as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Final, Literal, TypeVar

import msgspec

from execserver.client.calls import Caller
from execserver.client.errors import (
    ExecServerError,
    PayloadTooLarge,
)
from execserver.client.fs_errors import fs_error
from execserver.client.params import b64encode, wire_bytes
from execserver.client.sandbox import sandbox_param, to_uri
from execserver.client.transfer import DEFAULT_CONCURRENCY, Progress, TransferSummary
from execserver.wire import methods
from execserver.wire.fs import (
    CanonicalizeParams,
    CloseParams,
    CopyParams,
    CreateDirectoryParams,
    DirectoryEntry,
    FileMetadata,
    GetMetadataParams,
    OpenParams,
    ReadBlockParams,
    ReadDirectoryParams,
    ReadFileParams,
    RemoveParams,
    WalkOptions,
    WalkOutcome,
    WalkParams,
    WriteBlockParams,
    WriteFileParams,
)
from execserver.wire.uri import uri_to_path

__all__ = [
    "WRITE_BLOCK_LIMIT",
    "WRITE_FILE_INLINE_LIMIT",
    "RemoteFileHandle",
    "RemoteFileSystem",
    "RemotePath",
    "fs_error",
]

T = TypeVar("T")

# The server's bound on one fs/writeBlock (and fs/readBlock) chunk.
WRITE_BLOCK_LIMIT: Final = 1024 * 1024
# The largest fs/writeFile sent as one message: its base64 (4/3) plus the JSON
# around it stays well below the protocol's 64 MiB message limit.
WRITE_FILE_INLINE_LIMIT: Final = 32 * 1024 * 1024
# Blocks of one large write sent at once (each a 1.4 MiB message).
WRITE_BLOCKS_IN_FLIGHT: Final = 4


def _native(path: str | os.PathLike[str] | RemotePath) -> str:
    if isinstance(path, RemotePath):
        return path.path
    text = os.fspath(path)
    if text.startswith("file:"):
        return uri_to_path(text)
    if not text.startswith("/"):
        raise ValueError(f"remote paths must be absolute: {text!r}")
    return posixpath.normpath(text)


async def _os_errors(call: Awaitable[T], path: str) -> T:
    """Await one fs call; a server error becomes the ``OSError`` a local call
    would have raised for ``path``."""
    try:
        return await call
    except ExecServerError as exc:
        raise fs_error(exc, path) from exc


class RemoteFileSystem:
    """fs/* calls of one client, optionally under a ``FileSystemSandboxContext``.

    ``sandbox`` (a wire Struct or a plain mapping) is sent unchanged with every
    call that accepts one; :meth:`with_sandbox` makes a sibling with another.
    """

    def __init__(self, caller: Caller, sandbox: object = None) -> None:
        self._caller = caller
        self.sandbox = sandbox

    def with_sandbox(self, sandbox: object) -> RemoteFileSystem:
        return RemoteFileSystem(self._caller, sandbox)

    def path(self, path: str | os.PathLike[str]) -> RemotePath:
        return RemotePath(self, _native(path))

    def _sandbox(self) -> msgspec.Raw:
        return sandbox_param(self.sandbox)

    @property
    def caller(self) -> Caller:
        return self._caller

    async def read_file(
        self, path: str | os.PathLike[str] | RemotePath, *, follow_symlinks: bool = True
    ) -> bytes:
        p = _native(path)
        params = ReadFileParams(
            path=to_uri(p), sandbox=self._sandbox(), follow_symlinks=follow_symlinks
        )
        result = await _os_errors(self._caller.call(methods.FS_READ_FILE, params), p)
        return wire_bytes(result.data_base64)

    async def write_file(
        self,
        path: str | os.PathLike[str] | RemotePath,
        data: bytes,
        *,
        follow_symlinks: bool = True,
    ) -> None:
        """Create or truncate. The parent must exist (the server does not create it).

        Up to ``WRITE_FILE_INLINE_LIMIT`` (32 MiB) this is one ``fs/writeFile``.
        Larger data would not fit the protocol's 64 MiB message once base64
        encoded, so it goes through a handle instead (``fs/open`` "replace", then
        1 MiB ``fs/writeBlock``s): the file is truncated first and fills up block
        by block, so a failure part-way leaves it partly written.
        ``follow_symlinks=False`` is not possible that way and is refused for
        such sizes (:class:`PayloadTooLarge`), as is a server without
        ``fileWriteStreaming``."""
        p = _native(path)
        if len(data) > WRITE_FILE_INLINE_LIMIT:
            await self._write_file_streamed(p, data, follow_symlinks=follow_symlinks)
            return
        encoded = b64encode(data)
        params = WriteFileParams(
            path=to_uri(p),
            data_base64=encoded,
            sandbox=self._sandbox(),
            follow_symlinks=follow_symlinks,
        )
        await _os_errors(self._caller.call(methods.FS_WRITE_FILE, params), p)

    async def _write_file_streamed(self, path: str, data: bytes, *, follow_symlinks: bool) -> None:
        if not follow_symlinks:
            raise PayloadTooLarge(
                f"fs.write_file({path!r}) of {len(data)} bytes with follow_symlinks=False: "
                f"only up to {WRITE_FILE_INLINE_LIMIT} bytes fit one fs/writeFile, and the "
                "handle it streams through otherwise cannot refuse a symlink"
            )
        info = getattr(self._caller, "environment_info", None)
        capabilities = getattr(info, "capabilities", None)
        if capabilities is not None and not capabilities.file_write_streaming:
            raise PayloadTooLarge(
                f"fs.write_file({path!r}) of {len(data)} bytes: only up to "
                f"{WRITE_FILE_INLINE_LIMIT} bytes fit one fs/writeFile, and this server "
                "has no fileWriteStreaming (fs/open replace + fs/writeBlock); write it in "
                "parts, or copy it to the executor another way"
            )
        async with self.open(path, "replace") as handle:
            await handle.write_block(0, data)

    async def create_directory(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        recursive: bool = True,
        follow_symlinks: bool = True,
    ) -> None:
        p = _native(path)
        params = CreateDirectoryParams(
            path=to_uri(p),
            recursive=recursive,
            sandbox=self._sandbox(),
            follow_symlinks=follow_symlinks,
        )
        await _os_errors(self._caller.call(methods.FS_CREATE_DIRECTORY, params), p)

    async def get_metadata(
        self, path: str | os.PathLike[str] | RemotePath, *, follow_symlinks: bool = True
    ) -> FileMetadata:
        p = _native(path)
        params = GetMetadataParams(
            path=to_uri(p), sandbox=self._sandbox(), follow_symlinks=follow_symlinks
        )
        return await _os_errors(self._caller.call(methods.FS_GET_METADATA, params), p)

    async def canonicalize(self, path: str | os.PathLike[str] | RemotePath) -> str:
        p = _native(path)
        params = CanonicalizeParams(path=to_uri(p), sandbox=self._sandbox())
        result = await _os_errors(self._caller.call(methods.FS_CANONICALIZE, params), p)
        return uri_to_path(result.path)

    async def read_directory(
        self, path: str | os.PathLike[str] | RemotePath
    ) -> list[DirectoryEntry]:
        p = _native(path)
        params = ReadDirectoryParams(path=to_uri(p), sandbox=self._sandbox())
        result = await _os_errors(self._caller.call(methods.FS_READ_DIRECTORY, params), p)
        return result.entries

    async def walk(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        max_depth: int = 64,
        max_directories: int = 10_000,
        max_entries: int = 50_000,
        follow_directory_symlinks: bool = False,
        prune_hidden_directories: bool = False,
    ) -> WalkOutcome:
        p = _native(path)
        options = WalkOptions(
            max_depth=max_depth,
            max_directories=max_directories,
            max_entries=max_entries,
            follow_directory_symlinks=follow_directory_symlinks,
            prune_hidden_directories=prune_hidden_directories,
        )
        params = WalkParams(path=to_uri(p), options=options, sandbox=self._sandbox())
        return await _os_errors(self._caller.call(methods.FS_WALK, params), p)

    async def remove(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        recursive: bool = True,
        force: bool = True,
        follow_symlinks: bool = True,
    ) -> None:
        """Server defaults: a directory goes with its contents, a missing path is fine."""
        p = _native(path)
        params = RemoveParams(
            path=to_uri(p),
            recursive=recursive,
            force=force,
            sandbox=self._sandbox(),
            follow_symlinks=follow_symlinks,
        )
        await _os_errors(self._caller.call(methods.FS_REMOVE, params), p)

    async def copy(
        self,
        source: str | os.PathLike[str] | RemotePath,
        destination: str | os.PathLike[str] | RemotePath,
        *,
        recursive: bool = False,
    ) -> None:
        src, dst = _native(source), _native(destination)
        params = CopyParams(
            source_path=to_uri(src),
            destination_path=to_uri(dst),
            recursive=recursive,
            sandbox=self._sandbox(),
        )
        await _os_errors(self._caller.call(methods.FS_COPY, params), src)

    async def upload(
        self,
        local_dir: str | os.PathLike[str],
        remote_dir: str | os.PathLike[str] | RemotePath,
        *,
        progress: Progress | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> TransferSummary:
        """Copy the tree under ``local_dir`` into ``remote_dir`` (created with its
        parents): contents, modes, symlinks as symlinks (their target text, never
        followed); other file types are skipped. ``progress(done, total)`` after
        each file (bytes); ``concurrency`` files in flight. Modes and links are
        set by commands on the executor (``chmod``, ``ln``)."""
        from execserver.client import transfer

        return await transfer.upload(
            self, local_dir, _native(remote_dir), progress=progress, concurrency=concurrency
        )

    async def download(
        self,
        remote_dir: str | os.PathLike[str] | RemotePath,
        local_dir: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> TransferSummary:
        """Copy the tree under ``remote_dir`` into ``local_dir`` (created with its
        parents), as :meth:`upload` does the other way. The tree is listed with
        GNU ``find -printf`` on the executor."""
        from execserver.client import transfer

        return await transfer.download(
            self, _native(remote_dir), local_dir, progress=progress, concurrency=concurrency
        )

    @asynccontextmanager
    async def open(
        self, path: str | os.PathLike[str] | RemotePath, mode: Literal["read", "replace"] = "read"
    ) -> AsyncIterator[RemoteFileHandle]:
        """A random-access handle (``fs/open``); ``replace`` truncates at once.
        Handles belong to the connection: a reconnect invalidates them."""
        p = _native(path)
        handle_id = uuid.uuid4().hex  # 32 bytes, the server's maximum
        params = OpenParams(handle_id=handle_id, path=to_uri(p), mode=mode, sandbox=self._sandbox())
        await _os_errors(self._caller.call(methods.FS_OPEN, params), p)
        handle = RemoteFileHandle(self, handle_id, p)
        try:
            yield handle
        finally:
            await handle.close()


class RemoteFileHandle:
    """An open ``fs/open`` handle: absolute-offset block reads and writes."""

    def __init__(self, fs: RemoteFileSystem, handle_id: str, path: str) -> None:
        self._fs = fs
        self.handle_id = handle_id
        self.path = path

    async def read_block(self, offset: int, length: int) -> tuple[bytes, bool]:
        """``(data, eof)``; eof only on a short read."""
        params = ReadBlockParams(handle_id=self.handle_id, offset=offset, len=length)
        caller = self._fs.caller
        result = await _os_errors(caller.call(methods.FS_READ_BLOCK, params), self.path)
        return wire_bytes(result.chunk), result.eof

    async def write_block(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset``. The server takes 1 MiB per ``fs/writeBlock``
        (``WRITE_BLOCK_LIMIT``); more is sent as several blocks, a few in flight
        at a time (the offsets are absolute, so their order does not matter).
        Empty data writes nothing, as a local write would."""
        view = memoryview(data)
        blocks = [
            (offset + start, view[start : start + WRITE_BLOCK_LIMIT])
            for start in range(0, len(data), WRITE_BLOCK_LIMIT)
        ]
        if len(blocks) == 1:
            await self._write_one(*blocks[0])
            return
        pending = iter(blocks)

        async def lane() -> None:
            for at, block in pending:
                await self._write_one(at, block)

        await asyncio.gather(*(lane() for _ in range(min(WRITE_BLOCKS_IN_FLIGHT, len(blocks)))))

    async def _write_one(self, offset: int, block: memoryview) -> None:
        params = WriteBlockParams(handle_id=self.handle_id, offset=offset, chunk=b64encode(block))
        await _os_errors(self._fs.caller.call(methods.FS_WRITE_BLOCK, params), self.path)

    async def close(self) -> None:
        params = CloseParams(handle_id=self.handle_id)
        await _os_errors(self._fs.caller.call(methods.FS_CLOSE, params), self.path)


class RemotePath:
    """A path on the executor host, with awaitable pathlib-style methods."""

    __slots__ = ("fs", "path")

    def __init__(self, fs: RemoteFileSystem, path: str) -> None:
        self.fs = fs
        self.path = path

    def __repr__(self) -> str:
        return f"RemotePath({self.path!r})"

    def __str__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __truediv__(self, other: str) -> RemotePath:
        return RemotePath(self.fs, posixpath.normpath(posixpath.join(self.path, other)))

    @property
    def uri(self) -> str:
        return to_uri(self.path)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.fs, posixpath.dirname(self.path))

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    async def read_bytes(self) -> bytes:
        return await self.fs.read_file(self.path)

    async def read_text(self, encoding: str = "utf-8") -> str:
        return (await self.read_bytes()).decode(encoding)

    async def write_bytes(self, data: bytes) -> None:
        await self.fs.write_file(self.path, data)

    async def write_text(self, text: str, encoding: str = "utf-8") -> None:
        await self.write_bytes(text.encode(encoding))

    async def stat(self, *, follow_symlinks: bool = True) -> FileMetadata:
        return await self.fs.get_metadata(self.path, follow_symlinks=follow_symlinks)

    async def exists(self) -> bool:
        try:
            await self.stat()
        except FileNotFoundError:
            return False
        return True

    async def is_file(self) -> bool:
        try:
            return (await self.stat()).is_file
        except FileNotFoundError:
            return False

    async def is_dir(self) -> bool:
        try:
            return (await self.stat()).is_directory
        except FileNotFoundError:
            return False

    async def is_symlink(self) -> bool:
        try:
            return (await self.stat()).is_symlink
        except FileNotFoundError:
            return False

    async def mkdir(self, *, parents: bool = False, exist_ok: bool = False) -> None:
        if parents and not exist_ok and await self.exists():
            raise FileExistsError(errno.EEXIST, "File exists", self.path)
        try:
            await self.fs.create_directory(self.path, recursive=parents)
        except FileExistsError:
            if not (exist_ok and await self.is_dir()):
                raise

    async def iterdir(self) -> list[RemotePath]:
        return [self / entry.file_name for entry in await self.fs.read_directory(self.path)]

    async def unlink(self, *, missing_ok: bool = False) -> None:
        try:
            meta = await self.stat()
        except FileNotFoundError:
            if missing_ok:
                return
            raise
        if meta.is_directory and not meta.is_symlink:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", self.path)
        await self.fs.remove(self.path, recursive=False, force=missing_ok)

    async def rmdir(self) -> None:
        if not await self.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", self.path)
        await self.fs.remove(self.path, recursive=False, force=False)

    async def rmtree(self) -> None:
        await self.fs.remove(self.path, recursive=True, force=False)

    async def resolve(self) -> RemotePath:
        return RemotePath(self.fs, await self.fs.canonicalize(self.path))

    async def copy_to(self, target: RemotePath | str, *, recursive: bool = False) -> RemotePath:
        dest = target if isinstance(target, RemotePath) else self.fs.path(target)
        await self.fs.copy(self.path, dest.path, recursive=recursive)
        return dest
