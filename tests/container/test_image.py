"""The container image, built from the Dockerfile and run as the docs prescribe.

Built with podman (deploy/image/build.sh, what `make image` runs) and started as
its non-root user with a read-only root, no capabilities, no-new-privileges, the
shipped seccomp profile (deploy/seccomp/execserver.json) and an unmasked /proc
(so bubblewrap may mount each sandbox its own) -- no --privileged, nothing
Unconfined. Then a smoke set goes through the published port: the handshake, an
unsandboxed command, a workspace-write sandboxed command whose write outside the
root is denied and which sees no process outside its sandbox, /readyz, and the
doctor inside the container. Without the unmasked /proc, or without the
profile's bubblewrap rule, the doctor must report workspace-write refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from execserver.client import ExecServerClient, Output
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

pytestmark = [
    pytest.mark.container,
    # Under pytest-xdist (`make test`) these tests go to one worker: the module's
    # fixtures build the image and start its container once, not once per worker.
    pytest.mark.xdist_group("container-image"),
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.timeout(900),
]

ROOT = Path(__file__).resolve().parents[2]
PODMAN = str(ROOT / "deploy" / "image" / "podman.sh")
IMAGE_UID = 10001
PROFILE = ROOT / "deploy" / "seccomp" / "execserver.json"
TAG = "localhost/execserver:test"
# The runtime's /proc masks (files overmounted in /proc) make the kernel refuse
# bubblewrap a fresh proc mount; docs/deploying.md says why unmasking is safe here.
UNMASK_PROC = ("--security-opt", "unmask=/proc/*")
HARDENING = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges")


def podman(
    *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


@dataclass
class Container:
    name: str
    url: str
    token: str
    workspace: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def image() -> str:
    done = subprocess.run(
        [str(ROOT / "deploy" / "image" / "build.sh"), TAG],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return TAG


@pytest.fixture(scope="module")
def container(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    base = tmp_path_factory.mktemp("container")
    token = secrets.token_urlsafe(32)
    token_file = base / "token"
    token_file.write_text(token + "\n")
    # The daemon runs as the image's uid: the token must be readable by it, by no one else.
    os.chown(token_file, IMAGE_UID, IMAGE_UID)
    token_file.chmod(0o400)
    workspace = base / "workspace"
    (workspace / ".git").mkdir(parents=True)
    for path in (workspace, workspace / ".git"):
        os.chown(path, IMAGE_UID, IMAGE_UID)
    port = free_port()
    name = f"execserver-test-{uuid.uuid4().hex[:8]}"
    run = [
        "run", "--detach", "--name", name,
        "--user", f"{IMAGE_UID}:{IMAGE_UID}",
        "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev",
        *HARDENING,
        "--security-opt", f"seccomp={PROFILE}",
        *UNMASK_PROC,
        "-v", f"{token_file}:/run/secrets/execserver/token:ro",
        "-v", f"{workspace}:/workspace",
        "-p", f"127.0.0.1:{port}:8765",
        image,
    ]  # fmt: skip
    podman(*run)
    try:
        yield Container(name, f"ws://127.0.0.1:{port}", token, workspace)
    finally:
        logs = podman("logs", name, check=False)
        podman("rm", "--force", "--time", "5", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])


async def wait_ready(http_url: str) -> None:
    async with asyncio.timeout(60), aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(http_url + "/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


def workspace_write(root: str) -> FileSystemSandboxContext:
    return decode_sandbox_context(
        {
            "permissions": {
                "type": "managed",
                "file_system": {
                    "type": "restricted",
                    "entries": [
                        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                        {"path": {"type": "path", "path": "file://" + root}, "access": "write"},
                    ],
                },
                "network": "restricted",
            },
            "windowsSandboxLevel": "disabled",
        }
    )


async def run(
    client: ExecServerClient, script: str, *, cwd: str = "/workspace", **kwargs: Any
) -> tuple[int, str]:
    # Exactly this environment (start_process inherits the executor's by default):
    # the /proc check below looks for the daemon's variables.
    proc = await client.start_process(
        ["sh", "-c", script],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        inherit_env=False,
        **kwargs,
    )
    output = b""
    async for event in proc:
        if isinstance(event, Output):
            output += event.data
    return (await proc.wait()).exit_code, output.decode(errors="replace")


async def test_image_serves_the_smoke_set_under_the_shipped_seccomp_profile(
    container: Container,
) -> None:
    http_url = container.url.replace("ws://", "http://")
    await wait_ready(http_url)
    async with await ExecServerClient.connect(container.url, token=container.token) as client:
        assert client.session_id  # initialize answered
        assert await client.environment_status() == "ready"

        code, out = await run(client, "id -u; echo unsandboxed > /workspace/plain.txt")
        assert (code, out.strip()) == (0, str(IMAGE_UID))
        assert (container.workspace / "plain.txt").read_text() == "unsandboxed\n"

        code, out = await run(
            client,
            "echo inside > /workspace/inside.txt || exit 10; "
            "(echo x > /workspace/.git/config) 2>/dev/null && exit 11; "
            "(echo x > /tmp/outside.txt) 2>/dev/null && exit 12; exit 0",
            sandbox=workspace_write("/workspace"),
        )
        assert code == 0, out
        assert (container.workspace / "inside.txt").read_text() == "inside\n"
        assert not (container.workspace / ".git" / "config").exists()
        code, out = await run(client, "test -e /tmp/outside.txt && echo leaked || echo absent")
        assert out.strip() == "absent"

        # The sandbox has its own /proc: the daemon (tini -- execserver serve
        # --ws-token-file ...) and its environment are not in it.
        code, out = await run(
            client,
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; "
            "cat /proc/1/environ 2>&1 | tr '\\0' ' '",
            sandbox=workspace_write("/workspace"),
        )
        assert code == 0, out
        assert "sh -c for f in /proc/" in out, out  # the listing ran and saw this shell
        assert "--ws-token-file" not in out and "EXECSERVER_LISTEN" not in out, out

        # Unmasked is not readable: the kernel files the runtime would have covered
        # stay closed to uid 10001 without capabilities.
        code, out = await run(
            client,
            "for f in /proc/timer_list /proc/kcore /proc/sysrq-trigger; do "
            "test -e $f && { head -c1 $f >/dev/null 2>&1 && echo read $f; }; done; "
            "(echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && echo wrote; echo checked",
        )
        assert out.strip() == "checked", out

    async with aiohttp.ClientSession() as http, http.get(http_url + "/readyz") as response:
        assert response.status == 200
    health = podman("healthcheck", "run", container.name, check=False)
    assert health.returncode == 0, health.stdout + health.stderr


def test_doctor_in_the_container_enforces_workspace_write_with_bwrap(container: Container) -> None:
    done = podman("exec", container.name, "execserver", "doctor", "--require", "sandbox")
    assert "workspace-write    ok       by bwrap" in done.stdout, done.stdout
    # The exec-as `make` built went into the image with the package (limited spawns
    # in the container keep the vfork path).
    assert "exec-as   ok" in done.stdout, done.stdout


def test_without_the_profiles_bwrap_rule_the_doctor_refuses_workspace_write(
    image: str, tmp_path: Path
) -> None:
    """The one rule the shipped profile adds is what makes bubblewrap work: drop it
    (leaving what Docker/containerd allow) and the doctor in the container says
    workspace-write would be refused, and `--require sandbox` fails."""
    profile = json.loads((ROOT / "deploy" / "seccomp" / "execserver.json").read_text())
    profile["syscalls"] = [
        rule for rule in profile["syscalls"] if not rule["comment"].startswith("execserver:")
    ]
    stripped = tmp_path / "runtime-default.json"
    stripped.write_text(json.dumps(profile))
    done = doctor_in_container(image, "--security-opt", f"seccomp={stripped}", *UNMASK_PROC)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "workspace-write would be refused" in done.stdout
    assert "Creating new namespace failed" in done.stdout


def test_with_the_runtimes_proc_masks_the_doctor_refuses_workspace_write_and_says_why(
    image: str,
) -> None:
    """The runtime's default masks cover files in /proc, so the kernel refuses
    bubblewrap a private proc mount. bwrap is then not used (a sandbox seeing the
    container's /proc would see the daemon), workspace-write is refused, and the
    doctor names the option that fixes it."""
    done = doctor_in_container(image, "--security-opt", f"seccomp={PROFILE}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "workspace-write would be refused" in done.stdout
    bwrap_line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("bwrap"))
    assert "bwrap cannot mount a private /proc" in bwrap_line, bwrap_line
    assert "unmask=/proc/*" in bwrap_line and "procMount: Unmasked" in bwrap_line


def test_a_user_namespaced_container_like_the_kubernetes_pods_enforces_workspace_write(
    image: str,
) -> None:
    """deploy/k8s runs the pod in its own user namespace (hostUsers: false, which
    procMount: Unmasked requires): uid 10001 of the container is an unprivileged
    uid of the host, and bubblewrap nests its own user namespace inside."""
    done = doctor_in_container(
        image,
        "--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536",
        "--security-opt", f"seccomp={PROFILE}", *UNMASK_PROC,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "workspace-write    ok       by bwrap" in done.stdout, done.stdout


def doctor_in_container(image: str, *options: str) -> subprocess.CompletedProcess[str]:
    return podman(
        "run", "--rm", "--user", f"{IMAGE_UID}:{IMAGE_UID}", "--read-only",
        "--tmpfs", "/tmp", *HARDENING, *options, "--entrypoint", "execserver",
        image, "doctor", "--require", "sandbox",
        check=False,
    )  # fmt: skip
