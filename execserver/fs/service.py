"""fs/* methods: parameter checks, routing to worker threads or the sandbox,
and the connection-scoped handle table and watch.

Checks the reference makes while decoding params (URI syntax, sandbox shape,
base64 of fs/writeBlock) run in the ``prepare`` step of the params decoder (see
fs/requests.py) so they come before lifecycle errors; everything else runs in
the handler.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, Any

from execserver.fs import handle_io, ops_read, ops_write
from execserver.fs import operations as op
from execserver.fs.dispatch import (
    caller_of,
    in_thread,
    in_thread_to_completion,
    needs_sandbox,
    run_as_tenant,
    run_cheap_fs_op_at_once,
    run_fs_op,
    run_sandboxed,
    sandboxed_fs,
    who_asks,
)
from execserver.fs.handle_io import open_fd
from execserver.fs.handles import FileHandles
from execserver.fs.paths import native_path
from execserver.fs.requests import (
    BlockWrite,
    PathRequest,
    check_copy,
    check_path,
    check_watch,
    decode_block,
)
from execserver.fs.sandboxed.client import SandboxedFs
from execserver.fs.sandboxed_open import open_handle_fd
from execserver.fs.watch import MissingWatch
from execserver.kernel.context import RequestContext
from execserver.kernel.limits import check_below
from execserver.kernel.methods import MUST_WAIT, MethodTable, MustWait
from execserver.tenancy.fs_access import FsPath, as_tenant, confine_watch
from execserver.tenancy.seat import tenant_of
from execserver.wire import methods as m
from execserver.wire.base import Empty
from execserver.wire.base64_text import base64_text
from execserver.wire.contract import EncodesAs
from execserver.wire.errors import RpcError
from execserver.wire.fs import (
    CanonicalizeParams,
    CanonicalizeResponse,
    CloseParams,
    CopyParams,
    CreateDirectoryParams,
    FileMetadata,
    GetMetadataParams,
    MissingChangedNotification,
    OpenParams,
    OpenResponse,
    ReadBlockParams,
    ReadBlockResponse,
    ReadDirectoryParams,
    ReadDirectoryResponse,
    ReadFileParams,
    ReadFileResponse,
    RemoveParams,
    WalkOutcome,
    WalkParams,
    WatchMissingParams,
    WatchMissingResponse,
    WriteFileParams,
)
from execserver.wire.rust.base64 import Base64Error, decode_base64

__all__ = ["register"]

FAMILY = "filesystem"
WALK_MAX_DEPTH, WALK_MAX_DIRECTORIES, WALK_MAX_ENTRIES = 64, 10_000, 50_000

# Results built as dicts by a worker thread or the sandbox helper (the reference's
# JSON, without a second pass through a Struct); base64 made off the event loop.
MetadataResult = Annotated[dict[str, Any], EncodesAs(FileMetadata)]


# Base64 text decoded on the event loop rather than in a worker: pybase64 takes
# ~0.1 ms for 1 MiB on the benchmark VM (64 KiB: 6.4 us).
INLINE_DECODE_MAX = 1 << 20
# fs/readFile answered on the event loop (no worker thread, ~0.09 ms less per call)
# up to this size, when the page cache holds the whole file (ops_read).
INLINE_READ_MAX = 64 << 10

# ---- whole-path operations ------------------------------------------------------------


def _audit(ctx: RequestContext, op: str, path: str, **fields: Any) -> None:
    """Record a successful change in the audit log (paths and sizes, never contents)."""
    session = ctx.peer.session
    ctx.server.telemetry.fs_changed(session.id if session else None, op, path, **fields)


def _fs(ctx: RequestContext) -> Callable[[], SandboxedFs]:
    """The server's sandboxed-fs client, looked up only when a sandbox needs it."""
    return lambda: sandboxed_fs(ctx)


ReadFileResult = Annotated[dict[str, str], EncodesAs(ReadFileResponse)]


def _read_cached_file(path: str, follow_symlinks: bool) -> str | MustWait:
    data = ops_read.read_cached_file_bytes(path, follow_symlinks, INLINE_READ_MAX)
    return MUST_WAIT if data is None else base64_text(data)


def read_file_at_once(
    ctx: RequestContext, req: PathRequest[ReadFileParams]
) -> ReadFileResult | MustWait:
    """fs/readFile inline when the file is small and all in the page cache, no sandbox
    restricts reads and no mount can block; else MUST_WAIT (``read_file`` reads it
    in a worker). Errors from opening it are the worker's own (ops_read)."""
    if tenant_of(ctx) is not None:
        return MUST_WAIT  # a tenant's read runs in a worker, with its identity
    params = req.params
    args = {"path": native_path(params.path), "follow_symlinks": params.follow_symlinks}
    data: str | MustWait = run_cheap_fs_op_at_once(req.sandbox, _read_cached_file, args)
    if isinstance(data, MustWait):
        return MUST_WAIT
    return {"dataBase64": data}


async def read_file(ctx: RequestContext, req: PathRequest[ReadFileParams]) -> ReadFileResult:
    params = req.params
    args = {"path": native_path(params.path), "follow_symlinks": params.follow_symlinks}
    data: str = await run_fs_op(
        req.sandbox, op.READ_FILE, args, write=False, fs=_fs(ctx), **who_asks(ctx)
    )
    return {"dataBase64": data}


async def write_file(ctx: RequestContext, req: PathRequest[WriteFileParams]) -> Empty:
    params = req.params
    path = native_path(params.path)
    text = params.data_base64
    try:
        # Decoded in the handler (after the lifecycle check) with -32600: as the
        # reference. Inline up to INLINE_DECODE_MAX (~0.1 ms at most), where a thread
        # hop (~0.09 ms of latency) would cost more than the decode.
        if len(text) <= INLINE_DECODE_MAX:
            data = decode_base64(text)
        else:
            data = await in_thread(decode_base64, text)
    except Base64Error as exc:
        raise RpcError.invalid_request(
            f"fs/writeFile requires valid base64 dataBase64: {exc}"
        ) from None
    sandbox = req.sandbox
    who = who_asks(ctx)
    tenant = who.get("tenant")
    if tenant is not None:
        limit = who["glob_scan_limit"]
        write = ops_write.write_file_bytes
        follow = params.follow_symlinks
        await run_as_tenant(
            tenant, sandbox, [(path, True)], write, path, data, follow, glob_scan_limit=limit
        )
    elif needs_sandbox(sandbox, write=True):
        assert sandbox is not None
        # Raw bytes: the persistent helper takes them as they are (no second base64).
        args = {"path": path, "data": data, "follow_symlinks": params.follow_symlinks}
        await run_sandboxed(sandbox, op.WRITE_FILE, args, sandboxed_fs(ctx), caller_of(ctx))
    else:
        await in_thread(ops_write.write_file_bytes, path, data, params.follow_symlinks)
    _audit(ctx, "write", path, bytes=len(data))
    return Empty()


async def create_directory(ctx: RequestContext, req: PathRequest[CreateDirectoryParams]) -> Empty:
    params = req.params
    path = native_path(params.path)
    args = {"path": path, "recursive": params.recursive, "follow_symlinks": params.follow_symlinks}
    await run_fs_op(
        req.sandbox, op.CREATE_DIRECTORY, args, write=True, fs=_fs(ctx), **who_asks(ctx)
    )
    _audit(ctx, "mkdir", path)
    return Empty()


def get_metadata_at_once(
    ctx: RequestContext, req: PathRequest[GetMetadataParams]
) -> MetadataResult | MustWait:
    """fs/getMetadata inline when no sandbox restricts reads and no mount can block."""
    if tenant_of(ctx) is not None:
        return MUST_WAIT  # a tenant's stat runs in a worker, with its identity
    params = req.params
    args = {"path": native_path(params.path), "follow_symlinks": params.follow_symlinks}
    result: MetadataResult | MustWait = run_cheap_fs_op_at_once(
        req.sandbox, ops_read.get_metadata, args
    )
    return result


async def get_metadata(ctx: RequestContext, req: PathRequest[GetMetadataParams]) -> MetadataResult:
    params = req.params
    args = {"path": native_path(params.path), "follow_symlinks": params.follow_symlinks}
    result: dict[str, Any] = await run_fs_op(
        req.sandbox, op.GET_METADATA, args, write=False, fs=_fs(ctx), **who_asks(ctx), cheap=True
    )
    return result


async def canonicalize(
    ctx: RequestContext, req: PathRequest[CanonicalizeParams]
) -> CanonicalizeResponse:
    args = {"path": native_path(req.params.path)}
    uri = await run_fs_op(
        req.sandbox, op.CANONICALIZE, args, write=False, fs=_fs(ctx), **who_asks(ctx), cheap=True
    )
    return CanonicalizeResponse(path=uri)


async def read_directory(
    ctx: RequestContext, req: PathRequest[ReadDirectoryParams]
) -> Annotated[dict[str, Any], EncodesAs(ReadDirectoryResponse)]:
    args = {"path": native_path(req.params.path)}
    entries = await run_fs_op(
        req.sandbox, op.READ_DIRECTORY, args, write=False, fs=_fs(ctx), **who_asks(ctx)
    )
    return {"entries": entries}


async def walk_tree(
    ctx: RequestContext, req: PathRequest[WalkParams]
) -> Annotated[dict[str, Any], EncodesAs(WalkOutcome)]:
    params = req.params
    opts = params.options
    if opts.max_directories == 0 or opts.max_entries == 0:
        raise RpcError.invalid_request("filesystem walk limits must be greater than zero")
    if (
        opts.max_depth > WALK_MAX_DEPTH
        or opts.max_directories > WALK_MAX_DIRECTORIES
        or opts.max_entries > WALK_MAX_ENTRIES
    ):
        raise RpcError.invalid_request(
            f"filesystem walk limits exceed maximums: depth={WALK_MAX_DEPTH}, "
            f"directories={WALK_MAX_DIRECTORIES}, entries={WALK_MAX_ENTRIES}"
        )
    args = {
        "path": native_path(params.path),
        "max_depth": opts.max_depth,
        "max_directories": opts.max_directories,
        "max_entries": opts.max_entries,
        "follow_directory_symlinks": opts.follow_directory_symlinks,
        "prune_hidden_directories": opts.prune_hidden_directories,
    }
    result: dict[str, Any] = await run_fs_op(
        req.sandbox, op.WALK, args, write=False, fs=_fs(ctx), **who_asks(ctx)
    )
    return result


async def remove(ctx: RequestContext, req: PathRequest[RemoveParams]) -> Empty:
    params = req.params
    path = native_path(params.path)
    args = {
        "path": path,
        "recursive": params.recursive,
        "force": params.force,
        "follow_symlinks": params.follow_symlinks,
    }
    await run_fs_op(req.sandbox, op.REMOVE, args, write=True, fs=_fs(ctx), **who_asks(ctx))
    _audit(ctx, "remove", path)
    return Empty()


async def copy(ctx: RequestContext, req: PathRequest[CopyParams]) -> Empty:
    params = req.params
    source, destination = native_path(params.source_path), native_path(params.destination_path)
    args = {"source_path": source, "destination_path": destination, "recursive": params.recursive}
    paths: list[FsPath] = [(source, False), (destination, True)]
    await run_fs_op(
        req.sandbox, op.COPY, args, write=True, fs=_fs(ctx), paths=paths, **who_asks(ctx)
    )
    _audit(ctx, "copy", destination, source=source)
    return Empty()


# ---- handles ------------------------------------------------------------------------


def _handles(ctx: RequestContext) -> FileHandles:
    return ctx.peer.state.get(FileHandles, FileHandles)


async def open_handle(ctx: RequestContext, req: PathRequest[OpenParams]) -> OpenResponse:
    params = req.params
    handles = _handles(ctx)
    # --max-open-files, an operator's cap below the protocol's 128.
    what = "too many open file handles on this connection"
    check_below(ctx.server.config.limits, "max_open_files", len(handles), what)
    handles.reserve(params.handle_id)
    try:
        path = native_path(params.path)
        fd = await _open_fd(ctx, req, path)
    except BaseException:
        handles.unreserve(params.handle_id)
        raise
    handles.install(params.handle_id, fd)
    return OpenResponse(handle_id=params.handle_id)


async def _open_fd(ctx: RequestContext, req: PathRequest[OpenParams], path: str) -> int:
    who = who_asks(ctx)
    tenant = who.get("tenant")
    mode = req.params.mode
    if tenant is None:
        return await open_handle_fd(req.sandbox, path, mode, _fs(ctx), caller_of(ctx))
    # The tenant's own open (its identity), so the handle carries only its rights.
    reached: list[FsPath] = [(path, mode == "replace")]
    limit = who["glob_scan_limit"]
    opening = functools.partial(
        as_tenant, tenant, req.sandbox, reached, open_fd, path, mode, glob_scan_limit=limit
    )
    # As the daemon's own open: a cancelled caller's fd is closed, not leaked.
    return await in_thread_to_completion(opening, on_abandon=os.close)


def _block_length_error(kind: str) -> RpcError:
    return RpcError.invalid_request(
        f"file {kind} block length must be between 1 and {handle_io.MAX_BLOCK}"
    )


def _read_block_b64(fd: int, offset: int, length: int) -> tuple[str, int]:
    data = handle_io.read_block(fd, offset, length)
    return base64_text(data), len(data)


async def read_block(
    ctx: RequestContext, params: ReadBlockParams
) -> Annotated[dict[str, Any], EncodesAs(ReadBlockResponse)]:
    length, offset = params.len, params.offset
    if not 1 <= length <= handle_io.MAX_BLOCK:
        raise _block_length_error("read")
    handles = _handles(ctx)
    handle = handles.acquire(params.handle_id)
    try:
        chunk, size = await in_thread_to_completion(_read_block_b64, handle.fd, offset, length)
    except RpcError:
        # The reference forgets a handle whose read failed.
        handles.discard(params.handle_id, handle)
        raise
    finally:
        handles.release(handle)
    # eof only on a short read: a block ending exactly at EOF is not eof yet.
    return {"chunk": chunk, "eof": size < length}


async def write_block(ctx: RequestContext, block: BlockWrite) -> Empty:
    params, data = block.params, block.data
    length, offset = len(data), params.offset
    if not 1 <= length <= handle_io.MAX_BLOCK:
        raise _block_length_error("write")
    if offset + length > handle_io.MAX_FILE_OFFSET:
        raise RpcError.invalid_request(
            "file write range exceeds the signed 64-bit file offset limit"
        )
    handles = _handles(ctx)
    handle = handles.acquire(params.handle_id)
    try:
        await in_thread_to_completion(handle_io.write_block, handle.fd, offset, data)
    finally:
        handles.release(handle)
    _audit(ctx, "writeBlock", params.handle_id, offset=offset, bytes=length)
    return Empty()


async def close_handle(ctx: RequestContext, params: CloseParams) -> Empty:
    handles = ctx.peer.state.peek(FileHandles)
    if handles is not None:
        handles.discard(params.handle_id)
    return Empty()


# ---- fs/watchMissing ----------------------------------------------------------------------


async def watch_missing(ctx: RequestContext, params: WatchMissingParams) -> WatchMissingResponse:
    connection = ctx.peer

    async def notify(watch_id: int) -> None:
        note = MissingChangedNotification(watch_id=watch_id)
        await connection.send_notification(m.FS_MISSING_CHANGED, note)

    watch = connection.state.get(MissingWatch, lambda: MissingWatch(notify))
    missing = [native_path(uri) for uri in params.missing]
    present = native_path(params.present) if params.present is not None else None
    tenant = tenant_of(ctx)
    if tenant is not None:
        # The watch itself runs as the daemon: a tenant may watch only inside its roots.
        watch_roots = tenant.may_read_roots() or tenant.writable_roots
        for path in [*missing, *([present] if present is not None else [])]:
            await in_thread(confine_watch, tenant, path, watch_roots)
    watching = await watch.watch(params.watch_id, missing, present)
    return WatchMissingResponse(watching=watching)


def register(table: MethodTable) -> None:
    add = table.add
    add(
        m.FS_READ_FILE,
        read_file,
        family=FAMILY,
        prepare=check_path,
        at_once=read_file_at_once,
    )
    add(m.FS_WRITE_FILE, write_file, family=FAMILY, prepare=check_path)
    add(m.FS_CREATE_DIRECTORY, create_directory, family=FAMILY, prepare=check_path)
    add(
        m.FS_GET_METADATA,
        get_metadata,
        family=FAMILY,
        prepare=check_path,
        at_once=get_metadata_at_once,
    )
    add(m.FS_CANONICALIZE, canonicalize, family=FAMILY, prepare=check_path)
    add(m.FS_READ_DIRECTORY, read_directory, family=FAMILY, prepare=check_path)
    add(m.FS_WALK, walk_tree, family=FAMILY, prepare=check_path)
    add(m.FS_REMOVE, remove, family=FAMILY, prepare=check_path)
    add(m.FS_COPY, copy, family=FAMILY, prepare=check_copy)
    add(m.FS_OPEN, open_handle, family=FAMILY, prepare=check_path)
    add(m.FS_READ_BLOCK, read_block, family=FAMILY)
    add(m.FS_WRITE_BLOCK, write_block, family=FAMILY, prepare=decode_block)
    add(m.FS_CLOSE, close_handle, family=FAMILY)
    add(m.FS_WATCH_MISSING, watch_missing, family=FAMILY, prepare=check_watch)
    # fs/open "replace" + fs/writeBlock, and fs/open under a sandbox, both work.
    table.capabilities.update(
        {"fs_watch_missing", "file_write_streaming", "sandboxed_file_streaming"}
    )
