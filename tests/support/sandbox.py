"""Shared helpers for the sandbox tests (real bwrap, real processes, real files).
tests/integration/test_sandbox_helpers.py tests the helpers themselves, so a
broken helper cannot hide failures."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execserver.fs.sandboxed.client import SandboxedFs
from execserver.sandbox import (
    LaunchPlan,
    SandboxBackend,
    is_sandbox_denied,
    plan_process_launch,
    probe_backend,
)
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

PATH = "/usr/local/bin:/usr/bin:/bin"


@functools.cache
def host_backend() -> SandboxBackend:
    """This host's backend, probed once for the test run (as serve does at start-up)."""
    return probe_backend()


def sandboxed_fs(*, persistent: bool = True, module: str | None = None) -> SandboxedFs:
    """What a server runs sandboxed fs calls with: the probed backend, default
    settings (``module``: a test's own helper program)."""
    if module is None:
        return SandboxedFs(host_backend(), persistent=persistent)
    return SandboxedFs(host_backend(), persistent=persistent, module=module)


def uri(path: str | Path) -> str:
    return "file://" + str(path)


def special(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": "special", "value": {"kind": kind, **extra}}


def entry(path: str | Path | dict[str, Any], access: str) -> dict[str, Any]:
    if isinstance(path, dict):
        return {"path": path, "access": access}
    return {"path": {"type": "path", "path": uri(path)}, "access": access}


ROOT_READ = entry(special("root"), "read")
MINIMAL_READ = entry(special("minimal"), "read")


def managed(entries: list[dict[str, Any]], network: str = "restricted") -> dict[str, Any]:
    return {
        "type": "managed",
        "file_system": {"type": "restricted", "entries": entries},
        "network": network,
    }


def context_json(permissions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"permissions": permissions, "windowsSandboxLevel": "disabled", **extra}


def context(permissions: dict[str, Any], **extra: Any) -> FileSystemSandboxContext:
    return decode_sandbox_context(context_json(permissions, **extra))


@dataclass
class Tree:
    """base/ws (writable root with .git/HEAD and link_out -> outside), base/outside,
    base/secret/s.txt (a deny-read dir), base/secret_file (a deny-read file)."""

    base: Path
    ws: Path
    outside: Path
    secret: Path
    secret_file: Path
    home: Path


def make_tree(tmp_path: Path) -> Tree:
    base = tmp_path.resolve()
    ws, outside, secret, home = base / "ws", base / "outside", base / "secret", base / "home"
    for d in (ws / ".git", outside, secret, home):
        d.mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref\n")
    (secret / "s.txt").write_text("TOPSECRET\n")
    secret_file = base / "secret_file"
    secret_file.write_text("FILESECRET\n")
    (ws / "link_out").symlink_to(outside)
    return Tree(base, ws, outside, secret, secret_file, home)


def child_env(tree: Tree) -> dict[str, str]:
    # HOME without a .bashrc: under the network filter bash thinks it was started
    # by rshd and sources ~/.bashrc (same under the reference), which we do not want
    # to depend on.
    return {"PATH": PATH, "HOME": str(tree.home), "LANG": "C.UTF-8"}


@dataclass
class Outcome:
    exit_code: int
    output: str
    denied: bool
    plan: LaunchPlan


async def run_plan(plan: LaunchPlan, cwd: str | Path) -> Outcome:
    """Spawn the plan as the process module does; stdout+stderr merged."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *plan.argv,
            env=plan.env,
            pass_fds=plan.pass_fds,
            cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        plan.close()
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    # Host resources (synthetic mount points) are released once bwrap is gone.
    assert await asyncio.to_thread(plan.wait_released, 10)
    return Outcome(code, out.decode(errors="replace"), is_sandbox_denied(code, out), plan)


async def run_sandboxed(
    ctx: FileSystemSandboxContext,
    script: str,
    tree: Tree,
    *,
    cwd: Path | None = None,
    backend: SandboxBackend | None = None,
) -> Outcome:
    where = cwd or tree.ws
    plan = plan_process_launch(
        ctx,
        argv=["bash", "-c", script],
        cwd=str(where),
        env=child_env(tree),
        tty=False,
        backend=backend or host_backend(),
    )
    return await run_plan(plan, where)


@contextmanager
def tcp_listener() -> Iterator[int]:
    """A listening socket on 127.0.0.1; yields its port."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]
    finally:
        sock.close()


def markers(text: str) -> set[str]:
    return {w for w in text.split() if w.endswith(("_OK", "_FAIL")) or w == "CONNECTED"}


# --------------------------------------------------------------------------- the matrix
# The policy x command matrix measured on the reference, used against the
# reference (test_sandbox_parity) and with recorded outcomes (test_sandbox_matrix).
def policies(tree: Tree) -> dict[str, dict[str, Any]]:
    return {
        "read-only": managed([ROOT_READ]),
        "workspace-write + deny secret": managed(
            [
                ROOT_READ,
                entry(tree.ws, "write"),
                entry(tree.secret, "none"),
                entry(tree.secret_file, "deny"),
            ]
        ),
        "workspace-write, network enabled": managed(
            [ROOT_READ, entry(tree.ws, "write")], network="enabled"
        ),
        "minimal read + ws write": managed([MINIMAL_READ, entry(tree.ws, "write")]),
        "unrestricted fs, network restricted": {
            "type": "managed",
            "file_system": {"type": "unrestricted"},
            "network": "restricted",
        },
        "external, network restricted": {"type": "external", "network": "restricted"},
        "disabled": {"type": "disabled"},
    }


def commands(tree: Tree, port: int) -> dict[str, str]:
    ws, out = tree.ws, tree.outside
    return {
        "writes": (
            f"echo x > {ws}/n_$$ && echo WS_OK || echo WS_FAIL; "
            f"echo x > {out}/o_$$ && echo OUT_OK || echo OUT_FAIL; "
            f"echo x > {ws}/.git/HEAD && echo GIT_OK || echo GIT_FAIL; "
            f"mkdir -p {ws}/.codex/x && echo CODEX_OK || echo CODEX_FAIL; "
            f"mv {ws}/n_$$ {ws}/.git/moved && echo MVGIT_OK || echo MVGIT_FAIL; "
            # A fresh name per run: in a pid namespace $$ is the same in every run.
            f"ln {ws}/.git/HEAD {ws}/$(mktemp -u hl_XXXXXXXX) "
            "&& echo LNGIT_OK || echo LNGIT_FAIL; "
            f"echo x > {ws}/link_out/l_$$ && echo LINK_OK || echo LINK_FAIL"
        ),
        "reads": (
            f"cat {tree.secret}/s.txt >/dev/null && echo SECRET_OK || echo SECRET_FAIL; "
            f"cat {tree.secret_file} >/dev/null && echo SFILE_OK || echo SFILE_FAIL; "
            f"ls {out} >/dev/null && echo LS_OK || echo LS_FAIL"
        ),
        "net": (
            'python3 -c "import socket; s=socket.socket(); '
            f"s.connect(('127.0.0.1',{port})); print('CONNECTED')\""
        ),
        "touch outside": f"touch {out}/t",
        "SIGSYS": "kill -SYS $$",
    }


# A container-like host without user namespaces (what Docker's default seccomp
# profile does), for one process tree: unshare/setns and namespace-creating clone
# fail with EPERM, clone3 with ENOSYS. Applied by a tiny wrapper, then exec.
_NO_USERNS = r"""
import ctypes, os, struct, sys
nr = {"unshare": 272, "setns": 308, "clone": 56, "clone3": 435}
ns_flags = 0x7E020000
EPERM, ENOSYS, ALLOW = 0x00050000 | 1, 0x00050000 | 38, 0x7FFF0000
code = [
    (0x20, 0, 0, 0),                 # A = nr
    (0x15, 0, 1, nr["unshare"]), (0x06, 0, 0, EPERM),
    (0x15, 0, 1, nr["setns"]), (0x06, 0, 0, EPERM),
    (0x15, 0, 1, nr["clone3"]), (0x06, 0, 0, ENOSYS),
    (0x15, 0, 3, nr["clone"]),
    (0x20, 0, 0, 16),                # A = low word of args[0] (flags)
    (0x45, 0, 1, ns_flags),          # jset
    (0x06, 0, 0, EPERM),
    (0x06, 0, 0, ALLOW),
]
prog = b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in code)
class F(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(prog, len(prog))
assert libc.prctl(38, 1, 0, 0, 0) == 0
f = F(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
assert libc.prctl(22, 2, ctypes.byref(f), 0, 0) == 0, ctypes.get_errno()
os.execvp(sys.argv[1], sys.argv[1:])
"""


def without_user_namespaces(argv: list[str]) -> list[str]:
    """``argv`` run on a simulated host that refuses namespaces (x86_64 numbers)."""
    assert os.uname().machine == "x86_64", "the no-userns simulation knows x86_64 only"
    return [sys.executable, "-c", _NO_USERNS, *argv]


# bwrap that works except for --proc: what a container with a masked /proc gives.
_MASKED_PROC_BWRAP = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = "--proc" ]; then
    echo "bwrap: Can't mount proc on /newroot/proc: Operation not permitted" >&2
    exit 1
  fi
done
exec {bwrap} "$@"
"""


def masked_proc_bwrap(tmp_path: Path) -> str:
    """A bwrap (for ``EXECSERVER_BWRAP``) that cannot mount a private /proc."""
    real = shutil.which("bwrap")
    assert real is not None, "bubblewrap is not installed (make installs it)"
    script = tmp_path / "bwrap"
    script.write_text(_MASKED_PROC_BWRAP.format(bwrap=real))
    script.chmod(0o755)
    return str(script)


# ------------------------------------------------ full filesystem access: containment
# The two policies the executor does not restrict the filesystem for (the command
# is assumed to be in someone else's sandbox), and what such a command must and
# must not be able to do. Run through real daemons (test_sandbox_parity): the
# daemon's pid and cgroups are part of the commands.
def full_access_policies() -> dict[str, dict[str, Any]]:
    return {
        "unrestricted fs, network restricted": {
            "type": "managed",
            "file_system": {"type": "unrestricted"},
            "network": "restricted",
        },
        "external, network restricted": {"type": "external", "network": "restricted"},
    }


_PTRACE = (
    "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "print('PTRACE_OK' if libc.ptrace(16, int(sys.argv[1]), None, None) == 0 else 'PTRACE_FAIL')"
)
_PROC_MEM = (
    "import sys\n"
    "try:\n"
    "    open(f'/proc/{sys.argv[1]}/mem', 'rb').close(); print('MEM_OK')\n"
    "except OSError:\n"
    "    print('MEM_FAIL')"
)
_RAW = (
    "import socket\n"
    "try:\n"
    "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('RAW_OK')\n"
    "except OSError:\n"
    "    print('RAW_FAIL')"
)
_CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5); print('CONNECTED')\n"
    "except OSError:\n"
    "    print('CONNECT_FAIL')"
)


def full_access_commands(
    tree: Tree, *, daemon_pid: int, daemon_cgroup: str, parent_cgroup: str, port: int
) -> dict[str, str]:
    """Markers only (no error texts: a "No such process" here is an "Operation not
    permitted" there for the same refusal), every script ends with status 0. The
    tmpfs is unmounted again: on the reference it is the host's mount."""
    mnt = tree.ws / "mnt"
    py = sys.executable
    return {
        "mount tmpfs": (
            f"mkdir -p {mnt}; mount -t tmpfs none {mnt} && echo MOUNT_OK || echo MOUNT_FAIL; "
            f"umount {mnt} 2>/dev/null; true"
        ),
        "unshare -Ur": "unshare -Ur /bin/true && echo UNSHARE_OK || echo UNSHARE_FAIL",
        "signal the daemon": (
            f"kill -0 {daemon_pid} 2>/dev/null && echo KILL0_OK || echo KILL0_FAIL; "
            f"kill -STOP {daemon_pid} 2>/dev/null && echo STOP_OK || echo STOP_FAIL; "
            f"kill -CONT {daemon_pid} 2>/dev/null; true"
        ),
        "leave the cgroup": (
            f"(echo $BASHPID > {daemon_cgroup}/cgroup.procs) 2>/dev/null "
            "&& echo DAEMONCG_OK || echo DAEMONCG_FAIL; "
            f"(echo $BASHPID > {parent_cgroup}/cgroup.procs) 2>/dev/null "
            "&& echo PARENTCG_OK || echo PARENTCG_FAIL; true"
        ),
        "ptrace the daemon": (
            f'{py} -I -c "{_PTRACE}" {daemon_pid}; {py} -I -c "{_PROC_MEM}" {daemon_pid}; true'
        ),
        "raw socket": f'{py} -I -c "{_RAW}"; true',
        "connect 127.0.0.1": f'{py} -I -c "{_CONNECT}" {port}; true',
    }
