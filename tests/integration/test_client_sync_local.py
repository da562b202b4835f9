"""``execserver.serve_local`` and the blocking ``execserver.client.sync`` facade."""

from __future__ import annotations

import _thread
import asyncio
import threading
from pathlib import Path

import psutil
import pytest

import execserver
from execserver.client import CommandFailed, sync
from tests.integration.test_client_run import marker, processes_with, wait_until
from tests.support.servers import RunningServer


def daemons() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
        except psutil.Error:  # gone, or a zombie of an earlier test
            continue
        if "serve" in cmdline and "execserver" in cmdline:
            found.append(proc)
    return found


async def test_serve_local_starts_a_daemon_yields_a_client_and_stops_it(tmp_path: Path) -> None:
    before = {p.pid for p in daemons()}
    async with execserver.serve_local() as client:
        assert client.url is not None and client.url.startswith("ws://127.0.0.1:")
        started = [p for p in daemons() if p.pid not in before]
        assert len(started) == 1
        result = await client.run(["pwd"], cwd=tmp_path, text=True)
        assert result.stdout == f"{tmp_path}\n"
    assert not started[0].is_running() or started[0].status() == psutil.STATUS_ZOMBIE


async def test_sync_client_runs_and_uses_the_file_system(
    any_server: RunningServer, tmp_path: Path
) -> None:
    def script() -> None:
        with sync.connect(any_server.url) as client:
            result = client.run("echo hi; echo there >&2", cwd=str(tmp_path), text=True)
            assert (result.stdout, result.stderr) == ("hi\n", "there\n")
            client.fs.write_file(str(tmp_path / "notes.txt"), b"hello\n")
            assert client.fs.read_file(str(tmp_path / "notes.txt")) == b"hello\n"
            with pytest.raises(CommandFailed):
                client.run(["false"], cwd=str(tmp_path), check=True)

    # In a thread, as a script would: the test's own loop stays free.
    await asyncio.to_thread(script)


def test_sync_serve_local_and_ctrl_c_terminates_the_remote_command(tmp_path: Path) -> None:
    mark = marker()
    with sync.serve_local() as client:
        assert client.run(["true"], cwd=str(tmp_path)).exit_code == 0
        timer = threading.Timer(1.0, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                client.run(["sleep", mark], cwd=str(tmp_path))
        finally:
            timer.cancel()
        assert not processes_with(mark)
    assert asyncio.run(wait_until(lambda: not processes_with(mark), 2))
