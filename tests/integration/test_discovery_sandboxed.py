"""capabilityRoots/discoverV1 with a root's ``sandbox``: the scan runs in a confined
helper (execserver/discovery/fs_program.py), so what the policy denies is never
read, and what it allows is found as without a sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.rpc import connect, uri
from tests.support.servers import RunningServer

SKILL = "---\nname: s\ndescription: d\n---\nbody\n"


def _sandbox(*entries: dict[str, Any]) -> dict[str, Any]:
    root_read = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": [root_read, *entries]},
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
    }


async def test_a_sandboxed_scan_finds_what_is_allowed_and_never_reads_what_is_denied(
    execserver: RunningServer, tmp_path: Path
) -> None:
    for root in ("open", "denied"):
        (tmp_path / root / "skill").mkdir(parents=True)
        (tmp_path / root / "skill" / "SKILL.md").write_text(SKILL + root)
    denied = tmp_path / "denied"
    deny = {"path": {"type": "path", "path": uri(denied)}, "access": "deny"}
    sandbox = _sandbox(deny)
    roots = [
        {"id": name, "path": uri(tmp_path / name), "sandbox": sandbox}
        for name in ("open", "denied")
    ]
    async with connect(execserver.url) as client:
        sandboxed = await client.ok("capabilityRoots/discoverV1", {"roots": roots})
        plain = await client.ok(
            "capabilityRoots/discoverV1",
            {"roots": [{"id": name, "path": uri(tmp_path / name)} for name in ("open", "denied")]},
        )
    opened, refused = sandboxed["roots"]
    assert opened == plain["roots"][0]
    assert [s["instructions"]["contents"] for s in opened["skills"]] == [SKILL + "open"]
    # Without the sandbox the denied root's skill is there to be found; with it, the
    # helper sees the root masked (an empty directory): nothing of it comes back.
    assert [s["instructions"]["contents"] for s in plain["roots"][1]["skills"]] == [
        SKILL + "denied"
    ]
    assert refused["skills"] == []
    assert "body" not in str(refused)
