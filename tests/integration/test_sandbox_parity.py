"""Parity with the reference: the same policy x command matrix through the codex
0.169.0 exec-server (process/start with ``sandbox``) and through our launch plan.

Compared per case: exit code, ``sandboxDenied``, which effects happened (the
``*_OK``/``*_FAIL``/``CONNECTED`` markers) and whether the denial texts
(``Read-only file system``, ``Permission denied``, ``Operation not permitted``)
appear. Both sides get the same files, the same env and a HOME without a .bashrc.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from execserver.containment.host import cgroup_dir_of
from execserver.sandbox import plan_process_launch
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import decode_sandbox_context
from tests.support.sandbox import (
    ROOT_READ,
    child_env,
    commands,
    context_json,
    entry,
    full_access_commands,
    full_access_policies,
    host_backend,
    make_tree,
    managed,
    markers,
    policies,
    run_plan,
    sandboxed_fs,
    tcp_listener,
    uri,
)
from tests.support.servers import RunningServer, start_server

pytestmark = pytest.mark.interop

DENIAL_TEXTS = ("Read-only file system", "Permission denied", "Operation not permitted")


class ReferenceClient:
    """A plain websocket JSON-RPC client: initialize, initialized, process/start."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.notes: list[dict[str, Any]] = []

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        await self.ws.send_json({"id": request_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json(timeout=60)
            if message.get("id") == request_id:
                return dict(message)
            self.notes.append(message)

    async def handshake(self) -> None:
        reply = await self.call("initialize", {"clientName": "execserver-sandbox-parity"})
        assert "result" in reply, reply
        await self.ws.send_json({"method": "initialized", "params": {}})

    async def run(
        self,
        process_id: str,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        sandbox: Any,
        extra: dict[str, Any] | None = None,
    ) -> tuple[int, bool, str]:
        reply = await self.call(
            "process/start",
            {
                "processId": process_id,
                "argv": argv,
                "cwd": uri(cwd),
                "env": env,
                "tty": False,
                "sandbox": sandbox,
                **(extra or {}),
            },
        )
        assert reply.get("result", {}).get("sandboxType") == "linuxSeccomp", reply
        # Per stream: the reference reads stdout and stderr on their own, so a
        # chunk of one may land between two writes of the other (glibc's
        # error() writes "cat: PATH" and ": Permission denied" separately),
        # which glues a marker to a path if the two are concatenated by arrival.
        output: dict[str, bytes] = {}
        exited: dict[str, Any] | None = None
        pending, self.notes = self.notes, []
        while True:
            for note in pending:
                params = note.get("params", {})
                if params.get("processId") != process_id:
                    continue
                if note["method"] == "process/output":
                    stream = str(params.get("stream"))
                    output[stream] = output.get(stream, b"") + base64.b64decode(params["chunk"])
                elif note["method"] == "process/exited":
                    exited = params
                elif note["method"] == "process/closed":
                    assert exited is not None
                    return (
                        exited["exitCode"],
                        exited["sandboxDenied"],
                        b"\n".join(output.values()).decode(errors="replace"),
                    )
            pending = [await self.ws.receive_json(timeout=60)]


async def test_sandbox_matrix_matches_reference(reference: RunningServer, tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    env = child_env(tree)
    mismatches: list[str] = []
    with tcp_listener() as port:
        async with aiohttp.ClientSession() as session, session.ws_connect(reference.url) as ws:
            client = ReferenceClient(ws)
            await client.handshake()
            n = 0
            for pname, perms in policies(tree).items():
                sandbox = context_json(perms, cwd=uri(tree.ws), workspaceRoots=[uri(tree.ws)])
                for cname, script in commands(tree, port).items():
                    n += 1
                    argv = ["bash", "-c", script]
                    ref_code, ref_denied, ref_out = await client.run(
                        f"p{n}", argv, tree.ws, env, sandbox
                    )
                    plan = plan_process_launch(
                        decode_sandbox_context(sandbox),
                        argv=argv,
                        cwd=str(tree.ws),
                        env=env,
                        tty=False,
                        backend=host_backend(),
                    )
                    ours = await run_plan(plan, tree.ws)
                    ref = (ref_code, ref_denied, markers(ref_out), _texts(ref_out))
                    got = (ours.exit_code, ours.denied, markers(ours.output), _texts(ours.output))
                    if ref != got:
                        mismatches.append(f"{pname} / {cname}: reference {ref} != ours {got}")
    assert not mismatches, "\n".join(mismatches)


async def test_unrunnable_commands_match_reference(
    reference: RunningServer, tmp_path: Path
) -> None:
    """A missing program, and useLegacyLandlock with a restricted file system: the
    reference's helper exits 101 with a text that counts as a denial."""
    tree = make_tree(tmp_path)
    env = child_env(tree)
    read_only = context_json(managed([ROOT_READ]))
    legacy = context_json(managed([ROOT_READ]), useLegacyLandlock=True)
    cases: list[tuple[list[str], dict[str, Any], dict[str, Any]]] = [
        (["/nonexistent/prog"], read_only, {}),
        (["no-such-program-xyz"], read_only, {}),
        (["true"], legacy, {}),
        (["true"], read_only, {"enforceManagedNetwork": True}),
    ]
    async with aiohttp.ClientSession() as session, session.ws_connect(reference.url) as ws:
        client = ReferenceClient(ws)
        await client.handshake()
        for n, (argv, sandbox, extra) in enumerate(cases):
            ref_code, ref_denied, _ = await client.run(f"u{n}", argv, tree.ws, env, sandbox, extra)
            plan = plan_process_launch(
                decode_sandbox_context(sandbox),
                argv=argv,
                cwd=str(tree.ws),
                env=env,
                tty=False,
                enforce_managed_network=bool(extra.get("enforceManagedNetwork")),
                backend=host_backend(),
            )
            ours = await run_plan(plan, tree.ws)
            assert (ours.exit_code, ours.denied) == (ref_code, ref_denied), (argv, ours.output)


def _texts(output: str) -> tuple[str, ...]:
    return tuple(t for t in DENIAL_TEXTS if t in output)


async def test_fs_errors_under_sandbox_match_reference(
    reference: RunningServer, tmp_path: Path
) -> None:
    """fs/writeFile and fs/readFile with a sandbox on the reference vs our fs helper."""
    tree = make_tree(tmp_path)
    perms = managed([ROOT_READ, entry(tree.ws, "write"), entry(tree.secret_file, "deny")])
    sandbox = context_json(perms, cwd=uri(tree.ws))
    ctx = decode_sandbox_context(sandbox)
    helper = sandboxed_fs(persistent=False, module="tests.integration.test_sandbox_fs_ops")
    cases = [
        ("fs/writeFile", tree.ws / "in.txt", True),
        ("fs/writeFile", tree.outside / "out.txt", True),
        ("fs/writeFile", tree.ws / ".git" / "HEAD", True),
        ("fs/readFile", tree.secret_file, False),
        ("fs/readFile", tree.ws / "missing", False),
    ]
    async with aiohttp.ClientSession() as session, session.ws_connect(reference.url) as ws:
        client = ReferenceClient(ws)
        await client.handshake()
        for method, path, write in cases:
            params: dict[str, Any] = {"path": uri(path), "sandbox": sandbox}
            if write:
                params["dataBase64"] = base64.b64encode(b"x").decode()
            reply = await client.call(method, params)
            ref = (reply["error"]["code"], reply["error"]["message"]) if "error" in reply else None
            if write and path.exists():
                path.unlink()  # let our side start from the same state
            try:
                if write:
                    await helper.call(ctx, "write_text", {"path": str(path), "text": "x"})
                else:
                    await helper.call(ctx, "read_text", {"path": str(path)})
                ours = None
            except RpcError as exc:
                ours = (exc.code, exc.message)
            assert ours == ref, (method, path)


async def test_child_environment_matches_reference(
    reference: RunningServer, tmp_path: Path
) -> None:
    """Only the request's env reaches the child (bwrap adds PWD, as under codex)."""
    tree = make_tree(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "A": "1"}
    async with aiohttp.ClientSession() as session, session.ws_connect(reference.url) as ws:
        client = ReferenceClient(ws)
        await client.handshake()
        for n, perms in enumerate(policies(tree).values()):
            sandbox = context_json(perms, workspaceRoots=[uri(tree.ws)])
            _, _, ref_out = await client.run(f"e{n}", ["/usr/bin/env"], tree.ws, env, sandbox)
            plan = plan_process_launch(
                decode_sandbox_context(sandbox),
                argv=["/usr/bin/env"],
                cwd=str(tree.ws),
                env=env,
                tty=False,
                backend=host_backend(),
            )
            ours = await run_plan(plan, tree.ws)
            assert sorted(ours.output.splitlines()) == sorted(ref_out.splitlines()), perms


async def test_arg0_is_what_the_program_sees_under_every_policy(
    reference: RunningServer, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}
    argv = ["/bin/sh", "-c", "echo $0; tr '\\0' ' ' < /proc/self/cmdline"]
    async with aiohttp.ClientSession() as session, session.ws_connect(reference.url) as ws:
        client = ReferenceClient(ws)
        await client.handshake()
        for n, perms in enumerate(policies(tree).values()):
            sandbox = context_json(perms, workspaceRoots=[uri(tree.ws)])
            _, _, ref_out = await client.run(
                f"a{n}", argv, tree.ws, env, sandbox, {"arg0": "MYARG0"}
            )
            plan = plan_process_launch(
                decode_sandbox_context(sandbox),
                argv=argv,
                cwd=str(tree.ws),
                env=env,
                tty=False,
                arg0="MYARG0",
                backend=host_backend(),
            )
            ours = await run_plan(plan, tree.ws)
            assert ours.output == ref_out, perms
            assert ours.output.startswith("MYARG0\n")


# Where execserver is deliberately stricter than the reference under the policies
# without filesystem restriction (every other case must be equal): the
# reference's command shares the daemon's pid namespace and cgroups, so it can
# stop the daemon (every client stalls) and leave its cgroup; ours is in
# namespaces of its own (tests/security/test_unrestricted_containment.py).
# ptrace itself is refused on both (the restricted network's seccomp filter);
# /proc/<daemon>/mem opens on the reference only. (command: (ours, reference))
STRICTER_THAN_REFERENCE: dict[str, tuple[set[str], set[str]]] = {
    "signal the daemon": ({"KILL0_FAIL", "STOP_FAIL"}, {"KILL0_OK", "STOP_OK"}),
    "leave the cgroup": ({"DAEMONCG_FAIL", "PARENTCG_FAIL"}, {"DAEMONCG_OK", "PARENTCG_OK"}),
    "ptrace the daemon": ({"PTRACE_FAIL", "MEM_FAIL"}, {"PTRACE_FAIL", "MEM_OK"}),
}


@contextlib.contextmanager
def _daemon_cgroup(tag: str) -> Iterator[tuple[str, str]]:
    """(parent, daemon): memory cgroups made for one daemon under the test's own,
    so that what the reference's command moves into stays below the test's."""
    own = cgroup_dir_of(os.getpid(), "memory", "/sys/fs/cgroup")
    if own is None or not os.access(own, os.W_OK):
        pytest.skip("needs a writable memory cgroup (root on cgroup v1, or v2 delegated)")
    parent = os.path.join(own, f"es-parity-{os.getpid()}-{tag}")
    daemon = os.path.join(parent, "daemon")
    os.makedirs(daemon)
    try:
        yield parent, daemon
    finally:
        for directory in (daemon, parent):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def _in_cgroup(directory: str) -> list[str]:
    """A wrapper that puts the server into ``directory`` and execs it (same pid)."""
    return ["sh", "-c", f'echo $$ > {shlex.quote(directory)}/cgroup.procs && exec "$@"', "sh"]


@pytest.mark.parametrize("policy", sorted(full_access_policies()))
async def test_full_access_policies_match_reference_or_are_stricter(
    tmp_path: Path, policy: str
) -> None:
    """Unrestricted filesystem and ``external`` (both with network restricted):
    nested mounts and user namespaces, a raw socket and a loopback connect give
    the reference's outcome; signalling and tracing the daemon and leaving its
    cgroup give ours (STRICTER_THAN_REFERENCE)."""
    tree = make_tree(tmp_path)
    env = child_env(tree)
    sandbox = context_json(
        full_access_policies()[policy], cwd=uri(tree.ws), workspaceRoots=[uri(tree.ws)]
    )
    outcomes: dict[str, dict[str, tuple[int, bool, frozenset[str], tuple[str, ...]]]] = {}
    with tcp_listener() as port:
        for kind in ("reference", "execserver"):
            with _daemon_cgroup(kind) as (parent_cg, daemon_cg):
                async with (
                    start_server(kind, wrapper=_in_cgroup(daemon_cg)) as server,
                    aiohttp.ClientSession() as session,
                    session.ws_connect(server.url) as ws,
                ):
                    client = ReferenceClient(ws)
                    await client.handshake()
                    scripts = full_access_commands(
                        tree,
                        daemon_pid=server.process.pid,
                        daemon_cgroup=daemon_cg,
                        parent_cgroup=parent_cg,
                        port=port,
                    )
                    for n, (name, script) in enumerate(scripts.items()):
                        code, denied, out = await client.run(
                            f"f{n}", ["bash", "-c", script], tree.ws, env, sandbox
                        )
                        outcome = (code, denied, frozenset(markers(out)), _texts(out))
                        outcomes.setdefault(name, {})[kind] = outcome
    mismatches = []
    for name, by_kind in outcomes.items():
        ours, ref = by_kind["execserver"], by_kind["reference"]
        if name in STRICTER_THAN_REFERENCE:
            want_ours, want_ref = STRICTER_THAN_REFERENCE[name]
            if (ours[:2], ref[:2]) != ((0, False), (0, False)) or (
                set(ours[2]),
                set(ref[2]),
            ) != (want_ours, want_ref):
                mismatches.append(f"{name}: ours {ours}, reference {ref} (expected stricter)")
        elif ours != ref:
            mismatches.append(f"{name}: reference {ref} != ours {ours}")
    assert not mismatches, "\n".join(mismatches)
    assert outcomes["mount tmpfs"]["execserver"][2] == {"MOUNT_OK"}
    assert outcomes["unshare -Ur"]["execserver"][2] == {"UNSHARE_OK"}
