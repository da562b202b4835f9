"""fs/readFile of a small file the page cache holds is answered on the event loop;
everything else still reads in a worker, with the same bytes (fs/service.py,
fs/ops_read.py). Real server, real files; whether a worker ran is seen in the
daemon's own threads (/proc/<pid>/task): the fs pool starts its threads on demand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from execserver.fs.local_mounts import all_local, mount_types
from execserver.fs.service import INLINE_READ_MAX
from tests.support.rpc import connect, unb64, uri
from tests.support.servers import RunningServer

# The tests count the daemon's threads and read its /proc status: a daemon of their own.
pytestmark = pytest.mark.fresh_daemon


def _threads(server: RunningServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/task"))


async def test_small_cached_files_are_read_without_a_worker_and_others_with_one(
    execserver: RunningServer, tmp_path: Path
) -> None:
    if not all_local(mount_types()):
        pytest.skip("a network or user-space mount sends every read to a worker")
    small = os.urandom(INLINE_READ_MAX)
    (tmp_path / "small").write_bytes(small)
    (tmp_path / "empty").write_bytes(b"")
    large = os.urandom(INLINE_READ_MAX + 1)
    (tmp_path / "large").write_bytes(large)
    async with connect(execserver.url) as c:
        threads = _threads(execserver)
        for _ in range(20):
            assert (
                unb64((await c.ok("fs/readFile", {"path": uri(tmp_path / "small")}))["dataBase64"])
                == small
            )
            assert (await c.ok("fs/readFile", {"path": uri(tmp_path / "empty")}))[
                "dataBase64"
            ] == ""
        assert _threads(execserver) == threads  # no worker started
        # One byte over the limit: read by a worker, whole.
        assert (
            unb64((await c.ok("fs/readFile", {"path": uri(tmp_path / "large")}))["dataBase64"])
            == large
        )
        assert _threads(execserver) > threads


async def test_files_the_loop_must_not_read_come_back_whole(
    execserver: RunningServer, tmp_path: Path
) -> None:
    cold = tmp_path / "cold"
    data = os.urandom(8 << 10)
    cold.write_bytes(data)
    fd = os.open(cold, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    async with connect(execserver.url) as c:
        got = await c.ok("fs/readFile", {"path": uri(cold)})
        assert unb64(got["dataBase64"]) == data
        # procfs: st_size 0, content made on read.
        status = await c.ok("fs/readFile", {"path": uri(f"/proc/{execserver.process.pid}/status")})
        assert unb64(status["dataBase64"]).startswith(b"Name:")
