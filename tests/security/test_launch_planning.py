"""Planning a sandboxed launch cannot stall the daemon, and honours the request:

* deny-glob expansion (and the rest of policy resolution, which walks the
  filesystem) runs off the event loop: other clients are answered while a
  launch with a glob over a large tree is being planned;
* the expansion is bounded: a glob that would read more directory entries than
  the limit refuses the request (a deny set not fully known cannot be
  enforced) and nothing runs;
* ``arg0`` reaches sandboxed processes (it was silently dropped).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.support.attacks import ROOT_READ, attack, bash, entry, python, sandbox, special
from tests.support.rpc import RpcFailure, connect
from tests.support.servers import start_server

FILES = 30_000
GLOBS = 4


def _big_tree(root: Path, files: int) -> None:
    for i in range(files // 500):
        directory = root / f"d{i}"
        directory.mkdir(parents=True)
        for j in range(500):
            (directory / f"f{j}.txt").touch()
    (root / "d0" / "key.pem").write_text("PRIVATE\n")


def _glob_policy(ws: Path, globs: int = 1) -> dict[str, object]:
    # Several deny globs over the same tree: each is expanded on its own, which
    # makes planning long enough to tell "off the loop" from "on the loop".
    patterns = [f"{ws}/**/*.pem", *(f"{ws}/**/*.key{i}" for i in range(globs - 1))]
    deny = [entry({"type": "glob_pattern", "pattern": p}, "deny") for p in patterns]
    return sandbox([ROOT_READ, entry(ws, "write"), *deny], cwd=ws)


async def test_deny_glob_expansion_does_not_stall_other_clients(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    await asyncio.to_thread(_big_tree, ws, FILES)
    async with (
        start_server("execserver") as server,
        connect(server.url) as launcher,
        connect(server.url) as other,
    ):
        answered_during = 0
        start = asyncio.ensure_future(
            launcher.start(
                "globbed",
                bash("cat d0/key.pem; echo done"),
                cwd=f"file://{ws}",
                sandbox=_glob_policy(ws, GLOBS),
            )
        )
        while not start.done():
            await other.ok("environment/status", {})
            if not start.done():
                answered_during += 1
            await asyncio.sleep(0.005)  # leave the planner thread some CPU
        await start
        events = await launcher.wait_closed("globbed")
    output = events.output().decode()
    assert "PRIVATE" not in output and "done" in output, output
    # The loop kept serving the other connection while the launch was planned.
    assert answered_during >= 10, answered_during


async def test_a_glob_past_the_scan_limit_refuses_the_launch(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    await asyncio.to_thread(_big_tree, ws, 2_000)
    env = {**os.environ, "EXECSERVER_SANDBOX_GLOB_SCAN_LIMIT": "1000"}
    async with start_server("execserver", env=env) as server, connect(server.url) as client:
        try:
            await attack(client, bash("touch ran"), cwd=ws, context=_glob_policy(ws))
        except RpcFailure as failure:
            refusal = failure
        else:
            raise AssertionError("the launch ran with a partially expanded deny glob")
        # fs/* with the same policy is refused the same way.
        try:
            await client.ok(
                "fs/readFile", {"path": f"file://{ws}/d0/key.pem", "sandbox": _glob_policy(ws)}
            )
        except RpcFailure as failure:
            fs_refusal = failure
        else:
            raise AssertionError("fs/readFile ran with a partially expanded deny glob")
    for refused in (refusal, fs_refusal):
        assert refused.code == -32602, refused
        assert "needs more than 1000 directory entries" in refused.message, refused.message
    assert not (ws / "ran").exists()


async def test_arg0_reaches_sandboxed_processes(tmp_path: Path) -> None:
    show_bash = 'echo "argv0=$0"'
    contexts = {
        "bwrap": sandbox([ROOT_READ, entry(special("tmpdir"), "write")]),
        "unrestricted": {
            "permissions": {
                "type": "managed",
                "file_system": {"type": "unrestricted"},
                "network": "restricted",
            },
            "windowsSandboxLevel": "disabled",
        },
    }
    async with start_server("execserver") as server, connect(server.url) as client:
        for name, context in contexts.items():
            result = await attack(
                client,
                ["bash", "--norc", "-c", show_bash],
                cwd=tmp_path,
                context=context,
                arg0="renamed-shell",
            )
            assert result.marker("argv0") == "renamed-shell", (name, result.output)


# Each link's target climbs 100 directories down and back up before naming the next
# link: os.path.realpath walked every component of every link (0.8 s for 900 links
# here) and raised RecursionError past ~1 000 links.
_PLANT_CHAIN = """
import os, sys
ws, links = sys.argv[1], int(sys.argv[2])
detour = "deep/" + "d/" * 99
os.makedirs(os.path.join(ws, detour))
climb = detour + "../" * 100
for i in range(links):
    os.symlink(f"{ws}/{climb}link{i + 1}", f"{ws}/link{i}")
os.mkdir(f"{ws}/link{links}")
os.symlink(f"{ws}/link0", f"{ws}/sub")
print("planted=yes")
"""


async def test_a_planted_symlink_chain_is_refused_not_walked(tmp_path: Path) -> None:
    """A sandboxed command plants a chain of 3 000 symlinks where a later context
    names a writable path inside its workspace. Resolving that context follows
    links as the kernel does (40 at most): the request is refused at once with a
    clear error, nothing runs, and the daemon keeps serving."""
    ws, secret = tmp_path / "ws", tmp_path / "secret"
    ws.mkdir()
    secret.mkdir()
    writable_ws = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    # The deny entry restricts reads, so fs/readFile goes through the sandbox too.
    chained = sandbox(
        [ROOT_READ, entry(ws, "write"), entry(ws / "sub", "write"), entry(secret, "none")],
        cwd=ws,
    )
    async with start_server("execserver") as server, connect(server.url) as client:
        planted = await attack(
            client, python(_PLANT_CHAIN, str(ws), "3000"), cwd=ws, context=writable_ws
        )
        assert planted.marker("planted") == "yes", planted.output
        refusals = []
        for method, params in (
            ("fs/readFile", {"path": f"file://{ws}/sub/x", "sandbox": chained}),
            ("fs/writeFile", {"path": f"file://{ws}/x", "dataBase64": "", "sandbox": chained}),
        ):
            try:
                await client.ok(method, params)
            except RpcFailure as failure:
                refusals.append(failure)
            else:
                raise AssertionError(f"{method} ran under a context that cannot be resolved")
        try:
            await attack(client, bash("touch ran"), cwd=ws, context=chained)
        except RpcFailure as failure:
            refusals.append(failure)
        else:
            raise AssertionError("the launch ran under a context that cannot be resolved")
        await client.ok("environment/status", {})
    for refused in refusals:
        assert refused.code == -32602, refused
        assert "cannot resolve" in refused.message and str(ws) in refused.message, refused.message
    assert not (ws / "ran").exists() and not (ws / "x").exists()
