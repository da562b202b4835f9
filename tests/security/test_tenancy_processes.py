"""Tenant B's processes against tenant A's, through a real daemon (root): each
tenant's process runs as its own Unix account, so B's command cannot read A's
files, A's process environment through /proc, signal A's process, or read the
daemon's tenants file — the kernel's uid checks refuse, whatever B runs."""

from __future__ import annotations

import asyncio
import base64
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.rpc import connect, uri
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, output_of, start, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        # A unsandboxed here (sandbox optional): its process has a host pid B can name.
        made.write_tenants(alice={"sandbox": "optional"})
        yield made


def _status_line(pid: int, key: str) -> str:
    with open(f"/proc/{pid}/status") as handle:
        return next(line for line in handle if line.startswith(key))


async def test_b_cannot_read_signal_or_inspect_as_process(host: TenantHost) -> None:
    async with host.serve() as server, connect(server.url, token=TOKEN_A) as a:
        ok, _ = await start(
            a,
            "a-server",
            ["sh", "-c", 'echo "pid $$"; exec sleep 300'],
            host.a,
            env={"ALICE_SECRET": "hunter2"},
        )
        assert ok
        async with asyncio.timeout(10):
            pid_line = ""
            while "pid " not in pid_line:
                result = await a.read("a-server", waitMs=2000)
                pid_line = "".join(base64.b64decode(c["chunk"]).decode() for c in result["chunks"])
        pid = int(pid_line.split()[1])
        script = (
            "id -u; "
            f"cat {host.a}/secret.txt && echo READ-FILE; "
            f"cat /proc/{pid}/environ && echo READ-ENVIRON; "
            f"kill -9 {pid} && echo KILLED; "
            f"cat {host.tenants_file} && echo READ-TENANTS; "
            f"ln {host.a}/secret.txt {host.b}/hard && echo HARDLINKED; "
            "true"
        )
        async with connect(server.url, token=TOKEN_B) as b:
            ok, _ = await start(b, "attack", ["sh", "-c", script], host.b)
            assert ok
            text, _code = await output_of(b, "attack")
        # A's process is alive and still A's.
        status = await a.read("a-server")
        assert not status["exited"]
        uid_line = _status_line(pid, "Uid:")
    assert text.splitlines()[0] == str(host.b_uid)
    for marker in ("READ-FILE", "READ-ENVIRON", "KILLED", "READ-TENANTS", "HARDLINKED"):
        assert marker not in text, text
    assert "hunter2" not in text and "alice's secret" not in text
    assert uid_line.split()[1] == str(host.a_uid)


async def test_a_tenants_process_has_its_accounts_identity_and_forced_env(
    host: TenantHost,
) -> None:
    host.write_tenants(alice={"sandbox": "optional"}, bob={"env": {"TMPDIR": str(host.b / "tmp")}})
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        ok, _ = await start(
            b,
            "who",
            ["sh", "-c", 'id -u; id -g; echo "$HOME $USER $TMPDIR"'],
            host.b,
            env={"TMPDIR": "/tmp/attempted-override"},
        )
        assert ok
        text, code = await output_of(b, "who")
    uid, gid, env = text.splitlines()
    account = pwd.getpwnam("es-tenant-b")
    assert (uid, gid) == (str(account.pw_uid), str(account.pw_gid))
    assert env.split()[1:] == ["es-tenant-b", str(host.b / "tmp")]
    assert code == 0


async def test_a_cwd_the_tenant_cannot_enter_is_refused(host: TenantHost) -> None:
    # The child would chdir as root before dropping to B's uid: checked first.
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        ok, error = await start(b, "in-a", ["ls"], host.a)
    assert not ok
    assert error[1] == f"tenant bob: cwd {host.a} is not accessible to user es-tenant-b"


async def test_a_tenants_terminal_gets_its_accounts_login_shell(host: TenantHost) -> None:
    """A tty start without SHELL in its env gets the login shell of the account it
    runs as (the reference's pty default), the tenant's, not the daemon's."""
    tenant_shell = pwd.getpwuid(host.b_uid).pw_shell
    daemon_shell = pwd.getpwuid(0).pw_shell
    assert tenant_shell != daemon_shell  # else the test could not tell them apart
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        ok, _ = await start(b, "tty", ["sh", "-c", 'echo "shell=$SHELL"'], host.b, tty=True)
        assert ok
        text, code = await output_of(b, "tty")
    assert code == 0
    assert f"shell={tenant_shell}" in text, text


async def test_environment_info_reports_the_tenants_home_shell_and_tmpdir(
    host: TenantHost,
) -> None:
    """initialize's environmentInfo and environment/info tell a tenant its own
    account's home and login shell, and its forced TMPDIR: never the daemon's
    (root's home, the daemon's SHELL and TMPDIR say nothing of the tenant)."""
    tmp = host.b / "tmp"
    host.write_tenants(alice={"sandbox": "optional"}, bob={"env": {"TMPDIR": str(tmp)}})
    daemon = {"HOME": "/root", "SHELL": "/bin/bash", "TMPDIR": "/var/tmp"}
    account_a, account_b = pwd.getpwuid(host.a_uid), pwd.getpwuid(host.b_uid)
    async with (
        host.serve(env=daemon) as server,
        connect(server.url, token=TOKEN_A, handshake=False) as a,
        connect(server.url, token=TOKEN_B, handshake=False) as b,
    ):
        infos = {}
        for name, client in (("a", a), ("b", b)):
            reply = await client.handshake()
            assert reply.ok
            infos[name] = (reply.result["environmentInfo"], await client.ok("environment/info"))
    for name, account, temp in (("a", account_a, "/var/tmp"), ("b", account_b, str(tmp))):
        at_initialize, asked = infos[name]
        # The wire shape is the reference's: the same keys, whoever asks.
        assert sorted(asked) == sorted(at_initialize)
        for info in (at_initialize, asked):
            assert info["userHomeDir"] == uri(Path(account.pw_dir))
            assert info["shell"] == {
                "name": Path(account.pw_shell).name,
                "path": account.pw_shell,
            }
            assert info["tempDir"] == uri(Path(temp))
    assert account_b.pw_dir != "/root" and account_b.pw_shell != "/bin/bash"
