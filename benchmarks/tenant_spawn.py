"""Spawn latency as a tenant against without tenancy (the target: within 1.5x).

Two real daemons, one serving ``--tenants`` (a tenant whose processes run as a
Unix account, ``es-bench-tenant``, made with useradd when missing) and one
without; ``process/start`` of ``true`` until its ``process/closed``, over the
websocket, alternately on each so that load on the machine falls on both alike.
Needs root (a tenant's process runs as its account).
``python -m benchmarks.tenant_spawn [--spawns N] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.client import BenchClient
from benchmarks.figures import ENV, ProcessWatcher, pct
from scripts.servers import start_server

__all__ = ["main"]

ACCOUNT = "es-bench-tenant"
TOKEN = "bench-tenant-token-0123456789"


def _account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(ACCOUNT)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", ACCOUNT], check=True)
        return pwd.getpwnam(ACCOUNT)


@contextlib.contextmanager
def _tenant_files() -> Any:
    """A workspace owned by the account and a tenants file (root, 0600) naming it."""
    account = _account()
    base = Path(tempfile.mkdtemp(prefix="es-bench-tenant-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        work = base / "work"
        work.mkdir()
        os.chown(work, account.pw_uid, account.pw_gid)
        tenants = base / "tenants.toml"
        fd = os.open(tenants, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(
                "[tenants.bench]\n"
                f'token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n'
                f'user = "{ACCOUNT}"\n'
                'sandbox = "optional"\n'
                f'writable_roots = ["{work}"]\n'
                'network = "none"\n'
            )
        yield work, tenants
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def _connect(url: str, token: str | None) -> BenchClient:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    session = aiohttp.ClientSession(headers=headers)
    ws = await session.ws_connect(url, max_msg_size=0, compress=0)
    client = BenchClient(session, ws)
    await client.call("initialize", {"clientName": "bench"})
    await client.notify("initialized", {})
    return client


@contextlib.asynccontextmanager
async def _daemons(tenants: Path) -> AsyncIterator[tuple[str, str]]:
    quiet = ["--log-level", "warning"]
    async with (
        start_server("execserver", [*quiet, "--tenants", str(tenants)]) as tenant,
        start_server("execserver", quiet) as plain,
    ):
        yield tenant.url, plain.url


async def _one(client: BenchClient, watcher: ProcessWatcher, pid: str, cwd: str) -> float:
    done = watcher.expect(pid)
    params = {"processId": pid, "argv": ["true"], "cwd": cwd, "env": ENV, "tty": False}
    start = time.perf_counter()
    await client.call("process/start", params)
    await asyncio.wait_for(done, 30)
    return time.perf_counter() - start


def _figures(times: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(times) * 1e3, 3),
        "p99_ms": round(pct(times, 0.99) * 1e3, 3),
    }


async def run(spawns: int, warmup: int) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise SystemExit("tenant_spawn: needs root (a tenant's process runs as its account)")
    with _tenant_files() as (work, tenants):
        cwd = "file://" + str(work)
        async with _daemons(tenants) as (tenant_url, plain_url):
            tenant = await _connect(tenant_url, TOKEN)
            plain = await _connect(plain_url, None)
            try:
                watchers = ProcessWatcher(tenant), ProcessWatcher(plain)
                times: dict[str, list[float]] = {"tenant": [], "no_tenancy": []}
                for i in range(warmup + spawns):
                    # Alternate which goes first, so neither always follows the other.
                    order = [("tenant", 0), ("no_tenancy", 1)]
                    if i % 2:
                        order.reverse()
                    for name, index in order:
                        client = (tenant, plain)[index]
                        took = await _one(client, watchers[index], f"s{i}", cwd)
                        if i >= warmup:
                            times[name].append(took)
            finally:
                await tenant.close()
                await plain.close()
    load = Path("/proc/loadavg").read_text().strip()  # noqa: ASYNC240 - a procfs read
    tenant_fig, plain_fig = _figures(times["tenant"]), _figures(times["no_tenancy"])
    return {
        "spawns": spawns,
        "tenant": tenant_fig,
        "no_tenancy": plain_fig,
        "p50_ratio": round(tenant_fig["p50_ms"] / plain_fig["p50_ms"], 2),
        "p99_ratio": round(tenant_fig["p99_ms"] / plain_fig["p99_ms"], 2),
        "loadavg_after": load,
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spawns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", help="also write the figures (JSON) here")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        before = handle.read().strip()
    result = {"loadavg_before": before, **asyncio.run(run(args.spawns, args.warmup))}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
