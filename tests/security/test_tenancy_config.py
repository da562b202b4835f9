"""The tenants file and the daemon's secrets at start-up, and JWT subjects as
principals, through real daemons: a file or secret a tenant's account could read
is refused with one ``Error:`` line (a readable JWT secret mints any ``sub``), as
is a malformed file, naming file, tenant and key; a JWT is admitted as the tenant
its ``sub`` names and no other."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from execserver.client.environments import signed_bearer_token
from tests.support.rpc import b64, connect, uri
from tests.support.servers import PROJECT_ROOT, execserver_command, start_server
from tests.support.tenants import ACCOUNT_A, TenantHost, output_of, start, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        yield made


def _startup_error(*flags: str) -> list[str]:
    """The daemon's stderr when it refuses to start (it must exit 1 at once)."""
    env = {**os.environ, "EXECSERVER_STARTUP_PROBE": "0"}
    argv = execserver_command(["--listen", "ws://127.0.0.1:0", *flags])
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, cwd=PROJECT_ROOT
    )
    assert done.returncode == 1, done
    return done.stderr.splitlines()


def test_a_tenants_file_others_can_read_is_refused(host: TenantHost) -> None:
    os.chmod(host.tenants_file, 0o644)
    assert _startup_error("--tenants", str(host.tenants_file)) == [
        f"Error: tenants file {host.tenants_file} is readable or writable by others "
        "(mode 0644); chmod o-rw it"
    ]


def test_a_tenants_file_a_tenant_owns_is_refused(host: TenantHost) -> None:
    os.chown(host.tenants_file, host.a_uid, 0)
    assert _startup_error("--tenants", str(host.tenants_file)) == [
        f"Error: tenants file {host.tenants_file} is owned by tenant account {ACCOUNT_A}"
    ]


def test_a_jwt_secret_in_a_tenants_group_is_refused(host: TenantHost, tmp_path: Path) -> None:
    secret = host.base / "jwt.secret"
    secret.write_text("s" * 40)
    os.chown(secret, 0, os.stat(host.a).st_gid)
    os.chmod(secret, 0o640)
    host.write_tenants(
        alice={"token_sha256": None, "jwt_sub": "alice"},
        bob={"token_sha256": None, "jwt_sub": "bob"},
    )
    lines = _startup_error(
        "--tenants",
        str(host.tenants_file),
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(secret),
    )
    assert len(lines) == 1 and lines[0].startswith(f"Error: websocket auth secret {secret} is ")
    assert f"which tenant account {ACCOUNT_A} is in" in lines[0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"writeable_roots": ["/x"]}, "tenant alice: unknown key 'writeable_roots'"),
        ({"user": "no-such-user-es"}, "tenant alice: user: no such user 'no-such-user-es'"),
        ({"user": "root"}, "tenant alice: user: user 'root' is uid 0"),
        ({"writable_roots": ["relative"]}, "tenant alice: writable_roots: 'relative' is not"),
        ({"network": "some"}, "tenant alice: network must be one of none, managed, full"),
        ({"sandbox": "maybe"}, "tenant alice: sandbox must be"),
        ({"token_sha256": "abc"}, "tenant alice: token_sha256 must be a 64-character hex"),
    ],
)
def test_a_bad_entry_is_one_line_naming_file_tenant_and_key(
    host: TenantHost, change: dict[str, object], expected: str
) -> None:
    host.write_tenants(alice=change)
    lines = _startup_error("--tenants", str(host.tenants_file))
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Error: tenants file {host.tenants_file}: {expected}"), lines


def test_tenants_with_a_global_capability_token_is_refused(host: TenantHost) -> None:
    lines = _startup_error(
        "--tenants", str(host.tenants_file), "--ws-auth", "capability-token",
        "--ws-token-sha256", "0" * 64,
    )  # fmt: skip
    assert len(lines) == 1 and "`--tenants` takes each tenant's token" in lines[0]


async def test_a_jwt_is_admitted_as_the_tenant_its_sub_names(host: TenantHost) -> None:
    secret = host.base / "jwt.secret"
    secret.write_text("k" * 40)
    os.chmod(secret, 0o600)
    host.write_tenants(
        alice={"token_sha256": None, "jwt_sub": "alice", "sandbox": "optional"},
        bob={"token_sha256": None, "jwt_sub": "bob"},
    )
    flags = [
        "--tenants",
        str(host.tenants_file),
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(secret),
    ]
    as_alice = signed_bearer_token(secret, subject="alice")()
    as_nobody = signed_bearer_token(secret, subject="mallory")()
    assert as_alice is not None and as_nobody is not None
    async with start_server("execserver", flags, cwd=host.base) as server:
        async with connect(server.url, token=as_alice) as a:
            mine = await a.call("fs/writeFile", {"path": uri(host.a / "f"), "dataBase64": b64("1")})
            theirs = await a.call(
                "fs/writeFile", {"path": uri(host.b / "f"), "dataBase64": b64("1")}
            )
            ok, _ = await start(a, "cat", ["cat", str(secret)], host.a)
            assert ok
            text, code = await output_of(a, "cat")
        with pytest.raises(Exception) as refused:
            async with connect(server.url, token=as_nobody):
                pass
    assert mine.ok
    assert theirs.error[1].startswith("tenant alice: path ")
    # The tenant's process cannot read the secret that would mint another sub.
    assert code != 0 and "Permission denied" in text
    assert "401" in str(refused.value)
