"""SIGTERM with ``--drain-timeout`` and ``--state-dir``: the drain waits only for
what ends with the daemon. A kept process outlives it anyway, so the daemon
does not wait for it; a process whose proxy masks credentials (secrets only
this daemon's memory holds) ends with the daemon, so the drain waits for that
one (up to the timeout), then the daemon exits 0 and the kept process runs on
in its keeper."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.support.netproxy import proxy_params
from tests.support.rpc import connect
from tests.support.state_dir import alive, keepers, living, state_daemon, tree_of

ENV = {"PATH": "/usr/bin:/bin"}


# A proxy with masked credentials: nothing later daemons could serve.
MASKED = proxy_params(
    credentialMasking=True,
    credentialProviders={"api": {"env": ["API_TOKEN"], "url_prefixes": ["http://localhost:1/"]}},
)


async def test_a_drain_waits_for_the_mortal_process_and_not_for_the_kept_one(
    state_dir: Path,
) -> None:
    extra = ["--drain-timeout", "120"]
    async with state_daemon(state_dir, ttl=60, extra=extra) as daemon:
        async with connect(daemon.url) as peer:
            await peer.start("kept", ["sleep", "300"], env=ENV)
            await peer.start("proxied", ["sleep", "300"], env=ENV, networkProxy=proxy_params())
            env = {**ENV, "API_TOKEN": "secret"}
            await peer.start("masked", ["sleep", "300"], env=env, networkProxy=MASKED)
            daemon.process.send_signal(signal.SIGTERM)
            # Draining: it still serves this session and waits for the masked one.
            await asyncio.sleep(1.0)
            assert daemon.process.returncode is None
            await peer.ok("process/terminate", {"processId": "masked"})
            await peer.wait_closed("masked")
            # Nothing left that ends with the daemon: it stops, though two run on.
            assert await asyncio.wait_for(daemon.process.wait(), 30) == 0
        held = keepers(state_dir)
        assert len(held) == 2 and all(alive(k) for k in held)
        for keeper in held:
            assert len(living(tree_of(keeper))) == 2  # the keeper and its sleep


async def test_a_drain_with_only_kept_processes_ends_at_once(state_dir: Path) -> None:
    async with state_daemon(state_dir, ttl=60, extra=["--drain-timeout", "120"]) as daemon:
        async with connect(daemon.url) as peer:
            await peer.start("kept", ["sleep", "300"], env=ENV)
            daemon.process.send_signal(signal.SIGTERM)
            # Well inside the 120 s drain: nothing it runs ends with it.
            assert await asyncio.wait_for(daemon.process.wait(), 30) == 0
    assert living(keepers(state_dir))
