"""fs/readFile's event-loop read (ops_read.read_cached_file_bytes): whole files the
page cache holds, None for everything a worker must read, and the worker's own
errors. Real files in tmp dirs, real page cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from execserver.fs import ops_read
from execserver.wire.errors import RpcError

LIMIT = 64 << 10


def _file_system_of(path: Path) -> str:
    best = ""
    fstype = ""
    for partition in psutil.disk_partitions(all=True):
        mount = partition.mountpoint
        if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
            best, fstype = mount, partition.fstype
    return fstype


def evict(path: Path, data: bytes) -> None:
    """Write ``path`` and drop its pages from the page cache. On one CPU: fadvise
    drains only its own CPU's batch of new pages, so pages written from another
    CPU could stay (seen 1 run in 5 without the pinning)."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # clean pages can be dropped; dirty ones cannot
            for _ in range(3):  # a page still being released is skipped: ask again
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                time.sleep(0.01)
        finally:
            os.close(fd)
    finally:
        os.sched_setaffinity(0, cpus)


def test_a_cached_small_file_is_read_whole(tmp_path: Path) -> None:
    data = os.urandom(LIMIT)
    (tmp_path / "f").write_bytes(data)
    assert ops_read.read_cached_file_bytes(str(tmp_path / "f"), True, LIMIT) == data
    (tmp_path / "empty").write_bytes(b"")
    assert ops_read.read_cached_file_bytes(str(tmp_path / "empty"), True, LIMIT) == b""


def test_a_symlink_is_followed_or_refused_as_the_worker_does(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"target")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert ops_read.read_cached_file_bytes(str(tmp_path / "link"), True, LIMIT) == b"target"
    with pytest.raises((RpcError, OSError)) as worker:
        ops_read.read_file_bytes(str(tmp_path / "link"), False)
    with pytest.raises((RpcError, OSError)) as inline:
        ops_read.read_cached_file_bytes(str(tmp_path / "link"), False, LIMIT)
    assert (type(inline.value), str(inline.value)) == (type(worker.value), str(worker.value))


def test_a_file_over_the_limit_is_left_to_the_worker(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * (LIMIT + 1))
    assert ops_read.read_cached_file_bytes(str(tmp_path / "f"), True, LIMIT) is None


def test_a_file_the_page_cache_does_not_hold_is_left_to_the_worker(tmp_path: Path) -> None:
    if _file_system_of(tmp_path) == "tmpfs":
        pytest.skip("tmpfs keeps its files in the page cache: nothing can be evicted")
    path = tmp_path / "cold"
    data = os.urandom(16 << 10)
    # The declined read starts readahead; on a VM whose disk answers from the host's
    # cache it can complete within the call (~1 run in 30), and then the read
    # rightly succeeds. So: every answer is None or the whole file, and a few
    # tries see at least one None.
    answers = []
    for _ in range(5):
        evict(path, data)
        answers.append(ops_read.read_cached_file_bytes(str(path), True, LIMIT))
    assert all(answer in (None, data) for answer in answers)
    assert None in answers
    assert ops_read.read_file_bytes(str(path)) == data  # what the worker then reads
    assert ops_read.read_cached_file_bytes(str(path), True, LIMIT) == data  # now cached


def test_a_file_whose_size_stat_does_not_tell_is_left_to_the_worker() -> None:
    # procfs: st_size 0, content made on read, no RWF_NOWAIT.
    assert os.stat("/proc/self/status").st_size == 0
    assert ops_read.read_cached_file_bytes("/proc/self/status", True, LIMIT) is None
    assert ops_read.read_file_bytes("/proc/self/status").startswith(b"Name:")


def test_what_is_not_a_regular_file_gets_the_workers_error_without_blocking(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened without O_NONBLOCK this would wait for a writer
    (tmp_path / "dir").mkdir()
    for name in ("fifo", "dir"):
        path = str(tmp_path / name)
        for follow in (True, False):
            with pytest.raises((RpcError, OSError)) as worker:
                ops_read.read_file_bytes(path, follow)
            with pytest.raises((RpcError, OSError)) as inline:
                ops_read.read_cached_file_bytes(path, follow, LIMIT)
            assert type(inline.value) is type(worker.value)
            assert str(inline.value) == str(worker.value)
