"""A daemon imports what serving needs, not what an option it was not given needs.

`execserver serve` starts for every daemon a user runs, every ``serve_local()`` and
most integration tests, and its imports are most of its start (``python -X
importtime``). Checked on a real daemon that served a session: the modules loaded
when it exits."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from tests.integration.test_client_cli import cli_env
from tests.integration.test_patch_once_imports import RECORD_MODULES
from tests.support.rpc import connect

# module -> what only needs it
OPTION_ONLY = {"jwt": "--ws-auth signed-bearer-token"}


async def _modules_of_a_daemon(tmp_path: Path, *flags: str, serve_a_session: bool) -> set[str]:
    out = tmp_path / "modules.txt"
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", RECORD_MODULES, "serve", "--listen", "ws://127.0.0.1:0", *flags),
        stdout=asyncio.subprocess.PIPE,
        env={**cli_env(), "MODULES_OUT": str(out)},
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
        assert url.startswith("ws://127.0.0.1:"), url
        if serve_a_session:
            async with connect(url) as c:
                await c.ok("fs/getMetadata", {"path": f"file://{tmp_path}"})
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    return set(out.read_text().split())


async def test_a_daemon_without_jwt_auth_never_imports_pyjwt(tmp_path: Path) -> None:
    modules = await _modules_of_a_daemon(tmp_path, serve_a_session=True)
    assert "execserver.server.auth" in modules  # the recorder saw the daemon's imports
    loaded = {name: why for name, why in OPTION_ONLY.items() if name in modules}
    assert loaded == {}


async def test_a_jwt_daemon_imports_pyjwt_before_its_first_connection(tmp_path: Path) -> None:
    # With the verifier, so the first client's upgrade does not wait for the import.
    (tmp_path / "secret").write_bytes(b"s" * 32)
    flags = (
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(tmp_path / "secret"),
    )
    modules = await _modules_of_a_daemon(tmp_path, *flags, serve_a_session=False)
    assert "jwt" in modules
