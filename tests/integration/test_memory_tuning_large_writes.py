"""The daemon keeps multi-megabyte buffers on its heap (server/memory_tuning.py):
large requests stop page-faulting in fresh memory once the first has been served.
Real server, real 8 MiB fs/writeFile calls; faults read from /proc/<pid>/stat."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from tests.support.rpc import b64, connect, uri
from tests.support.servers import RunningServer

# The test counts the daemon's page faults: a daemon of its own.
pytestmark = pytest.mark.fresh_daemon


def _minor_faults(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])


async def test_large_writes_reuse_the_heap_after_the_first(
    execserver: RunningServer, tmp_path: Path
) -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the tuning is glibc's mallopt")
    payload = b64(os.urandom(8 << 20))
    params = {"path": uri(tmp_path / "big"), "dataBase64": payload}
    async with connect(execserver.url) as c:
        for _ in range(3):
            await c.ok("fs/writeFile", params)
        before = _minor_faults(execserver.process.pid)
        for _ in range(4):
            await c.ok("fs/writeFile", params)
        per_write = (_minor_faults(execserver.process.pid) - before) / 4
    # Each write handles ~40 MB of buffers (frame, text, data): untuned glibc maps
    # ~21 MB of it afresh every time (~5 400 faults of 4 KiB); tuned, ~0.
    assert per_write < 1000, per_write
