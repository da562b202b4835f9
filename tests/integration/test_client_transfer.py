"""``fs.upload`` / ``fs.download``: a tree with modes, empty and nested
directories, symlinks (kept as links) and a fifo (skipped), against both
servers. The executor runs on this machine, so the remote side is checked
with os calls."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import ExecServerClient, TransferSummary, sync
from tests.support.servers import RunningServer


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


def make_tree(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "secret").write_bytes(b"s" * 5000)
    (root / "secret").chmod(0o600)
    (root / "deep" / "er" / "est").mkdir(parents=True)
    (root / "deep" / "er" / "note.txt").write_text("note\n")
    (root / "empty").mkdir()
    (root / "private").mkdir(mode=0o700)
    (root / "private").chmod(0o700)
    (root / "private" / "x").write_bytes(b"x")
    (root / "-dash").write_bytes(b"dash")
    (root / "link-in").symlink_to("bin/tool")
    (root / "link-dangling").symlink_to("/no/such/target")
    (root / "link-dir").symlink_to("deep")
    os.mkfifo(root / "pipe")


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes | str]]:
    seen: dict[str, tuple[str, int, bytes | str]] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            elif stat.S_ISREG(st.st_mode):
                seen[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return seen


async def test_upload_then_download_keeps_contents_modes_and_links(
    client: ExecServerClient, tmp_path: Path
) -> None:
    source, remote, back = tmp_path / "src", tmp_path / "remote" / "a" / "b", tmp_path / "back"
    make_tree(source)
    expected = snapshot(source)
    ticks: list[tuple[int, int]] = []
    sent = await client.fs.upload(source, str(remote), progress=lambda d, t: ticks.append((d, t)))
    assert isinstance(sent, TransferSummary)
    assert (sent.files, sent.symlinks, sent.skipped) == (5, 3, ["pipe"])
    assert snapshot(remote) == expected  # parents created, modes and links kept
    total = sum(len(v[2]) for v in expected.values() if v[0] == "file")
    assert ticks[-1] == (total, total) and sent.bytes == total
    assert [d for d, _ in ticks] == sorted(d for d, _ in ticks)
    assert os.readlink(remote / "link-dir") == "deep"  # not followed

    got = await client.fs.download(str(remote), back / "nested", concurrency=2)
    assert (got.files, got.symlinks) == (5, 3)
    assert snapshot(back / "nested") == expected


async def test_upload_overwrites_what_is_there(client: ExecServerClient, tmp_path: Path) -> None:
    source, remote = tmp_path / "src", tmp_path / "remote"
    source.mkdir()
    (source / "f").write_bytes(b"new")
    remote.mkdir()
    (remote / "f").write_bytes(b"old contents")
    (remote / "other").write_bytes(b"kept")
    await client.fs.upload(source, str(remote))
    assert (remote / "f").read_bytes() == b"new"
    assert (remote / "other").read_bytes() == b"kept"


async def test_errors_are_clear(client: ExecServerClient, tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        await client.fs.upload(tmp_path / "missing", str(tmp_path / "r"))
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        await client.fs.download(str(tmp_path / "file"), tmp_path / "d")


async def test_the_sync_twin(any_server: RunningServer, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a").write_bytes(b"a")

    def blocking() -> tuple[int, int]:
        with sync.connect(any_server.url) as c:
            up = c.fs.upload(str(source), str(tmp_path / "r"))
            down = c.fs.download(str(tmp_path / "r"), str(tmp_path / "back"))
            return up.files, down.files

    assert await asyncio.to_thread(blocking) == (1, 1)
    assert (tmp_path / "back" / "a").read_bytes() == b"a"
