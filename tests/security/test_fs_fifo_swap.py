"""fs/readFile (and writeFile/copy) cannot be hung by a fifo swapped in between the
type check and the open: the open is non-blocking, and the type is checked on the
opened descriptor. A hung open would pin a worker thread forever (and enough of
them, the whole fs service)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from tests.support.attacks import uri
from tests.support.rpc import RpcFailure, connect
from tests.support.servers import start_server

REQUESTS = 400


def _swapper(path: Path, stop: threading.Event) -> None:
    regular, fifo = path.with_name("r.tmp"), path.with_name("f.tmp")
    while not stop.is_set():
        regular.write_bytes(b"data")
        os.rename(regular, path)
        time.sleep(0.0002)  # about as long a regular file as a fifo
        os.mkfifo(fifo)
        os.rename(fifo, path)


async def test_a_fifo_swapped_in_never_hangs_fs_read_file(tmp_path: Path) -> None:
    path = tmp_path / "target"
    path.write_bytes(b"data")
    stop = threading.Event()
    swapper = threading.Thread(target=_swapper, args=(path, stop), daemon=True)
    answered = {"data": 0, "error": 0}
    async with start_server("execserver") as server, connect(server.url) as client:
        swapper.start()
        try:
            for _ in range(REQUESTS):
                try:
                    await client.ok("fs/readFile", {"path": uri(path)}, timeout=20)
                    answered["data"] += 1
                except RpcFailure:
                    answered["error"] += 1
        finally:
            stop.set()
            await asyncio.to_thread(swapper.join)
    # Every request was answered (a hang would have raised TimeoutError above).
    assert answered["data"] + answered["error"] == REQUESTS
    # The swap really happened under the requests (a fifo is refused: not a file).
    assert answered["error"] > 0, answered
