"""Processes on a managed network outlive the daemon too (``--state-dir``): the
keeper holds the listening sockets of the process's proxy and of its sandbox's
bridge (execserver/netproxy/kept.py), and the restarted daemon serves them
again with the policy the process started with.

* three processes, each answering "fetch" lines on its stdin through its proxy
  variables: one unsandboxed behind the daemon's proxy (``networkProxy``), one
  sandboxed behind it (``enforceManagedNetwork``: the only way out of its
  network namespace is the bridge to the proxy's unix socket), and one
  sandboxed bridged to a client-side loopback proxy (no ``networkProxy``);
* before a SIGKILL of the daemon, after the restart and a resume, an allowed
  fetch reaches the upstream and a fetch the policy does not allow gets the
  proxy's 403; the sandboxed ones still cannot connect directly;
* a sandbox the restarted daemon starts cannot see their socket directories
  (every daemon of a state directory masks the same private directory);
* a fetch made while no daemon runs waits in the listener's backlog and is
  answered once the restarted daemon serves it;
* once they have ended, their keepers and the proxies' socket directories are
  gone.

A graceful take-over keeps them too
(``test_managed_network_processes_survive_a_take_over``). A process whose
proxy masks credentials ends with the daemon (the secrets never
go to disk): ``test_a_process_with_masked_credentials_ends_with_the_daemon``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from execserver.processes.keepers import private_dir_for
from tests.support.netproxy import CHILD, SANDBOX_READ_ONLY, proxy_params, upstream_server
from tests.support.procinfo import wait_until
from tests.support.rpc import RpcClient, connect, unb64
from tests.support.state_dir import (
    end_keepers,
    free_port,
    keepers,
    kill9,
    living,
    read_until_closed,
    state_daemon,
    tree_of,
)

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
TTL = 60.0
# The tests' CHILD, answering one JSON list of operations per stdin line.
# Long enough for the daemon to be SIGKILLed first, even on a loaded machine.
DELAY_S = 3.0
LOOP = (
    CHILD.rsplit("for op in", 1)[0]
    + r"""
import time

def later(seconds, method, url):
    time.sleep(seconds)
    return fetch(method, url)

print("ready", flush=True)
for line in sys.stdin:
    for op in json.loads(line):
        try:
            result = globals()[op[0]](*op[1:])
        except Exception as exc:
            result = {"error": repr(exc)}
        print(json.dumps(result), flush=True)
"""
)
ALLOWED = proxy_params(domains={"localhost": "allow"})


def _processes(upstream_port: int) -> dict[str, dict[str, Any]]:
    return {
        "proxied": {"networkProxy": ALLOWED},
        "boxed": {
            "networkProxy": ALLOWED,
            "sandbox": SANDBOX_READ_ONLY,
            "enforceManagedNetwork": True,
        },
        # Its "proxy" is the upstream itself (it serves absolute-form requests).
        "bridged": {
            "sandbox": SANDBOX_READ_ONLY,
            "enforceManagedNetwork": True,
            "env": {**ENV, "HTTP_PROXY": f"http://127.0.0.1:{upstream_port}"},
        },
    }


async def _start_all(peer: RpcClient, processes: dict[str, dict[str, Any]]) -> None:
    """Each of ``processes`` (name -> its process/start params) answering fetches."""
    for name, extra in processes.items():
        params = {"env": ENV, **extra}
        await peer.start(name, ["python3", "-c", LOOP], pipeStdin=True, **params)
    for name in processes:
        await peer.wait_output(name, b"ready\n")


async def _ask(peer: RpcClient, name: str, ops: list[list[Any]], tag: str) -> None:
    await peer.write(name, json.dumps(ops) + "\n", tag)


async def _answers(peer: RpcClient, name: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` JSON answers of ``name`` (after its "ready")."""
    events = peer.events(name)

    def lines() -> list[str]:
        return [ln for ln in events.output().decode().splitlines() if ln.startswith("{")]

    await peer.wait_for(lambda: len(lines()) >= count or events.closed, 60)
    found = lines()
    assert len(found) >= count, events.output()
    return [json.loads(ln) for ln in found[:count]]


async def _read_back(peer: RpcClient, name: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` JSON answers of ``name`` read with process/read from seq 1
    (output from before a resume is not pushed again)."""
    text = b""
    after = 0
    async with asyncio.timeout(60):
        while True:
            result = await peer.read(name, afterSeq=after, waitMs=1000)
            for chunk in result["chunks"]:
                text += unb64(chunk["chunk"])
                after = chunk["seq"]
            found = [ln for ln in text.decode().splitlines() if ln.startswith("{")]
            if len(found) >= count or result["closed"]:
                assert len(found) >= count, text
                return [json.loads(ln) for ln in found[:count]]


def _check(answers: list[dict[str, Any]], name: str, marker: str) -> None:
    allowed, refused, direct = answers
    assert allowed["status"] == 200, (name, allowed)
    assert marker in allowed["body"], (name, allowed)
    if name != "bridged":  # the daemon's proxy refuses what its policy does not allow
        assert refused["status"] == 403, (name, refused)
    # A sandbox's only way out is its bridge; the unsandboxed one connects anywhere.
    assert direct["direct"] == ("connected" if name == "proxied" else "failed"), (name, direct)


async def test_managed_network_processes_survive_a_sigkill_with_their_policy(
    state_dir: Path,
) -> None:
    port = free_port()
    async with upstream_server() as up:
        processes = _processes(up.port)

        def ops(marker: str) -> list[list[Any]]:
            return [
                ["fetch", "GET", f"http://localhost:{up.port}/{marker}"],
                ["fetch", "GET", f"http://127.0.0.1:{up.port}/{marker}-refused"],
                # Something listening that no bridge leads to: the daemon's port.
                ["direct", "127.0.0.1", port],
            ]

        async with state_daemon(state_dir, port, ttl=TTL) as first:
            async with connect(first.url) as peer:
                session_id = peer.session_id
                await _start_all(peer, processes)
                for name in processes:
                    await _ask(peer, name, ops("before"), "before")
                for name in processes:
                    _check(await _answers(peer, name, 3), name, "/before")
                private = Path(private_dir_for(str(state_dir)))
                socket_dirs = await asyncio.to_thread(_entries, private)
                # The sandboxed proxy's and the bridge's (the other proxy is TCP only).
                assert len(socket_dirs) == 2, socket_dirs
            held = keepers(state_dir)
            trees = [p for k in held for p in tree_of(k)]
            await kill9(first)
        # Meanwhile: each keeper and its process live on; a fetch made now waits.
        assert len(living(held)) == 3
        async with (
            state_daemon(state_dir, port, ttl=TTL) as second,
            connect(second.url, resume=session_id) as peer,
        ):
            for name in processes:
                await _ask(peer, name, ops("after"), "after")
            for name in processes:
                _check(await _answers(peer, name, 3), name, "/after")
            assert await asyncio.to_thread(_entries, private) == socket_dirs
            # A new sandbox of the restarted daemon does not see the kept sockets: the
            # private directory is the same for every daemon of the state dir, masked.
            for n, directory in enumerate(sorted(socket_dirs)):
                look = await peer.run(
                    f"look{n}", ["ls", str(directory)], sandbox=SANDBOX_READ_ONLY, timeout=60
                )
                exited = look.exited()
                assert exited is not None and exited["exitCode"] != 0, look.output()
            for name in processes:
                await peer.ok("process/terminate", {"processId": name})
            for name in processes:
                # The whole output from seq 1: both rounds of answers, in order.
                chunks, exit_code = await read_until_closed(peer, name)
                assert exit_code is not None
                text = b"".join(unb64(c["chunk"]) for c in chunks).decode()
                answers = [json.loads(ln) for ln in text.splitlines()[1:]]
                _check(answers[:3], name, "/before")
                _check(answers[3:], name, "/after")
    # Their keepers end (as at their TTL) and take the socket directories along.
    await end_keepers(state_dir)
    assert await wait_until(lambda: not living(trees), 30)
    assert await asyncio.to_thread(_entries, private) == set()


async def test_a_fetch_made_while_no_daemon_runs_is_answered_after_the_restart(
    state_dir: Path,
) -> None:
    port = free_port()
    async with upstream_server() as up:
        url = f"http://localhost:{up.port}/during"
        async with state_daemon(state_dir, port, ttl=TTL) as first:
            async with connect(first.url) as peer:
                session_id = peer.session_id
                extra = _processes(up.port)["boxed"]
                await peer.start("boxed", ["python3", "-c", LOOP], pipeStdin=True, env=ENV, **extra)
                await peer.wait_output("boxed", b"ready\n")
                # Its fetch starts DELAY_S from now: the daemon is gone by then.
                await _ask(peer, "boxed", [["later", DELAY_S, "GET", url]], "later")
            await kill9(first)
        await asyncio.sleep(DELAY_S + 1.5)
        assert up.seen == []
        # The request waited in the proxy's listener backlog (held by the keeper).
        async with (
            state_daemon(state_dir, port, ttl=TTL) as second,
            connect(second.url, resume=session_id) as peer,
        ):
            # Read back, not pushed: the answer may come before this client resumed
            # (the new daemon serves the proxy once it has re-adopted the keeper).
            [answer] = await _read_back(peer, "boxed", 1)
            assert answer["status"] == 200, answer
            assert up.seen == [f"GET /during host=localhost:{up.port}"]
            await peer.ok("process/terminate", {"processId": "boxed"})
            await read_until_closed(peer, "boxed")


async def test_a_process_with_masked_credentials_ends_with_the_daemon(state_dir: Path) -> None:
    # Its proxy swaps placeholders for secrets only this daemon's memory holds: no
    # later daemon could serve it, so its keeper ends it with the daemon.
    masked = proxy_params(
        domains={"localhost": "allow"},
        credentialMasking=True,
        credentialProviders={
            "api": {"env": ["API_TOKEN"], "url_prefixes": ["http://localhost:1/api"]}
        },
    )
    async with state_daemon(state_dir, ttl=TTL) as first:
        async with connect(first.url) as peer:
            env = {**ENV, "API_TOKEN": "secret-value"}
            await peer.start("masked", ["sleep", "300"], env=env, networkProxy=masked)
            await peer.start("plain", ["sleep", "300"], env=ENV, networkProxy=ALLOWED)
        held = keepers(state_dir)
        assert len(held) == 2
        children = {k.pid: tree_of(k)[1:] for k in held}
        await kill9(first)
    assert await wait_until(lambda: len(living(held)) == 1, 20)
    (survivor,) = living(held)
    for pid, kids in children.items():
        assert kids, "a keeper without its child"
        # The masked one's tree is gone with its keeper, not orphaned.
        assert bool(living(kids)) == (pid == survivor.pid)
    assert "secret-value" not in await asyncio.to_thread(_every_file, state_dir)
    survivor.terminate()


def _entries(directory: Path) -> set[Path]:
    return set(directory.iterdir())


def _every_file(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


async def test_managed_network_processes_survive_a_take_over(state_dir: Path) -> None:
    # A graceful handover: the old daemon closes its proxies without removing the
    # socket directories (its keepers hold them); the new one serves the listeners.
    async with upstream_server() as up:
        processes = _processes(up.port)
        allowed = [["fetch", "GET", f"http://localhost:{up.port}/x"]]
        async with state_daemon(state_dir, ttl=TTL) as old:
            async with connect(old.url) as peer:
                session_id = peer.session_id
                await _start_all(peer, processes)
            async with state_daemon(state_dir, ttl=TTL, extra=["--take-over"]) as new:
                assert await asyncio.wait_for(old.process.wait(), 60) == 0
                async with connect(new.url, resume=session_id) as peer:
                    for name in processes:
                        await _ask(peer, name, allowed, "after")
                    for name in processes:
                        [answer] = await _answers(peer, name, 1)
                        assert answer["status"] == 200, (name, answer)
                        await peer.ok("process/terminate", {"processId": name})
                        await read_until_closed(peer, name)
