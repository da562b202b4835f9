"""Daemons run with ``--state-dir`` on a port of the test's choosing, and what they
leave: the keepers that hold their processes, and every process under them.

A restarted daemon must come back on the same address for a client to find it
again by itself, so :func:`free_port` picks one and :func:`state_daemon` passes
it as ``--listen`` (the last one given wins over start_server's port 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from tests.support.procinfo import wait_until
from tests.support.rpc import RpcClient
from tests.support.servers import RunningServer, start_server

__all__ = [
    "alive",
    "end_keepers",
    "free_port",
    "keepers",
    "kill9",
    "living",
    "read_until_closed",
    "state_daemon",
    "tree_of",
]


def free_port() -> int:
    """A free port below the kernel's ephemeral range: a daemon restarted on it
    must find it free again, and another test's daemon listening on port 0 (the
    suite runs on several workers) is given ephemeral ports only."""
    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(100):
        port = random.randrange(max(1024, low - 8192), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port below {low}")


@contextlib.asynccontextmanager
async def state_daemon(
    state_dir: Path,
    port: int | None = None,
    *,
    ttl: float,
    extra: Sequence[str] = (),
    serve: list[str] | None = None,
) -> AsyncIterator[RunningServer]:
    """A daemon on ws://127.0.0.1:``port`` (any free port when None) holding its
    processes in keepers under ``state_dir``; stopped (if still running) when the
    block ends. ``serve``: start_server's (another entry point than ``execserver
    serve``)."""
    listen = [] if port is None else ["--listen", f"ws://127.0.0.1:{port}"]
    flags = [
        "--state-dir",
        str(state_dir),
        *listen,
        "--session-ttl",
        str(ttl),
        "--log-level",
        "warning",
        *extra,
    ]
    async with start_server("execserver", extra=flags, serve=serve) as server:
        yield server


async def kill9(server: RunningServer) -> None:
    """SIGKILL the daemon and wait until it is reaped (its port is free again)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.process.pid, signal.SIGKILL)
    await asyncio.wait_for(server.process.wait(), 10)


def keepers(state_dir: Path) -> list[psutil.Process]:
    """The keepers the state directory names (each one's meta.json)."""
    found = []
    for meta in state_dir.glob("*/*/meta.json"):
        with contextlib.suppress(psutil.NoSuchProcess, ValueError, KeyError, OSError):
            found.append(psutil.Process(json.loads(meta.read_text())["keeper"]))
    return found


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def living(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if alive(p)]


def tree_of(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its descendants as they are now (none if it is gone)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


async def end_keepers(state_dir: Path) -> None:
    """A test's own clean-up: SIGTERM ends a keeper as its TTL would (its tree
    killed, its files removed)."""
    found = keepers(state_dir)
    for keeper in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            keeper.terminate()
    assert await wait_until(lambda: not living(found), 20)


async def read_until_closed(
    peer: RpcClient, process_id: str, after: int = 0
) -> tuple[list[dict[str, Any]], int | None]:
    """``process/read`` from ``after`` (long polls) until the process is closed:
    every chunk read, and its exit code."""
    chunks: list[dict[str, Any]] = []
    while True:
        result = await peer.read(process_id, afterSeq=after, waitMs=2000)
        chunks.extend(result["chunks"])
        if result["chunks"]:
            after = result["chunks"][-1]["seq"]
        if result["closed"]:
            return chunks, result["exitCode"]
