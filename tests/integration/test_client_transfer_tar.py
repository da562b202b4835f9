"""``fs.upload`` / ``fs.download`` through the tar stream: times kept both ways
(to the nanosecond), modes of a read-only directory kept, and the per-file
fallback when the executor has no tar on its PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import execserver
from execserver.client import ExecServerClient
from tests.support.servers import RunningServer


def make_tree(root: Path) -> dict[str, int]:
    (root / "ro").mkdir(parents=True)
    (root / "ro" / "f").write_bytes(b"f" * 3000)
    (root / "top").write_bytes(b"top")
    (root / "link").symlink_to("../outside")
    times = {"ro/f": 1_600_000_000_123_456_789, "top": 1_500_000_000_000_000_000}
    for rel, ns in times.items():
        os.utime(root / rel, ns=(ns, ns))
    os.utime(root / "link", ns=(1_400_000_000_5, 1_400_000_000_5), follow_symlinks=False)
    (root / "ro").chmod(0o555)
    os.utime(root / "ro", ns=(1_300_000_000_000_000_001,) * 2)
    return times


async def test_times_and_modes_kept_both_ways(any_server: RunningServer, tmp_path: Path) -> None:
    source, remote, back = tmp_path / "src", tmp_path / "remote", tmp_path / "back"
    make_tree(source)
    try:
        async with await ExecServerClient.connect(any_server.url) as client:
            await client.fs.upload(source, str(remote))
            await client.fs.download(str(remote), back)
        for tree in (remote, back):
            for rel in ("ro/f", "top", "ro"):
                assert (tree / rel).stat().st_mtime_ns == (source / rel).stat().st_mtime_ns, rel
            assert (tree / "link").lstat().st_mtime_ns == (source / "link").lstat().st_mtime_ns
            assert os.readlink(tree / "link") == "../outside"
            assert (tree / "ro").stat().st_mode & 0o777 == 0o555
    finally:
        for tree in (source, remote, back):
            if (tree / "ro").exists():
                (tree / "ro").chmod(0o755)


async def test_without_tar_the_per_file_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "xargs", "chmod", "ln", "find", "env"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    source, remote, back = tmp_path / "src", tmp_path / "remote", tmp_path / "back"
    (source / "d").mkdir(parents=True)
    (source / "d" / "x").write_bytes(b"x")
    (source / "d" / "x").chmod(0o640)
    (source / "l").symlink_to("d/x")
    env = {**os.environ, "PATH": str(bin_dir)}
    async with execserver.serve_local(env=env) as client:
        ticks: list[tuple[int, int]] = []
        sent = await client.fs.upload(
            source, str(remote), progress=lambda d, t: ticks.append((d, t))
        )
        got = await client.fs.download(str(remote), back)
    assert (sent.files, sent.symlinks, got.files, got.symlinks) == (1, 1, 1, 1)
    assert ticks[-1] == (1, 1)
    for tree in (remote, back):
        assert (tree / "d" / "x").read_bytes() == b"x"
        assert (tree / "d" / "x").stat().st_mode & 0o777 == 0o640
        assert os.readlink(tree / "l") == "d/x"
