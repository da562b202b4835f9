"""The image run as deploy/k8s/tenants/devbox-tenants.yaml runs it, attacked through
the protocol: root with exactly the pod's seven capabilities (everything else
dropped), no-new-privileges, the shipped seccomp profile, an unmasked /proc, a
read-only root, the manifest's accounts ConfigMap as /etc/passwd and /etc/group,
a tenants file with two tenants, and their homes made by the manifest's own
init-container script under its three capabilities.

Then: each tenant's sandboxed command runs as its account in its workspace and
its files are its account's; B cannot read A's file by a command or through
fs/*. (Signals and /proc between tenants are attacked on the host, in
tests/security/test_tenancy_processes.py; here each sandbox also has its own pid
namespace.)
(No user namespace here, unlike the pod's hostUsers: false, which only narrows
what that root is on the node.)
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from execserver.client import ExecServerClient
from tests.container import test_image
from tests.container.test_image import (
    PROFILE,
    UNMASK_PROC,
    free_port,
    image,  # noqa: F401 - the module-scoped fixture (a cached rebuild here)
    podman,
    run,
    wait_ready,
    workspace_write,
)

# The image's own marks: its xdist group (one build per run), podman, the timeout.
pytestmark = test_image.pytestmark

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "k8s" / "tenants" / "devbox-tenants.yaml"


def _manifest() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc}


def _container(name: str) -> dict[str, Any]:
    pod = _manifest()["StatefulSet"]["spec"]["template"]["spec"]
    found: dict[str, Any] = next(
        c for c in [*pod["initContainers"], *pod["containers"]] if c["name"] == name
    )
    return found


def _caps(name: str) -> list[str]:
    """The pod's capability set for ``name``, as podman options."""
    added = _container(name)["securityContext"]["capabilities"]["add"]
    return ["--cap-drop", "ALL", "--cap-add", ",".join(added)]


@dataclass
class Tenants:
    url: str
    alice: str  # tokens
    bob: str
    homes: Path


def _tenants_file(alice: str, bob: str) -> str:
    def entry(name: str, token: str) -> str:
        return (
            f"[tenants.{name}]\n"
            f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
            f'user = "{name}"\n'
            'sandbox = "required"\n'
            f'writable_roots = ["/home/{name}/work"]\n'
            'network = "none"\n'
            f'env = {{ TMPDIR = "/home/{name}/tmp" }}\n'
        )

    return entry("alice", alice) + entry("bob", bob)


@pytest.fixture(scope="module")
def tenants(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:  # noqa: F811
    base = tmp_path_factory.mktemp("tenants")
    data = _manifest()["ConfigMap"]["data"]
    accounts = []
    for name in ("passwd", "group"):
        (base / name).write_text(data[name])
        accounts += ["-v", f"{base / name}:/etc/{name}:ro"]
    alice, bob = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    tenants_file = base / "tenants.toml"
    tenants_file.write_text(_tenants_file(alice, bob))
    tenants_file.chmod(0o400)  # root's alone, as the Secret's defaultMode
    homes = base / "homes"
    homes.mkdir()
    common = [
        "--user", "0:0", "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev",
        "--security-opt", "no-new-privileges", "--security-opt", f"seccomp={PROFILE}",
        *accounts, "-v", f"{homes}:/home",
    ]  # fmt: skip
    # The manifest's init container, its script and capabilities as they are.
    init = _container("prepare-homes")
    podman(
        "run", "--rm", *common, *_caps("prepare-homes"), "--entrypoint", init["command"][0],
        image, *init["command"][1:], *init["args"],
    )  # fmt: skip
    port = free_port()
    name = f"execserver-tenants-{uuid.uuid4().hex[:8]}"
    podman(
        "run", "--detach", "--name", name, *common, *_caps("execserver"), *UNMASK_PROC,
        "-v", f"{tenants_file}:/etc/execserver/tenants.toml:ro",
        "-p", f"127.0.0.1:{port}:8765",
        image, *_container("execserver")["args"][:2],
    )  # fmt: skip
    try:
        yield Tenants(f"ws://127.0.0.1:{port}", alice, bob, homes)
    finally:
        logs = podman("logs", name, check=False)
        podman("rm", "--force", "--time", "5", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])
        # The homes belong to the tenants' uids: root removes them.
        subprocess.run(["rm", "-rf", str(homes)], check=False)


async def test_each_tenant_runs_as_its_account_and_b_cannot_reach_a(tenants: Tenants) -> None:
    await wait_ready(tenants.url.replace("ws://", "http://"))
    async with (
        await ExecServerClient.connect(tenants.url, token=tenants.alice) as a,
        await ExecServerClient.connect(tenants.url, token=tenants.bob) as b,
    ):
        a_box, b_box = workspace_write("/home/alice/work"), workspace_write("/home/bob/work")
        code, out = await run(
            a,
            "id -u; id -g; echo secret > /home/alice/work/s && cat /home/alice/work/s",
            sandbox=a_box,
            cwd="/home/alice/work",
        )
        assert (code, out.split()) == (0, ["20001", "20001", "secret"]), out
        stat = (tenants.homes / "alice" / "work" / "s").stat()
        assert (stat.st_uid, stat.st_gid) == (20001, 20001)

        code, out = await run(b, "id -u", sandbox=b_box, cwd="/home/bob/work")
        assert (code, out.strip()) == (0, "20002"), out
        # B's command, in its own sandbox that reads the whole root, cannot read A's
        # file (A's 0700 home, the kernel's check as B's account).
        code, out = await run(
            b, "cat /home/alice/work/s || echo refused", sandbox=b_box, cwd="/home/bob/work"
        )
        assert "secret" not in out and "refused" in out, out
        # Nor through fs/* (outside B's roots: the ceiling refuses it first).
        with pytest.raises(PermissionError):
            await b.fs.read_file("/home/alice/work/s")

        # B's own file through fs/* works (the refusal above is not a broken fs).
        await run(b, "echo mine > /home/bob/work/m", sandbox=b_box, cwd="/home/bob/work")
        assert await b.fs.read_file("/home/bob/work/m") == b"mine\n"
