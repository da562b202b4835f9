"""How the supervisor attributes escapees (orphans it inherits as subreaper) to trees.

`bash -c 'setsid sleep 1000 & echo $!'` exits before its background child has
finished exec'ing sleep; for an instant that child's /proc/<pid>/environ reads
back empty, so the start-environment match could not claim it, the tree looked
empty and was forgotten, and the escapee outlived its session. The supervisor
here is the daemon's own, driven the way ``ManagedProcess`` drives it (pidfd
wake-up, reap, ``root_exited``), many times where the window is narrow. Also
here: an escapee with no environment at all, and one that another tree
recorded first, and a helper of the daemon's not registered yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Callable

from execserver.processes.supervisor import Supervisor
from execserver.processes.tree import ProcessTree, read_environ, read_stat
from execserver.sandbox.helper_pids import HELPER_ENV_ENTRY, helper_environment
from tests.support.rpc import poll_until

TRIES = 150


async def _root_exit(pid: int) -> None:
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(pid)
    exited = loop.create_future()
    loop.add_reader(pidfd, exited.set_result, None)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _start_root(
    env: dict[str, str], script: str, stdin: int | None = None
) -> subprocess.Popen[bytes]:
    # As the daemon starts a managed child: its own session. A plain fork + exec,
    # so a blocking call is fine on the loop here.
    return subprocess.Popen(
        ["bash", "-c", script],
        stdin=stdin,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def _start_helper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    # As the daemon spawns a sandboxed fs helper: its own session, the marker added.
    return subprocess.Popen(["sleep", "1000"], env=helper_environment(env), start_new_session=True)


def _attributed(tree: ProcessTree, pid: int) -> bool:
    return pid in tree.tracked


def _dead(tree: ProcessTree, pid: int) -> bool:
    info = read_stat(pid)
    return info is None or info.state == "Z"


def _kill_and_reap(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # an inherited orphan is our child
        os.waitpid(pid, 0)


async def _escapees_failing(
    label: str,
    at_exit: Callable[[Supervisor, ProcessTree], None],
    holds: Callable[[ProcessTree, int], bool],
) -> list[int]:
    """Start TRIES roots that each leave a ``setsid`` escapee and exit at once, hand
    each root's exit to the supervisor as ``ManagedProcess`` does (pidfd wake-up,
    reap, ``root_exited``), then call ``at_exit``. Returns the escapees for which
    ``holds(tree, escapee)`` did not come true within 2 s (the supervisor re-reads
    an unreadable environment on its own timer)."""
    supervisor = Supervisor()
    assert supervisor.subreaper
    failing: list[int] = []
    escapee: int | None = None
    try:
        for n in range(TRIES):
            # One environment per tree: trees with identical environments started
            # within one clock tick cannot be told apart by the start-environment
            # match, and this is not what is tested here.
            env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": f"{label}-{n}"}
            root = _start_root(env, "setsid sleep 1000 & echo $!")
            tree = supervisor.track(root.pid, env)
            await _root_exit(root.pid)
            root.wait()
            supervisor.root_exited(tree)
            at_exit(supervisor, tree)
            assert root.stdout is not None
            escapee = int(root.stdout.readline())
            root.stdout.close()
            if not await poll_until(functools.partial(holds, tree, escapee), 2):
                failing.append(escapee)
            _kill_and_reap(escapee)
            escapee = None
    finally:
        if escapee is not None:
            _kill_and_reap(escapee)
        await supervisor.aclose()
    return failing


async def test_every_quick_setsid_escapee_is_attributed_at_its_roots_exit() -> None:
    assert await _escapees_failing("escapee", lambda supervisor, tree: None, _attributed) == []


async def test_an_escapee_attributed_after_its_tree_was_killed_is_killed_too() -> None:
    """The tree is killed right at its root's exit (a session ending at that very
    moment), while its escapee may still be mid-execve, not attributable yet: once
    attributed, it is killed as well."""
    assert await _escapees_failing("killed", Supervisor.kill, _dead) == []


async def test_an_escapee_with_no_environment_at_all_is_given_up_not_waited_on() -> None:
    """``env -i`` leaves nothing to match: the re-reading stops and the tree is done."""
    supervisor = Supervisor()
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "bare-escapee"}
    root = _start_root(env, "env -i setsid sleep 1000 & echo $!; sleep 0.2")
    escapee: int | None = None
    try:
        tree = supervisor.track(root.pid, env)
        assert root.stdout is not None
        escapee = int(root.stdout.readline())
        await _root_exit(root.pid)
        root.wait()
        root.stdout.close()
        supervisor.root_exited(tree)
        assert await poll_until(lambda: tree.empty, 5)
        assert escapee not in tree.tracked
    finally:
        if escapee is not None:
            _kill_and_reap(escapee)
        await supervisor.aclose()


async def test_an_escapee_another_tree_recorded_is_not_taken_at_a_roots_exit() -> None:
    """Two trees with the same start environment (two agents' commands both inherit
    the daemon's): when one root exits, the escapee the other tree recorded stays the
    other tree's, so the first tree's session end does not kill it."""
    supervisor = Supervisor()
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "shared"}
    first = _start_root(env, "read -r _", stdin=subprocess.PIPE)
    second: subprocess.Popen[bytes] | None = None
    escapee: int | None = None
    try:
        first_tree = supervisor.track(first.pid, env)
        # Among equally close trees the later root wins: with both started within
        # one clock tick (10 ms) of start time, the later pid.
        # The subshell exits at once, so its setsid child is re-parented to us while
        # the second root lives on; a sweep attributes it to the second tree.
        second = _start_root(env, "(setsid sleep 1000 & echo $!); exec sleep 1000")
        second_tree = supervisor.track(second.pid, env)
        assert second.stdout is not None
        escapee = int(second.stdout.readline())
        assert await poll_until(functools.partial(_attributed, second_tree, escapee), 10)
        assert first.stdin is not None
        first.stdin.close()  # the first root exits now
        await _root_exit(first.pid)
        first.wait()
        supervisor.root_exited(first_tree)
        assert escapee not in first_tree.tracked
        assert escapee not in first_tree.unread
        assert escapee in second_tree.tracked
    finally:
        if escapee is not None:
            _kill_and_reap(escapee)
        for root in (first, second):
            if root is not None:
                root.kill()
                root.wait()
                if root.stdout is not None:
                    root.stdout.close()
        await supervisor.aclose()


async def test_a_helper_not_yet_registered_is_nobodys_escapee() -> None:
    """A sandboxed fs helper is the daemon's own child in a session of its own, and
    is registered only once its spawn's pipes are set up. A root exiting before that
    has its orphans attributed: the helper's marker keeps it out, even when the rest
    of its environment is the tree's, and a kill of the tree leaves it running."""
    supervisor = Supervisor()
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "helper-window"}
    root = _start_root(env, "read -r _", stdin=subprocess.PIPE)
    helper: subprocess.Popen[bytes] | None = None
    try:
        tree = supervisor.track(root.pid, env)
        # Started after the root, in its own session, with the tree's environment:
        # everything an escapee of the tree would be, but for the marker.
        helper = _start_helper(env)
        assert await poll_until(lambda: HELPER_ENV_ENTRY in read_environ(helper.pid), 5)
        assert root.stdin is not None
        root.stdin.close()  # the root exits now
        await _root_exit(root.pid)
        root.wait()
        supervisor.root_exited(tree)
        assert helper.pid not in tree.tracked
        assert helper.pid not in tree.unread
        supervisor.kill(tree)
        await asyncio.sleep(0.2)  # a kill would have landed by now
        assert helper.poll() is None
        info = read_stat(helper.pid)
        assert info is not None and info.state != "Z"
    finally:
        if helper is not None:
            helper.kill()
            helper.wait()
        root.kill()
        root.wait()
        if root.stdout is not None:
            root.stdout.close()
        await supervisor.aclose()


def _reaped(pid: int) -> bool:
    """Whether our child ``pid`` is gone for good (reaped), without reaping it."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


async def test_a_sandbox_pid_1_named_after_its_roots_exit_is_reaped_without_the_sweep() -> None:
    """bwrap's status pipe is read by a thread of the sandbox's; on a loaded machine
    the root's exit can be handled before that thread has named the sandbox's pid 1
    (left to the daemon as a zombie). It is asked for again, and reaped within a
    few retries, not a second or two later by the stray-zombie sweep."""
    supervisor = Supervisor()
    env = {"PATH": os.environ["PATH"], "EXECSERVER_TEST_TREE": "late-pid-1"}
    root = _start_root(env, "exit 0")  # bwrap, which exits without waiting for its pid 1
    pid_1 = _start_root(env, "exit 0")  # the pid 1: a child of ours, a zombie once it exits
    named: list[int] = []
    try:
        tree = supervisor.track(root.pid, env, sandbox_child=lambda: named[0] if named else None)
        await _root_exit(root.pid)
        root.wait()
        assert root.stdout is not None
        root.stdout.close()
        supervisor.root_exited(tree)
        await asyncio.sleep(0.1)
        assert not _reaped(pid_1.pid)
        named.append(pid_1.pid)  # the watcher thread gets to it
        assert await poll_until(lambda: _reaped(pid_1.pid), 0.5)
    finally:
        assert pid_1.stdout is not None
        pid_1.stdout.close()
        with contextlib.suppress(ChildProcessError):
            pid_1.wait()
        await supervisor.aclose()
