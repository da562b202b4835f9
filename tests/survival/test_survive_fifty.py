"""Fifty processes of every kind through a daemon SIGKILL and restart
(``--state-dir``): pipes and PTY, unsandboxed and sandboxed (workspace-write,
bwrap), behind the daemon's managed-network proxy or not,
each printing numbered lines before the crash, while no daemon runs,
and after the restart. The restarted daemon serves every one of them to the
resumed session: output complete and in order from seq 1, seqs gap-free, the
right exit codes; the daemon's RSS after re-adopting them stays bounded, and
once they have ended nothing of them is left.

Not here: that a managed network still works after the restart
(tests/survival/test_survive_network.py) and big output to a client that does
not read (tests/survival/test_survive_big_output.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.reliability.scale import pick
from tests.support.attacks import ROOT_READ, entry, sandbox
from tests.support.netproxy import proxy_params
from tests.support.procinfo import rss_mb, wait_until
from tests.support.rpc import connect, unb64
from tests.support.sandbox import uri
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
# Lines before the crash, while no daemon runs, after the restart.
BEFORE, DOWN, AFTER = pick(20, 200), pick(30, 300), pick(20, 200)


@dataclass(frozen=True)
class Kind:
    name: str
    count: int
    tty: bool
    sandboxed: bool
    proxied: bool = False  # behind the daemon's managed-network proxy


KINDS = [
    Kind("pipes", 15, tty=False, sandboxed=False),
    Kind("pty", 10, tty=True, sandboxed=False),
    Kind("boxed", 12, tty=False, sandboxed=True),
    Kind("boxedpty", 5, tty=True, sandboxed=True),
    Kind("proxied", 4, tty=False, sandboxed=False, proxied=True),
    Kind("boxednet", 4, tty=False, sandboxed=True, proxied=True),
]


def _script(prefix: str, gates: Path, code: int) -> str:
    def lines(first: int, last: int) -> str:
        return f"for i in $(seq {first} {last}); do echo {prefix}-$i; done"

    return (
        f"{lines(1, BEFORE)}; "
        f"while [ ! -e {gates}/down ]; do sleep 0.02; done; "
        f"{lines(BEFORE + 1, BEFORE + DOWN)}; touch {prefix}.down; "
        f"while [ ! -e {gates}/restarted ]; do sleep 0.02; done; "
        f"{lines(BEFORE + DOWN + 1, BEFORE + DOWN + AFTER)}; exit {code}"
    )


async def test_fifty_processes_of_every_kind_survive_a_sigkill_and_restart_whole(
    state_dir: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    gates = tmp_path / "gates"
    gates.mkdir()
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    expected: dict[str, tuple[Kind, int]] = {}
    port = free_port()
    async with state_daemon(state_dir, port, ttl=TTL) as first:
        async with connect(first.url) as peer:
            session_id = peer.session_id
            n = 0
            for kind in KINDS:
                for i in range(kind.count):
                    process_id = f"{kind.name}-{i}"
                    extra: dict[str, Any] = {"tty": kind.tty, "cwd": uri(ws)}
                    if kind.sandboxed:
                        extra["sandbox"] = context
                    if kind.proxied:
                        # Its proxy's listeners go to its keeper too (that they
                        # still serve: tests/survival/test_survive_network.py).
                        extra["networkProxy"] = proxy_params()
                        extra["enforceManagedNetwork"] = kind.sandboxed
                    code = n % 50
                    argv = ["sh", "-c", _script(process_id, gates, code)]
                    await peer.start(process_id, argv, env=ENV, **extra)
                    expected[process_id] = (kind, code)
                    n += 1
            last = f"-{BEFORE}"
            for process_id in expected:
                await peer.wait_output(process_id, f"{process_id}{last}".encode(), timeout=60)
        held = keepers(state_dir)
        assert len(held) == len(expected) == 50
        trees = [p for k in held for p in tree_of(k)]
        await kill9(first)
    (gates / "down").touch()
    # Everything runs on without a daemon, and prints its second phase meanwhile (each
    # says so in the workspace, its cwd, writable sandboxed too).
    assert len(living(held)) == 50
    assert await wait_until(lambda: len(list(ws.glob("*.down"))) == 50, 60)
    async with (
        state_daemon(state_dir, port, ttl=TTL) as second,
        connect(second.url, resume=session_id) as peer,
    ):
        rss_after_readopt = rss_mb(second.process.pid)
        (gates / "restarted").touch()
        results = await asyncio.gather(*(read_until_closed(peer, pid) for pid in expected))
        rss_at_end = rss_mb(second.process.pid)
    for (process_id, (kind, code)), (chunks, exit_code) in zip(
        expected.items(), results, strict=True
    ):
        sep = "\r\n" if kind.tty else "\n"
        total = BEFORE + DOWN + AFTER
        text = b"".join(unb64(c["chunk"]) for c in chunks).decode()
        assert text == "".join(f"{process_id}-{i}{sep}" for i in range(1, total + 1)), (
            process_id,
            text[-200:],
        )
        seqs = [c["seq"] for c in chunks]
        assert seqs[0] == 1 and seqs == sorted(set(seqs)), (process_id, seqs[:10])
        holes = set(range(1, seqs[-1] + 1)) - set(seqs)
        assert not holes, (process_id, sorted(holes)[:10])
        assert exit_code == code, (process_id, exit_code)
    # Re-adopting fifty processes and serving all of their output costs little.
    assert rss_at_end - rss_after_readopt < 64, (rss_after_readopt, rss_at_end)
    # They have all ended; what they were is gone once their keepers are.
    await end_keepers(state_dir)
    assert await wait_until(lambda: not living(trees), 30)
