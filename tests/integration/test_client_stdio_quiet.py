"""``ExecServerClient.spawn`` keeps the spawned server's log out of the
harness's stderr unless asked for it; a server that dies at start still says why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from execserver.client import ExecServerClient, ExecServerConnectError
from tests.integration.test_client_stdio import stdio_command


async def test_spawn_is_quiet_by_default(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv, env = stdio_command("execserver")
    client = await ExecServerClient.spawn([*argv, "--log-level", "INFO"], env=env)
    try:
        assert (await client.run(["true"], cwd=tmp_path)).exit_code == 0
    finally:
        await client.close()
    err = capfd.readouterr().err
    assert " INFO " not in err, err


async def test_spawn_stderr_opt_in_passes_the_log_through(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv, env = stdio_command("execserver")
    client = await ExecServerClient.spawn(
        [*argv, "--log-level", "INFO"], env=env, stderr=sys.stderr
    )
    try:
        assert (await client.run(["true"], cwd=tmp_path)).exit_code == 0
    finally:
        await client.close()
    assert " INFO " in capfd.readouterr().err


async def test_a_server_that_fails_to_start_reports_its_stderr() -> None:
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('bad flag --nope\\n'); sys.exit(2)"]
    with pytest.raises(ExecServerConnectError) as info:
        await ExecServerClient.spawn(argv, initialize_timeout=10)
    assert "bad flag --nope" in str(info.value)
