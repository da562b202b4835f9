"""Two real tenants on one real daemon (running as root): Unix accounts
``es-tenant-a`` / ``es-tenant-b`` (made with useradd when missing), a workspace of
each owned by it (mode 0700) under a root-owned 0755 directory, a world-writable
``shared`` directory that only a sandbox can keep a tenant out of, and a tenants
file (root, 0600) naming them. ``TenantHost.serve`` starts a daemon with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.rpc import RpcClient, poll_until, read_all, uri
from tests.support.servers import RunningServer, start_server

__all__ = [
    "ACCOUNT_A",
    "ACCOUNT_B",
    "TOKEN_A",
    "TOKEN_B",
    "TenantHost",
    "audit_records",
    "ensure_account",
    "output_of",
    "records",
    "sha",
    "sighup",
    "start",
    "tenant_host",
]

ACCOUNT_A = "es-tenant-a"
ACCOUNT_B = "es-tenant-b"
TOKEN_A = "tenant-a-token-0123456789"
TOKEN_B = "tenant-b-token-9876543210"


def ensure_account(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class TenantHost:
    base: Path
    a: Path  # es-tenant-a's workspace
    b: Path  # es-tenant-b's workspace
    shared: Path  # mode 0777: only a sandbox keeps a tenant out of it
    tenants_file: Path
    a_uid: int
    b_uid: int
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def write_tenants(self, **profiles: dict[str, Any] | None) -> None:
        """Write the tenants file: ``alice`` (A) and ``bob`` (B) by default, each
        entry's keys replaced by ``profiles[name]`` (None drops the tenant)."""
        base: dict[str, dict[str, Any] | None] = {
            "alice": {
                "token_sha256": sha(TOKEN_A),
                "user": ACCOUNT_A,
                "sandbox": "required",
                "writable_roots": [str(self.a)],
                "network": "none",
            },
            "bob": {
                "token_sha256": sha(TOKEN_B),
                "user": ACCOUNT_B,
                "sandbox": "optional",
                "writable_roots": [str(self.b)],
                "network": "none",
            },
        }
        for name, change in profiles.items():
            if change is None:
                base[name] = None
            else:
                base[name] = {**(base.get(name) or {}), **change}
        lines: list[str] = []
        for name, kept in base.items():
            if kept is None:
                continue
            lines.append(f"[tenants.{name}]")
            lines += [f"{key} = {_toml(value)}" for key, value in kept.items() if value is not None]
            lines.append("")
        tmp = self.tenants_file.with_suffix(".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("\n".join(lines))
        os.replace(tmp, self.tenants_file)

    @contextlib.asynccontextmanager
    async def serve(
        self, *extra: str, env: dict[str, str] | None = None, serve: list[str] | None = None
    ) -> AsyncIterator[RunningServer]:
        """``serve``: the argv standing for ``execserver serve`` (start_server's), e.g.
        tests.support.netproxy.SERVE_WITH_HOSTS for made-up names on 127.0.0.1."""
        async with start_server(
            "execserver",
            ["--tenants", str(self.tenants_file), *extra],
            cwd=self.base,
            env=None if env is None else {**os.environ, **env},
            serve=serve,
        ) as server:
            yield server


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


@contextlib.contextmanager
def tenant_host() -> Iterator[TenantHost]:
    """The accounts, the workspaces and a tenants file; removed afterwards."""
    a, b = ensure_account(ACCOUNT_A), ensure_account(ACCOUNT_B)
    # Not under pytest's tmp_path: its 0700 root-owned parents keep tenants out of
    # their own workspaces.
    base = Path(tempfile.mkdtemp(prefix="es-tenancy-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        host = TenantHost(
            base=base,
            a=base / "a",
            b=base / "b",
            shared=base / "shared",
            tenants_file=base / "tenants.toml",
            a_uid=a.pw_uid,
            b_uid=b.pw_uid,
        )
        for path, account in ((host.a, a), (host.b, b)):
            path.mkdir()
            os.chown(path, account.pw_uid, account.pw_gid)
            os.chmod(path, 0o700)
        host.shared.mkdir()
        os.chmod(host.shared, 0o777)
        secret = host.a / "secret.txt"
        secret.write_text("alice's secret\n")
        os.chown(secret, a.pw_uid, a.pw_gid)
        os.chmod(secret, 0o600)
        host.write_tenants()
        yield host
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def start(
    client: RpcClient,
    process_id: str,
    argv: list[str],
    cwd: Path,
    *,
    sandbox: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    **extra: Any,
) -> tuple[bool, Any]:
    """process/start: (True, result) or (False, (code, message))."""
    params: dict[str, Any] = {
        "processId": process_id,
        "argv": argv,
        "cwd": uri(cwd),
        "env": {"PATH": "/usr/bin:/bin", **(env or {})},
        "tty": False,
        "pipeStdin": False,
        "arg0": None,
        **extra,
    }
    if sandbox is not None:
        params["sandbox"] = sandbox
    reply = await client.call("process/start", params)
    return (True, reply.result) if reply.ok else (False, reply.error)


async def output_of(client: RpcClient, process_id: str, timeout: float = 30) -> tuple[str, int]:
    """The whole stdout+stderr of a process, once it is closed, and its exit code."""
    after = 0
    async with asyncio.timeout(timeout):
        while True:
            # A long poll past what was read: it answers when something new happens.
            result = await client.read(process_id, waitMs=5000, afterSeq=after)
            if result["closed"]:
                break
            after = result["nextSeq"] - 1
    chunks = await read_all(client, process_id)
    text = b"".join(base64.b64decode(c["chunk"]) for c in chunks).decode(errors="replace")
    return text, result["exitCode"]


def sighup(server: RunningServer) -> None:
    server.process.send_signal(signal.SIGHUP)


def records(path: Path, event: str) -> list[dict[str, object]]:
    """The audit log's ``event`` records so far (one JSON object per line)."""
    text = path.read_text() if path.exists() else ""
    return [r for r in map(json.loads, text.splitlines()) if r.get("event") == event]


async def audit_records(path: Path, event: str, count: int = 1) -> list[dict[str, object]]:
    """The audit log's ``event`` records once there are ``count`` of them: the log is
    a file another process's writer thread appends to (no event to wait on)."""
    assert await poll_until(lambda: len(records(path, event)) >= count, 20), event
    return records(path, event)
