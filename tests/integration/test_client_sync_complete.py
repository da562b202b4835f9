"""The blocking client through a real daemon: processes, paths and handles,
the same names as the async client without ``await``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from execserver.client import Closed, Exited, Output, sync
from tests.support.servers import RunningServer


async def test_sync_start_process_paths_and_handles(
    any_server: RunningServer, tmp_path: Path
) -> None:
    def script() -> None:
        with sync.connect(any_server.url) as client:
            proc = client.start_process(
                ["sh", "-c", "echo one; echo two >&2; exit 4"], cwd=str(tmp_path)
            )
            events = list(proc)
            assert isinstance(events[-1], Closed)
            assert any(isinstance(e, Exited) and e.exit_code == 4 for e in events)
            out = b"".join(e.data for e in events if isinstance(e, Output) and e.stream == "stdout")
            assert out == b"one\n"
            assert proc.wait().exit_code == 4

            notes = client.fs.path(str(tmp_path)) / "notes.txt"
            notes.write_text("hello\n")
            assert notes.read_text() == "hello\n" and notes.stat().size == 6
            assert [p.name for p in notes.parent.iterdir()] == ["notes.txt"]
            with client.fs.open(notes, "read") as handle:
                assert handle.read_block(0, 3) == (b"hel", False)
            notes.unlink()
            assert not notes.exists()

    await asyncio.to_thread(script)
