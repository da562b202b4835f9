"""A plan with Credentials runs as that account: uid, gid and supplementary groups
switched by spawn, pipes and pty alike (the shape tenancy and the keeper share)."""

from __future__ import annotations

import os
import pwd
import select

import pytest

from execserver.processes.exec_as import EXEC_AS_PROGRAM
from execserver.processes.launch import Spawned, plan_unsandboxed, spawn
from execserver.sandbox.plan import Credentials, LaunchRequest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")


def _nobody() -> Credentials:
    entry = pwd.getpwnam("nobody")
    return Credentials("nobody", entry.pw_uid, entry.pw_gid, (entry.pw_gid, 4), entry.pw_dir)


def _output(fd: int) -> bytes:
    data = b""
    while True:
        select.select([fd], [], [], 10)
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the pty master reads EIO once the child has gone
            return data
        if not chunk:
            return data
        data += chunk


def exit_status(spawned: Spawned) -> int:
    """The child's exit status, waited for through its Popen when it has one."""
    if spawned.popen is not None:
        return spawned.popen.wait(10)
    return os.waitstatus_to_exitcode(os.waitpid(spawned.pid, 0)[1])


@pytest.mark.parametrize("tty", [False, True])
@pytest.mark.parametrize("through", ["exec-as", "subprocess"])
def test_a_plan_with_credentials_runs_as_that_account(tty: bool, through: str) -> None:
    # Without exec-as subprocess switches the account (never posix_spawn, which cannot).
    creds = _nobody()
    request = LaunchRequest(
        argv=["sh", "-c", 'echo "$(id -u) $(id -g) $(id -G)"'],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        tty=tty,
        credentials=creds,
    )
    program = EXEC_AS_PROGRAM if through == "exec-as" else None
    spawned = spawn(plan_unsandboxed(request), exec_as_program=program)
    out = _output(spawned.outputs[0][0])
    assert exit_status(spawned) == 0
    uid, gid, *groups = out.split()
    assert (int(uid), int(gid)) == (creds.uid, creds.gid)
    assert sorted(int(g) for g in groups) == sorted(set(creds.groups))


def test_without_credentials_the_child_keeps_the_daemons_account() -> None:
    request = LaunchRequest(argv=["id", "-u"], cwd="/", env={"PATH": "/usr/bin:/bin"})
    spawned = spawn(plan_unsandboxed(request))
    out = _output(spawned.outputs[0][0])
    assert exit_status(spawned) == 0
    assert int(out) == os.geteuid()
