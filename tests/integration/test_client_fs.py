"""RemoteFileSystem / RemotePath against real servers (ours and the reference)."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import ExecServerClient, RemoteFileSystem
from tests.support.client_peers import read_only_sandbox
from tests.support.servers import RunningServer


@pytest.fixture
async def fs(any_server: RunningServer) -> AsyncIterator[RemoteFileSystem]:
    async with await ExecServerClient.connect(any_server.url) as client:
        yield client.fs


async def test_write_read_and_stat_round_trip(fs: RemoteFileSystem, tmp_path: Path) -> None:
    p = fs.path(tmp_path) / "hello.txt"
    await p.write_text("hello\n")
    assert (tmp_path / "hello.txt").read_text() == "hello\n"
    assert await p.read_text() == "hello\n"
    meta = await p.stat()
    assert (meta.is_file, meta.is_directory, meta.size) == (True, False, 6)
    assert await p.exists() and await p.is_file() and not await p.is_dir()


async def test_binary_data_survives_base64(fs: RemoteFileSystem, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    await fs.write_file(tmp_path / "blob", data)
    assert await fs.read_file(tmp_path / "blob") == data


async def test_uri_and_native_paths_are_both_accepted(fs: RemoteFileSystem, tmp_path: Path) -> None:
    (tmp_path / "a b").write_text("x")
    assert await fs.read_file(f"file://{tmp_path}/a%20b") == b"x"
    assert await fs.read_file(str(tmp_path / "a b")) == b"x"


async def test_missing_file_raises_file_not_found(fs: RemoteFileSystem, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.path(tmp_path / "missing").read_bytes()
    with pytest.raises(FileNotFoundError):
        await fs.write_file(tmp_path / "no" / "parent", b"x")  # parents are not created
    assert not await fs.path(tmp_path / "missing").exists()


async def test_mkdir_iterdir_and_remove(fs: RemoteFileSystem, tmp_path: Path) -> None:
    root = fs.path(tmp_path) / "d"
    await (root / "x" / "y").mkdir(parents=True)
    await (root / "f.txt").write_bytes(b"1")
    names = sorted(p.name for p in await root.iterdir())
    assert names == ["f.txt", "x"]
    with pytest.raises(FileExistsError):
        await (root / "x").mkdir()
    await (root / "x").mkdir(exist_ok=True)
    with pytest.raises(OSError) as info:
        await (root / "x").rmdir()
    assert info.value.errno == errno.ENOTEMPTY
    await (root / "f.txt").unlink()
    await (root / "f.txt").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        await (root / "f.txt").unlink()
    await root.rmtree()
    assert not (tmp_path / "d").exists()


async def test_copy_and_canonicalize(fs: RemoteFileSystem, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    os.symlink(tmp_path / "src", tmp_path / "link")
    dest = await fs.path(tmp_path / "src").copy_to(str(tmp_path / "dst"), recursive=True)
    assert await (dest / "a.txt").read_text() == "a"
    resolved = await (fs.path(tmp_path) / "link" / "a.txt").resolve()
    assert resolved.path == str(tmp_path / "src" / "a.txt")  # tmp_path has no symlinks


async def test_follow_symlinks_false_refuses_a_final_symlink(
    fs: RemoteFileSystem, tmp_path: Path
) -> None:
    (tmp_path / "target").write_text("t")
    os.symlink(tmp_path / "target", tmp_path / "link")
    assert await fs.read_file(tmp_path / "link") == b"t"
    with pytest.raises(OSError) as info:
        await fs.read_file(tmp_path / "link", follow_symlinks=False)
    assert info.value.errno == errno.ELOOP
    meta = await fs.get_metadata(tmp_path / "link")
    assert meta.is_symlink and meta.is_file


async def test_walk_lists_breadth_first(fs: RemoteFileSystem, tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("")
    outcome = await fs.walk(tmp_path)
    assert [e.path.removeprefix(f"file://{tmp_path}") for e in outcome.entries] == [
        "/d",
        "/d/e",
        "/d/e/f",
    ]
    assert not outcome.truncated


async def test_random_access_handles(fs: RemoteFileSystem, tmp_path: Path) -> None:
    async with fs.open(tmp_path / "h.bin", "replace") as handle:
        await handle.write_block(0, b"hello")
        await handle.write_block(5, b" world")
    async with fs.open(tmp_path / "h.bin") as handle:
        assert await handle.read_block(6, 5) == (b"world", False)
        assert await handle.read_block(6, 100) == (b"world", True)


async def test_sandbox_context_is_passed_through(fs: RemoteFileSystem, tmp_path: Path) -> None:
    (tmp_path / "ro.txt").write_text("r")
    sandboxed = fs.with_sandbox(read_only_sandbox())
    assert await sandboxed.read_file(tmp_path / "ro.txt") == b"r"
    with pytest.raises(OSError) as info:
        await sandboxed.write_file(tmp_path / "new.txt", b"w")
    assert info.value.errno == errno.EROFS
    assert not (tmp_path / "new.txt").exists()
    await fs.write_file(tmp_path / "new.txt", b"w")  # the unsandboxed sibling may
