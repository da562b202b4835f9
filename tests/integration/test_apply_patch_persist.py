"""``execserver patch --persist``: commands hand their patch to a control master
that holds one connection (execserver/client/control.py), and print and exit
exactly as the one-shot command does. Real server, real master process, real
files; the master must be gone when each test ends (the leftover check)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil
import pytest

from execserver.client.cli_options import CONTROL_DIR_ENV
from execserver.client.control import control_socket_path
from tests.support.servers import RunningServer, start_server

# The persistent patch master lives as long as its daemon connection: each test
# stops its own daemon, and the master with it.
pytestmark = pytest.mark.fresh_daemon

TOKEN = "persist-test-token-123"


@pytest.fixture
def control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The commands' control directory (through the variable); ``socket_of``
    names a master's socket in it."""
    # Short: a Unix socket path must fit in 108 bytes, pytest's tmp_path may not.
    with tempfile.TemporaryDirectory(prefix="esc-", dir="/tmp") as name:
        private = Path(name) / "ctl"
        monkeypatch.setenv(CONTROL_DIR_ENV, str(private))
        yield private


async def patch(
    url: str, cwd: Path, text: str, *extra: str, persist: float | None = 30.0
) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "execserver", "patch", url, "--cwd", str(cwd), *extra]
    if persist is not None:
        argv += ["--persist", str(persist)]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(text.encode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def add(name: str, line: str) -> str:
    return f"*** Begin Patch\n*** Add File: {name}\n+{line}\n*** End Patch\n"


def socket_of(control_dir: Path, url: str, token: str | None = None) -> str:
    return control_socket_path(url, token, str(control_dir))


def exists(path: str) -> bool:
    return os.path.exists(path)


def mode(path: str | Path) -> str:
    return oct(os.stat(path).st_mode & 0o777)


def inode(path: str) -> int:
    return os.stat(path).st_ino


def make_shared_dir(path: Path) -> None:
    path.mkdir()
    path.chmod(0o755)


def make_link_to_private_dir(path: Path) -> None:
    target = path.with_name("elsewhere")
    target.mkdir(mode=0o700)
    path.symlink_to(target)


async def wait_gone(path: str) -> None:
    for _ in range(200):
        if not exists(path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} is still there")


async def test_commands_share_one_master_and_print_what_the_one_shot_command_prints(
    execserver: RunningServer, workspace: Path, control_dir: Path
) -> None:
    box = ["--sandbox", "workspace-write"]
    assert await patch(execserver.url, workspace, add("a.txt", "one"), *box) == (
        0,
        "Success. Updated the following files:\nA a.txt\n",
        "",
    )
    sock = socket_of(control_dir, execserver.url)
    master = inode(sock)
    assert mode(sock) == "0o600"
    assert mode(control_dir) == "0o700"
    assert (await patch(execserver.url, workspace, add("b.txt", "two"), *box))[0] == 0
    assert inode(sock) == master  # the same master answered
    assert (workspace / "a.txt").read_text() == "one\n"
    assert (workspace / "b.txt").read_text() == "two\n"
    # Failures read the same through the master as without it.
    failing = "*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch\n"
    one_shot = await patch(execserver.url, workspace, failing, persist=None)
    assert one_shot[0] == 1 and "missing.txt" in one_shot[2]
    assert await patch(execserver.url, workspace, failing) == one_shot
    missing_cwd = await patch(execserver.url, workspace / "nope", add("c.txt", "x"), persist=None)
    assert missing_cwd[0] == 125
    assert await patch(execserver.url, workspace / "nope", add("c.txt", "x")) == missing_cwd
    # Outside the workspace the sandbox refuses through the master too.
    outside = await patch(execserver.url, workspace, add("../escape.txt", "x"), *box)
    assert outside[0] == 1 and not (workspace.parent / "escape.txt").exists()


async def test_the_master_ends_after_its_idle_time_and_a_new_one_takes_over(
    execserver: RunningServer, workspace: Path, control_dir: Path
) -> None:
    assert (await patch(execserver.url, workspace, add("a.txt", "1"), persist=0.5))[0] == 0
    sock = socket_of(control_dir, execserver.url)
    await wait_gone(sock)  # the master removed its socket on the way out
    assert (await patch(execserver.url, workspace, add("b.txt", "2"), persist=0.5))[0] == 0
    assert (workspace / "b.txt").read_text() == "2\n"
    await wait_gone(sock)


async def test_the_master_ends_with_its_connection(workspace: Path, control_dir: Path) -> None:
    async with start_server("execserver") as server:
        assert (await patch(server.url, workspace, add("a.txt", "1")))[0] == 0
        sock = socket_of(control_dir, server.url)
        assert exists(sock)
    await wait_gone(sock)  # persist was 30 s: the lost connection ended it


async def test_a_refused_connection_is_one_line_and_leaves_no_master(
    workspace: Path, control_dir: Path
) -> None:
    async with start_server("execserver") as server:
        url = server.url  # a port that has just stopped listening
    code, out, err = await patch(url, workspace, add("a.txt", "1"))
    assert (code, out) == (255, "")
    assert err == (
        f"execserver patch: cannot connect to {url}: connection refused; "
        "is the exec-server running there?\n"
    )
    assert not exists(socket_of(control_dir, url))


async def test_the_token_reaches_the_server_and_keys_the_master(
    workspace: Path, control_dir: Path
) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    auth = ["--ws-auth", "capability-token", "--ws-token-sha256", digest]
    async with start_server("execserver", extra=auth) as server:
        ok = await patch(server.url, workspace, add("a.txt", "1"), "--token", TOKEN)
        assert ok[0] == 0
        code, _, err = await patch(server.url, workspace, add("b.txt", "2"), "--token", "wrong")
        assert code == 255
        assert err.startswith(f"execserver patch: {server.url} refused the token (HTTP 401")
        assert err.count("\n") == 1
        assert not (workspace / "b.txt").exists()
        # Each token has its own master; the token is only hashed into the name.
        right, wrong = (socket_of(control_dir, server.url, t) for t in (TOKEN, "wrong"))
        assert right != wrong and TOKEN not in right
        assert exists(right)
        assert not exists(wrong)


async def test_a_control_directory_others_can_enter_is_refused(
    execserver: RunningServer, workspace: Path, control_dir: Path
) -> None:
    make_shared_dir(control_dir)
    code, _, err = await patch(execserver.url, workspace, add("a.txt", "1"))
    assert code == 2
    assert err == (
        f"execserver patch: {control_dir} must be a directory owned by uid {os.getuid()} "
        f"with mode 0700 (set ${CONTROL_DIR_ENV} to use another)\n"
    )
    assert not (workspace / "a.txt").exists()


async def test_a_control_directory_that_is_a_link_is_refused(
    execserver: RunningServer, workspace: Path, control_dir: Path
) -> None:
    # Private as the link's target may be, a link is what someone else could plant.
    make_link_to_private_dir(control_dir)
    code, _, err = await patch(execserver.url, workspace, add("a.txt", "1"))
    assert code == 2
    assert err.startswith(f"execserver patch: {control_dir} must be a directory owned by uid")
    assert not (workspace / "a.txt").exists()


def master_process(socket_path: str) -> psutil.Process:
    """The live control master serving ``socket_path`` (a descendant of the test
    runner, which is a subreaper)."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if socket_path in child.cmdline():
                return child
    raise AssertionError(f"no control master serves {socket_path}")


async def test_the_token_is_neither_on_the_masters_command_line_nor_in_its_environment(
    workspace: Path, control_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ps shows every user the command line, and /proc/PID/environ is readable by
    # the same uid's processes for the master's whole life: the token stays out of
    # both, even when the command itself took it from $EXECSERVER_TOKEN.
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    auth = ["--ws-auth", "capability-token", "--ws-token-sha256", digest]
    monkeypatch.setenv("EXECSERVER_TOKEN", TOKEN)
    async with start_server("execserver", extra=auth) as server:
        assert (await patch(server.url, workspace, add("a.txt", "1")))[0] == 0
        master = master_process(socket_of(control_dir, server.url, TOKEN))
        assert all(TOKEN not in word for word in master.cmdline())
        assert all(TOKEN not in value for value in master.environ().values())
        # Without the token in its environment the master still holds the connection.
        assert (await patch(server.url, workspace, add("b.txt", "2")))[0] == 0
        assert (workspace / "b.txt").read_text() == "2\n"


_OTHER_USER = 65534  # nobody


def knock_as(uid: int, socket_path: str, request: Mapping[str, object]) -> bytes:
    """Connect to ``socket_path`` as ``uid``, send ``request`` as a command would,
    and return what came back before the master closed (a forked child: the
    interpreter under test may live where that uid cannot execute it)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only syscalls, then _exit
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(socket_path)
                sock.sendall(json.dumps(request).encode() + b"\n")
                os.write(write_end, b"answer:" + sock.recv(1 << 16))
        except (ConnectionResetError, BrokenPipeError):
            # Closed with the request unread; the refusal can come before the
            # request is sent (BrokenPipe, seen under load) or after (reset).
            os.write(write_end, b"answer:")
        except BaseException as exc:
            os.write(write_end, f"failed: {exc!r}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        seen = pipe.read()
    os.waitpid(pid, 0)
    return seen


async def test_a_peer_of_another_uid_is_refused_even_when_it_reaches_the_socket(
    execserver: RunningServer, workspace: Path, control_dir: Path
) -> None:
    # The directory is the first wall; the master's SO_PEERCRED check is the
    # second. Open the first (as a careless chmod would) and knock as nobody.
    assert (await patch(execserver.url, workspace, add("a.txt", "1")))[0] == 0
    sock = socket_of(control_dir, execserver.url)
    walls = [control_dir.parent, control_dir]
    request = {"op": "patch", "patch": add("intruder.txt", "x"), "cwd": str(workspace)}
    for path in walls:
        path.chmod(0o755)
    os.chmod(sock, 0o666)
    try:
        seen = await asyncio.to_thread(knock_as, _OTHER_USER, sock, request)
    finally:
        for path in walls:
            path.chmod(0o700)
        os.chmod(sock, 0o600)
    # Connected (the walls were open), then closed without the "+": not taken.
    assert seen == b"answer:"
    assert not (workspace / "intruder.txt").exists()
    # The master still serves its own user.
    assert (await patch(execserver.url, workspace, add("b.txt", "2")))[0] == 0
