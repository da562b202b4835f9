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
from tests.support.servers import RunningServer, start_server

# The tests count the daemon's threads and read its /proc status: a daemon of their own.
pytestmark = pytest.mark.fresh_daemon


# What the fs pool's threads call themselves (execserver/fs/dispatch.py): only they
# are workers; other threads of the daemon's are no sign of a worker read.
FS_WORKER = "fs-worker"


def _threads(server: RunningServer) -> dict[int, str]:
    """The daemon's threads: id -> name. Compared by id, so that the threads that
    started are told from those already there whatever their names."""
    threads = {}
    for tid in os.listdir(f"/proc/{server.process.pid}/task"):
        with open(f"/proc/{server.process.pid}/task/{tid}/comm") as comm:
            threads[int(tid)] = comm.read().strip()
    return threads


# RWF_NOWAIT may refuse a cached page now and then (EAGAIN while the kernel's flusher
# holds it for writeback); the read then goes to a worker, which is the design. So the
# claim "small cached files are read on the loop" is tried on a few fresh daemons:
# it fails only when no daemon reads them all inline (the regression it guards).
_ATTEMPTS = 4


def _read_nowait(path: Path) -> str:
    """What the daemon's inline read of ``path`` would meet (for a failure's message:
    which of its conditions sent the reads to a worker)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        got = os.preadv(fd, [bytearray(os.fstat(fd).st_size + 1)], 0, os.RWF_NOWAIT)
        return f"{got} bytes"
    except OSError as exc:
        return f"errno {exc.errno}"
    finally:
        os.close(fd)


def _started(before: dict[int, str], after: dict[int, str]) -> list[str]:
    """The names of the threads in ``after`` that were not in ``before``."""
    return sorted(name for tid, name in after.items() if tid not in before)


_NEWCOMERS: list[list[str]] = []  # the threads each failed attempt saw start, for the failure


async def _small_reads_inline_then_large_in_a_worker(server: RunningServer, files: Path) -> bool:
    """False when a small read started a worker (its threads are recorded in
    _NEWCOMERS); else checks that the large one does."""
    small = (files / "small").read_bytes()
    async with connect(server.url) as c:
        threads = _threads(server)
        for _ in range(20):
            # Read here first, so that its pages are in the cache and recently used
            # when the daemon reads: a machine's proactive reclaim may evict a file's
            # cold pages at any time (this VM runs DAMON with action "pageout", and a
            # quiet suite run saw every attempt's small reads go to a worker).
            (files / "small").read_bytes()
            data = (await c.ok("fs/readFile", {"path": uri(files / "small")}))["dataBase64"]
            assert unb64(data) == small
            assert (await c.ok("fs/readFile", {"path": uri(files / "empty")}))["dataBase64"] == ""
        started = _started(threads, _threads(server))
        if FS_WORKER in started:  # a small read went to a worker
            _NEWCOMERS.append(started)
            return False
        # One byte over the limit: read by a worker, whole.
        data = (await c.ok("fs/readFile", {"path": uri(files / "large")}))["dataBase64"]
        assert unb64(data) == (files / "large").read_bytes()
        assert FS_WORKER in _started(threads, _threads(server)), "the large read started none"
    return True


async def test_small_cached_files_are_read_without_a_worker_and_others_with_one(
    execserver: RunningServer, tmp_path: Path
) -> None:
    if not all_local(mount_types()):
        pytest.skip("a network or user-space mount sends every read to a worker")
    for name, size in (("small", INLINE_READ_MAX), ("empty", 0), ("large", INLINE_READ_MAX + 1)):
        (tmp_path / name).write_bytes(os.urandom(size))
    if await _small_reads_inline_then_large_in_a_worker(execserver, tmp_path):
        return
    for _ in range(_ATTEMPTS - 1):
        async with start_server("execserver") as server:
            if await _small_reads_inline_then_large_in_a_worker(server, tmp_path):
                return
    pytest.fail(
        f"each of {_ATTEMPTS} daemons started a worker for small cached reads; "
        f"the threads that started: {_NEWCOMERS[-_ATTEMPTS:]}; now, all mounts local: "
        f"{all_local(mount_types())}, the small file read with RWF_NOWAIT: "
        f"{_read_nowait(tmp_path / 'small')}"
    )


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
