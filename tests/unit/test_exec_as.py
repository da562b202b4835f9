"""A spawn that changes account goes through exec-as (execserver/processes/exec_as.py)
and is indistinguishable from subprocess's own account switch: the same pid, argv[0],
exit status, fds and, for a program that cannot run, the same error text."""

from __future__ import annotations

import os
import pwd
import select
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from execserver.processes import exec_as
from execserver.processes.launch import plan_unsandboxed, spawn
from execserver.sandbox.plan import Credentials, LaunchRequest
from execserver.wire.errors import RpcError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")


@pytest.fixture(params=["exec-as", "subprocess"])
def path(request: pytest.FixtureRequest) -> str | None:
    """Each test runs through exec-as and through subprocess's own switch."""
    if request.param == "exec-as":
        assert exec_as.EXEC_AS_PROGRAM is not None, "exec-as is not built (make builds it)"
        return exec_as.EXEC_AS_PROGRAM
    return None


def _nobody() -> Credentials:
    entry = pwd.getpwnam("nobody")
    return Credentials("nobody", entry.pw_uid, entry.pw_gid, (entry.pw_gid,), entry.pw_dir)


def _output(fd: int) -> str:
    data = b""
    while True:
        select.select([fd], [], [], 10)
        chunk = os.read(fd, 4096)
        if not chunk:
            return data.decode()
        data += chunk


def _run(
    argv: list[str],
    program: str | None,
    arg0: str | None = None,
    credentials: Credentials | None = None,
) -> tuple[int, str, int]:
    request = LaunchRequest(
        argv=argv,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        credentials=credentials or _nobody(),
        arg0=arg0,
    )
    spawned = spawn(plan_unsandboxed(request), exec_as_program=program)
    out = _output(spawned.outputs[0][0])
    assert spawned.popen is not None  # exec-as is started by subprocess
    return spawned.pid, out, spawned.popen.wait(10)


def test_the_command_keeps_the_pid_argv0_and_exit_status(path: str | None) -> None:
    pid, out, status = _run(["sh", "-c", 'echo "$$ $0 $(id -u)"; exit 7'], path, arg0="renamed")
    own_pid, arg0, uid = out.split()
    assert (int(own_pid), arg0, int(uid), status) == (pid, "renamed", _nobody().uid, 7)


@pytest.mark.parametrize("groups", [(), (4, 100, 65534)], ids=["no-groups", "three-groups"])
def test_the_command_has_exactly_the_accounts_uid_gid_and_groups(
    path: str | None, groups: tuple[int, ...]
) -> None:
    # Real, effective and saved ids all switched (the kernel's status file lists them).
    account = Credentials("nobody", _nobody().uid, 100, groups, "/")
    _, out, status = _run(
        ["sh", "-c", "grep -E '^(Uid|Gid|Groups):' /proc/self/status"], path, None, account
    )
    fields = {line.split(":")[0]: line.split()[1:] for line in out.splitlines()}
    assert status == 0, out
    assert fields["Uid"] == [str(account.uid)] * 4
    assert fields["Gid"] == ["100"] * 4
    assert sorted(map(int, fields["Groups"])) == sorted(groups)


def test_no_fd_of_the_spawn_leaks_into_the_command(path: str | None) -> None:
    _, out, status = _run(["sh", "-c", "ls /proc/self/fd"], path)
    assert status == 0
    # stdin, stdout, stderr, and the fd ls itself opens to list the directory.
    assert sorted(int(fd) for fd in out.split()) == [0, 1, 2, 3]


def _spawn_error(argv: list[str], program: str | None) -> str:
    with pytest.raises(RpcError) as raised:
        _run(argv, program)
    return raised.value.message


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory nobody can enter (pytest's tmp_path has 0700 parents)."""
    made = Path(tempfile.mkdtemp(prefix="es-exec-as-", dir="/tmp"))
    os.chmod(made, 0o755)
    yield made
    shutil.rmtree(made)


def test_a_program_that_cannot_run_fails_the_spawn_with_subprocess_text(
    path: str | None, public_dir: Path
) -> None:
    tmp_path = public_dir
    script = tmp_path / "no-shebang"
    script.write_bytes(b"\x7fnot an executable format\n")
    script.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    unreadable = tmp_path / "root-only"
    unreadable.write_text("#!/bin/sh\necho no\n")
    unreadable.chmod(0o700)
    errors = [
        _spawn_error([str(script)], path),
        _spawn_error([str(unreadable)], path),
        _spawn_error(["no-such-program-anywhere"], path),
    ]
    # ENOEXEC (no fallback to /bin/sh), EACCES (checked as nobody), and not found.
    assert errors[:2] == [f"{os.strerror(8)} (os error 8)", f"{os.strerror(13)} (os error 13)"]
    assert "no-such-program-anywhere" in errors[2] or "os error 2" in errors[2], errors[2]
