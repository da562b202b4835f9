"""A tenant's cgroup quota through a real daemon (root): ``pids_max`` and
``memory_max`` hold over everything B runs, across its processes and sessions,
while A (no quota) starts and allocates as before; a reload changes or lifts the
quota in place, and a reload that adds a quota the daemon cannot apply is
refused with the old table kept. Where each process goes: into its group's
shared leaf when there are no per-process limits (with or without keepers), into
a cgroup of its own inside the group when there are."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.rpc import connect, poll_until
from tests.support.servers import RunningServer
from tests.support.state_dir import end_keepers
from tests.support.tenants import (
    TOKEN_A,
    TOKEN_B,
    TenantHost,
    output_of,
    sighup,
    start,
    tenant_host,
)

_ALICE = {"sandbox": "optional"}  # A runs unsandboxed, as B does: only the quota differs

# Forks children that sleep until killed and prints how many forks succeeded: the
# pids controller refuses a fork past the quota with EAGAIN. The children let go of
# the output pipes, so the process's output ends when the parent exits (else the
# daemon waits out its drain timeout for them, 5 s per process).
FORKS = """
import os, sys, time
made = 0
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        time.sleep(300)
        os._exit(0)
    made += 1
print("forked", made, flush=True)
"""

# Allocates and touches ~160 MiB, then says so.
ALLOCATES = "b = bytearray(160 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('allocated')"


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(alice=_ALICE, bob={"pids_max": 30, "memory_max": "96M"})
        yield made


def _bob_group(server: RunningServer, controller: str) -> Path:
    """Where the daemon made B's group in a v1 hierarchy (this project's CI host)."""
    pid = server.process.pid
    v1 = Path("/sys/fs/cgroup") / controller
    if v1.is_dir():
        for found in v1.rglob(f"execserver-{pid}"):
            return found / "tenant-bob"
    for found in Path("/sys/fs/cgroup").rglob(f"tenant-{pid}-bob"):
        return found
    raise AssertionError(f"no cgroup of tenant bob for daemon {pid}")


def _limit(group: Path, v1_name: str, v2_name: str) -> str:
    path = group / v1_name if (group / v1_name).exists() else group / v2_name
    return path.read_text().strip()


def _forked(text: str) -> int:
    match = re.search(r"forked (\d+)", text)
    assert match is not None, text
    return int(match.group(1))


async def test_b_pids_quota_holds_across_its_processes_and_a_is_untouched(
    host: TenantHost,
) -> None:
    async with (
        host.serve() as server,
        connect(server.url, token=TOKEN_B) as b,
        connect(server.url, token=TOKEN_B) as b_again,
        connect(server.url, token=TOKEN_A) as a,
    ):
        assert _limit(_bob_group(server, "pids"), "pids.max", "pids.max") == "30"
        # B's first process takes 20 of its 30; its second (another session) gets
        # only what is left, however many it asks for.
        ok, _ = await start(b, "b1", ["python3", "-c", FORKS, "20"], host.b)
        assert ok
        first, _ = await output_of(b, "b1")
        assert _forked(first) == 20
        ok, _ = await start(b_again, "b2", ["python3", "-c", FORKS, "20"], host.b)
        assert ok
        second, _ = await output_of(b_again, "b2")
        assert _forked(second) < 10
        # A has no quota: B's full one does not touch it.
        ok, error = await start(a, "a1", ["python3", "-c", FORKS, "20"], host.a)
        assert ok, error
        text, _ = await output_of(a, "a1")
        assert _forked(text) == 20


async def test_b_memory_quota_kills_past_it_and_a_allocates(host: TenantHost) -> None:
    async with (
        host.serve() as server,
        connect(server.url, token=TOKEN_B) as b,
        connect(server.url, token=TOKEN_A) as a,
    ):
        group = _bob_group(server, "memory")
        assert int(_limit(group, "memory.limit_in_bytes", "memory.max")) == 96 << 20
        ok, _ = await start(b, "b-big", ["python3", "-c", ALLOCATES], host.b)
        assert ok
        text, code = await output_of(b, "b-big")
        assert "allocated" not in text
        assert code != 0
        ok, error = await start(a, "a-big", ["python3", "-c", ALLOCATES], host.a)
        assert ok, error
        text, code = await output_of(a, "a-big")
        assert (text.strip(), code) == ("allocated", 0)


async def test_reload_changes_and_lifts_the_quota_in_place(
    host: TenantHost, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with host.serve("--audit-log", str(audit)) as server:
        group = _bob_group(server, "pids")
        host.write_tenants(alice=_ALICE, bob={"pids_max": 50, "memory_max": "96M"})
        sighup(server)
        assert await poll_until(lambda: (group / "pids.max").read_text().strip() == "50", 20)
        host.write_tenants(alice=_ALICE, bob={"memory_max": "96M"})  # pids_max dropped: lifted
        sighup(server)
        assert await poll_until(lambda: (group / "pids.max").read_text().strip() == "max", 20)
        async with connect(server.url, token=TOKEN_B) as b:
            ok, _ = await start(b, "b1", ["python3", "-c", FORKS, "40"], host.b)
            assert ok
            text, _ = await output_of(b, "b1")
            assert _forked(text) == 40


async def test_a_quota_added_on_reload_to_a_daemon_without_cgroups_is_refused(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.jsonl"
    with tenant_host() as host:
        async with host.serve("--audit-log", str(audit)) as server:
            host.write_tenants(bob={"pids_max": 10})
            sighup(server)

            def reloads() -> list[dict[str, object]]:
                text = audit.read_text() if audit.exists() else ""
                records = map(json.loads, text.splitlines())
                return [r for r in records if r.get("event") == "tenants.reload"]

            assert await poll_until(lambda: bool(reloads()), 20)
            record = reloads()[0]
            assert record["ok"] is False
            assert "restart it to apply quotas" in str(record["reason"])
            # The old table (no quota) still serves B.
            async with connect(server.url, token=TOKEN_B) as b:
                ok, _ = await start(b, "b1", ["python3", "-c", FORKS, "15"], host.b)
                assert ok
                text, _ = await output_of(b, "b1")
                assert _forked(text) == 15


def _pids_cgroup(text: str) -> str:
    """The pids hierarchy's path in a /proc/<pid>/cgroup listing (v1), else the
    unified one (v2)."""
    lines = [line.split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    for _, controllers, path in lines:
        if "pids" in controllers.split(","):
            return path
    return next(path for number, _, path in lines if number == "0")


@pytest.mark.parametrize("keepers", [False, True], ids=["daemon", "state-dir"])
async def test_without_per_process_limits_b_runs_in_its_groups_shared_leaf(
    host: TenantHost, keepers: bool
) -> None:
    state = host.base / "state"
    extra = ("--state-dir", str(state)) if keepers else ()
    try:
        async with host.serve(*extra) as server, connect(server.url, token=TOKEN_B) as b:
            group = _bob_group(server, "pids")
            for n in range(2):
                ok, error = await start(b, f"b{n}", ["cat", "/proc/self/cgroup"], host.b)
                assert ok, error
                text, code = await output_of(b, f"b{n}")
                assert code == 0, text
                path = _pids_cgroup(text)
                # In the group's members leaf, not in a cgroup of its own.
                assert path.endswith(f"/{group.name}/members"), text
            # A process's end (its keeper's, with --state-dir) leaves the shared leaf
            # and the group in place for the next one.
            assert (group / "members").is_dir()
            members = (group / "members" / "cgroup.procs").read_text().split()
            assert members == []
    finally:
        if keepers:
            await end_keepers(state)


async def test_with_per_process_limits_each_of_bs_processes_has_its_own_cgroup_in_the_group(
    host: TenantHost,
) -> None:
    async with (
        host.serve("--process-pids-max", "500") as server,
        connect(server.url, token=TOKEN_B) as b,
    ):
        group = _bob_group(server, "pids")
        paths = []
        for n in range(2):
            ok, error = await start(b, f"b{n}", ["cat", "/proc/self/cgroup"], host.b)
            assert ok, error
            text, code = await output_of(b, f"b{n}")
            assert code == 0, text
            paths.append(_pids_cgroup(text))
        for path in paths:
            parent, _, leaf = path.rpartition("/")
            assert parent.endswith(f"/{group.name}"), paths
            assert leaf != "members", paths
        assert paths[0] != paths[1]
