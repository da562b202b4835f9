"""Unit tests of the fs building blocks (no server)."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from execserver.fs import ops_read, ops_write
from execserver.fs.handles import FileHandles
from execserver.fs.paths import native_path, validate_path_uri
from execserver.fs.sandboxed_open import reopen_same_inode
from execserver.fs.walk import walk
from execserver.fs.watch import MissingWatch
from execserver.wire.errors import RpcError


def test_handle_table_rules(tmp_path: Path) -> None:
    handles = FileHandles()
    handles.reserve("a")
    with pytest.raises(RpcError, match="file handle `a` already exists"):
        handles.reserve("a")
    with pytest.raises(RpcError, match="must not exceed 32 bytes"):
        handles.reserve("é" * 17)
    handles.unreserve("a")
    for i in range(128):
        handles.reserve(str(i))
    with pytest.raises(RpcError, match="at most 128 file handles"):
        handles.reserve("extra")
    with pytest.raises(RpcError) as unknown:
        handles.acquire("0")  # reserved, not opened yet
    assert (unknown.value.code, unknown.value.message) == (-32004, "unknown file handle `0`")


def test_close_waits_for_the_worker_using_the_fd(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    handles = FileHandles()
    handles.reserve("h")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    handles.install("h", fd)
    handle = handles.acquire("h")
    handles.discard("h")
    os.fstat(fd)  # still open: a worker holds it
    handles.release(handle)
    with pytest.raises(OSError) as closed:
        os.fstat(fd)
    assert closed.value.errno == errno.EBADF


def test_reopen_refuses_a_swapped_path(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    st = os.stat(tmp_path / "f")
    fd = reopen_same_inode(str(tmp_path / "f"), "read", st.st_dev, st.st_ino)
    os.close(fd)
    (tmp_path / "f").unlink()
    (tmp_path / "f").write_text("other inode")
    with pytest.raises(PermissionError):
        reopen_same_inode(str(tmp_path / "f"), "read", st.st_dev, st.st_ino + 10**9)


def test_uri_checks() -> None:
    validate_path_uri("file:///a/b")
    validate_path_uri("file://host/a")  # deferred to native_path
    assert native_path("file:///a/./b/../c") == "/a/c"
    with pytest.raises(RpcError) as host:
        native_path("file://host/a")
    assert (host.value.code, host.value.message) == (
        -32600,
        "'file://host/a' is invalid on 'linux'",
    )
    for bad, message in [
        ("/abs", "invalid URI: relative URL without a base"),
        ("file:///a?b", "query parameters are not allowed in path URIs"),
        ("file:///a#b", "fragments are not allowed in path URIs"),
    ]:
        with pytest.raises(RpcError) as caught:
            validate_path_uri(bad)
        assert (caught.value.code, caught.value.message) == (-32602, message)


def test_walk_sorts_entries_by_bytes(tmp_path: Path) -> None:
    for name in ["b", "a", "B", "é", "_"]:
        (tmp_path / name).write_text("x")
    result = walk(str(tmp_path), 5, 10, 100, False)
    names = [e["path"].rsplit("/", 1)[1] for e in result["entries"]]
    assert names == ["B", "_", "a", "b", "%C3%A9"]
    assert result["truncated"] is False


def test_remove_defaults_and_copy_onto_itself(tmp_path: Path) -> None:
    (tmp_path / "d" / "x").mkdir(parents=True)
    ops_write.remove(str(tmp_path / "d"))  # recursive omitted means true
    assert not (tmp_path / "d").exists()
    ops_write.remove(str(tmp_path / "missing"))  # force omitted means true
    (tmp_path / "f").write_text("data")
    ops_write.copy(str(tmp_path / "f"), str(tmp_path / "f"), False)
    assert (tmp_path / "f").read_text() == ""


def test_read_file_is_base64_and_refuses_fifos(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"\x00\xff")
    assert ops_read.read_file(str(tmp_path / "f")) == "AP8="
    os.mkfifo(tmp_path / "p")
    with pytest.raises(RpcError, match="path is not a regular file"):
        ops_read.read_file(str(tmp_path / "p"), follow_symlinks=False)


async def test_watch_fires_once_and_closes_its_inotify_fd(tmp_path: Path) -> None:
    fired: asyncio.Queue[int] = asyncio.Queue()

    async def notify(watch_id: int) -> None:
        await fired.put(watch_id)

    def inotify_fds() -> int:
        fds = os.listdir("/proc/self/fd")
        return sum(1 for fd in fds if _link(f"/proc/self/fd/{fd}") == "anon_inode:inotify")

    before = inotify_fds()
    watch = MissingWatch(notify)
    assert await watch.watch(3, [str(tmp_path / "a")], None) is True
    assert inotify_fds() == before + 1
    (tmp_path / "a").write_text("x")
    assert await asyncio.wait_for(fired.get(), 10) == 3
    assert inotify_fds() == before  # fired: done with it
    assert await watch.watch(4, [str(tmp_path / "b")], None) is True
    await watch.aclose()
    assert inotify_fds() == before


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


async def test_cancelled_handle_io_waits_for_its_worker() -> None:
    import threading

    from execserver.fs.dispatch import in_thread_to_completion

    started, release = threading.Event(), threading.Event()
    abandoned: list[int] = []

    def blocking() -> int:
        started.set()
        release.wait()
        return 7

    task = asyncio.ensure_future(in_thread_to_completion(blocking, on_abandon=abandoned.append))
    await asyncio.to_thread(started.wait)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()  # still waiting for the worker, which holds the fd
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert abandoned == [7]
