"""Attacks on the process keeper's boundary (THREAT_MODEL.md §14, ``--state-dir``):
real daemons on 127.0.0.1, real kept processes started through the protocol.

* the state directory's modes: every directory 0700, every file 0600 (the
  sockets too), even for a daemon started under umask 000;
* the kept child, a grandchild and a ``setsid`` escapee speak the keeper's own
  protocol on its ``keeper.sock`` (as the same uid: the modes do not stop them)
  and are refused, also a descendant that is gone before the keeper looks; the
  process is unaffected and its keeper still serves the daemon;
* a process of another uid (``nobody``) cannot reach ``keeper.sock`` as the
  modes are, and is refused by the uid check once the socket is made reachable;
  a tenant's kept child runs as its account and cannot reach it either;
* the kept child's fd table holds 0, 1 and 2 and nothing of its keeper's,
  sandboxed or not;
* the keeper is non-dumpable: the child of a non-root daemon (the keeper's uid,
  no capability) cannot ptrace it or read its environ, memory or fd links; a
  root daemon's child can (CAP_SYS_PTRACE), as §14 says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.attacks import ROOT_READ, sandbox, unrestricted
from tests.support.nobody import run_as_nobody
from tests.support.procinfo import wait_until
from tests.support.rpc import RpcClient, connect
from tests.support.servers import RunningServer, start_server
from tests.support.state_dir import alive, end_keepers, keepers, state_daemon, tree_of
from tests.support.tenants import TOKEN_B, start, tenant_host

pytestmark = pytest.mark.skipif(
    os.getuid() != 0, reason="needs root: makes processes of another uid (nobody)"
)

# The system interpreter: nobody may not be able to read the project's virtualenv.
PYTHON = "/usr/bin/python3"
TTL = 60

# One attacker for every role, run as ``python -I -S -c ATTACKER ROLE ...``. What it
# sends is what the daemon would: a replay, a stdin write, ^C, and a release (which
# ends the keeper and its whole tree); any of them obeyed shows in the output.
ATTACKER = r"""
import base64, ctypes, json, os, signal, socket, subprocess, sys, time
CODE = open("/proc/self/cmdline", "rb").read().split(b"\0")[4].decode()  # this script
COMMANDS = b"".join(json.dumps(c).encode() + b"\n" for c in (
    {"op": "hello", "from": 0},
    {"op": "write", "data": base64.b64encode(b"INJECTED\n").decode()},
    {"op": "signal"},
    {"op": "release"},
))

def connect(path):
    # Through an O_PATH fd of its directory: the path may exceed a socket address.
    fd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    return sock

def attack(path):
    try:
        sock = connect(path)
    except PermissionError:
        return "EACCES"
    try:
        sock.sendall(COMMANDS)
        data = sock.recv(65536)  # a replay if obeyed; EOF if refused
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    except TimeoutError:
        return "silent"
    return "answered" if data else "refused"

def again(*args):
    return [sys.executable, "-I", "-S", "-c", CODE, *args]

def echo():
    for line in sys.stdin:
        print("echo", line.strip(), flush=True)

def serve():
    print("ready", flush=True)
    echo()

def kept():
    print("ready", flush=True)
    path = sys.stdin.readline().strip()
    print("child", attack(path), flush=True)
    subprocess.run(again("attack", "grandchild", path), check=True)
    # A setsid double-fork: the escapee is re-parented to the keeper (a subreaper).
    done_r, done_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        me = os.getpid()
        if os.fork() == 0:
            while os.getppid() == me:
                time.sleep(0.01)
            print("escapee", attack(path), os.getppid(), flush=True)
        os._exit(0)
    os.close(done_w)
    os.waitpid(middle, 0)
    os.read(done_r, 1)  # EOF: the escapee is done
    echo()

def gone():
    # Stop the keeper, connect from a grandchild that queues its commands and
    # exits (reaped here), then let the keeper look at a peer that is no more.
    print("ready", flush=True)
    path = sys.stdin.readline().strip()
    keeper = os.getppid()
    os.kill(keeper, signal.SIGSTOP)
    try:
        subprocess.run(again("leave", path), check=True)
    finally:
        os.kill(keeper, signal.SIGCONT)
    print("left", flush=True)
    echo()

def peek():
    # What a process of the keeper's uid can see of it, and of a dumpable process
    # of its own (the control: the same attempts, allowed).
    libc = ctypes.CDLL(None, use_errno=True)
    def tries(pid):
        out = {}
        for name, how in (
            ("environ", lambda: open(f"/proc/{pid}/environ", "rb").close()),
            ("mem", lambda: open(f"/proc/{pid}/mem", "rb").close()),
            ("fd", lambda: os.readlink(f"/proc/{pid}/fd/0")),
        ):
            try:
                how()
                out[name] = "read"
            except PermissionError:
                out[name] = "denied"
        # PTRACE_SEIZE stops nothing, and this tracer's exit detaches it.
        ok = libc.ptrace(0x4206, pid, 0, 0) == 0
        out["ptrace"] = "attached" if ok else os.strerror(ctypes.get_errno())
        return out
    keeper = os.getppid()
    zygote = int(open(f"/proc/{keeper}/stat").read().rsplit(")", 1)[1].split()[1])
    control = os.fork()
    if control == 0:
        time.sleep(120)
        os._exit(0)
    report = {"dumpable": libc.prctl(3, 0, 0, 0, 0)}  # PR_GET_DUMPABLE: the child's own
    for name, pid in (("keeper", keeper), ("zygote", zygote), ("control", control)):
        report[name] = tries(pid)
    os.kill(control, signal.SIGKILL)
    print(json.dumps(report), flush=True)

role = sys.argv[1]
if role == "attack":
    print(sys.argv[2], attack(sys.argv[3]), flush=True)
elif role == "leave":  # queue the commands and go
    connect(sys.argv[2]).sendall(COMMANDS)
else:
    {"kept": kept, "gone": gone, "serve": serve, "peek": peek}[role]()
"""


def _argv(role: str) -> list[str]:
    return [PYTHON, "-I", "-S", "-c", ATTACKER, role]


@pytest.fixture
def state(state_dir: Path) -> Path:
    """The suite's ``state_dir`` (its keepers ended afterwards), under a short name."""
    return state_dir


async def _kept(state: Path, process_id: str) -> tuple[Path, dict[str, Any]]:
    """The process directory and meta.json of a kept process (written before the
    keeper answers the spawn)."""
    found: list[tuple[Path, dict[str, Any]]] = []

    def look() -> bool:
        for meta in state.glob("*/*/meta.json"):
            with contextlib.suppress(OSError, ValueError):  # mid-rename, or removed
                body = json.loads(meta.read_text())
                if body["process_id"] == process_id:
                    found.append((meta.parent, body))
        return bool(found)

    assert await wait_until(look, 30)
    return found[0]


async def _lines(peer: RpcClient, process_id: str, *needles: bytes) -> str:
    """The output once every needle is in it; fails (showing it) if the process
    closes first, as an obeyed ``release`` makes it."""
    events = peer.events(process_id)
    await peer.wait_for(lambda: all(n in events.output() for n in needles) or events.closed, 90)
    text = events.output().decode(errors="replace")
    assert all(n.decode() in text for n in needles), f"ended early: {text!r} {events.exited()}"
    return text


async def _still_served(peer: RpcClient, process_id: str, keeper: int) -> None:
    """The keeper, untouched, still carries the daemon's stdin and the output."""
    await peer.write(process_id, b"after\n", "after")
    text = await _lines(peer, process_id, b"echo after\n")
    assert "INJECTED" not in text and "answered" not in text and "silent" not in text
    assert alive(psutil.Process(keeper))
    await peer.ok("process/terminate", {"processId": process_id})
    await peer.wait_closed(process_id, 60)


def _modes(state: Path) -> tuple[list[str], set[str]]:
    """Every entry under ``state`` (itself included) whose owner or mode is not
    the daemon's 0700/0600, and the names seen."""
    wrong, names = [], set()
    for root, _dirs, files in os.walk(state):
        for path in [root, *(os.path.join(root, f) for f in files)]:
            names.add(os.path.basename(path))
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # a meta.json.tmp renamed meanwhile
            want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
            if stat.S_IMODE(info.st_mode) != want or info.st_uid != os.getuid():
                wrong.append(f"{path}: {stat.filemode(info.st_mode)} uid {info.st_uid}")
    return wrong, names


async def test_every_directory_is_0700_and_every_file_0600_even_under_umask_000(
    state: Path,
) -> None:
    # A daemon started with umask 000: whatever relied on the umask would show.
    old = os.umask(0)
    try:
        async with state_daemon(state, ttl=TTL) as server, connect(server.url) as peer:
            os.umask(old)
            script = "echo ready; exec sleep 300"
            await peer.start("pipes", ["sh", "-c", script], pipeStdin=True)
            await peer.start("term", ["sh", "-c", script], tty=True)
            await peer.wait_output("pipes", b"ready")
            await peer.wait_output("term", b"ready")
            await _kept(state, "pipes")
            await _kept(state, "term")
            wrong, names = await asyncio.to_thread(_modes, state)
            # The walk saw what the claim is about: both sockets, the metadata, journals.
            wanted = {"control.sock", "keeper.sock", "meta.json", "session.json", "journal"}
            assert wanted <= names, sorted(names)
            assert any(name.endswith(".seg") for name in names), sorted(names)
            assert wrong == []
    finally:
        os.umask(old)


async def test_the_child_its_grandchild_and_a_setsid_escapee_are_refused_by_their_keeper(
    state: Path,
) -> None:
    async with state_daemon(state, ttl=TTL) as server, connect(server.url) as peer:
        await peer.start("kept", _argv("kept"), pipeStdin=True)
        await peer.wait_output("kept", b"ready\n")
        directory, meta = await _kept(state, "kept")
        # Its own keeper's socket, from the same uid (root: no mode stops it).
        await peer.write("kept", f"{directory / 'keeper.sock'}\n", "path")
        text = await _lines(peer, "kept", b"child ", b"grandchild ", b"escapee ")
        lines = text.splitlines()
        assert "child refused" in lines and "grandchild refused" in lines, text
        # The escapee really left the child's session and parentage: it is the
        # keeper's own (subreaper) child when it attacks.
        escapee = re.search(r"escapee (\w+) (\d+)", text)
        assert escapee is not None and escapee.groups() == ("refused", str(meta["keeper"]))
        await _still_served(peer, "kept", meta["keeper"])


async def test_a_descendant_gone_before_its_keeper_looks_is_still_refused(state: Path) -> None:
    # The peer's pid from SO_PEERCRED then names no process: its ancestry is unknown.
    async with state_daemon(state, ttl=TTL) as server, connect(server.url) as peer:
        await peer.start("gone", _argv("gone"), pipeStdin=True)
        await peer.wait_output("gone", b"ready\n")
        directory, meta = await _kept(state, "gone")
        await peer.write("gone", f"{directory / 'keeper.sock'}\n", "path")
        await _lines(peer, "gone", b"left\n")
        await _still_served(peer, "gone", meta["keeper"])


def _as_nobody(*args: str) -> str:
    return run_as_nobody(ATTACKER, *args, timeout=90)


@contextlib.contextmanager
def _open_dir() -> Iterator[Path]:
    """A directory under /tmp anyone may search (same file system as a state
    directory inside it, so a hard link can be made into it)."""
    path = Path(tempfile.mkdtemp(prefix="keeper-boundary-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_a_process_of_another_uid_cannot_reach_keeper_sock_and_is_refused_by_uid() -> None:
    with _open_dir() as open_dir:
        # The state directory in an open one: only its own modes stand in the way.
        state = open_dir / "state"
        try:
            async with state_daemon(state, ttl=TTL) as server, connect(server.url) as peer:
                await peer.start("kept", _argv("serve"), pipeStdin=True)
                await peer.wait_output("kept", b"ready\n")
                directory, meta = await _kept(state, "kept")
                sock = directory / "keeper.sock"
                # As the modes are; then with the socket's own mode loosened (the
                # 0700 directories still stop it).
                for mode in (0o600, 0o666):
                    sock.chmod(mode)
                    answer = await asyncio.to_thread(_as_nobody, "attack", "nobody", str(sock))
                    assert answer == "nobody EACCES"
                # Reachable: hard-linked into the open directory (the same inode, 0666).
                link = open_dir / "keeper.sock"
                os.link(sock, link)
                answer = await asyncio.to_thread(_as_nobody, "attack", "nobody", str(link))
                assert answer == "nobody refused"
                await _still_served(peer, "kept", meta["keeper"])
        finally:
            await end_keepers(state)


@contextlib.asynccontextmanager
async def _nobody_daemon() -> AsyncIterator[tuple[RunningServer, Path]]:
    """A daemon running as nobody with --state-dir: its commands have the keepers'
    uid and no capability, so only the keepers' own check stands in their way."""
    nobody = pwd.getpwnam("nobody")
    wrapper = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
    wrapper += ["--clear-groups", "--"]
    with _open_dir() as open_dir:
        os.chown(open_dir, nobody.pw_uid, nobody.pw_gid)
        state = open_dir / "state"
        flags = ["--state-dir", str(state), "--session-ttl", str(TTL), "--log-level", "warning"]
        try:
            async with start_server("execserver", flags, wrapper=wrapper) as server:
                yield server, state
        finally:
            await end_keepers(state)


async def test_a_sandboxed_or_sibling_process_cannot_command_another_processs_keeper() -> None:
    # A read-only sandbox with network (unix sockets allowed) of a non-root daemon
    # sees keeper.sock with its own uid: only the keeper's refusal of anything a
    # keeper holds keeps it from driving an unsandboxed shell's stdin. An
    # unsandboxed sibling is refused the same way.
    attackers = {
        "boxed": {"sandbox": sandbox([ROOT_READ], network="enabled")},
        "plain": {},
    }
    async with _nobody_daemon() as (server, state), connect(server.url) as peer:
        await peer.start("victim", _argv("serve"), pipeStdin=True)
        await peer.wait_output("victim", b"ready\n")
        directory, meta = await _kept(state, "victim")
        target = str(directory / "keeper.sock")
        for name, extra in attackers.items():
            await peer.start(name, [*_argv("attack"), name, target], **extra)
            await peer.wait_closed(name, 60)
            assert peer.events(name).output() == f"{name} refused\n".encode()
        await _still_served(peer, "victim", meta["keeper"])


# What --take-over sends on the control socket, and what comes back (fds: the
# listening sockets a successor would get).
TAKE_OVER = r"""
import array, json, os, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(30)
sock.connect(sys.argv[1])
request = {"op": "take-over", "pid": os.getpid(), "version": "9"}
try:
    sock.sendall(json.dumps(request).encode() + b"\n")
except BrokenPipeError:
    pass  # refused at once: the refusal is still there to read
data, fds, _, _ = socket.recv_fds(sock, 4096, 8)
print(len(fds), data.decode().strip(), flush=True)
"""


async def test_a_sandboxed_command_cannot_take_over_the_daemon_through_its_control_socket() -> None:
    # The same uid reaches control.sock; a take-over would hand the command the
    # daemon's listening sockets (every client's next connection) and its keepers.
    async with _nobody_daemon() as (server, state), connect(server.url) as peer:
        control = str(state / "control.sock")
        argv = [PYTHON, "-I", "-S", "-c", TAKE_OVER, control]
        events = await peer.run(
            "boxed", argv, sandbox=sandbox([ROOT_READ], network="enabled"), timeout=60
        )
        count, answer = events.output().decode().split(" ", 1)
        assert count == "0" and json.loads(answer)["op"] == "refused", answer
        # The daemon handed nothing over and serves on.
        exited = (await peer.run("after", ["true"], timeout=60)).exited()
        assert exited is not None and exited["exitCode"] == 0
        assert server.process.returncode is None


async def test_a_tenants_kept_child_runs_as_its_account_and_cannot_reach_its_keeper() -> None:
    # --tenants: the keeper is root's, its child the tenant's (the plan's credentials).
    with tenant_host() as host:
        state = host.base / "state"
        try:
            async with (
                host.serve("--state-dir", str(state)) as server,
                connect(server.url, token=TOKEN_B) as peer,
            ):
                ok, error = await start(peer, "kept", _argv("kept"), host.b, pipeStdin=True)
                assert ok, error
                await peer.wait_output("kept", b"ready\n")
                directory, meta = await _kept(state, "kept")
                assert psutil.Process(meta["pid"]).uids().real == host.b_uid
                await peer.write("kept", f"{directory / 'keeper.sock'}\n", "path")
                text = await _lines(peer, "kept", b"child ", b"grandchild ", b"escapee ")
                lines = text.splitlines()
                assert "child EACCES" in lines and "grandchild EACCES" in lines, text
                assert f"escapee EACCES {meta['keeper']}" in lines, text
                await _still_served(peer, "kept", meta["keeper"])
        finally:
            await end_keepers(state)


def _fd_table(listing: str) -> dict[int, str]:
    """``ls -l /proc/self/fd`` as fd -> target, without ls's own directory fd."""
    table = {}
    for line in listing.splitlines():
        found = re.search(r" (\d+) -> (.*?)\r?$", line)
        if found and not re.fullmatch(r"/proc/\d+/fd", found[2]):
            table[int(found[1])] = found[2]
    return table


def _held(state: Path) -> list[str]:
    """What any process of a kept tree holds that is a socket or under ``state``."""
    found = []
    for keeper in keepers(state):
        for proc in tree_of(keeper)[1:]:
            with contextlib.suppress(OSError):  # an ls that has just exited
                for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                    target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                    if target.startswith(("socket:", str(state))):
                        found.append(f"{proc.pid} {proc.name()} {fd} -> {target}")
    return found


async def test_a_kept_child_inherits_only_its_stdio(state: Path) -> None:
    # An unsandboxed plan has no pass_fds: 0-2 is all its child may hold. A
    # sandboxed plan passes bwrap or the launcher their own (status pipe, seccomp
    # program), which they keep to themselves: the command holds 0-2 again.
    script = "ls -l /proc/self/fd; sh -c 'ls -l /proc/self/fd'; echo listed; exec sleep 300"
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "pipes": ({"pipeStdin": True}, "pipe:"),
        "quiet": ({}, "/dev/null"),
        "term": ({"tty": True}, "/dev/pts/"),
        "bwrap": ({"sandbox": sandbox([ROOT_READ])}, "/dev/null"),
        "launcher": ({"sandbox": unrestricted()}, "/dev/null"),
    }
    async with state_daemon(state, ttl=TTL) as server, connect(server.url) as peer:
        for name, (extra, _) in cases.items():
            await peer.start(name, ["sh", "-c", script], **extra)
        for name in cases:
            await peer.wait_output(name, b"listed", 90)
        # From outside, every process of every kept tree: no link, journal or socket.
        assert len(keepers(state)) == len(cases)
        assert await asyncio.to_thread(_held, state) == []
        for name in cases:
            await peer.ok("process/terminate", {"processId": name})
            await peer.wait_closed(name, 60)
    for name, (_, stdin) in cases.items():
        text = peer.events(name).output().decode()
        halves = text.split("total")[1:]  # the child's listing, then its child's
        assert len(halves) == 2, text
        for half in halves:
            table = _fd_table(half)
            assert sorted(table) == [0, 1, 2], (name, text)
            assert table[0].startswith(stdin), (name, text)


ALLOWED = {"environ": "read", "mem": "read", "fd": "read", "ptrace": "attached"}


async def _peek(server: RunningServer) -> dict[str, Any]:
    async with connect(server.url) as peer:
        events = await peer.run("peek", _argv("peek"), timeout=90)
    exited = events.exited()
    assert exited is not None and exited["exitCode"] == 0, events.output()
    report: dict[str, Any] = json.loads(events.output())
    # The same attempts on a dumpable process of the same uid succeed: what refuses
    # is the keeper's flag. The child itself is dumpable (reset at its exec).
    assert report["control"] == ALLOWED
    assert report["dumpable"] == 1
    return report


async def test_a_non_root_daemons_kept_child_cannot_ptrace_or_read_its_keeper() -> None:
    # The daemon as nobody: its child has the keeper's uid and no capability, the
    # case PR_SET_DUMPABLE 0 is for (the keeper's /proc files become root's).
    async with _nobody_daemon() as (server, _):
        report = await _peek(server)
    denied = {"environ": "denied", "mem": "denied", "fd": "denied"}
    assert report["keeper"] == {**denied, "ptrace": "Operation not permitted"}
    assert report["zygote"] == {**denied, "ptrace": "Operation not permitted"}


async def test_a_root_daemons_kept_child_is_not_stopped_by_the_flag(state: Path) -> None:
    # What §14 says it does not protect: root's children hold CAP_SYS_PTRACE,
    # which overrides a non-dumpable flag.
    async with state_daemon(state, ttl=TTL) as server:
        report = await _peek(server)
    assert report["keeper"] == ALLOWED
