"""The real codex 0.169.0 CLI, unchanged, as a tenant of a daemon started with
``--tenants``: alice (account es-tenant-a, ``sandbox = "required"``,
``writable_roots`` = her workspace) connects with her bearer token, and her
tools run as her account inside the sandbox and her ceiling.

How the CLI sends a token. ``CODEX_EXEC_SERVER_URL`` (what test_codex_cli.py
uses) carries no credential, and no other environment variable adds one. The
CLI's ``$CODEX_HOME/environments.toml`` does: an ``[[environments]]`` entry with
``url`` may set ``auth_bearer_token``, a literal token (no ``${VAR}``
expansion) sent as ``Authorization: Bearer <token>`` on every websocket
upgrade. In openai/codex: codex-rs/exec-server/src/environment_toml.rs
(``EnvironmentToml``; the token becomes ``RemoteEnvironmentOptions.http_headers``)
and codex-rs/exec-server/src/environment/connect_options.rs (those headers are
refused unless the url is ``wss://`` or loopback: "exec-server WebSocket headers
require wss:// or a loopback destination"). The 0.169.0 binary says so too:
an unknown key in an entry fails with "expected one of `id`, `skills`, `url`,
`auth_bearer_token`, `program`, `args`, `env`, `cwd`, `connect_timeout_sec`,
`initialize_timeout_sec`". When it ran against a header-logging server it sent
``Authorization: Bearer <the literal value>``, and with ``ws://0.0.0.0`` it
stopped with the wss-or-loopback error before connecting. The
``bearer_token_env_var`` strings in the binary belong to ``mcp_servers``, not to
exec-server environments.

Why ``include_local = false``. A refused upgrade (401) is only a warning to the
CLI ("turn environment `remote` failed to start"): with the local environment
included (the default), it runs the model's commands on its own host instead,
as whoever runs the CLI, and the turn still succeeds. The last test pins that;
the tenant's configuration turns the local environment off, so a bad token
means no tool runs anywhere.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.interop.codex_cli.harness import UPGRADED, CliResult, Rig, rig
from tests.interop.codex_cli.mock_model import apply_patch, exec_command, message
from tests.support.servers import reference_binary
from tests.support.tenants import TOKEN_A, TenantHost, tenant_host

# Under pytest-xdist (`make test`) the CLI's turns run one at a time, on one worker:
# its workspace-write sandbox makes /tmp writable, and two daemons sandboxing /tmp
# at once race on its protected-name mount points (one daemon removed /tmp/.codex
# as another's bwrap bound it: "Can't bind mount /oldroot/tmp/.codex").
pytestmark = [pytest.mark.interop, pytest.mark.xdist_group("codex-cli")]

WRONG_TOKEN = "not-alices-token-0000000000"
NO_ENVIRONMENT = "No usable execution environment is available"
# The CLI's workspace-write sandbox asks for /tmp and $TMPDIR writable by default,
# which alice's ceiling (her workspace only) refuses; her config leaves them out.
EXCLUDE_TMP = """
[sandbox_workspace_write]
exclude_slash_tmp = true
exclude_tmpdir_env_var = true
"""


@pytest.fixture(scope="session")
def codex_binary() -> str:
    return reference_binary()


@pytest.fixture
def host() -> Iterator[TenantHost]:
    """es-tenant-a / es-tenant-b with workspaces under a 0755 directory in /tmp
    (alice can enter hers), a world-writable ``shared`` directory, the tenants file."""
    with tenant_host() as made:
        yield made


def _tenant_rig(
    host: TenantHost,
    codex: str,
    token: str,
    *,
    include_local: bool = False,
    workspace: Path | None = None,
) -> AbstractAsyncContextManager[Rig]:
    """``codex exec`` against a daemon with the tenants file, as the holder of
    ``token``, in alice's workspace unless told otherwise."""
    return rig(
        "execserver",
        "websocket",
        codex,
        token=token,
        include_local=include_local,
        server_args=["--tenants", str(host.tenants_file)],
        workspace_dir=host.a if workspace is None else workspace,
    )


@pytest.fixture
async def alice(host: TenantHost, codex_binary: str) -> AsyncIterator[Rig]:
    async with _tenant_rig(host, codex_binary, TOKEN_A) as r:
        yield r


def authenticated_as_alice(result: CliResult) -> None:
    """Every upgrade carried alice's token, from the CLI itself, and was accepted."""
    assert result.handshakes, result.describe()
    for handshake in result.handshakes:
        assert handshake.authorization == f"Bearer {TOKEN_A}", result.describe()
        assert handshake.status == UPGRADED, result.describe()


def finished(result: CliResult) -> None:
    assert result.returncode == 0, result.describe()
    assert [m["text"] for m in result.items("agent_message")] == ["done"], result.describe()
    assert result.model.stray == [], "the CLI sent traffic beyond the model turns"


def output(result: CliResult, call_id: str) -> str:
    outputs = result.model.tool_outputs()
    assert call_id in outputs, f"no tool output for {call_id}\n{result.describe()}"
    return outputs[call_id]


def start_call(result: CliResult, cmd: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params, reply) of the CLI's ``process/start`` for ``cmd``."""
    for params, reply in result.frames.calls("process/start"):
        if params["argv"][-1] == cmd:
            return params, reply
    raise AssertionError(f"no process/start for {cmd!r} reached the server\n{result.describe()}")


def started(result: CliResult, cmd: str) -> str:
    """The processId of a sandboxed ``process/start`` of ``cmd`` the server accepted."""
    params, reply = start_call(result, cmd)
    assert params.get("sandbox") is not None, params
    assert "result" in reply, f"process/start failed: {reply}\n{result.describe()}"
    assert reply["result"]["sandboxType"] == "linuxSeccomp", reply
    process_id: str = reply["result"]["processId"]
    return process_id


async def test_a_command_runs_as_the_tenant_inside_its_sandbox(
    alice: Rig, host: TenantHost
) -> None:
    cmd = "printf made > made.txt; id -u; echo tenant-echo"
    result = await alice.run([[exec_command("c1", cmd=cmd)], [message("done")]], config=EXCLUDE_TMP)
    finished(result)
    authenticated_as_alice(result)
    made = host.a / "made.txt"
    assert made.read_text() == "made"
    assert made.stat().st_uid == host.a_uid  # alice's account, not the daemon's root
    text = output(result, "c1")
    assert f"{host.a_uid}\ntenant-echo\n" in text and "Process exited with code 0" in text, text
    pid = started(result, cmd)
    assert f"{host.a_uid}\ntenant-echo\n".encode() in result.frames.process_output(pid)
    assert result.frames.process_exit(pid) == {"exitCode": 0, "sandboxDenied": False}


async def test_apply_patch_lands_as_the_tenant(alice: Rig, host: TenantHost) -> None:
    patch = "*** Begin Patch\n*** Add File: notes/plan.txt\n+alpha\n+beta\n*** End Patch\n"
    result = await alice.run([[apply_patch("p1", patch)], [message("done")]], config=EXCLUDE_TMP)
    finished(result)
    authenticated_as_alice(result)
    plan = host.a / "notes" / "plan.txt"
    assert plan.read_text() == "alpha\nbeta\n"
    assert plan.stat().st_uid == host.a_uid
    assert (host.a / "notes").stat().st_uid == host.a_uid
    text = output(result, "p1")
    assert "Success. Updated the following files:" in text and "A notes/plan.txt" in text, text
    # Through the server's fs/writeFile, not a local write of the CLI's.
    writes = [p["path"] for p, r in result.frames.calls("fs/writeFile") if "result" in r]
    assert writes == [plan.as_uri()], result.describe()


async def test_a_write_outside_the_writable_roots_is_denied_by_the_sandbox(
    alice: Rig, host: TenantHost
) -> None:
    # shared is mode 0777 and bob's workspace is bob's: the sandbox has to stop the
    # first; the second the kernel would refuse alice anyway.
    denied_cmd = f"echo escaped > {host.shared}/denied.txt"
    bob_cmd = f"echo escaped > {host.b}/denied.txt"
    result = await alice.run(
        [
            [exec_command("c1", cmd=denied_cmd)],
            [exec_command("c2", cmd=bob_cmd)],
            [message("done")],
        ],
        config=EXCLUDE_TMP,
    )
    finished(result)
    authenticated_as_alice(result)
    assert not (host.shared / "denied.txt").exists()
    assert not (host.b / "denied.txt").exists()
    for call_id, cmd in (("c1", denied_cmd), ("c2", bob_cmd)):
        text = output(result, call_id)
        assert not re.search(r"Process exited with code 0\b", text), text
        exit_status = result.frames.process_exit(started(result, cmd))
        assert exit_status is not None and exit_status["exitCode"] != 0, result.describe()
    assert "Read-only file system" in output(result, "c1")
    shared_exit = result.frames.process_exit(started(result, denied_cmd))
    # The CLI runs the command with environmentInfo's shell: the tenant account's
    # login shell (the test accounts': /bin/sh), whose status for a failed
    # redirection is 2 with dash and 1 with bash.
    assert shared_exit is not None, result.describe()
    assert shared_exit["sandboxDenied"] is True, result.describe()
    assert shared_exit["exitCode"] in (1, 2), result.describe()


async def test_a_sandbox_wider_than_the_ceiling_is_refused_and_runs_nowhere(
    alice: Rig, host: TenantHost
) -> None:
    # Without EXCLUDE_TMP the CLI's sandbox makes /tmp writable: alice's ceiling
    # refuses the process/start, and the CLI does not run the command itself (as
    # root, it would have written the file).
    cmd = f"echo escaped > {host.shared}/widened.txt"
    result = await alice.run([[exec_command("c1", cmd=cmd)], [message("done")]])
    finished(result)
    authenticated_as_alice(result)
    assert not (host.shared / "widened.txt").exists()
    params, reply = start_call(result, cmd)
    assert params.get("sandbox") is not None, params
    assert reply.get("error", {}).get("message") == (
        "tenant alice: writable root /tmp is outside the tenant's ceiling"
    ), result.describe()
    text = output(result, "c1")
    assert "writable root /tmp is outside the tenant's ceiling" in text, text
    [item] = result.items("command_execution")
    assert item["status"] == "failed", item


async def test_a_wrong_token_runs_no_tool_anywhere(host: TenantHost, codex_binary: str) -> None:
    # In the world-writable directory, where a local run of the CLI's could write.
    cmd = "echo ran > ran.txt"
    async with _tenant_rig(host, codex_binary, WRONG_TOKEN, workspace=host.shared) as cli:
        result = await cli.run(
            [[exec_command("c1", cmd=cmd)], [message("done")]], config=EXCLUDE_TMP
        )
    # The daemon refused every upgrade of the CLI's (the token is the CLI's own)...
    assert result.handshakes, result.describe()
    assert {(h.authorization, h.status) for h in result.handshakes} == {
        (f"Bearer {WRONG_TOKEN}", 401)
    }, result.describe()
    # ...so no JSON-RPC reached it, and the CLI ran nothing on its own host either.
    assert result.frames.frames == [], result.describe()
    assert not (host.shared / "ran.txt").exists()
    assert NO_ENVIRONMENT in output(result, "c1"), result.describe()


async def test_with_the_local_environment_kept_a_refused_token_runs_tools_locally(
    host: TenantHost, codex_binary: str
) -> None:
    """Why the tenant's environments.toml says ``include_local = false``: with the
    default, the CLI of 0.169.0 takes a 401 for an unavailable environment and
    runs the command on its own host (here as root, in its own sandbox: hence the
    world-writable workspace), and the turn succeeds."""
    cmd = "echo ran > ran.txt"
    local = _tenant_rig(host, codex_binary, WRONG_TOKEN, include_local=True, workspace=host.shared)
    async with local as cli:
        result = await cli.run(
            [[exec_command("c1", cmd=cmd)], [message("done")]], config=EXCLUDE_TMP
        )
    finished(result)
    assert {h.status for h in result.handshakes} == {401}, result.describe()
    assert result.frames.frames == [], result.describe()
    ran = host.shared / "ran.txt"
    assert ran.exists(), result.describe()
    assert ran.read_text() == "ran\n"
    assert ran.stat().st_uid == 0  # the CLI's own account: the daemon never saw it
    assert "Process exited with code 0" in output(result, "c1")
