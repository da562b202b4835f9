"""Spawn latency as a tenant against without tenancy (the target: within 1.5x).

Three real daemons: one serving ``--tenants`` with a tenant whose processes run as
its account, one whose tenant also has a cgroup quota (``pids_max``: each process
then also enters its tenant's cgroup), and one without tenancy. The first two
Unix account, ``es-bench-tenant``, made with useradd when missing) and one
without; ``process/start`` of ``true`` until its ``process/closed``, over the
websocket, alternately on each so that load on the machine falls on both alike;
``--gap-ms`` pauses after each spawn, as an agent's turns do (the kernel's cost
of a first move into a cgroup depends on how long ago the last one was).
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
    """A workspace owned by the account and two tenants files (root, 0600) naming it,
    the second with a quota."""
    account = _account()
    base = Path(tempfile.mkdtemp(prefix="es-bench-tenant-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        work = base / "work"
        work.mkdir()
        os.chown(work, account.pw_uid, account.pw_gid)
        entry = (
            "[tenants.bench]\n"
            f'token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n'
            f'user = "{ACCOUNT}"\n'
            'sandbox = "optional"\n'
            f'writable_roots = ["{work}"]\n'
            'network = "none"\n'
        )
        files = []
        for name, text in (("tenants.toml", entry), ("quota.toml", entry + "pids_max = 100000\n")):
            path = base / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            files.append(path)
        yield work, files[0], files[1]
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
async def _daemons(tenants: Path, quota: Path) -> AsyncIterator[tuple[str, str, str]]:
    quiet = ["--log-level", "warning"]
    async with (
        start_server("execserver", [*quiet, "--tenants", str(tenants)]) as tenant,
        start_server("execserver", [*quiet, "--tenants", str(quota)]) as quota_tenant,
        start_server("execserver", quiet) as plain,
    ):
        yield tenant.url, quota_tenant.url, plain.url


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


async def run(spawns: int, warmup: int, gap_s: float = 0.0) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise SystemExit("tenant_spawn: needs root (a tenant's process runs as its account)")
    names = ("tenant", "tenant_cgroup", "no_tenancy")
    with _tenant_files() as (work, tenants, quota):
        cwd = "file://" + str(work)
        async with _daemons(tenants, quota) as urls:
            clients = [
                await _connect(url, TOKEN if name != "no_tenancy" else None)
                for name, url in zip(names, urls, strict=True)
            ]
            try:
                watchers = [ProcessWatcher(client) for client in clients]
                times: dict[str, list[float]] = {name: [] for name in names}
                for i in range(warmup + spawns):
                    # Rotate which goes first, so none always follows another.
                    order = list(range(len(names)))
                    order = order[i % len(order) :] + order[: i % len(order)]
                    for index in order:
                        took = await _one(clients[index], watchers[index], f"s{i}", cwd)
                        if i >= warmup:
                            times[names[index]].append(took)
                        if gap_s:
                            # As an agent's commands come: a model's turn between them.
                            await asyncio.sleep(gap_s)
            finally:
                for client in clients:
                    await client.close()
    load = Path("/proc/loadavg").read_text().strip()  # noqa: ASYNC240 - a procfs read
    figures = {name: _figures(times[name]) for name in names}
    plain = figures["no_tenancy"]
    return {
        "spawns": spawns,
        "gap_ms": round(gap_s * 1e3),
        **figures,
        "p50_ratio": round(figures["tenant"]["p50_ms"] / plain["p50_ms"], 2),
        "p99_ratio": round(figures["tenant"]["p99_ms"] / plain["p99_ms"], 2),
        "cgroup_p50_ratio": round(figures["tenant_cgroup"]["p50_ms"] / plain["p50_ms"], 2),
        "cgroup_p99_ratio": round(figures["tenant_cgroup"]["p99_ms"] / plain["p99_ms"], 2),
        "loadavg_after": load,
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spawns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="pause after each spawn (agents' spawns come seconds apart; 0: back to back)",
    )
    parser.add_argument("--out", help="also write the figures (JSON) here")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        before = handle.read().strip()
    figures = asyncio.run(run(args.spawns, args.warmup, args.gap_ms / 1e3))
    result = {"loadavg_before": before, **figures}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
