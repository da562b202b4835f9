"""The persistent sandboxed fs helper: the policy's view and nothing more, one
helper per resolved policy, restart after a crash, LRU cap and idle timeout.

The view tests attack through the protocol (a real daemon, real websocket);
the lifetime tests drive the daemon's pool directly so they can see and kill
the helper processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from execserver.fs import ops_read
from execserver.fs.dispatch import run_sandboxed
from execserver.fs.operations import READ_DIRECTORY, READ_FILE, WRITE_FILE
from execserver.fs.sandboxed.client import SandboxedFs
from execserver.fs.sandboxed.pool import HelperPool
from execserver.sandbox.fs_helper.runtime import PRIVATE_DIR
from execserver.sandbox.policy import resolve_policy
from execserver.wire.errors import INTERNAL_ERROR, RpcError
from tests.support.http import http_get
from tests.support.procinfo import is_zombie_or_gone, wait_until
from tests.support.rpc import b64, connect, unb64, uri
from tests.support.sandbox import (
    ROOT_READ,
    context,
    entry,
    host_backend,
    managed,
    sandboxed_fs,
)
from tests.support.servers import RunningServer, start_server

# The tests count the daemon's fs helpers and wait for its sessions to expire:
# a daemon of their own.
pytestmark = pytest.mark.fresh_daemon

NOT_FOUND = [-32004, "No such file or directory (os error 2)"]
EACCES = [-32600, "Permission denied (os error 13)"]
EROFS = [-32603, "Read-only file system (os error 30)"]


INTERPRETER = os.path.realpath(sys.executable)
PACKAGE_FILE = os.path.realpath(ops_read.__file__)
VENV_FILES = (os.path.join(sys.prefix, "pyvenv.cfg"), os.path.realpath(msgspec.__file__))


def sandbox(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": entries},
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
    }


@pytest.fixture
async def fs() -> AsyncIterator[SandboxedFs]:
    """The daemon's sandboxed-fs client, with a pool of its own."""
    client = sandboxed_fs()
    yield client
    await client.aclose()


async def _read(client: Any, path: str | Path, box: dict[str, Any]) -> Any:
    reply = await client.call("fs/readFile", {"path": uri(path), "sandbox": box})
    return unb64(reply.result["dataBase64"]) if reply.ok else list(reply.error)


async def test_read_ws_policy_shows_the_workspace_and_nothing_else(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("mine")
    os.symlink("/etc/shadow", ws / "shadow_link")
    os.symlink(PRIVATE_DIR + "/home", ws / "runtime_link")
    box = sandbox([entry(ws, "read")])
    async with connect(execserver.url) as client:
        assert await _read(client, ws / "a.txt", box) == b"mine"
        # Outside the policy: not there at all (no :minimal, no interpreter, no venv).
        for path in (
            "/etc/shadow",
            "/etc/passwd",
            INTERPRETER,
            PACKAGE_FILE,
            *VENV_FILES,
            ws / "shadow_link",
        ):
            assert await _read(client, path, box) == NOT_FOUND, path
        # The helper's own runtime is locked before it serves anything.
        for path in (
            f"{PRIVATE_DIR}/home/bin/{os.path.basename(INTERPRETER)}",
            ws / "runtime_link",
        ):
            assert await _read(client, path, box) == EACCES, path
        listing = await client.call("fs/readDirectory", {"path": uri(PRIVATE_DIR), "sandbox": box})
        assert list(listing.error) == EACCES
        # Still serving after the attempts, from the same view.
        assert await _read(client, ws / "a.txt", box) == b"mine"


async def test_request_pipes_cannot_be_reopened_through_proc(
    execserver: RunningServer, tmp_path: Path
) -> None:
    """/proc/self/fd/0 and /1 of the helper are its channel to the daemon: a write
    there must not inject or corrupt frames (they are sockets: ENXIO)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    box = sandbox([ROOT_READ, entry(ws, "write")])
    async with connect(execserver.url) as client:
        await client.ok(
            "fs/writeFile", {"path": uri(ws / "f"), "dataBase64": b64("1"), "sandbox": box}
        )
        for fd in (0, 1):
            reply = await client.call(
                "fs/writeFile",
                {
                    "path": f"file:///proc/self/fd/{fd}",
                    "dataBase64": b64("garbage"),
                    "sandbox": box,
                },
            )
            assert list(reply.error) == [-32603, "No such device or address (os error 6)"]
        data = os.urandom(300_000)
        await client.ok(
            "fs/writeFile", {"path": uri(ws / "big"), "dataBase64": b64(data), "sandbox": box}
        )
        assert (ws / "big").read_bytes() == data


async def test_contents_round_trip_and_errors_keep_the_reference_codes(
    execserver: RunningServer, tmp_path: Path
) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    box = sandbox([ROOT_READ, entry(ws, "write"), entry(outside / "secret", "deny")])
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    async with connect(execserver.url) as client:
        await client.ok(
            "fs/writeFile", {"path": uri(ws / "bin"), "dataBase64": b64(data), "sandbox": box}
        )
        assert await _read(client, ws / "bin", box) == data
        reply = await client.call(
            "fs/writeFile", {"path": uri(outside / "x"), "dataBase64": b64("x"), "sandbox": box}
        )
        assert list(reply.error) == EROFS
        reply = await client.call(
            "fs/writeFile", {"path": uri(ws / ".git" / "x"), "dataBase64": b64("x"), "sandbox": box}
        )
        assert list(reply.error) == EROFS
        assert await _read(client, outside / "secret", box) == EACCES
        listing = await client.ok("fs/readDirectory", {"path": uri(ws), "sandbox": box})
        assert "bin" in {e["fileName"] for e in listing["entries"]}
    assert not (outside / "x").exists()


async def test_a_file_name_that_is_not_utf8_is_served_in_the_sandbox_as_outside_it(
    execserver: RunningServer, tmp_path: Path
) -> None:
    """A ``file:`` URI names any bytes (``%FF``), and the reference serves such a
    file with a sandbox as without one; so does the helper (its frames carry the
    name's bytes: execserver/fs/sandboxed/protocol.py)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    name = os.fsdecode(b"bad\xff.txt")
    (ws / name).write_bytes(b"x")
    at = uri(ws) + "/bad%FF.txt"
    box = sandbox([ROOT_READ, entry(ws, "write")])
    async with connect(execserver.url) as client:
        for params in ({}, {"sandbox": box}):
            read = await client.ok("fs/readFile", {"path": at, **params})
            assert unb64(read["dataBase64"]) == b"x", params
            meta = await client.ok("fs/getMetadata", {"path": at, **params})
            assert meta["isFile"], params
            listing = await client.ok("fs/readDirectory", {"path": uri(ws), **params})
            assert [e["fileName"] for e in listing["entries"]] == ["bad\ufffd.txt"], params
        await client.ok("fs/writeFile", {"path": at, "dataBase64": b64("y"), "sandbox": box})
        assert (ws / name).read_bytes() == b"y"
        # The daemon still serves the sandbox after it (nothing was left broken).
        assert await _read(client, ws / name.replace("\udcff", "_"), box) == NOT_FOUND


async def test_one_helper_per_resolved_policy(tmp_path: Path, fs: SandboxedFs) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    (ws / "f").write_text("ws")
    (other / "f").write_text("other")
    ctx_ws = context(managed([entry(ws, "read")]))
    ctx_other = context(managed([entry(other, "read")]))
    args_ws = {"path": str(ws / "f"), "follow_symlinks": True}
    assert await run_sandboxed(ctx_ws, READ_FILE, args_ws, fs) == b64("ws")
    first = {h.process.pid for h in fs.pool.live()}
    assert await run_sandboxed(ctx_ws, READ_FILE, args_ws, fs) == b64("ws")
    assert {h.process.pid for h in fs.pool.live()} == first  # reused
    # The other policy cannot see ws through its own helper, nor the reverse.
    with pytest.raises(RpcError) as info:
        await run_sandboxed(ctx_other, READ_FILE, args_ws, fs)
    assert info.value.message == NOT_FOUND[1]
    assert len(fs.pool.live()) == 2
    # ws deleted and re-created under the same name: a different policy (new inode).
    shutil.rmtree(ws)
    ws.mkdir()
    (ws / "f").write_text("new")
    assert await run_sandboxed(ctx_ws, READ_FILE, args_ws, fs) == b64("new")


async def test_a_helper_is_its_sandboxs_pid_1_with_no_process_between_it_and_bwrap(
    tmp_path: Path, fs: SandboxedFs
) -> None:
    """bwrap's own pid 1 (1.9 MB of RSS) reaps what a command leaves running; a helper
    starts nothing, so it runs as pid 1 itself: two processes per helper, not three."""
    (tmp_path / "f").write_text("x")
    ctx = context(managed([entry(tmp_path, "read")]))
    await run_sandboxed(ctx, READ_FILE, {"path": str(tmp_path / "f")}, fs)
    (helper,) = fs.pool.live()
    below = _helper_children(helper.process.pid)
    assert len(below) == 1, f"bwrap's processes below it: {below}"
    (inner,) = below
    assert _is_python(inner), "bwrap's child is the helper program"
    nspid = _nspid(inner)
    assert nspid[-1] == "1", f"the helper's pids, host first: {nspid}"
    # Still ended by its bwrap's death (SIGKILL, as the daemon ends a helper).
    helper.process.kill()
    assert await wait_until(lambda: is_zombie_or_gone(inner), 10)


async def test_a_helper_in_the_c_locale_serves_every_file_name_as_the_daemon_does(
    tmp_path: Path, fs: SandboxedFs
) -> None:
    """The helper runs in the C locale with Python's UTF-8 mode (no locale archive
    mapped, once per policy): names in UTF-8 and names that are not come back as
    the daemon itself lists them, and a name read back reaches the same file."""
    names = ["é sp%.txt", os.fsdecode(b"bad\xff.txt"), "plain"]
    for number, name in enumerate(names):
        (tmp_path / name).write_text(str(number))
    ctx = context(managed([entry(tmp_path, "read")]))
    listed = await run_sandboxed(ctx, READ_DIRECTORY, {"path": str(tmp_path)}, fs)

    def by_name(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(entries, key=lambda each: str(each["fileName"]))

    assert by_name(listed) == by_name(READ_DIRECTORY.local(str(tmp_path)))
    assert {each["fileName"] for each in listed} >= {"é sp%.txt", "plain"}
    for number, name in enumerate(names):
        data = await run_sandboxed(ctx, READ_FILE, {"path": str(tmp_path / name)}, fs)
        assert data == b64(str(number)), name
    (helper,) = fs.pool.live()
    (inner,) = _helper_children(helper.process.pid)
    mapped = _mapped_files(inner)
    assert mapped, "the helper's mappings were read"
    assert not [path for path in mapped if "/locale/" in path or "/gconv/" in path]


async def test_host_removing_a_protected_mount_point_retires_the_helper(
    tmp_path: Path, fs: SandboxedFs
) -> None:
    """Removing ws/.codex on the host detaches the helper's read-only mount over it
    in its namespace; the next call must run in a fresh, fully protected sandbox."""
    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = context(managed([ROOT_READ, entry(ws, "write")]))
    write = {"path": str(ws / "a"), "data": b"a", "follow_symlinks": True}
    await run_sandboxed(ctx, WRITE_FILE, write, fs)
    (helper,) = fs.pool.live()
    assert (ws / ".codex").is_dir()  # the synthetic mount point, while the helper lives
    os.rmdir(ws / ".codex")
    inside = {"path": str(ws / ".codex" / "config.toml"), "data": b"x", "follow_symlinks": True}
    with pytest.raises(RpcError) as info:
        await run_sandboxed(ctx, WRITE_FILE, inside, fs)
    assert [info.value.code, info.value.message] == EROFS
    assert helper not in fs.pool.live()
    assert not (ws / ".codex" / "config.toml").exists()


def _helper_children(pid: int) -> list[int]:
    """Processes below ``pid`` (bwrap and the helper inside it)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/task/{current}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        found += kids
        todo += kids
    return found


async def test_crashed_helper_fails_the_call_in_flight_and_is_restarted(
    tmp_path: Path, fs: SandboxedFs
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "fifo")
    ctx = context(managed([ROOT_READ, entry(ws, "write")]))
    await run_sandboxed(ctx, WRITE_FILE, {"path": str(ws / "a"), "data": b"a"}, fs)
    (helper,) = fs.pool.live()
    # Opening a fifo for writing without a reader blocks: a call stays in flight.
    stuck = asyncio.create_task(
        run_sandboxed(ctx, WRITE_FILE, {"path": str(ws / "fifo"), "data": b"x"}, fs)
    )
    assert await wait_until(lambda: helper.in_flight > 0, 30)
    inner = [p for p in _helper_children(helper.process.pid) if _is_python(p)]
    assert inner, "the helper's interpreter runs below bwrap"
    killed = 0
    for pid in inner:
        # A pid listed a moment ago may have gone since (a loaded machine lists
        # more transient processes): the helper's own interpreter must be killed.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    assert killed, "no helper interpreter was there to kill"
    with pytest.raises(RpcError) as info:
        await asyncio.wait_for(stuck, 60)
    assert info.value.code == INTERNAL_ERROR
    assert info.value.message.startswith("fs sandbox helper failed with status ")
    # The next call gets a new helper, still sandboxed.
    await run_sandboxed(ctx, WRITE_FILE, {"path": str(ws / "b"), "data": b"b"}, fs)
    (replacement,) = fs.pool.live()
    assert replacement is not helper and replacement.process.pid != helper.process.pid
    with pytest.raises(RpcError) as info:
        await run_sandboxed(ctx, WRITE_FILE, {"path": str(tmp_path / "outside"), "data": b"x"}, fs)
    assert [info.value.code, info.value.message] == EROFS


def _nspid(pid: int) -> list[str]:
    """``pid``'s pid in each pid namespace it is in, the host's first."""
    with open(f"/proc/{pid}/status") as status:
        return next(line.split()[1:] for line in status if line.startswith("NSpid:"))


def _mapped_files(pid: int) -> set[str]:
    """The files ``pid`` has mapped."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "/" in line}


def _is_python(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"execserver.fs.sandboxed.program" in f.read()
    except OSError:
        return False


async def test_lru_cap_and_idle_timeout_end_helpers(tmp_path: Path) -> None:
    backend = host_backend()
    pool = HelperPool(max_helpers=1, idle_seconds=0.5)
    try:
        roots = []
        for name in ("a", "b"):
            root = tmp_path / name
            root.mkdir()
            (root / "f").write_text(name)
            roots.append(root)
        policies = [
            resolve_policy(context(managed([entry(r, "read")])), fallback_cwd=None) for r in roots
        ]
        served, data = await pool.call(
            policies[0], backend, "read_file", {"path": str(roots[0] / "f")}
        )
        assert (served, data) == (True, b"a")
        (first,) = pool.live()
        await pool.call(policies[1], backend, "read_file", {"path": str(roots[1] / "f")})
        (second,) = pool.live()
        assert second is not first
        await asyncio.wait_for(first.process.wait(), 30)  # evicted: over the cap
        await asyncio.wait_for(second.process.wait(), 30)  # idle for 0.5 s
        assert pool.live() == []
    finally:
        await pool.aclose()


async def test_a_helper_called_at_a_steady_rhythm_outlives_the_idle_timeout(
    tmp_path: Path,
) -> None:
    """An agent whose turns come every 0.8 s, with a pool that retires helpers
    idle for 0.5 s: its first helper goes idle between two turns, but the next
    one is kept for twice the interval the agent took, and serves every later
    turn. Once the calls stop, it goes all the same."""
    backend = host_backend()
    pool = HelperPool(idle_seconds=0.5)
    try:
        (tmp_path / "f").write_text("x")
        policy = resolve_policy(context(managed([entry(tmp_path, "read")])), fallback_cwd=None)
        args = {"path": str(tmp_path / "f")}
        await pool.call(policy, backend, "read_file", args)
        (first,) = pool.live()
        await asyncio.wait_for(first.process.wait(), 30)  # idle for 0.5 s: retired
        await asyncio.sleep(0.3)  # the agent's turn took longer
        await pool.call(policy, backend, "read_file", args)
        (helper,) = pool.live()
        assert helper is not first and pool.keeps(helper) >= 1.6
        for _ in range(4):  # intervals past idle_seconds, within the rhythm's allowance
            await asyncio.sleep(0.8)
            await pool.call(policy, backend, "read_file", args)
            assert pool.live() == [helper] and helper.process.returncode is None
        await asyncio.wait_for(helper.process.wait(), 30)  # no more calls: it goes
        assert pool.live() == []
    finally:
        await pool.aclose()


async def _sessions_expired(url: str) -> float:
    status, text = await http_get(url, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "execserver_sessions_expired_total":
                return float(sample.value)
    return 0.0


def _helper_pids(daemon_pid: int) -> list[int]:
    return [
        child.pid
        for child in psutil.Process(daemon_pid).children()
        if "execserver.fs.sandboxed.program" in child.cmdline()
    ]


async def test_a_helper_outlives_a_session_whose_command_shares_its_environment(
    tmp_path: Path,
) -> None:
    """Helpers serve every session. One started while another session's command ran,
    with an environment like that command's (here the same PATH), used to be taken
    for that command's escapee when it exited, and killed when its session ended,
    failing whatever the other sessions had in flight."""
    (tmp_path / "f").write_text("data")
    box = sandbox([entry(tmp_path, "read")])
    async with start_server("execserver", ["--session-ttl", "1", "--metrics"]) as server:
        async with connect(server.url) as user:
            async with connect(server.url) as other:
                await other.start("short", ["sleep", "1"], env={"PATH": "/usr/bin:/bin"})
                assert await _read(user, tmp_path / "f", box) == b"data"
                [helper] = _helper_pids(server.process.pid)
                await other.wait_closed("short")
            # The other session is detached now and ends after its 1 s TTL.
            async with asyncio.timeout(30):
                while True:
                    if await _sessions_expired(server.url) >= 1:
                        break
                    await asyncio.sleep(0.1)  # a scrape is the only way to see it
            assert psutil.Process(helper).status() != psutil.STATUS_ZOMBIE
            assert _helper_pids(server.process.pid) == [helper]
            assert await _read(user, tmp_path / "f", box) == b"data"


async def _helpers_after_reading(roots: list[Path], env: dict[str, str], most: int) -> int:
    """How many helpers the daemon has once four workspaces were read in turn (a
    retired helper's exit is waited for)."""
    async with start_server("execserver", env=env) as server, connect(server.url) as client:
        for root in roots:
            box = sandbox([entry(root, "read")])
            assert await _read(client, root / "f", box) == root.name.encode()
        pid = server.process.pid
        await wait_until(lambda: len(_helper_pids(pid)) <= most, 10)
        return len(_helper_pids(pid))


async def test_the_daemon_keeps_at_most_fs_helpers_max_helpers(tmp_path: Path) -> None:
    # Four workspaces (four policies) read in turn: the default keeps a helper for
    # each; EXECSERVER_FS_HELPERS_MAX=2 keeps two, the least recently used retired,
    # and every read still answers.
    roots = []
    for name in "abcd":
        root = tmp_path / name
        root.mkdir()
        (root / "f").write_text(name)
        roots.append(root)
    assert await _helpers_after_reading(roots, dict(os.environ), 4) == 4
    capped = {**os.environ, "EXECSERVER_FS_HELPERS_MAX": "2"}
    assert await _helpers_after_reading(roots, capped, 2) == 2
