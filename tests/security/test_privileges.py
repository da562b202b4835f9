"""No privilege leaves the sandbox and none is kept inside it:

* no setuid/setgid file can be planted in a writable root (``chmod 4755``,
  ``chmod g+s``, ``install -m 4755``, ``open(O_CREAT, 04755)``): another local
  user running it would get the daemon's uid (root here);
* every backend drops all capabilities, bounding set included, and sets
  no_new_privs (the Landlock fallback used to keep all of root's);
* the daemon's session keyring is neither readable nor writable (keyctl,
  add_key and request_key are refused, and the daemon runs on a fresh
  session keyring of its own).

The Landlock backend is forced the way the fail-closed tests do it: the daemon
runs on a simulated host without user namespaces, so bwrap cannot start.
Measured on the reference 0.169.0: ``chmod 4755`` in a writable root succeeds
there (``test_reference_lets_a_setuid_file_be_planted``).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.attacks import ROOT_READ, attack, bash, entry, python, sandbox, unrestricted
from tests.support.rpc import connect
from tests.support.sandbox import without_user_namespaces
from tests.support.servers import start_server

SETID_ATTEMPTS = r"""
cp /bin/true t1 && chmod 4755 t1; echo "chmod_rc=$?"
cp /bin/true t2 && chmod g+s t2; echo "chmod_g_rc=$?"
install -m 4755 /bin/true t3; echo "install_rc=$?"
python3 -I -c 'import os; os.close(os.open("t4", os.O_CREAT | os.O_WRONLY, 0o4755))'
echo "open_rc=$?"
"""


def _setid_files(ws: Path) -> list[str]:
    found = []
    for path in ws.iterdir():
        mode = path.lstat().st_mode
        if mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(f"{path.name} {oct(mode)}")
    return found


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.mark.parametrize("policy", ["workspace-write", "unrestricted"])
async def test_no_setuid_or_setgid_file_can_be_planted(tmp_path: Path, policy: str) -> None:
    ws = _workspace(tmp_path)
    context = (
        sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
        if policy == "workspace-write"
        else unrestricted()
    )
    async with start_server("execserver") as server, connect(server.url) as client:
        result = await attack(client, bash(SETID_ATTEMPTS), cwd=ws, context=context)
    assert _setid_files(ws) == [], result.output
    for name in ("chmod_rc", "chmod_g_rc", "install_rc", "open_rc"):
        assert result.marker(name) not in ("", "0"), result.output
    assert "Operation not permitted" in result.output
    # Ordinary modes still work: the copies exist and stay executable.
    assert (ws / "t1").stat().st_mode & 0o111


async def test_writable_roots_are_nosuid_inside_the_sandbox(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    async with start_server("execserver") as server, connect(server.url) as client:
        result = await attack(
            client,
            bash(f"grep ' {ws} ' /proc/self/mountinfo | head -1"),
            cwd=ws,
            context=context,
        )
    options = result.output.split()[5].split(",") if result.output.split() else []
    assert "nosuid" in options, result.output


@pytest.mark.interop
async def test_reference_lets_a_setuid_file_be_planted(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    async with start_server("reference") as server, connect(server.url) as client:
        await attack(client, bash("cp /bin/true t1 && chmod 4755 t1"), cwd=ws, context=context)
    assert (ws / "t1").stat().st_mode & stat.S_ISUID


CAPS = r"""
import ctypes, os, socket
fields = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    fields[key] = value.strip()
for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
    print(f"{key}={fields.get(key)}")
print("uid_map=" + " ".join(open("/proc/self/uid_map").read().split()))
print("gid_map=" + " ".join(open("/proc/self/gid_map").read().split()))
try:
    socket.sethostname("pwned")
    print("sethostname=ok")
except OSError as exc:
    print(f"sethostname={exc.errno}")
libc = ctypes.CDLL(None, use_errno=True)
print("unshare_net=" + str(libc.unshare(0x40000000)) + "/" + str(ctypes.get_errno()))
mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print(f"mount={mounted}/{ctypes.get_errno()}")
try:
    open("/dev/kmsg").read(1)
    print("kmsg=read")
except OSError as exc:
    print(f"kmsg={exc.errno}")
"""

NO_USERNS: list[str] = without_user_namespaces([])


def _assert_powerless(output: str, marker: Callable[[str], str]) -> None:
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert marker(key) == "0000000000000000", (key, output)
    assert marker("NoNewPrivs") == "1", output
    assert marker("Seccomp") == "2", output
    assert marker("sethostname") == "1", output
    assert marker("unshare_net").startswith("-1/"), output
    assert marker("mount") == "-1/1", output
    assert marker("kmsg") != "read", output


def _assert_powerless_outside_its_namespaces(output: str, marker: Callable[[str], str]) -> None:
    """Full filesystem access on a host with user namespaces: whatever the command
    holds is the capability set of its own user namespace, which maps exactly the
    daemon's uid and gid; on the host it can do nothing a capability would allow."""
    uid, gid = os.geteuid(), os.getegid()
    assert marker("uid_map") == f"{uid} {uid} 1", output
    assert marker("gid_map") == f"{gid} {gid} 1", output
    assert marker("CapAmb") == "0000000000000000", output
    assert marker("NoNewPrivs") == "1", output
    assert marker("Seccomp") == "2", output
    assert marker("sethostname") == "1", output  # the host's UTS namespace is not its own
    assert marker("kmsg") != "read", output
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    assert not any(line.split()[4] == "/tmp" for line in mounts), output  # its tmpfs is its own


@pytest.mark.parametrize(
    ("backend", "policy"),
    [
        ("bwrap", "read-only"),
        ("bwrap", "unrestricted"),
        ("landlock", "read-only"),
        ("landlock", "unrestricted"),
    ],
)
async def test_every_backend_leaves_no_capability(
    tmp_path: Path, backend: str, policy: str
) -> None:
    """``bwrap-unrestricted`` is a host with user namespaces, where a policy without
    filesystem restriction runs in namespaces of its own (the launcher's
    ``--namespaces``); ``landlock-unrestricted`` a host without, where the launcher
    drops every capability instead."""
    context: dict[str, Any] = sandbox([ROOT_READ]) if policy == "read-only" else unrestricted()
    wrapper = NO_USERNS if backend == "landlock" else []
    async with start_server("execserver", wrapper=wrapper) as server, connect(server.url) as c:
        result = await attack(c, python(CAPS), cwd=tmp_path, context=context)
    assert result.exit_code == 0, result.output
    if backend == "bwrap" and policy == "unrestricted":
        _assert_powerless_outside_its_namespaces(result.output, result.marker)
    else:
        _assert_powerless(result.output, result.marker)


KEYRING = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING = 10, -3
name = sys.argv[1].encode()
serial = libc.syscall(250, KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, b"user", name, 0)
print(f"search={serial}/{ctypes.get_errno()}")
added = libc.syscall(248, b"user", b"planted", b"x", 1, KEY_SPEC_SESSION_KEYRING)
print(f"add_key={added}/{ctypes.get_errno()}")
try:
    print("proc_keys=" + str(sys.argv[1] in open("/proc/keys").read()))
except OSError as exc:
    print(f"proc_keys={exc.errno}")
"""

# Runs before the daemon: joins a fresh session keyring holding a secret key (the
# way a login session would), then execs the daemon. x86_64 syscall numbers.
KEY_HOLDER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "assert libc.syscall(250, 1, None) >= 0\n"
    "assert libc.syscall(248, b'user', sys.argv[1].encode(), b'SECRETKEY', 9, -3) > 0\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
async def test_the_daemons_session_keyring_is_out_of_reach(tmp_path: Path, backend: str) -> None:
    assert sys.platform == "linux"
    description = f"execserver-test-{tmp_path.name}"
    holder = [sys.executable, "-c", KEY_HOLDER, description]
    wrapper = [*NO_USERNS, *holder] if backend == "landlock" else holder
    async with start_server("execserver", wrapper=wrapper) as server, connect(server.url) as c:
        for context in (sandbox([ROOT_READ]), unrestricted(network="enabled")):
            result = await attack(c, python(KEYRING, description), cwd=tmp_path, context=context)
            assert result.marker("search").startswith("-1/"), (backend, result.output)
            assert result.marker("add_key").startswith("-1/"), (backend, result.output)
            if backend == "bwrap" and context["permissions"]["file_system"]["type"] != (
                "unrestricted"
            ):
                # bwrap masks /proc/keys; without a mount namespace (Landlock, or no
                # filesystem restriction) descriptions of same-uid keys stay listable
                # there (THREAT_MODEL.md), their contents do not.
                assert result.marker("proc_keys") != "True", (backend, result.output)
        # Unsandboxed (trusted) children share the daemon's fresh keyring: the key
        # of the daemon's parent session is not in it either.
        plain = await attack(c, python(KEYRING, description), cwd=tmp_path, context=None)
        assert plain.marker("search").startswith("-1/"), plain.output
