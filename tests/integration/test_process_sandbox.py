"""process/start with a ``sandbox`` end to end through the server (ours and the reference):
sandboxType, the sandbox actually enforced, sandboxDenied on exit and in process/read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.rpc import RpcFailure, connect, poll_until
from tests.support.sandbox import ROOT_READ, context_json, entry, managed, uri
from tests.support.servers import RunningServer, start_server

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}


async def _run(c: Any, pid: str, script: str, cwd: Path, sandbox: Any) -> tuple[Any, Any]:
    result = await c.start(pid, ["bash", "-c", script], env=ENV, cwd=uri(cwd), sandbox=sandbox)
    ev = await c.wait_closed(pid)
    return result, ev


async def test_sandboxed_write_is_denied_and_classified(
    any_server: RunningServer, tmp_path: Path
) -> None:
    work = tmp_path / "ws"
    work.mkdir()
    sandbox = context_json(managed([ROOT_READ, entry(work, "write")]), cwd=uri(work))
    async with connect(any_server.url) as c:
        ok, ev_ok = await _run(
            c, "ok", f"echo inside > {work}/a.txt && cat {work}/a.txt", work, sandbox
        )
        assert ok["sandboxType"] == "linuxSeccomp"
        assert ev_ok.output() == b"inside\n"
        assert ev_ok.exited() is not None and ev_ok.exited()["sandboxDenied"] is False
        _, ev_denied = await _run(c, "denied", f"echo outside > {tmp_path}/b.txt", work, sandbox)
        exited = ev_denied.exited()
        assert exited is not None and exited["exitCode"] != 0 and exited["sandboxDenied"] is True
        assert b"Read-only file system" in ev_denied.output()
        read = await c.read("denied")
        assert read["sandboxDenied"] is True
    assert not (tmp_path / "b.txt").exists()


async def test_disabled_permissions_still_report_linux_seccomp(
    any_server: RunningServer, tmp_path: Path
) -> None:
    sandbox = context_json({"type": "disabled"})
    async with connect(any_server.url) as c:
        result, ev = await _run(c, "d", "echo free; exit 1", tmp_path, sandbox)
    assert result["sandboxType"] == "linuxSeccomp"
    assert ev.output() == b"free\n"
    assert ev.exited()["exitCode"] == 1


async def test_an_invalid_sandbox_is_rejected_before_the_lifecycle_check(
    any_server: RunningServer,
) -> None:
    async with connect(any_server.url, handshake=False) as c:
        params = {
            "processId": "x",
            "argv": ["true"],
            "cwd": "file:///tmp",
            "env": {},
            "tty": False,
            "sandbox": {"permissions": {"type": "nope"}, "windowsSandboxLevel": "disabled"},
        }
        with pytest.raises(RpcFailure) as err:
            await c.ok("process/start", params)
        assert err.value.code == -32602


async def test_a_sandboxed_command_leaves_no_zombie_behind_it(tmp_path: Path) -> None:
    """bwrap exits once its pid 1 has reported the command's status, without
    waiting for it: that pid 1 becomes the daemon's child (the daemon is a
    subreaper) and a zombie. The daemon reaps it when the sandbox's root exit is
    handled, not a second later in its sweep: every exit in between read each
    such zombie's /proc files, a third of the event loop at 1,000 agents."""
    work = tmp_path / "ws"
    work.mkdir()
    sandbox = context_json(managed([ROOT_READ, entry(work, "write")]), cwd=uri(work))
    async with start_server("execserver") as server, connect(server.url) as c:
        daemon = psutil.Process(server.process.pid)
        for n in range(10):
            _, ev = await _run(c, f"t{n}", "true", work, sandbox)
            assert ev.exited() is not None and ev.exited()["exitCode"] == 0

        def zombies() -> list[int]:
            return [p.pid for p in daemon.children() if p.status() == psutil.STATUS_ZOMBIE]

        # Well within the stray-zombie sweep's grace (1 s) and its period.
        assert await poll_until(lambda: not zombies(), timeout=0.4), zombies()


async def test_a_sandboxed_commands_setsid_escapee_ends_with_its_sandbox(tmp_path: Path) -> None:
    """What the supervisor relies on to skip the escapee search at a sandboxed
    root's exit: a command's setsid'd background child cannot outlive the
    sandbox, which is a pid namespace of its own (its orphans go to its pid 1 and
    die with it), so it never becomes the daemon's to attribute."""
    work = tmp_path / "ws"
    work.mkdir()
    marker = f"1000.{os.getpid()}{len(str(tmp_path))}"
    sandbox = context_json(managed([ROOT_READ, entry(work, "write")]), cwd=uri(work))

    def escapees() -> list[int]:
        return [
            process.pid
            for process in psutil.process_iter(["cmdline"])
            if process.info["cmdline"] == ["sleep", marker]
        ]

    async with start_server("execserver") as server, connect(server.url) as c:
        script = f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 0.3; echo started"
        _, ev = await _run(c, "e", script, work, sandbox)
        assert ev.output() == b"started\n"
        assert await poll_until(lambda: not escapees(), timeout=5.0), escapees()
        # Nothing of it came to the daemon either.
        daemon = psutil.Process(server.process.pid)
        assert all(child.name() != "sleep" for child in daemon.children(recursive=True))
