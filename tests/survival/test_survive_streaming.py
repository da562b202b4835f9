"""A daemon killed while its processes stream output: every keeper lives on.

When the daemon dies, a keeper learns it twice at once: its forwarding of new
output to the daemon fails, and its link reports the hang-up. Both can arrive
in one wake-up; a keeper that acted on the second after the first had already
dropped the link crashed, and its crash path killed the very process it keeps
(the resumed session then found ``unknown process id``). Ten processes printing
a numbered line every few milliseconds, five daemon kills: no keeper and no
process may be lost, and each process's output, read back from the start after
the restarts, is every number in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.rpc import connect, unb64
from tests.support.state_dir import (
    free_port,
    keepers,
    kill9,
    living,
    read_until_closed,
    state_daemon,
    tree_of,
)

ENV = {"PATH": "/usr/bin:/bin"}
PROCESSES = 10
KILLS = 5


async def test_keepers_outlive_a_daemon_killed_while_output_streams(
    state_dir: Path, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    # Numbered lines, ten every 30 ms (a line every few milliseconds), until told to
    # stop. One `sleep` per ten lines: one per line, ten processes forked ~3,000 of
    # them a second, which took the machine's cores from the rest of the suite.
    script = (
        f"i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo $i; "
        f"[ $((i % 10)) -ne 0 ] || sleep 0.03; done; exit 7"
    )
    port = free_port()
    session_id: str | None = None
    for round_ in range(KILLS):
        async with state_daemon(state_dir, port, ttl=60) as daemon:
            async with connect(daemon.url, resume=session_id) as peer:
                if session_id is None:
                    session_id = peer.session_id
                    for n in range(PROCESSES):
                        await peer.start(f"flood-{n}", ["sh", "-c", script], env=ENV)
                # Output is flowing to this daemon (the keepers forward it now).
                for n in range(PROCESSES):
                    read = await peer.read(f"flood-{n}", afterSeq=0, waitMs=5000)
                    assert read["chunks"], f"round {round_}: flood-{n} printed nothing"
                held = keepers(state_dir)
                trees = [tree_of(k) for k in held]
                await kill9(daemon)
        assert len(held) == PROCESSES
        # Every keeper survived the daemon, and so did what it keeps.
        await asyncio.sleep(0.5)  # a keeper that crashed has died by now
        assert len(living(held)) == PROCESSES, f"round {round_}: a keeper died with the daemon"
        assert all(len(living(tree)) >= 2 for tree in trees), f"round {round_}: a child died"
    stop.touch()
    async with (
        state_daemon(state_dir, port, ttl=60) as daemon,
        connect(daemon.url, resume=session_id) as peer,
    ):
        for n in range(PROCESSES):
            chunks, code = await read_until_closed(peer, f"flood-{n}")
            assert code == 7
            seqs = [c["seq"] for c in chunks]
            assert seqs == sorted(set(seqs))
            lines = b"".join(unb64(c["chunk"]) for c in chunks).split()
            assert seqs[0] == 1, seqs[:3]  # all of it is still retained
            numbers = [int(x) for x in lines]
            assert numbers == list(range(1, len(numbers) + 1))
