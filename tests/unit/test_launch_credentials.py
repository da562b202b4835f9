"""A plan with Credentials runs as that account: uid, gid and supplementary groups
switched by spawn, pipes and pty alike (the shape tenancy and the keeper share)."""

from __future__ import annotations

import os
import pwd
import select

import pytest

from execserver.processes.launch import plan_unsandboxed, spawn
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


@pytest.mark.parametrize("tty", [False, True])
def test_a_plan_with_credentials_runs_as_that_account(tty: bool) -> None:
    creds = _nobody()
    request = LaunchRequest(
        argv=["sh", "-c", 'echo "$(id -u) $(id -g) $(id -G)"'],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        tty=tty,
        credentials=creds,
    )
    spawned = spawn(plan_unsandboxed(request))
    out = _output(spawned.outputs[0][0])
    assert spawned.popen.wait(10) == 0
    uid, gid, *groups = out.split()
    assert (int(uid), int(gid)) == (creds.uid, creds.gid)
    assert sorted(int(g) for g in groups) == sorted(set(creds.groups))


def test_without_credentials_the_child_keeps_the_daemons_account() -> None:
    request = LaunchRequest(argv=["id", "-u"], cwd="/", env={"PATH": "/usr/bin:/bin"})
    spawned = spawn(plan_unsandboxed(request))
    out = _output(spawned.outputs[0][0])
    assert spawned.popen.wait(10) == 0
    assert int(out) == os.geteuid()
