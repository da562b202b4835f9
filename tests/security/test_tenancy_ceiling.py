"""A tenant whose profile requires a sandbox, through a real daemon (root): nothing
starts unsandboxed or wider than its ceiling, by any field combination. The named
cases check the refusal texts; the property test generates sandbox requests over
the policy space (entries of every path kind and access, both networks, every
permission type) and runs what the daemon accepts: no accepted request may write
outside the tenant's writable roots (a world-writable directory and /tmp are
probed, so only the sandbox can stop the write), enable the network, or escape
the managed permissions."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.rpc import connect, uri
from tests.support.sandbox import ROOT_READ, context_json, entry, managed, special
from tests.support.servers import PROJECT_ROOT, execserver_command
from tests.support.state_dir import end_keepers
from tests.support.tenants import TOKEN_A, TenantHost, output_of, start, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        yield made


async def _refusal(host: TenantHost, sandbox: dict[str, Any] | None) -> str:
    async with host.serve() as server, connect(server.url, token=TOKEN_A) as a:
        ok, result = await start(a, "p", ["true"], host.a, sandbox=sandbox)
    assert not ok, result
    return str(result[1])


async def test_no_sandbox_is_refused_when_the_profile_requires_one(host: TenantHost) -> None:
    assert await _refusal(host, None) == "tenant alice: sandbox required by its profile"


@pytest.mark.parametrize(
    ("permissions", "expected"),
    [
        ({"type": "disabled"}, "permissions `disabled` exceed its ceiling"),
        ({"type": "external", "network": "restricted"}, "permissions `external` exceed"),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
            "writable root / is outside the tenant's ceiling",
        ),
        (managed([entry(special("root"), "write")]), "writable root / is outside"),
        (managed([ROOT_READ, entry("/tmp", "write")]), "writable root /tmp is outside"),
        (
            managed([ROOT_READ, entry(special("slash_tmp"), "write")]),
            "writable root /tmp is outside",
        ),
    ],
)
async def test_wider_than_the_ceiling_is_refused_naming_it(
    host: TenantHost, permissions: dict[str, Any], expected: str
) -> None:
    message = await _refusal(host, context_json(permissions, cwd=uri(host.a)))
    assert message.startswith("tenant alice: ") and expected in message, message


async def test_the_network_is_refused_above_the_ceiling(host: TenantHost) -> None:
    sandbox = context_json(managed([ROOT_READ, entry(host.a, "write")], network="enabled"))
    message = await _refusal(host, sandbox)
    assert message == "tenant alice: network full is outside the tenant's ceiling (network none)"


async def test_a_symlink_in_the_root_to_outside_is_judged_by_its_target(
    host: TenantHost,
) -> None:
    os.symlink(host.shared, host.a / "out")
    sandbox = context_json(managed([ROOT_READ, entry(host.a / "out", "write")]))
    message = await _refusal(host, sandbox)
    assert message == f"tenant alice: writable root {host.shared} is outside the tenant's ceiling"


async def test_readable_roots_bound_reads_when_configured(host: TenantHost) -> None:
    host.write_tenants(alice={"readable_roots": ["/usr"]})
    message = await _refusal(host, context_json(managed([ROOT_READ, entry(host.a, "write")])))
    assert message == "tenant alice: readable root / is outside the tenant's ceiling"


@pytest.mark.parametrize("keepers", [False, True], ids=["daemon", "state-dir"])
async def test_within_the_ceiling_it_runs_sandboxed_as_the_tenant(
    host: TenantHost, keepers: bool
) -> None:
    sandbox = context_json(managed([ROOT_READ, entry(host.a, "write")]), cwd=uri(host.a))
    script = f"id -u; echo x > {host.a}/made; touch {host.shared}/escaped; true"
    # With --state-dir the daemon's private directory is STATE_DIR/private, under a
    # 0700 STATE_DIR that the account's bwrap cannot search to mask it.
    state = host.base / "state"
    extra = ("--state-dir", str(state)) if keepers else ()
    try:
        async with host.serve(*extra) as server, connect(server.url, token=TOKEN_A) as a:
            ok, result = await start(a, "p", ["sh", "-c", script], host.a, sandbox=sandbox)
            assert ok, result
            text, code = await output_of(a, "p")
    finally:
        if keepers:
            await end_keepers(state)
    assert code == 0, text
    assert result["sandboxType"] == "linuxSeccomp"
    assert text.splitlines()[0] == str(host.a_uid)
    assert os.stat(host.a / "made").st_uid == host.a_uid
    assert not (host.shared / "escaped").exists()


# ---- the property: no accepted request exceeds the ceiling --------------------------------


@pytest.fixture(scope="module")
def fuzz_daemon() -> Iterator[tuple[TenantHost, str]]:
    """One daemon for every generated example (started once: examples are many)."""
    with tenant_host() as made:
        os.symlink(made.shared, made.a / "link-out")
        (made.a / "sub").mkdir()
        os.chown(made.a / "sub", made.a_uid, made.a_uid)
        env = {**os.environ, "EXECSERVER_STARTUP_PROBE": "0"}
        argv = execserver_command(
            ["--listen", "ws://127.0.0.1:0", "--tenants", str(made.tenants_file)]
        )
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env, cwd=PROJECT_ROOT
        ) as daemon:
            try:
                assert daemon.stdout is not None
                url = daemon.stdout.readline().decode().strip()
                assert url.startswith("ws://"), url
                yield made, url
            finally:
                daemon.terminate()
                daemon.wait(10)


_ACCESS = st.sampled_from(["read", "write", "none", "deny"])
_SPECIALS = ["root", "minimal", "current_working_directory", "tmpdir", "slash_tmp"]


def _paths(host: TenantHost) -> st.SearchStrategy[Any]:
    named = [
        host.a,
        host.a / "sub",
        host.a / "link-out",
        host.shared,
        host.b,
        host.base,
        Path("/tmp"),
        Path("/"),
    ]
    globs = [f"{host.base}/*", f"{host.a}/*", "/tm*"]
    return st.one_of(
        st.sampled_from(named).map(lambda p: {"type": "path", "path": uri(p)}),
        st.sampled_from(globs).map(lambda g: {"type": "glob_pattern", "pattern": g}),
        st.sampled_from(_SPECIALS).map(special),
    )


def _permissions(host: TenantHost) -> st.SearchStrategy[dict[str, Any]]:
    entries = st.lists(
        st.tuples(_paths(host), _ACCESS).map(lambda pa: {"path": pa[0], "access": pa[1]}),
        max_size=5,
    )
    network = st.sampled_from(["restricted", "enabled"])
    restricted = st.builds(
        lambda es, net: {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": es},
            "network": net,
        },
        entries,
        network,
    )
    return st.one_of(
        restricted,
        network.map(
            lambda n: {"type": "managed", "file_system": {"type": "unrestricted"}, "network": n}
        ),
        network.map(lambda n: {"type": "external", "network": n}),
        st.just({"type": "disabled"}),
    )


_numbers = itertools.count()


async def _try(host: TenantHost, url: str, permissions: dict[str, Any]) -> str | None:
    """Start a probe under ``permissions``; None if refused, else what escaped."""
    n = next(_numbers)
    sandbox = context_json(permissions, cwd=uri(host.a))
    probes = [host.shared / f"probe-{n}", Path(f"/tmp/es-tenancy-probe-{os.getpid()}-{n}")]
    script = "; ".join(f"touch {p} 2>/dev/null" for p in probes) + "; true"
    async with connect(url, token=TOKEN_A) as a:
        ok, _ = await start(a, f"p{n}", ["sh", "-c", script], host.a, sandbox=sandbox)
        if not ok:
            return None
        await output_of(a, f"p{n}")
    escaped = [str(p) for p in probes if p.exists()]
    for p in probes:
        if p.exists():
            p.unlink()
    if permissions["type"] != "managed":
        escaped.append(f"accepted permissions {permissions['type']}")
    if permissions.get("network") == "enabled":
        escaped.append("accepted network enabled")
    return ", ".join(escaped)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_accepted_request_exceeds_the_ceiling(
    fuzz_daemon: tuple[TenantHost, str], data: st.DataObject
) -> None:
    host, url = fuzz_daemon
    permissions = data.draw(_permissions(host))
    escaped = asyncio.run(_try(host, url, permissions))
    assert not escaped, f"{permissions} accepted and exceeded the ceiling: {escaped}"


def test_the_property_sees_accepted_requests(fuzz_daemon: tuple[TenantHost, str]) -> None:
    # Its check is not vacuous: a request within the ceiling is accepted and probed.
    host, url = fuzz_daemon
    within = managed([ROOT_READ, entry(host.a, "write")])
    assert asyncio.run(_try(host, url, within)) == ""
