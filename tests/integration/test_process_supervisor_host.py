"""A supervisor inside another program leaves that program's own children alone.

The daemon's supervisor kills, at shutdown, whatever it started that is still
running, and reaps the orphans nobody owns. The processes it starts all run
outside its session (each root leads one of its own). It once killed every
descendant of its process and reaped any long-dead child: run inside another
program (the test workers, which also start a shared daemon as a child; an
application embedding the server), its shutdown SIGKILLed that program's other
children, and a sweep could take a child's exit status from its owner. A CI run
lost its shared daemon that way, between two tests.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from execserver.processes.supervisor import Supervisor
from execserver.processes.tree import STRAY_ZOMBIE_GRACE_S, read_proc_table, reap_stray_zombies
from tests.support.procinfo import is_zombie_or_gone
from tests.support.rpc import poll_until


def _alive(pid: int) -> bool:
    return not is_zombie_or_gone(pid)


def _start(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    # A plain fork + exec: a blocking call is fine on the loop here.
    return subprocess.Popen(argv, **options)


async def test_shutdown_kills_the_trees_and_spares_the_host_programs_own_children() -> None:
    # The host's child, in the host's session, with a child of its own in another
    # session (as the tests' shared daemon runs its processes).
    bystander = _start(["bash", "-c", "setsid sleep 600 & echo $!; wait"], stdout=subprocess.PIPE)
    assert bystander.stdout is not None
    grandchild = int(bystander.stdout.readline())
    bystander.stdout.close()
    root = _start(["sleep", "600"], start_new_session=True)
    supervisor = Supervisor()
    try:
        supervisor.track(root.pid, dict(os.environ))
    finally:
        await supervisor.aclose()
    try:
        assert await poll_until(lambda: root.poll() is not None, 5), "the tree survived"
        assert _alive(bystander.pid), "the host program's own child was killed"
        assert _alive(grandchild), "what the host's child started was killed"
    finally:
        os.kill(grandchild, 9)
        bystander.kill()
        bystander.wait()
        root.kill()
        root.wait()


async def test_a_host_programs_exited_child_keeps_its_exit_status_for_its_owner() -> None:
    host_child = _start(["sh", "-c", "exit 7"])
    assert await poll_until(lambda: is_zombie_or_gone(host_child.pid), 5)
    seen: dict[int, tuple[int, float]] = {}
    # Two sweeps, the second past the grace after which an unowned zombie is reaped.
    for now in (0.0, STRAY_ZOMBIE_GRACE_S + 1):
        seen, _ = reap_stray_zombies(read_proc_table(), set(), seen, now)
    # Reaped by someone else, Popen.wait would say 0 (it cannot get the status).
    assert host_child.wait(timeout=5) == 7
