"""SandboxAttempt: choosing the attempt, its three notions of "sandbox", and
the process/start params built from it.

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

import msgspec
import pytest

from execserver.core.attempt import (
    SandboxAttempt,
    SandboxType,
    exec_start_params,
    first_attempt,
    retry_attempt,
    sandbox_context,
    should_sandbox,
    unsandboxed_execution_allowed,
)
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.errors import Rejected
from execserver.core.permissions import (
    DisabledProfile,
    ExplicitPath,
    ExternalProfile,
    FsAccess,
    FsEntry,
    ManagedProfile,
    NetworkAccess,
    PermissionProfile,
    RestrictedFs,
    SpecialPath,
    UnrestrictedFs,
    profile_to_json,
    read_only_profile,
    workspace_write_profile,
)
from execserver.core.policy import SandboxablePreference, SandboxOverride
from execserver.wire.process import (
    ManagedNetworkSandboxContext,
    RemoteNetworkProxyConfig,
    RemoteNetworkProxyLaunchConfig,
)
from execserver.wire.sandbox import decode_sandbox_context

REMOTE = ExecutionEnvironment(environment_id="remote-1", cwd="/work/repo")
LOCAL = ExecutionEnvironment(environment_id="local", cwd="/work/repo", executor_managed=False)
RESTRICTED = workspace_write_profile()
DENY_READ = workspace_write_profile(extra=[FsEntry(ExplicitPath("/secret"), FsAccess.DENY)])
AUTO = SandboxablePreference.AUTO
NO = SandboxOverride.NO_OVERRIDE
FULL_ACCESS = ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED)
BYPASS = SandboxOverride.BYPASS_SANDBOX_FIRST_ATTEMPT


def _first(
    profile: PermissionProfile = RESTRICTED,
    *,
    environment: ExecutionEnvironment = REMOTE,
    override: SandboxOverride = NO,
    managed: ManagedNetwork | None = None,
    preference: SandboxablePreference = AUTO,
) -> SandboxAttempt:
    return first_attempt(
        environment=environment,
        profile=profile,
        preference=preference,
        override=override,
        managed_network=managed,
        process_id_base="7",
    )


def _retry(
    profile: PermissionProfile = RESTRICTED, *, managed: ManagedNetwork | None = None
) -> SandboxAttempt:
    return retry_attempt(
        environment=REMOTE,
        profile=profile,
        preference=AUTO,
        managed_network=managed,
        process_id_base="7",
    )


# ------------------------------------------------------------------ the sandbox an attempt asks for
@pytest.mark.parametrize(
    ("profile", "preference", "managed", "expected"),
    [
        (RESTRICTED, SandboxablePreference.FORBID, True, False),
        (DisabledProfile(), SandboxablePreference.REQUIRE, True, False),
        (ExternalProfile(), AUTO, True, False),
        (ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED), AUTO, True, True),
        (RESTRICTED, AUTO, False, True),
        (read_only_profile(network=NetworkAccess.ENABLED), AUTO, False, True),
        (ManagedProfile(UnrestrictedFs(), NetworkAccess.RESTRICTED), AUTO, False, True),
        (ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED), AUTO, False, False),
        (FULL_ACCESS, SandboxablePreference.REQUIRE, False, True),
        (
            ManagedProfile(
                RestrictedFs((FsEntry(SpecialPath("root"), FsAccess.WRITE),)), NetworkAccess.ENABLED
            ),
            AUTO,
            False,
            False,
        ),
    ],
)
def test_should_sandbox_table(
    profile: PermissionProfile,
    preference: SandboxablePreference,
    managed: bool,
    expected: bool,
) -> None:
    assert should_sandbox(profile, preference, managed) is expected


def test_unsandboxed_execution_is_not_allowed_with_deny_read_or_owner_network_policy() -> None:
    """Invariant 10: deny-read profiles and owner network policies keep the sandbox."""
    assert unsandboxed_execution_allowed(RESTRICTED, None)
    assert unsandboxed_execution_allowed(RESTRICTED, ManagedNetwork())
    assert not unsandboxed_execution_allowed(DENY_READ, None)
    assert not unsandboxed_execution_allowed(RESTRICTED, ManagedNetwork(owner_policy=True))


# -------------------------------------------------------------------- executor-managed environments
@pytest.mark.parametrize("override", [NO, BYPASS])
@pytest.mark.parametrize("profile", [RESTRICTED, DENY_READ, DisabledProfile(), ExternalProfile()])
def test_invariant_9_remote_attempts_never_have_a_host_sandbox(
    profile: PermissionProfile, override: SandboxOverride
) -> None:
    assert _first(profile, override=override).sandbox is SandboxType.NONE
    assert _retry(profile).sandbox is SandboxType.NONE


def test_local_environment_gets_a_host_sandbox_only_when_requested() -> None:
    assert _first(environment=LOCAL).sandbox is SandboxType.LINUX_SECCOMP
    assert _first(environment=LOCAL, override=BYPASS).sandbox is SandboxType.NONE
    assert _first(environment=LOCAL).exec_server_permissions is None
    assert sandbox_context(_first(environment=LOCAL)) is None


@pytest.mark.parametrize(
    ("profile", "override", "requested"),
    [
        (RESTRICTED, NO, True),
        (RESTRICTED, BYPASS, False),
        (DisabledProfile(), NO, False),
        (ExternalProfile(), NO, False),
        (ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED), NO, False),
    ],
)
def test_invariant_9_context_is_sent_iff_sandbox_requested(
    profile: PermissionProfile, override: SandboxOverride, requested: bool
) -> None:
    attempt = _first(profile, override=override)
    assert attempt.sandbox_requested is requested
    context = sandbox_context(attempt)
    assert (context is not None) is requested
    params = exec_start_params(attempt, argv=["true"], cwd="/work/repo")
    assert (bytes(params.sandbox) != b"null") is requested


def test_exec_server_env_keeps_command_native_and_carries_sandbox_context() -> None:
    """Invariant 9: native argv, host NONE, and the symbolic profile in the context."""
    attempt = _first()
    argv = ["/bin/bash", "-lc", "make test"]
    params = exec_start_params(attempt, argv=argv, cwd="/work/repo/sub", env={"NO_COLOR": "1"})
    assert params.argv == argv
    assert params.cwd == "file:///work/repo/sub"
    assert params.env == {"NO_COLOR": "1"}
    assert params.pipe_stdin is False
    context = decode_sandbox_context(msgspec.json.decode(bytes(params.sandbox)))
    assert msgspec.to_builtins(context.permissions) == profile_to_json(RESTRICTED)
    assert context.windows_sandbox_level == "disabled"
    assert context.workspace_roots == ["file:///work/repo"]


def test_remote_sandbox_context_drops_unused_cwd() -> None:
    context = sandbox_context(_first(read_only_profile()))
    assert context is not None
    assert context.cwd is None


def test_remote_sandbox_context_preserves_required_cwd() -> None:
    context = sandbox_context(_first(workspace_write_profile()))
    assert context is not None
    assert context.cwd == "file:///work/repo"


def test_sandbox_cwd_is_the_trusted_cwd_unless_the_runtime_names_one() -> None:
    assert _first().sandbox_cwd == "/work/repo"
    attempt = first_attempt(
        environment=REMOTE,
        profile=RESTRICTED,
        preference=AUTO,
        override=NO,
        managed_network=None,
        process_id_base="p",
        sandbox_cwd="/work/repo/pkg",
    )
    context = sandbox_context(attempt)
    assert context is not None and context.cwd == "file:///work/repo/pkg"


# --------------------------------------------------------------------------- invariant 2
def test_invariant_2_every_attempt_gets_a_fresh_process_id() -> None:
    ids = {_first().process_id for _ in range(50)} | {_retry().process_id for _ in range(50)}
    assert len(ids) == 100
    assert all(pid.startswith("7-") for pid in ids)
    attempt = _first()
    assert exec_start_params(attempt, argv=["true"], cwd="/").process_id == attempt.process_id


# --------------------------------------------------------------------------- retry attempt
def test_retry_attempt_runs_unsandboxed_and_is_escalated() -> None:
    attempt = _retry()
    assert attempt.sandbox_requested is False
    assert attempt.first_attempt is False
    assert attempt.is_escalated()
    assert sandbox_context(attempt) is None


def test_retry_attempt_keeps_the_sandbox_for_a_deny_read_profile() -> None:
    """Invariant 10: only the network-context retry reaches this, and it stays sandboxed."""
    attempt = _retry(DENY_READ)
    assert attempt.sandbox_requested is True
    assert sandbox_context(attempt) is not None


def test_first_attempt_bypass_is_escalated_and_plain_first_attempt_is_not() -> None:
    assert _first(override=BYPASS).is_escalated()
    assert not _first().is_escalated()
    assert not _first(DisabledProfile()).is_escalated()


# --------------------------------------------------------------------------- apply_patch attempts
@pytest.mark.parametrize(
    ("attempt_factory", "follow"),
    [
        (lambda: _first(), True),  # sandboxed: the executor confines the resolved path
        (lambda: _first(ManagedProfile(UnrestrictedFs(), NetworkAccess.ENABLED)), True),
        (lambda: _first(override=BYPASS), False),  # bypass of a profile that would sandbox
        (lambda: _retry(), False),  # unsandboxed retry after approval
        (lambda: _first(DisabledProfile()), True),
    ],
)
def test_invariant_15_follow_symlinks_false_exactly_when_unsandboxed_against_profile(
    attempt_factory: object, follow: bool
) -> None:
    assert callable(attempt_factory)
    attempt = attempt_factory()
    assert isinstance(attempt, SandboxAttempt)
    assert attempt.follow_symlinks is follow


# --------------------------------------------------------------------------- managed network
def _launch() -> RemoteNetworkProxyLaunchConfig:
    proxy = RemoteNetworkProxyConfig(
        enabled=True,
        mode="limited",
        enable_socks5=False,
        enable_socks5_udp=False,
        allow_upstream_proxy=False,
        dangerously_allow_all_unix_sockets=False,
        allow_local_binding=False,
    )
    return RemoteNetworkProxyLaunchConfig(proxy=proxy, policy_decision_timeout_ms=1000)


def test_managed_network_is_enforced_only_for_sandboxed_attempts() -> None:
    managed = ManagedNetwork(
        context=ManagedNetworkSandboxContext(loopback_ports=[3128]),
        proxy_env={"HTTP_PROXY": "http://127.0.0.1:3128"},
    )
    sandboxed = exec_start_params(_first(managed=managed), argv=["curl", "x"], cwd="/")
    assert sandboxed.enforce_managed_network is True
    assert sandboxed.managed_network == managed.context
    assert sandboxed.env["HTTP_PROXY"] == "http://127.0.0.1:3128"
    escalated = exec_start_params(_first(managed=managed, override=BYPASS), argv=["x"], cwd="/")
    assert escalated.enforce_managed_network is False
    assert escalated.managed_network is None
    assert "HTTP_PROXY" not in escalated.env


def test_executor_proxy_launch_needs_the_capability() -> None:
    managed = ManagedNetwork(launch=_launch())
    with pytest.raises(Rejected) as info:
        exec_start_params(_first(managed=managed), argv=["x"], cwd="/")
    assert info.value.message == (
        "selected exec-server does not support executor-local network proxy launches"
    )
    capable = ExecutionEnvironment("e", "/w", supports_network_proxy_launch=True)
    params = exec_start_params(_first(environment=capable, managed=managed), argv=["x"], cwd="/")
    assert params.network_proxy == managed.launch


def test_empty_argv_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError):
        exec_start_params(_first(), argv=[], cwd="/")
