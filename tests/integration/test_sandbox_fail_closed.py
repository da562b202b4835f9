"""Fail closed: when nothing can enforce a policy the request is refused and nothing
runs; the Landlock fallback enforces what it can express exactly and refuses the rest."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from execserver.sandbox import SandboxBackend, plan_process_launch, probe_backend
from execserver.wire.errors import INVALID_PARAMS, RpcError
from tests.support.sandbox import (
    MINIMAL_READ,
    ROOT_READ,
    child_env,
    context,
    entry,
    make_tree,
    managed,
    run_sandboxed,
    without_user_namespaces,
)

MISSING_BWRAP = "/nonexistent/bin/bwrap"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def no_backend() -> SandboxBackend:
    return probe_backend(bwrap=MISSING_BWRAP, allow_landlock=False)


def landlock_only() -> SandboxBackend:
    backend = probe_backend(bwrap=MISSING_BWRAP, allow_landlock=True)
    assert backend.kind == "landlock", backend.describe()
    return backend


def test_missing_bwrap_and_no_landlock_means_no_backend() -> None:
    backend = no_backend()
    assert backend.kind == "none"
    assert MISSING_BWRAP in backend.describe() or "cannot run" in backend.describe()


@pytest.mark.parametrize(
    "permissions_for",
    [
        lambda ws: managed([ROOT_READ]),
        lambda ws: managed([ROOT_READ, entry(ws, "write")]),
        lambda ws: managed([MINIMAL_READ, entry(ws, "write")], network="enabled"),
    ],
)
async def test_unenforceable_policy_is_refused_and_nothing_runs(
    tmp_path: Path, permissions_for: object
) -> None:
    tree = make_tree(tmp_path)
    assert callable(permissions_for)
    ctx = context(permissions_for(tree.ws))
    with pytest.raises(RpcError) as info:
        plan_process_launch(
            ctx,
            argv=["bash", "-c", f"echo ran > {tree.outside}/ran"],
            cwd=str(tree.ws),
            env=child_env(tree),
            tty=False,
            backend=no_backend(),
        )
    assert info.value.code == INVALID_PARAMS
    assert info.value.message.startswith("sandbox intent cannot be enforced on this executor: ")
    await asyncio.sleep(0)
    assert not (tree.outside / "ran").exists()


def test_the_bwrap_and_landlock_variables_reach_the_probe() -> None:
    """EXECSERVER_BWRAP and EXECSERVER_SANDBOX_NO_LANDLOCK, mapped onto the config by
    cli.py, decide what is probed (here by `execserver doctor`, as serve would)."""
    env = {
        **os.environ,
        "EXECSERVER_BWRAP": MISSING_BWRAP,
        "EXECSERVER_SANDBOX_NO_LANDLOCK": "1",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "execserver", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(done.stdout)
    assert report["backend"] == "none"
    assert MISSING_BWRAP in report["backendDetail"]


async def test_probe_on_a_host_without_user_namespaces_selects_landlock() -> None:
    code = (
        "import json; from execserver.sandbox import probe_backend as p; b = p(); "
        "print(json.dumps([b.kind, b.bwrap_error]))"
    )
    proc = await asyncio.create_subprocess_exec(
        *without_user_namespaces([sys.executable, "-c", code]),
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    kind, error = json.loads(out)
    assert kind == "landlock"
    assert "namespace" in error.lower()


async def test_landlock_fallback_enforces_read_only_policy(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(
        context(managed([ROOT_READ])),
        f"cat {tree.secret}/s.txt; echo x > {tree.ws}/f",
        tree,
        backend=landlock_only(),
    )
    assert out.plan.mechanism == "landlock"
    assert "TOPSECRET" in out.output  # reads allowed
    assert f"{tree.ws}/f: Permission denied" in out.output  # Landlock says EACCES, not EROFS
    assert not (tree.ws / "f").exists()
    assert out.exit_code == 1 and out.denied is True


async def test_landlock_fallback_restricts_network_with_seccomp(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(
        context(managed([ROOT_READ])),
        f"{sys.executable} -c 'import socket; socket.socket()'",
        tree,
        backend=landlock_only(),
    )
    assert "Operation not permitted" in out.output and out.denied is True


async def test_landlock_fallback_hides_unlisted_paths_under_minimal_read(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([MINIMAL_READ, entry(tree.outside, "read")]))
    (tree.outside / "pub").write_text("PUBLIC\n")
    out = await run_sandboxed(
        ctx,
        f"cat {tree.outside}/pub; cat {tree.secret}/s.txt",
        tree,
        cwd=tree.outside,
        backend=landlock_only(),
    )
    assert "PUBLIC" in out.output
    assert "TOPSECRET" not in out.output and "Permission denied" in out.output


@pytest.mark.parametrize("what", ["writable root", "deny entry"])
def test_landlock_fallback_refuses_policies_it_cannot_express(tmp_path: Path, what: str) -> None:
    tree = make_tree(tmp_path)
    extra = entry(tree.ws, "write") if what == "writable root" else entry(tree.secret, "deny")
    with pytest.raises(RpcError) as info:
        plan_process_launch(
            context(managed([ROOT_READ, extra])),
            argv=["true"],
            cwd=str(tree.ws),
            env=child_env(tree),
            tty=False,
            backend=landlock_only(),
        )
    assert info.value.code == INVALID_PARAMS
    assert "Landlock cannot express this policy" in info.value.message


async def test_policies_without_fs_restriction_still_run_with_seccomp_only(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    backend = no_backend()
    out = await run_sandboxed(
        context({"type": "external", "network": "restricted"}),
        f"echo x > {tree.outside}/o; {sys.executable} -c 'import socket; socket.socket()'",
        tree,
        backend=backend,
    )
    assert (tree.outside / "o").exists()
    assert "Operation not permitted" in out.output


async def test_landlock_fallback_cannot_signal_processes_outside(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    outside = await asyncio.create_subprocess_exec("sleep", "30")
    try:
        out = await run_sandboxed(
            context(managed([ROOT_READ])),
            f"kill -TERM {outside.pid} && echo KILL_OK || echo KILL_FAIL",
            tree,
            backend=landlock_only(),
        )
        assert "KILL_FAIL" in out.output
        assert outside.returncode is None
    finally:
        outside.kill()
        await outside.wait()
