"""The one-shot ``execserver patch`` stays light: most of its wall time is
interpreter start-up, so it runs on the blocking websocket session and must not
pull in what the async client, OpenSSL or argparse's terminal-size lookup would
load (docs/performance.md: each was measured in milliseconds of the command's
start). Checked on a real command against a real server: the modules loaded when
it exits."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.integration.test_client_cli import cli_env
from tests.support.servers import RunningServer

# module -> why the one-shot command must not load it
HEAVY = {
    "asyncio": "the event loop (~29 ms with what it imports)",
    "picows": "the async client's websocket (~24 ms)",
    "aiohttp": "the daemon's HTTP stack",
    "msgspec": "the async client's codec",
    "execserver.client.connection": "the async client",
    "ssl": "only a wss:// URL needs it",
    "_hashlib": "OpenSSL, for one SHA-1 (~3.5 ms)",
    "shutil": "argparse's terminal-size lookup (bz2, lzma, zlib: ~3 ms)",
}

RECORD_MODULES = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['MODULES_OUT'], 'w')"
    ".write('\\n'.join(sorted(sys.modules))))\n"
    "from execserver.cli import main\n"
    "sys.exit(main())\n"
)


async def test_the_one_shot_patch_command_loads_nothing_heavy(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    out = tmp_path / "modules.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RECORD_MODULES,
        "patch",
        execserver.url,
        "--cwd",
        str(ws),
        "--sandbox",
        "workspace-write",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**cli_env(), "MODULES_OUT": str(out)},
    )
    patch = b"*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"
    _, stderr = await proc.communicate(patch)
    assert proc.returncode == 0, stderr
    assert (ws / "a.txt").read_text() == "a\n"
    loaded = set(out.read_text().split())
    assert "execserver.client.blocking_rpc" in loaded  # the record is of this command
    assert {name: why for name, why in HEAVY.items() if name in loaded} == {}
