"""exec_command / write_stdin against a real execserver.

Everything is real - server, sandbox, processes, client - except the user,
who is a scripted approver. Commands run with ``login: false`` where the
test depends on the process exiting inside the 150 ms early-exit window: a
login shell's startup files can take longer than that on their own.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client.connection import ExecServerClient
from execserver.core import TurnContext
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.network_approval import NetworkApprovalService
from execserver.core.permissions import (
    AdditionalPermissions,
    DisabledProfile,
    PermissionProfile,
    workspace_write_profile,
)
from execserver.core.policy import AskForApproval
from execserver.core.unified_exec.errors import RespondToModel
from execserver.core.unified_exec.manager import (
    APPLY_PATCH_VIA_EXEC_WARNING,
    NETWORK_DENIED_FALLBACK,
    UnifiedExecManager,
    process_limit_warning,
)
from tests.support.approver import ScriptedUser
from tests.support.servers import RunningServer


@pytest.fixture
async def client(execserver: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(execserver.url) as connected:
        yield connected


@pytest.fixture
async def manager(client: ExecServerClient) -> AsyncIterator[UnifiedExecManager]:
    m = UnifiedExecManager(client, deterministic_ids=True)
    yield m
    await m.clean()


def _turn(
    workspace: Path,
    user: ScriptedUser | None = None,
    policy: AskForApproval = AskForApproval.ON_REQUEST,
    profile: PermissionProfile | None = None,
) -> TurnContext:
    return TurnContext(
        environment=ExecutionEnvironment(environment_id="executor-1", cwd=str(workspace)),
        approval_policy=policy,
        permission_profile=profile or workspace_write_profile(),
        approver=user or ScriptedUser(),
    )


async def test_short_command_reports_exit_code_and_output(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command({"cmd": "echo hello", "login": False}, _turn(workspace))
    assert out.exit_code == 0
    assert out.session_id is None
    assert out.output == "hello\n"
    assert out.original_token_count == 2  # 6 bytes
    text = out.render()
    assert text.startswith(f"Chunk ID: {out.chunk_id}\nWall time: ")
    assert "\nProcess exited with code 0\nOriginal token count: 2\nOutput:\nhello\n" in text
    assert len(manager.store) == 0


async def test_completed_pipe_commands_preserve_exit_code(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "echo x | sh -c 'cat; exit 17'", "login": False}, _turn(workspace)
    )
    assert out.exit_code == 17
    assert out.output == "x\n"


async def test_workdir_is_joined_onto_the_turn_cwd(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    out = await manager.exec_command(
        {"cmd": "pwd", "workdir": "sub", "login": False}, _turn(workspace)
    )
    assert out.output == f"{workspace / 'sub'}\n"


async def test_long_command_is_stored_then_polled_with_write_stdin(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "echo start; sleep 1; echo done", "login": False, "yield_time_ms": 250},
        _turn(workspace),
    )
    assert out.exit_code is None
    assert out.session_id == 1000
    assert f"Process running with session ID {out.session_id}" in out.render()
    assert manager.store.ids() == [out.session_id]

    polled = await manager.write_stdin({"session_id": out.session_id})
    assert polled.exit_code == 0
    assert polled.session_id is None
    # Each call drains what arrived since the previous one.
    assert (out.output + polled.output) == "start\ndone\n"
    assert len(manager.store) == 0

    with pytest.raises(RespondToModel) as info:
        await manager.write_stdin({"session_id": out.session_id})
    assert info.value.message == f"Unknown process id {out.session_id}"


async def test_tty_session_keeps_shell_state_between_writes(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "sh", "tty": True, "login": False, "yield_time_ms": 500}, _turn(workspace)
    )
    session = out.session_id
    assert session is not None
    first = await manager.write_stdin({"session_id": session, "chars": "X=42\n"})
    assert first.session_id == session
    second = await manager.write_stdin(
        {"session_id": session, "chars": "echo value=$X\n", "yield_time_ms": 1000}
    )
    assert "value=42" in second.output
    done = await manager.write_stdin({"session_id": session, "chars": "exit 3\n"})
    if done.exit_code is None:  # the shell may need longer than the write yield
        done = await manager.write_stdin({"session_id": session})
    assert done.exit_code == 3


async def test_independent_sessions_do_not_share_output(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    turn = _turn(workspace)
    args = {"cmd": "cat", "tty": True, "login": False, "yield_time_ms": 250}
    a = await manager.exec_command(args, turn)
    b = await manager.exec_command(args, turn)
    assert a.session_id is not None and b.session_id is not None
    assert a.session_id != b.session_id
    to_a = await manager.write_stdin({"session_id": a.session_id, "chars": "alpha\n"})
    to_b = await manager.write_stdin({"session_id": b.session_id, "chars": "beta\n"})
    assert "alpha" in to_a.output and "beta" not in to_a.output
    assert "beta" in to_b.output and "alpha" not in to_b.output


async def test_write_to_a_process_without_tty_is_refused_but_ctrl_c_interrupts(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, _turn(workspace)
    )
    assert out.session_id is not None
    with pytest.raises(RespondToModel) as info:
        await manager.write_stdin({"session_id": out.session_id, "chars": "hello\n"})
    assert info.value.message == (
        "stdin is closed for this session; rerun exec_command with tty=true to keep stdin open"
    )
    interrupted = await manager.write_stdin(
        {"session_id": out.session_id, "chars": "\u0003", "yield_time_ms": 5000}
    )
    assert interrupted.exit_code == 130
    assert len(manager.store) == 0


async def test_output_over_the_token_budget_keeps_head_and_tail(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "seq 1 20000", "login": False, "max_output_tokens": 100}, _turn(workspace)
    )
    full = "".join(f"{i}\n" for i in range(1, 20001))
    assert out.exit_code == 0
    assert out.original_token_count == math.ceil(len(full) / 4)
    header = (
        f"Warning: truncated output (original token count: {out.original_token_count})\n"
        "Total output lines: 20000\n\n"
    )
    assert out.output.startswith(header + "1\n2\n3\n")
    assert out.output.endswith("19999\n20000\n")
    assert "tokens truncated…" in out.output
    assert len(out.output.encode()) < len(header) + 100 * 4 + 40


async def test_environment_pins_override_inherited_values(
    client: ExecServerClient, workspace: Path
) -> None:
    manager = UnifiedExecManager(client, env={"TERM": "xterm-256color", "EXTRA": "kept"})
    try:
        out = await manager.exec_command({"cmd": "env", "login": False}, _turn(workspace))
    finally:
        await manager.clean()
    env = dict(line.split("=", 1) for line in out.output.splitlines() if "=" in line)
    assert env["TERM"] == "dumb"
    assert env["EXTRA"] == "kept"
    for name, value in {
        "NO_COLOR": "1",
        "LANG": "C.UTF-8",
        "LC_CTYPE": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "COLORTERM": "",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GH_PAGER": "cat",
        "CODEX_CI": "1",
    }.items():
        assert env[name] == value, name


async def test_sandbox_denied_early_exit_is_retried_unsandboxed(
    manager: UnifiedExecManager, workspace: Path, outside: Path
) -> None:
    """Exit inside the window with the executor's denial flag: the orchestrator
    retries without the sandbox; the approval given up front covers the retry."""
    user = ScriptedUser(ReviewDecision.APPROVED)
    target = outside / "note.txt"
    out = await manager.exec_command(
        {"cmd": f"echo hi > {target} && cat {target}", "login": False},
        _turn(workspace, user, AskForApproval.UNLESS_TRUSTED),
    )
    assert out.exit_code == 0
    assert out.output == "hi\n"
    assert target.read_text() == "hi\n"
    assert [r.retry for r in user.requests] == [False]


async def test_early_denial_without_retry_is_an_ordinary_result(
    manager: UnifiedExecManager, workspace: Path, outside: Path
) -> None:
    """Under ON_REQUEST the shell-like runtime has no retry for a plain fs
    denial: the model gets the denied output and its exit code."""
    user = ScriptedUser()
    out = await manager.exec_command(
        {"cmd": f"echo hi > {outside}/f", "login": False}, _turn(workspace, user)
    )
    assert out.exit_code not in (0, None)
    assert out.session_id is None
    assert "Read-only file system" in out.output
    assert user.requests == []
    assert not (outside / "f").exists()


async def test_late_denial_is_reported_and_not_retried(
    manager: UnifiedExecManager, workspace: Path, outside: Path
) -> None:
    """A denial after the window is an ordinary result: no retry prompt, no
    unsandboxed second run, no session id."""
    user = ScriptedUser(ReviewDecision.APPROVED)
    out = await manager.exec_command(
        {"cmd": f"sleep 1; echo hi > {outside}/late", "login": False},
        _turn(workspace, user, AskForApproval.UNLESS_TRUSTED),
    )
    assert out.exit_code not in (0, None)
    assert out.session_id is None
    assert "Read-only file system" in out.output
    assert [r.retry for r in user.requests] == [False]
    assert not (outside / "late").exists()
    assert len(manager.store) == 0


async def test_interrupting_a_call_leaves_the_stored_process_alive(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    call = asyncio.create_task(
        manager.exec_command(
            {"cmd": "echo ready; read line; echo got:$line", "tty": True, "login": False},
            _turn(workspace),
        )
    )
    for _ in range(1000):  # until the call has stored its process
        if manager.store.ids():
            break
        await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    (session,) = manager.store.ids()
    out = await manager.write_stdin({"session_id": session, "chars": "still here\n"})
    if out.exit_code is None:
        out = await manager.write_stdin({"session_id": session})
    assert "got:still here" in out.output
    assert out.exit_code == 0


async def test_clean_terminates_every_stored_process(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    turn = _turn(workspace)
    ids = []
    for _ in range(3):
        out = await manager.exec_command(
            {"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, turn
        )
        assert out.session_id is not None
        ids.append(out.session_id)
    assert sorted(manager.store.ids()) == sorted(ids)
    processes = [entry.process for i in ids if (entry := manager.store.get(i)) is not None]
    await manager.clean()
    assert len(manager.store) == 0
    assert all(p.exited for p in processes)
    for session in ids:
        with pytest.raises(RespondToModel):
            await manager.write_stdin({"session_id": session})


async def test_pruning_terminates_the_least_recently_used_process(
    client: ExecServerClient, workspace: Path
) -> None:
    manager = UnifiedExecManager(
        client, deterministic_ids=True, max_processes=3, protected_recent=1
    )
    turn = _turn(workspace)
    try:
        for _ in range(3):
            await manager.exec_command(
                {"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, turn
            )
        oldest = manager.store.get(1000)
        assert oldest is not None
        await manager.write_stdin({"session_id": 1001, "chars": "\u0003"})  # 1001 exits
        await manager.exec_command({"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, turn)
        # 1001 exited during its call and left the store; 1000 is kept: the store
        # had room again.
        assert sorted(manager.store.ids()) == [1000, 1002, 1003]
        await manager.exec_command({"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, turn)
        assert 1000 not in manager.store
        assert oldest.process.exited
    finally:
        await manager.clean()


async def test_apply_patch_through_exec_command_is_intercepted(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    script = (
        "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\nEOF\n"
    )
    out = await manager.exec_command({"cmd": script}, _turn(workspace))
    assert out.exit_code == 0
    assert out.output == "Success. Updated the following files:\nA hello.txt\n"
    assert out.warnings == (f"Warning: {APPLY_PATCH_VIA_EXEC_WARNING}",)
    assert (workspace / "hello.txt").read_text() == "hi\n"


async def test_bare_patch_body_as_command_is_refused(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(
            {"cmd": "*** Begin Patch\n*** Add File: x\n+x\n*** End Patch", "shell": "bash"},
            _turn(workspace),
        )
    assert info.value.message == (
        'patch detected without explicit call to apply_patch. Rerun as ["apply_patch", "<patch>"]'
    )


async def test_write_to_a_process_that_exited_between_calls_reports_its_exit(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "read line; echo got:$line", "tty": True, "login": False, "yield_time_ms": 250},
        _turn(workspace),
    )
    assert out.session_id is not None
    entry = manager.store.get(out.session_id)
    assert entry is not None
    # Kill it behind the manager's back: the store still lists it.
    await entry.process.remote.terminate()
    await entry.process.wait_exit(30)
    done = await manager.write_stdin({"session_id": out.session_id, "chars": "late\n"})
    assert done.session_id is None
    assert done.exit_code is not None and done.exit_code != 0
    assert len(manager.store) == 0


async def test_start_failure_is_reported_to_the_model(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(
            {"cmd": "true", "workdir": "does/not/exist", "login": False}, _turn(workspace)
        )
    assert info.value.message.startswith(
        "exec_command failed for `true`: Failed to create unified exec process: "
    )
    assert len(manager.store) == 0


async def test_unified_exec_pause_blocks_yield_timeout(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    """While paused (a prompt is waiting for the user) the yield deadline does
    not run out: the call returns the exit instead of a session id."""
    with manager.pause.paused():
        out = await manager.exec_command(
            {"cmd": "sleep 1; echo done", "login": False, "yield_time_ms": 250},
            _turn(workspace),
        )
    assert out.exit_code == 0
    assert out.session_id is None
    assert out.output == "done\n"


def _network_turn(workspace: Path) -> tuple[TurnContext, NetworkApprovalService]:
    user = ScriptedUser()
    profile = DisabledProfile()
    service = NetworkApprovalService(
        approver=user, policy=AskForApproval.ON_REQUEST, profile=profile
    )
    turn = TurnContext(
        environment=ExecutionEnvironment(environment_id="executor-1", cwd=str(workspace)),
        approval_policy=AskForApproval.ON_REQUEST,
        permission_profile=profile,
        approver=user,
        managed_network=ManagedNetwork(),
        network_approvals=service,
    )
    return turn, service


async def test_deferred_network_approval_ends_when_the_stored_process_exits(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    turn, service = _network_turn(workspace)
    out = await manager.exec_command(
        {"cmd": "sleep 0.5; echo ok", "login": False, "yield_time_ms": 250}, turn
    )
    assert out.session_id is not None
    assert len(service.active_calls_for_environment("executor-1")) == 1
    done = await manager.write_stdin({"session_id": out.session_id})
    assert (done.exit_code, done.output) == (0, "ok\n")
    assert service.active_calls_for_environment("executor-1") == []


async def test_network_denial_terminates_the_process_and_says_so(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    """Invariant 14: the proxy's block cancels the call's approval, the process
    is terminated, and the result names the network proxy."""
    turn, service = _network_turn(workspace)
    out = await manager.exec_command(
        {"cmd": "sleep 30", "login": False, "yield_time_ms": 250}, turn
    )
    assert out.session_id is not None
    (active,) = service.active_calls_for_environment("executor-1")
    service.record_blocked_request(active.registration_id)
    done = await manager.write_stdin({"session_id": out.session_id})
    assert done.exit_code is not None and done.exit_code != 0
    assert done.output.endswith(NETWORK_DENIED_FALLBACK)
    assert service.active_calls_for_environment("executor-1") == []
    assert len(manager.store) == 0


async def test_many_open_processes_produce_the_limit_warning(
    client: ExecServerClient, workspace: Path
) -> None:
    manager = UnifiedExecManager(client, max_processes=4, warning_threshold=2)
    args = {"cmd": "sleep 30", "login": False, "yield_time_ms": 250}
    try:
        first = await manager.exec_command(args, _turn(workspace))
        second = await manager.exec_command(args, _turn(workspace))
    finally:
        await manager.clean()
    assert first.warnings == ()
    assert second.warnings == (
        "Warning: The maximum number of unified exec processes you can keep open is 2 and you "
        "currently have 2 processes open. Reuse older processes or close them to prevent "
        "automatic pruning of old processes",
    )
    assert process_limit_warning(60, 61).startswith(
        "Warning: The maximum number of unified exec processes you can keep open is 60 "
    )


async def test_login_shell_disabled_by_config_refuses_an_explicit_login(
    client: ExecServerClient, workspace: Path
) -> None:
    manager = UnifiedExecManager(client, allow_login_shell=False)
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command({"cmd": "true", "login": True}, _turn(workspace))
    assert info.value.message == (
        "login shell is disabled by config; omit `login` or set it to false."
    )
    out = await manager.exec_command({"cmd": "echo $0"}, _turn(workspace))
    assert out.exit_code == 0


async def test_escalation_request_is_refused_unless_on_request(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(
            {"cmd": "true", "sandbox_permissions": "require_escalated"},
            _turn(workspace, policy=AskForApproval.NEVER),
        )
    assert info.value.message == (
        "approval policy is Never; reject command — you cannot ask for escalated "
        "permissions if the approval policy is Never"
    )
    assert len(manager.store) == 0


async def test_permissions_granted_earlier_pass_the_escalation_gate(
    manager: UnifiedExecManager, workspace: Path, tmp_path: Path
) -> None:
    """As in the reference, asking only for what the session already granted is
    not an escalation the approval policy must allow; asking for more is."""
    outside = tmp_path / "granted"
    outside.mkdir()
    args = {
        "cmd": f"echo ok > {outside}/made",
        "login": False,
        "sandbox_permissions": "with_additional_permissions",
        "additional_permissions": {"file_system": {"write": [str(outside)]}},
    }
    turn = _turn(workspace, policy=AskForApproval.NEVER)
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(args, turn)
    assert info.value.message.startswith("approval policy is Never; reject command")
    assert not (outside / "made").exists()

    turn.granted_permissions = AdditionalPermissions(write=(str(outside),))
    out = await manager.exec_command(args, turn)
    assert out.exit_code == 0, out.output
    assert (outside / "made").read_text() == "ok\n"


async def test_a_missing_shell_under_the_sandbox_is_no_denial_and_asks_nobody(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    """The sandbox launcher's exit 101 + sandboxDenied for a program that does
    not exist is a start failure, not a reason to offer running unsandboxed."""
    user = ScriptedUser(ReviewDecision.APPROVED)
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(
            {"cmd": "true", "shell": "/no/such/shell", "login": False}, _turn(workspace, user)
        )
    assert "Failed to create unified exec process" in info.value.message
    assert "command not found" in info.value.message
    assert user.requests == []
    assert len(manager.store) == 0


async def test_a_typo_in_exec_command_arguments_is_refused_naming_the_key(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    """A misspelt key is an error the model reads, not a default silently used:
    nothing runs and nobody is asked."""
    user = ScriptedUser()
    with pytest.raises(RespondToModel) as info:
        await manager.exec_command(
            {"cmd": "touch ran", "login": False, "yeild_time_ms": 250}, _turn(workspace, user)
        )
    assert "unknown field `yeild_time_ms`" in info.value.message
    assert not (workspace / "ran").exists()
    assert user.requests == []
    assert len(manager.store) == 0


async def test_a_typo_in_write_stdin_arguments_is_refused_naming_the_key(
    manager: UnifiedExecManager, workspace: Path
) -> None:
    out = await manager.exec_command(
        {"cmd": "cat", "tty": True, "login": False, "yield_time_ms": 250}, _turn(workspace)
    )
    assert out.session_id is not None
    with pytest.raises(RespondToModel) as info:
        await manager.write_stdin({"session_id": out.session_id, "char": "hello\n"})
    assert "unknown field `char`" in info.value.message
    # The process is untouched and still reachable with the right spelling.
    echoed = await manager.write_stdin({"session_id": out.session_id, "chars": "hello\n"})
    assert "hello" in echoed.output
    assert echoed.session_id == out.session_id
