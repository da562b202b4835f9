"""Shared helpers for the sandbox tests (real bwrap, real processes, real files),
plus tests of the helpers themselves so a broken helper cannot hide failures."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execserver.sandbox import (
    LaunchPlan,
    SandboxBackend,
    is_sandbox_denied,
    plan_process_launch,
)
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

PATH = "/usr/local/bin:/usr/bin:/bin"


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
        backend=backend,
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


# --------------------------------------------------------------------------- helper self-tests
async def test_run_plan_reports_exit_code_and_output(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    outcome = await run_sandboxed(
        context({"type": "disabled"}), "echo hello; echo oops >&2; exit 3", tree
    )
    assert outcome.exit_code == 3
    assert "hello" in outcome.output and "oops" in outcome.output
    assert outcome.denied is False


def test_make_tree_builds_the_documented_layout(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    assert (tree.ws / ".git" / "HEAD").read_text() == "ref\n"
    assert os.path.realpath(tree.ws / "link_out") == str(tree.outside)
    assert tree.secret_file.read_text() == "FILESECRET\n"
