"""Figures for fs/* under a sandbox, and the composite apply_patch through
``execserver patch --sandbox``.

The context is workspace-write (read everything, write the workspace) plus one
deny-read entry: without a deny entry both servers serve reads in-process
(full-disk read needs no confinement), so the deny entry is what makes
``fs/readFile`` and ``fs/readDirectory`` go through each server's sandboxed
helper at all — the same shape of context the codex CLI sends when its profile
denies reading a path.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.client import BenchClient
from benchmarks.figures import WORK, file_latencies, read_then_write, timed_call

WS = WORK / "execserver-bench-ws"
SECRET = WORK / "execserver-bench-secret"
FILE_SIZE = 4096
PATCH_FILES = 10


def _uri(path: Path) -> str:
    return "file://" + str(path)


def deny_read_context(ws: Path, secret: Path) -> dict[str, Any]:
    return {
        "permissions": {
            "type": "managed",
            "file_system": {
                "type": "restricted",
                "entries": [
                    {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                    {
                        "path": {
                            "type": "special",
                            "value": {"kind": "current_working_directory"},
                        },
                        "access": "write",
                    },
                    {"path": {"type": "path", "path": _uri(secret)}, "access": "deny"},
                ],
            },
            "network": "restricted",
        },
        "cwd": _uri(ws),
        "workspaceRoots": [_uri(ws)],
        "windowsSandboxLevel": "disabled",
    }


def _fresh_workspace() -> None:
    shutil.rmtree(WS, ignore_errors=True)
    WS.mkdir(parents=True)
    SECRET.mkdir(exist_ok=True)
    (SECRET / "key").write_text("not for the sandbox\n")
    for i in range(16):
        (WS / f"f{i}.txt").write_bytes(os.urandom(FILE_SIZE))


async def sandboxed_fs(url: str, calls: int) -> dict[str, float]:
    """``calls`` sandboxed readFile (4 KiB), writeFile (4 KiB) and readDirectory
    (16 entries) each, one at a time, on one connection."""
    _fresh_workspace()
    box = deny_read_context(WS, SECRET)
    payload = base64.b64encode(os.urandom(FILE_SIZE)).decode()
    client = await BenchClient.connect(url)
    reads: list[float] = []
    writes: list[float] = []
    listings: list[float] = []
    try:
        # Fails loudly if the policy were not enforced (the figure would be wrong).
        try:
            await client.call("fs/readFile", {"path": _uri(SECRET / "key"), "sandbox": box})
        except Exception:
            pass
        else:
            raise RuntimeError("the deny-read entry was not enforced")
        for i in range(calls):
            read = {"path": _uri(WS / f"f{i % 16}.txt"), "sandbox": box}
            write = {"path": _uri(WS / f"w{i % 16}.txt"), "dataBase64": payload, "sandbox": box}
            await read_then_write(client, (reads, read), (writes, write), FILE_SIZE)
            listing = {"path": _uri(WS), "sandbox": box}
            await timed_call(client, listings, "fs/readDirectory", listing)
    finally:
        await client.close()
    return {
        **file_latencies(reads, writes),
        "readDirectory_p50_ms": statistics.median(listings) * 1e3,
        "ops": 3 * calls,
    }


def _patch_tree(root: Path) -> str:
    """A 10-file patch: 4 files added, 4 updated, 2 deleted. The workspace
    directory itself is kept (emptied), as an agent's workspace is: a new
    directory would be a new policy (a new helper) for execserver."""
    root.mkdir(parents=True, exist_ok=True)
    for child in root.glob("*.py"):  # not the sandbox's (empty) .codex/.agents/... mount points
        child.unlink()
    lines = "".join(f"line {n}\n" for n in range(40))
    for i in range(6):
        (root / f"src{i}.py").write_text(lines)
    parts = ["*** Begin Patch\n"]
    parts += [
        f"*** Add File: new{i}.py\n" + "".join(f"+new {n}\n" for n in range(20)) for i in range(4)
    ]
    parts += [
        f"*** Update File: src{i}.py\n@@\n line 19\n-line 20\n+line twenty\n" for i in range(4)
    ]
    parts += [f"*** Delete File: src{i}.py\n" for i in (4, 5)]
    parts.append("*** End Patch\n")
    return "".join(parts)


def _patch_program() -> str:
    """The ``execserver`` console script of this interpreter's environment (what a
    user types), with the package's bytecode compiled first: an installed wheel
    ships its ``.pyc`` files (pip compiles them at install), while a source tree
    under ``PYTHONDONTWRITEBYTECODE`` (set on some CI machines) would compile
    every imported module on every run, ~20-40 ms that no user pays."""
    import compileall

    import execserver

    compileall.compile_dir(str(Path(execserver.__file__).parent), quiet=1)
    script = Path(sys.executable).with_name("execserver")
    if not script.exists():
        raise RuntimeError(f"no console script {script}: install the package (make venv)")
    return str(script)


async def _patch_command(url: str, root: Path, *extra: str) -> float:
    """Wall time of the whole ``execserver patch`` command (interpreter start
    included) applying the 10-file patch; fails the figure if it did not apply."""
    patch = _patch_tree(root)
    program = _patch_program()
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        program,
        "patch",
        url,
        "--cwd",
        str(root),
        "--sandbox",
        "workspace-write",
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(patch.encode())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or (root / "src4.py").exists():
        raise RuntimeError(f"patch failed: {out.decode()} {err.decode()}")
    return elapsed


async def patch_composite(url: str, repeats: int) -> dict[str, float]:
    """Wall time of ``execserver patch URL --cwd WS --sandbox workspace-write`` for
    a 10-file patch (the whole command, interpreter start included); of the same
    command with ``--persist`` (the first one starts the control master, the
    others hand the patch to it: still the whole command each time); and of the
    same patch applied in-process by the client library (what an agent host
    that is already running pays)."""
    from execserver.core.apply_patch.cli import patch_remote, sandbox_option

    root = WORK / "execserver-bench-patch"
    cli_times: list[float] = []
    persist_times: list[float] = []
    apply_times: list[float] = []
    # The master lives until the figure's server stops (its connection is lost).
    persist = ("--persist", "600")
    persist_first = 0.0
    for i in range(repeats):
        cli_times.append(await _patch_command(url, root))
        if i == 0:
            persist_first = await _patch_command(url, root, *persist)
        persist_times.append(await _patch_command(url, root, *persist))
        patch = _patch_tree(root)
        box = sandbox_option("workspace-write", str(root))
        start = time.perf_counter()
        outcome = await patch_remote(url, patch, str(root), sandbox=box)
        apply_times.append(time.perf_counter() - start)
        if outcome.exit_code != 0:
            raise RuntimeError(f"patch failed: {outcome.stderr}")
    return {
        "cli_wall_ms": statistics.median(cli_times) * 1e3,
        # The first command of a fresh server also starts execserver's helper.
        "cli_wall_first_ms": cli_times[0] * 1e3,
        "cli_persist_wall_ms": statistics.median(persist_times) * 1e3,
        # The command that started the master (and, for a fresh server, the helper).
        "cli_persist_first_ms": persist_first * 1e3,
        "library_apply_ms": statistics.median(apply_times) * 1e3,
        "ops": 3 * repeats + 1,  # patches applied
    }
