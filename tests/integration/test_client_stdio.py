"""The stdio transport: the client spawns the server and speaks newline-delimited JSON."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from execserver.client import ExecServerClient, ExecServerTransportClosed
from execserver.client.transport import StdioTransport
from scripts import reference
from tests.support.servers import PROJECT_ROOT, execserver_command, reference_command


def stdio_command(kind: str) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if kind == "reference":
        env.setdefault("CODEX_HOME", str(reference.codex_home()))
        return reference_command(["--listen", "stdio"]), env
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return execserver_command(["--listen", "stdio"]), env


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_connect_stdio_command_initializes_json_rpc_client(kind: str, tmp_path: Path) -> None:
    argv, env = stdio_command(kind)
    client = await ExecServerClient.spawn(argv, env=env)
    try:
        assert client.session_id
        assert await client.environment_status() == "ready"
        result = await client.run(["bash", "-c", "echo over stdio"], cwd=tmp_path)
        assert result.stdout == b"over stdio\n"
    finally:
        await client.close()


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_closing_stdio_client_terminates_spawned_process(kind: str) -> None:
    argv, env = stdio_command(kind)
    client = await ExecServerClient.spawn(argv, env=env)
    conn = client.connection
    assert conn is not None and isinstance(conn.transport, StdioTransport)
    child = conn.transport.process
    await client.close()
    assert child.returncode is not None


async def test_malformed_stdio_message_terminates_spawned_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake server that answers the handshake with garbage.
    fake = "import sys; sys.stdin.readline(); print('not json', flush=True); sys.stdin.read()"
    transport_holder: list[StdioTransport] = []
    original = StdioTransport.spawn

    async def spy(argv: list[str], **options: Any) -> StdioTransport:
        transport = await original(argv, **options)
        transport_holder.append(transport)
        return transport

    monkeypatch.setattr(StdioTransport, "spawn", spy)
    with pytest.raises(ExecServerTransportClosed, match="undecodable"):
        await ExecServerClient.spawn([sys.executable, "-c", fake])
    child = transport_holder[0].process
    await child.wait()
    assert child.returncode is not None and child.returncode < 0  # killed, not exited
