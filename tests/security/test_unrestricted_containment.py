"""Commands under a policy without filesystem restriction (``unrestricted``,
``external``) stay inside what the daemon gives them, even when the daemon is
root and the command is uid 0:

* they cannot leave their per-process cgroup (``--process-memory-max``): not
  by writing a parent's or the daemon's ``cgroup.procs``, not by raising their
  own limit, not by mounting a cgroup file system of their own (directly, in a
  nested user namespace, or in a nested cgroup namespace);
* they cannot signal or ptrace the daemon (``kill -STOP`` stalled every client),
  nor read its memory through ``/proc``;
* what they mount stays in their own mount namespace (the host does not see it).

Every attack goes through the protocol to a real daemon. The daemon's pid and
cgroup are passed to the payload by the test, because inside the sandbox they
are not supposed to be visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execserver.containment.host import cgroup_dir_of, probe_host
from tests.support.attacks import ROOT_READ, attack, bash, python, sandbox, unrestricted
from tests.support.rpc import RpcFailure, connect
from tests.support.sandbox import context_json, without_user_namespaces
from tests.support.servers import RunningServer, start_server

CGROUP_ROOT = "/sys/fs/cgroup"


def _delegates_memory() -> bool:
    host = probe_host(CGROUP_ROOT)
    return host.v2_usable({"memory"}) or host.v1_usable({"memory"})


needs_memory_cgroup = pytest.mark.skipif(
    not _delegates_memory(), reason="this host delegates no memory cgroup"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks are those of a root daemon")


def external(network: str = "restricted") -> dict[str, Any]:
    return context_json({"type": "external", "network": network})


POLICIES = {
    "unrestricted": unrestricted,
    "external": external,
}

# argv: daemon cgroup dir, parent (execserver-<pid>) dir. Every attempt prints a
# marker; then 300 MB are touched, which the 64M limit must stop (exit 137).
LEAVE_CGROUP = r"""
import ctypes, os, sys
daemon_dir, parent_dir = sys.argv[1], sys.argv[2]
me = str(os.getpid()).encode()

def attempt(name, path, data):
    try:
        with open(path, "wb", buffering=0) as f:
            f.write(data)
        print(f"{name}=ok", flush=True)
    except OSError as exc:
        print(f"{name}={exc.errno}", flush=True)

# Our own cgroup, as /proc/self/cgroup names it (a cgroup namespace shows "/").
own = next(l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()
           if l.split(":")[1] == "memory")
own_dir = "/sys/fs/cgroup/memory" + own.rstrip("/")
attempt("own_memsw", os.path.join(own_dir, "memory.memsw.limit_in_bytes"), b"-1")
attempt("own_limit", os.path.join(own_dir, "memory.limit_in_bytes"), b"-1")
attempt("own_procs", os.path.join(own_dir, "cgroup.procs"), me)
attempt("parent_procs", os.path.join(parent_dir, "cgroup.procs"), me)
attempt("daemon_procs", os.path.join(daemon_dir, "cgroup.procs"), me)
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("/tmp/es-cg-" + str(os.getpid()), exist_ok=True)
target = ("/tmp/es-cg-" + str(os.getpid())).encode()
for name, fstype, opts in (("mount_v1", b"cgroup", b"memory"), ("mount_v2", b"cgroup2", None)):
    rc = libc.mount(b"none", target, fstype, 0, opts)
    print(f"{name}={rc}/{ctypes.get_errno()}", flush=True)
    if rc == 0:
        for leaf, data in (("cgroup.procs", me), ("memory.limit_in_bytes", b"-1")):
            attempt(f"{name}_{leaf}", os.path.join(target.decode(), leaf), data)
        libc.umount2(target, 2)
print("cgroup_now=" + open("/proc/self/cgroup").read().replace("\n", " "), flush=True)
block = bytearray(300 << 20)
block[::4096] = b"x" * len(block[::4096])
print("allocated=yes", flush=True)
"""

# Nested user + cgroup namespaces: in a cgroup namespace of its own the command
# could mount a cgroup file system rooted at its own (limited) cgroup.
NESTED_CGROUP_NS = (
    "unshare -C true; echo unshare_C=$?; "
    "unshare -Ur sh -c 'unshare -C true; echo nested_unshare_C=$?; "
    "mkdir -p /tmp/cgm$$ && mount -t cgroup -o memory none /tmp/cgm$$; echo nested_mount=$?'"
)


def _daemon_memory_dirs(pid: int) -> tuple[str, str]:
    daemon = cgroup_dir_of(pid, "memory", CGROUP_ROOT)
    assert daemon is not None
    return daemon, os.path.join(daemon, f"execserver-{pid}")


@needs_root
@needs_memory_cgroup
@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_a_command_cannot_leave_its_memory_limit(tmp_path: Path, policy: str) -> None:
    async with start_server("execserver", ["--process-memory-max", "64M"]) as server:
        pid = server.process.pid
        daemon_dir, parent_dir = _daemon_memory_dirs(pid)
        async with connect(server.url) as client:
            result = await attack(
                client,
                python(LEAVE_CGROUP, daemon_dir, parent_dir),
                cwd=tmp_path,
                context=POLICIES[policy](),
            )
            nested = await attack(
                client, bash(NESTED_CGROUP_NS), cwd=tmp_path, context=POLICIES[policy]()
            )
    for name in ("daemon_procs", "parent_procs", "own_limit", "own_memsw"):
        assert result.marker(name) not in ("", "ok"), (name, result.output)
    for name in ("mount_v1", "mount_v2"):
        assert result.marker(name).startswith("-1/"), (name, result.output)
    assert result.marker("allocated") != "yes", result.output
    assert result.exit_code == 137, result.output
    assert nested.marker("unshare_C") not in ("", "0"), nested.output
    assert nested.marker("nested_unshare_C") not in ("", "0"), nested.output
    assert nested.marker("nested_mount") not in ("", "0"), nested.output


SIGNAL_DAEMON = r"""
pid=$1
kill -0 "$pid"; echo kill0=$?
kill -STOP "$pid"; echo stop=$?
kill -CONT "$pid" 2>/dev/null
"""

PTRACE_DAEMON = r"""
import ctypes, os, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
rc = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
print(f"ptrace={rc}/{ctypes.get_errno()}", flush=True)
if rc == 0:
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
try:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        print("mem=open", flush=True)
except OSError as exc:
    print(f"mem={exc.errno}", flush=True)
try:
    os.stat(f"/proc/{pid}")
    print("visible=yes", flush=True)
except OSError as exc:
    print(f"visible={exc.errno}", flush=True)
"""


def _host_mount_table() -> str:
    return Path("/proc/self/mountinfo").read_text()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2 :].split()[0].decode()


@needs_root
@pytest.mark.parametrize("network", ["restricted", "enabled"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_a_command_cannot_signal_or_trace_the_daemon(
    tmp_path: Path, policy: str, network: str
) -> None:
    async with start_server("execserver") as server:
        pid = server.process.pid
        try:
            async with connect(server.url) as client:
                signalled = await attack(
                    client,
                    [*bash(SIGNAL_DAEMON), "sh", str(pid)],
                    cwd=tmp_path,
                    context=POLICIES[policy](network),
                )
                assert _state(pid) != "T", signalled.output
                traced = await attack(
                    client,
                    python(PTRACE_DAEMON, str(pid)),
                    cwd=tmp_path,
                    context=POLICIES[policy](network),
                )
                # Still serving every client.
                async with asyncio.timeout(10):
                    await client.ok("environment/status", {})
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert signalled.marker("kill0") not in ("", "0"), signalled.output
    assert signalled.marker("stop") not in ("", "0"), signalled.output
    assert traced.marker("ptrace").startswith("-1/"), traced.output
    assert traced.marker("mem") not in ("", "open"), traced.output


MOUNT_AND_UNSHARE = r"""
mkdir -p mnt
mount -t tmpfs none "$PWD/mnt"; echo mount=$?
echo inside > mnt/f && echo wrote=yes
unshare -Ur /bin/true; echo unshare=$?
"""


@needs_root
@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_nested_mounts_work_and_stay_in_the_commands_namespace(
    execserver: RunningServer, tmp_path: Path, policy: str
) -> None:
    """The reference's behaviour for these policies (nested mount and user
    namespaces work), without the reference's side effect on the host: the
    tmpfs is the command's own."""
    async with connect(execserver.url) as client:
        result = await attack(
            client, bash(MOUNT_AND_UNSHARE), cwd=tmp_path, context=POLICIES[policy]()
        )
    assert result.marker("mount") == "0", result.output
    assert result.marker("unshare") == "0", result.output
    assert result.marker("wrote") == "yes", result.output
    assert not (tmp_path / "mnt" / "f").exists()
    assert str(tmp_path / "mnt") not in _host_mount_table()


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_without_user_namespaces_the_stricter_launcher_remains(
    tmp_path: Path, policy: str
) -> None:
    """On a host that refuses namespaces the unrestricted path keeps the strict
    launcher: no capability, mount and unshare refused, and the daemon is still
    out of reach of signals where Landlock can scope them (ABI 6)."""
    wrapper = without_user_namespaces([])
    async with (
        start_server("execserver", wrapper=wrapper) as server,
        connect(server.url) as client,
    ):
        pid = server.process.pid
        try:
            result = await attack(
                client, bash(MOUNT_AND_UNSHARE), cwd=tmp_path, context=POLICIES[policy]()
            )
            signalled = await attack(
                client,
                [*bash(SIGNAL_DAEMON), "sh", str(pid)],
                cwd=tmp_path,
                context=POLICIES[policy](),
            )
            assert _state(pid) != "T", signalled.output
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert result.marker("mount") not in ("", "0"), result.output
    assert result.marker("unshare") not in ("", "0"), result.output
    if _landlock_abi() >= 6:
        assert signalled.marker("stop") not in ("", "0"), signalled.output
        assert signalled.marker("kill0") not in ("", "0"), signalled.output


def _landlock_abi() -> int:
    from execserver.sandbox.backend import landlock_abi

    return landlock_abi()


# ---- the daemon's process invariants hold through the namespaces -----------------


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``ES_MARK=mark``."""
    found = []
    needle = f"ES_MARK={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if needle in env and _state(int(name)) != "Z":
                found.append(int(name))
        except OSError:
            continue
    return found


def _env(mark: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "ES_MARK": mark}


async def _gone(mark: str, timeout: float = 10) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while _marked(mark):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_terminate_signals_exit_codes_and_tty_through_the_namespaces(
    execserver: RunningServer, tmp_path: Path, policy: str
) -> None:
    context = POLICIES[policy]()
    mark = f"term-{policy}-{tmp_path.name}"
    async with connect(execserver.url) as client:
        # terminate: 137 at once, the whole tree (a setsid escapee included) gone.
        await client.start(
            "t",
            bash("setsid sleep 300 >/dev/null 2>&1 & echo armed; sleep 300"),
            env=_env(mark),
            cwd=f"file://{tmp_path}",
            sandbox=context,
        )
        await client.wait_output("t", b"armed")
        assert await client.ok("process/terminate", {"processId": "t"}) == {"running": True}
        exited = (await client.wait_closed("t")).exited()
        assert exited is not None and exited["exitCode"] == 137, exited
        assert await _gone(mark), _marked(mark)
        # interrupt reaches the command (not the launcher in front of it).
        script = "trap 'echo caught; exit 7' INT; echo armed; sleep 100 & wait"
        await client.start("i", bash(script), cwd=f"file://{tmp_path}", sandbox=context)
        await client.wait_output("i", b"armed")
        await client.ok("process/signal", {"processId": "i", "signal": "interrupt"})
        events = await client.wait_closed("i")
        assert (events.exited() or {}).get("exitCode") == 7, events.output()
        assert b"caught" in events.output()
        # Death by a signal: 128+N through pipes, 1 on a pty, as without namespaces.
        killed = await attack(client, bash("kill -TERM $$"), cwd=tmp_path, context=context)
        assert killed.exit_code == 143, killed.output
        on_tty = await attack(
            client,
            bash("tty >/dev/null && echo on-tty; exit 3"),
            cwd=tmp_path,
            context=context,
            tty=True,
        )
        assert on_tty.exit_code == 3 and "on-tty" in on_tty.output, on_tty.output
        tty_killed = await attack(
            client, bash("kill -TERM $$"), cwd=tmp_path, context=context, tty=True
        )
        assert tty_killed.exit_code == 1, tty_killed.output


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_background_jobs_outlive_the_command_until_the_session_ends(
    tmp_path: Path, policy: str
) -> None:
    """As without namespaces: the command's exit is reported at once, what it left
    running lives on (the namespace's init with it) and dies with the session."""
    mark = f"bg-{policy}-{tmp_path.name}"
    async with start_server("execserver") as server:
        async with connect(server.url) as client:
            await client.start(
                "b",
                bash("sleep 300 >/dev/null 2>&1 & echo started"),
                env=_env(mark),
                cwd=f"file://{tmp_path}",
                sandbox=POLICIES[policy](),
            )
            events = await client.wait_closed("b", timeout=10)
            assert (events.exited() or {}).get("exitCode") == 0, events.output()
            assert _marked(mark), "the background job died with the command"
        # The session ends with the server: nothing of the tree is left.
    assert await _gone(mark), _marked(mark)


NOBODY = 65534


@contextlib.contextmanager
def _delegated_memory_cgroup(tag: str) -> Iterator[str]:
    """A memory cgroup below the test's own, delegated to uid 65534 the way a
    systemd ``Delegate=yes`` or a container runtime does it (the directory and its
    ``cgroup.procs`` owned by the daemon's user)."""
    own = cgroup_dir_of(os.getpid(), "memory", CGROUP_ROOT)
    if own is None or not os.access(own, os.W_OK):
        pytest.skip("needs a writable memory cgroup")
    directory = os.path.join(own, f"es-delegated-{os.getpid()}-{tag}")
    os.mkdir(directory)
    try:
        for name in ("", "cgroup.procs", "tasks"):
            os.chown(os.path.join(directory, name), NOBODY, NOBODY)
        yield directory
    finally:
        for leftover in sorted(Path(directory).glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                leftover.rmdir()


@needs_root
@needs_memory_cgroup
async def test_a_non_root_daemons_command_cannot_leave_its_delegated_cgroup() -> None:
    """The daemon runs as uid 65534 in a cgroup delegated to it: its command (the
    same uid) owns every cgroup file the daemon owns, so only the namespaces keep
    it in its limited leaf."""
    with _delegated_memory_cgroup("nonroot") as delegated:
        wrapper = [
            "sh",
            "-c",
            f"echo $$ > {delegated}/cgroup.procs && exec setpriv --reuid={NOBODY} "
            f'--regid={NOBODY} --clear-groups -- "$@"',
            "sh",
        ]
        async with start_server(
            "execserver", ["--process-memory-max", "64M"], wrapper=wrapper
        ) as server:
            parent = os.path.join(delegated, f"execserver-{server.process.pid}")
            async with connect(server.url) as client:
                result = await attack(
                    client,
                    python(LEAVE_CGROUP, delegated, parent),
                    cwd=Path("/tmp"),
                    context=unrestricted(),
                )
    for name in ("daemon_procs", "parent_procs", "own_limit"):
        assert result.marker(name) not in ("", "ok"), (name, result.output)
    assert result.marker("allocated") != "yes", result.output
    assert result.exit_code == 137, result.output


@needs_root
@needs_memory_cgroup
async def test_without_user_namespaces_limits_refuse_full_access_commands(tmp_path: Path) -> None:
    """Without namespaces nothing keeps a same-uid command off its own cgroup's
    files, so with per-process limits such a launch fails closed; restricted
    policies (bwrap or Landlock) are unaffected."""
    wrapper = without_user_namespaces([])
    async with (
        start_server("execserver", ["--process-memory-max", "64M"], wrapper=wrapper) as server,
        connect(server.url) as client,
    ):
        try:
            await attack(client, bash("touch ran"), cwd=tmp_path, context=unrestricted())
        except RpcFailure as failure:
            refusal = failure
        else:
            raise AssertionError("a full-access command ran where its limit cannot hold")
        read_only = await attack(
            client, bash("echo fine"), cwd=tmp_path, context=sandbox([ROOT_READ])
        )
    assert refusal.code == -32602, refusal
    assert "per-process limits cannot hold" in refusal.message, refusal.message
    assert not (tmp_path / "ran").exists()
    assert read_only.exit_code == 0 and "fine" in read_only.output, read_only.output


UNCOVER = r"""
for cg in /sys/fs/cgroup/*/; do
  umount "$cg" 2>/dev/null && echo "uncovered=$cg"
  umount -l "$cg" 2>/dev/null && echo "uncovered=$cg"
  mount -o remount,bind,rw "$cg" 2>/dev/null && echo "writable=$cg"
done
umount -l /proc 2>/dev/null && echo "uncovered=/proc"
umount -l /sys 2>/dev/null && echo "uncovered=/sys"
echo done=yes
"""


@needs_root
@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_the_covers_cannot_be_removed(
    execserver: RunningServer, tmp_path: Path, policy: str
) -> None:
    """What hides the host's cgroups and processes was mounted by a more
    privileged namespace: the command (root in its own) can neither unmount nor
    remount it read-write."""
    async with connect(execserver.url) as client:
        result = await attack(client, bash(UNCOVER), cwd=tmp_path, context=POLICIES[policy]())
    assert result.marker("done") == "yes", result.output
    assert "uncovered=" not in result.output and "writable=" not in result.output, result.output
