"""The one-shot patch command's file-system calls send what the async client's
RemoteFileSystem sends: same methods, same params (every key, same values)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from execserver.client.blocking_rpc import BlockingRpcSession, run_blocking
from execserver.client.errors import MethodNotFound, PayloadTooLarge
from execserver.client.fs import RemoteFileSystem
from execserver.core.apply_patch.blocking_fs import BlockingFileSystem
from execserver.wire.contract import REQUESTS

SANDBOX: dict[str, Any] = {
    "permissions": {
        "type": "managed",
        "file_system": {"type": "restricted", "entries": []},
        "network": "restricted",
    },
    "cwd": "file:///w",
    "workspaceRoots": ["file:///w"],
    "windowsSandboxLevel": "disabled",
}


class RecordingSession(BlockingRpcSession):
    """Keeps each request instead of sending it (the comparison is of what
    would go on the wire); answers with the minimal valid result."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def call(self, method: str, params: Any, *, timeout: float | None = 60.0) -> Any:
        self.sent.append((method, dict(params)))
        return {
            "fs/getMetadata": {
                "isDirectory": False,
                "isFile": True,
                "isSymlink": False,
                "size": 0,
                "createdAtMs": 0,
                "modifiedAtMs": 0,
            },
            "fs/readFile": {"dataBase64": "aGk="},
        }.get(method, {})


class RecordingCaller:
    """The async client's side of the same comparison."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def call(self, method: str, params: msgspec.Struct, **_: Any) -> Any:
        self.sent.append((method, msgspec.json.decode(msgspec.json.encode(params))))
        result_type = REQUESTS[method][1]
        answer = RecordingSession().call(method, {})
        return msgspec.convert(answer, result_type)


CALLS = [
    ("get_metadata", ("/w/a b/ü.txt",), {"follow_symlinks": False}),
    ("read_file", ("/w/x/../y.txt",), {}),
    ("write_file", ("/w/new.txt", b"\x00\xffdata\n"), {"follow_symlinks": True}),
    ("create_directory", ("/w/d/e",), {"recursive": True}),
    ("remove", ("/w/old.txt",), {"recursive": False, "force": False}),
]


@pytest.mark.parametrize("sandbox", [None, SANDBOX], ids=["unsandboxed", "sandboxed"])
@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
async def test_same_request_as_the_async_client(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], sandbox: dict[str, Any] | None
) -> None:
    session = RecordingSession()
    blocking = BlockingFileSystem(session, sandbox)
    result = run_blocking(getattr(blocking, name)(*args, **kwargs))
    caller = RecordingCaller()
    remote = RemoteFileSystem(caller, sandbox)
    expected = await getattr(remote, name)(*args, **kwargs)
    assert session.sent == caller.sent
    assert len(session.sent) == 1
    method, params = session.sent[0]
    # Every key is one the wire type knows (an unknown one would be dropped here).
    params_type = REQUESTS[method][0]
    typed: object = msgspec.json.decode(msgspec.json.encode(params), type=params_type)
    assert msgspec.json.decode(msgspec.json.encode(typed)) == params
    if name == "read_file":
        assert result == expected == b"hi"
    elif name == "get_metadata":
        assert (result.is_file, result.is_directory, result.is_symlink) == (
            expected.is_file,
            expected.is_directory,
            expected.is_symlink,
        )


def test_relative_paths_are_refused_as_by_the_async_client() -> None:
    blocking = BlockingFileSystem(RecordingSession(), None)
    with pytest.raises(ValueError, match="absolute"):
        run_blocking(blocking.read_file("relative.txt"))


def test_run_blocking_refuses_a_coroutine_that_suspends() -> None:
    import asyncio

    async def suspends() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="suspends"):
        run_blocking(suspends())


def test_the_blocking_limits_are_the_async_clients() -> None:
    from execserver.client import fs as async_fs
    from execserver.core.apply_patch import blocking_fs

    assert blocking_fs.WRITE_FILE_INLINE_LIMIT == async_fs.WRITE_FILE_INLINE_LIMIT
    assert blocking_fs.WRITE_BLOCK_LIMIT == async_fs.WRITE_BLOCK_LIMIT


class NoHandlesSession(RecordingSession):
    """A server without fs/open (-32601)."""

    def call(self, method: str, params: Any, *, timeout: float | None = 60.0) -> Any:
        if method == "fs/open":
            raise MethodNotFound(-32601, "unknown method fs/open")
        return super().call(method, params, timeout=timeout)


def test_a_big_write_to_a_server_without_handles_is_refused_before_any_block() -> None:
    session = NoHandlesSession()
    fs = BlockingFileSystem(session, None)
    with pytest.raises(PayloadTooLarge, match="no fs/open"):
        run_blocking(fs.write_file("/w/big", b"x" * (32 * 1024 * 1024 + 1)))
    assert [method for method, _ in session.sent] == []  # nothing sent but the refused open
    with pytest.raises(PayloadTooLarge, match="follow_symlinks=False"):
        run_blocking(fs.write_file("/w/big", b"x" * (32 * 1024 * 1024 + 1), follow_symlinks=False))
