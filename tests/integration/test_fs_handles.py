"""fs/open, fs/readBlock, fs/writeBlock, fs/close: semantics, limits, large files."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import b64, check_cases, connect, unb64, uri
from tests.support.servers import RunningServer

OK: dict[str, Any] = {"result": {}}
MIB = 1024 * 1024


def err(code: int, message: str) -> dict[str, Any]:
    return {"error": [code, message]}


def opened(handle_id: str) -> dict[str, Any]:
    return {"result": {"handleId": handle_id}}


def block(data: bytes, eof: bool) -> dict[str, Any]:
    return {"result": {"chunk": b64(data), "eof": eof}}


async def test_read_handle(any_server: RunningServer, tmp_path: Path) -> None:
    data = bytes(range(256))
    (tmp_path / "b.bin").write_bytes(data)
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "b.bin")
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    def rb(handle: str, offset: Any, length: Any) -> dict[str, Any]:
        return {"handleId": handle, "offset": offset, "len": length}

    cases = [
        ("open (mode omitted)", "fs/open", {"handleId": "h1", "path": u("b.bin")}, opened("h1")),
        ("first block", "fs/readBlock", rb("h1", 0, 10), block(data[:10], False)),
        ("crossing EOF", "fs/readBlock", rb("h1", 250, 10), block(data[250:], True)),
        (
            "ending exactly at EOF is not eof",
            "fs/readBlock",
            rb("h1", 246, 10),
            block(data[246:], False),
        ),
        ("at EOF", "fs/readBlock", rb("h1", 256, 10), block(b"", True)),
        ("past EOF", "fs/readBlock", rb("h1", 1000, 10), block(b"", True)),
        (
            "len 0",
            "fs/readBlock",
            rb("h1", 0, 0),
            err(-32600, "file read block length must be between 1 and 1048576"),
        ),
        (
            "len above 1 MiB",
            "fs/readBlock",
            rb("h1", 0, MIB + 1),
            err(-32600, "file read block length must be between 1 and 1048576"),
        ),
        (
            "len checked before the handle",
            "fs/readBlock",
            rb("nope", 0, 0),
            err(-32600, "file read block length must be between 1 and 1048576"),
        ),
        ("negative offset", "fs/readBlock", rb("h1", -1, 1), err(-32602, "invalid number")),
        ("fractional offset", "fs/readBlock", rb("h1", 1.5, 1), err(-32602, "invalid number")),
        (
            "write on a read handle",
            "fs/writeBlock",
            {"handleId": "h1", "offset": 0, "chunk": b64("x")},
            err(-32603, "Bad file descriptor (os error 9)"),
        ),
        (
            "the handle survives a failed write",
            "fs/readBlock",
            rb("h1", 0, 3),
            block(data[:3], False),
        ),
        (
            "duplicate id",
            "fs/open",
            {"handleId": "h1", "path": u("nope")},
            err(-32600, "file handle `h1` already exists"),
        ),
        ("close", "fs/close", {"handleId": "h1"}, OK),
        ("close again", "fs/close", {"handleId": "h1"}, OK),
        (
            "read after close",
            "fs/readBlock",
            rb("h1", 0, 10),
            err(-32004, "unknown file handle `h1`"),
        ),
        ("id free again", "fs/open", {"handleId": "h1", "path": u("link")}, opened("h1")),
        (
            "offset 2^63: EINVAL",
            "fs/readBlock",
            rb("h1", 2**63, 1),
            err(-32600, "Invalid argument (os error 22)"),
        ),
        (
            "a failed read drops the handle",
            "fs/readBlock",
            rb("h1", 0, 1),
            err(-32004, "unknown file handle `h1`"),
        ),
        (
            "directory",
            "fs/open",
            {"handleId": "r", "path": u("dir")},
            err(-32600, "path `<D>/dir` is not a file"),
        ),
        (
            "fifo",
            "fs/open",
            {"handleId": "r", "path": u("fifo")},
            err(-32600, "path `<D>/fifo` is not a file"),
        ),
        (
            "missing",
            "fs/open",
            {"handleId": "r", "path": u("nope")},
            err(-32004, "No such file or directory (os error 2)"),
        ),
        ("empty id", "fs/open", {"handleId": "", "path": u("b.bin")}, opened("")),
        ("32-byte id", "fs/open", {"handleId": "é" * 16, "path": u("b.bin")}, opened("é" * 16)),
        (
            "33-byte id",
            "fs/open",
            {"handleId": "x" * 33, "path": u("b.bin")},
            err(-32600, "file handle ID must not exceed 32 bytes"),
        ),
        (
            "unknown mode",
            "fs/open",
            {"handleId": "m", "path": u("b.bin"), "mode": "append"},
            err(-32602, "unknown variant `append`, expected `read` or `replace`"),
        ),
        (
            "null mode",
            "fs/open",
            {"handleId": "m", "path": u("b.bin"), "mode": None},
            err(-32602, "invalid type: null, expected string or map"),
        ),
        (
            "map mode",
            "fs/open",
            {"handleId": "m", "path": u("b.bin"), "mode": {"read": {}}},
            err(-32602, "invalid type: map, expected unit"),
        ),
        (
            "unit-map mode",
            "fs/open",
            {"handleId": "m", "path": u("b.bin"), "mode": {"read": None}},
            opened("m"),
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)


async def test_replace_handle(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("existing content")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    def wb(handle: str, offset: Any, chunk: str) -> dict[str, Any]:
        return {"handleId": handle, "offset": offset, "chunk": chunk}

    cases = [
        (
            "open replace (new file)",
            "fs/open",
            {"handleId": "w", "path": u("out.bin"), "mode": "replace"},
            opened("w"),
        ),
        ("write", "fs/writeBlock", wb("w", 0, b64("hello ")), OK),
        ("write at offset", "fs/writeBlock", wb("w", 6, b64("world")), OK),
        (
            "write past the end leaves a zero-filled gap",
            "fs/writeBlock",
            wb("w", 20, b64("gap")),
            OK,
        ),
        (
            "empty chunk",
            "fs/writeBlock",
            wb("w", 0, ""),
            err(-32600, "file write block length must be between 1 and 1048576"),
        ),
        (
            "chunk above 1 MiB",
            "fs/writeBlock",
            wb("w", 0, b64(b"x" * (MIB + 1))),
            err(-32600, "file write block length must be between 1 and 1048576"),
        ),
        (
            "range beyond i64",
            "fs/writeBlock",
            wb("w", 2**63 - 1, b64("x")),
            err(-32600, "file write range exceeds the signed 64-bit file offset limit"),
        ),
        (
            "range checked before the handle",
            "fs/writeBlock",
            wb("nope", 2**63, b64("x")),
            err(-32600, "file write range exceeds the signed 64-bit file offset limit"),
        ),
        (
            "largest offset: EFBIG",
            "fs/writeBlock",
            wb("w", 2**63 - 2, b64("x")),
            err(-32603, "File too large (os error 27)"),
        ),
        (
            "bad base64",
            "fs/writeBlock",
            wb("w", 0, "!"),
            err(-32602, "Invalid symbol 33, offset 0."),
        ),
        (
            "unknown handle",
            "fs/writeBlock",
            wb("nope", 0, b64("x")),
            err(-32004, "unknown file handle `nope`"),
        ),
        ("close", "fs/close", {"handleId": "w"}, OK),
        (
            "replace truncates at open",
            "fs/open",
            {"handleId": "t", "path": u("a.txt"), "mode": "replace"},
            opened("t"),
        ),
        (
            "read on a replace handle: EBADF",
            "fs/readBlock",
            {"handleId": "t", "offset": 0, "len": 1},
            err(-32603, "Bad file descriptor (os error 9)"),
        ),
        (
            "which drops the handle",
            "fs/writeBlock",
            wb("t", 0, b64("x")),
            err(-32004, "unknown file handle `t`"),
        ),
        (
            "replace a directory",
            "fs/open",
            {"handleId": "r", "path": u("dir"), "mode": "replace"},
            err(-32603, "Is a directory (os error 21)"),
        ),
        (
            "replace with missing parent",
            "fs/open",
            {"handleId": "r", "path": u("nod/x"), "mode": "replace"},
            err(-32004, "No such file or directory (os error 2)"),
        ),
        (
            "replace a fifo without reader",
            "fs/open",
            {"handleId": "r", "path": u("fifo"), "mode": "replace"},
            err(-32603, "No such device or address (os error 6)"),
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "out.bin").read_bytes() == b"hello world" + b"\0" * 9 + b"gap"
    assert (tmp_path / "a.txt").read_bytes() == b""


async def test_handle_limit_and_scope(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("0123456789")
    path = uri(tmp_path / "f")
    limit = (-32600, "at most 128 file handles may be open per connection")
    async with connect(any_server.url) as client:
        for i in range(128):
            await client.ok("fs/open", {"handleId": f"m{i}", "path": path})
        assert await client.err("fs/open", {"handleId": "extra", "path": path}) == limit
        # an existing id is reported as such even at the limit
        assert await client.err("fs/open", {"handleId": "m5", "path": path}) == (
            -32600,
            "file handle `m5` already exists",
        )
        await client.ok("fs/close", {"handleId": "m0"})
        await client.ok("fs/open", {"handleId": "again", "path": path})
        assert await client.err("fs/open", {"handleId": "again2", "path": path}) == limit
        async with connect(any_server.url) as other:
            # handles belong to their connection
            assert await other.err("fs/readBlock", {"handleId": "m1", "offset": 0, "len": 1}) == (
                -32004,
                "unknown file handle `m1`",
            )
            await other.ok("fs/open", {"handleId": "m1", "path": path})
    async with connect(any_server.url) as client:
        # a new connection starts with no handles
        await client.ok("fs/open", {"handleId": "m1", "path": path})


async def _read_by_blocks(client: Any, path: str, size: int) -> bytes:
    await client.ok("fs/open", {"handleId": "big", "path": path})
    hasher = hashlib.sha256()
    offset, eof = 0, False
    while not eof:
        result = await client.ok("fs/readBlock", {"handleId": "big", "offset": offset, "len": MIB})
        chunk = unb64(result["chunk"])
        hasher.update(chunk)
        offset += len(chunk)
        eof = result["eof"]
    await client.ok("fs/close", {"handleId": "big"})
    assert offset == size
    return hasher.digest()


async def test_50mb_read_file_and_block_round_trips(
    any_server: RunningServer, tmp_path: Path
) -> None:
    size = 50 * MIB
    data = os.urandom(size)
    (tmp_path / "big.bin").write_bytes(data)
    digest = hashlib.sha256(data).digest()
    async with connect(any_server.url) as client:
        whole = await client.ok("fs/readFile", {"path": uri(tmp_path / "big.bin")}, timeout=120)
        assert hashlib.sha256(unb64(whole["dataBase64"])).digest() == digest
        del whole
        assert await _read_by_blocks(client, uri(tmp_path / "big.bin"), size) == digest
        # and back: write it in 1 MiB blocks through a replace handle
        await client.ok(
            "fs/open", {"handleId": "up", "path": uri(tmp_path / "copy.bin"), "mode": "replace"}
        )
        for offset in range(0, size, MIB):
            chunk = b64(data[offset : offset + MIB])
            await client.ok("fs/writeBlock", {"handleId": "up", "offset": offset, "chunk": chunk})
        await client.ok("fs/close", {"handleId": "up"})
    assert hashlib.sha256((tmp_path / "copy.bin").read_bytes()).digest() == digest


async def test_blocked_file_io_does_not_stall_other_connections(
    any_server: RunningServer, tmp_path: Path
) -> None:
    """A write that blocks in the kernel (a fifo without reader) must not hold up
    another connection: blocking file I/O runs off the event loop."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    async with connect(any_server.url) as blocked, connect(any_server.url) as other:
        pending = asyncio.ensure_future(
            blocked.call("fs/writeFile", {"path": uri(fifo), "dataBase64": b64("through")})
        )
        # Answered while the first connection's write is stuck in open(2).
        assert await other.ok("fs/getMetadata", {"path": uri(tmp_path)}) is not None
        assert await other.ok("environment/status", {}) == {"status": "ready"}
        assert not pending.done()
        received = await asyncio.to_thread(fifo.read_bytes)
        reply = await pending
    assert reply.result == {}
    assert received == b"through"


def _open_fds(pid: int, target: str) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                count += 1
        except OSError:
            continue
    return count


# Counts the daemon's open fds.
@pytest.mark.fresh_daemon
async def test_connection_close_releases_handles_and_watch(
    execserver: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("x")
    pid = execserver.process.pid
    target = str(tmp_path / "f")
    async with connect(execserver.url) as client:
        for i in range(5):
            await client.ok("fs/open", {"handleId": str(i), "path": uri(target)})
        watching = await client.ok(
            "fs/watchMissing", {"watchId": 1, "missing": [uri(tmp_path / "later")]}
        )
        assert watching == {"watching": True}
        assert _open_fds(pid, target) == 5
        assert _open_fds(pid, "anon_inode:inotify") == 1
    # the server tears the connection down asynchronously: wait for it
    for _ in range(200):
        if _open_fds(pid, target) == 0 and _open_fds(pid, "anon_inode:inotify") == 0:
            break
        await asyncio.sleep(0.05)
    assert _open_fds(pid, target) == 0
    assert _open_fds(pid, "anon_inode:inotify") == 0


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# Measures the daemon's RSS.
@pytest.mark.fresh_daemon
async def test_200mb_block_read_keeps_daemon_rss_flat(
    execserver: RunningServer, tmp_path: Path
) -> None:
    size = 200 * MIB
    big = tmp_path / "sparse.bin"
    with open(big, "wb") as stream:  # noqa: ASYNC230 - creating a sparse file is instant
        stream.truncate(size)
    pid = execserver.process.pid
    async with connect(execserver.url) as client:
        await client.ok("fs/open", {"handleId": "b", "path": uri(big)})
        peak = baseline = 0
        for index, offset in enumerate(range(0, size, MIB)):
            result = await client.ok(
                "fs/readBlock", {"handleId": "b", "offset": offset, "len": MIB}
            )
            assert len(result["chunk"]) == 4 * ((MIB + 2) // 3)
            if index == 8:
                baseline = _rss_bytes(pid)  # after the first blocks warmed the buffers up
            elif index > 8 and index % 16 == 0:
                peak = max(peak, _rss_bytes(pid))
        await client.ok("fs/close", {"handleId": "b"})
    # 200 MiB went through; the daemon never held more than a few blocks of it.
    assert peak - baseline < 32 * MIB, (baseline, peak)
