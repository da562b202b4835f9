"""``Server.run`` hands the signals back as it found them (as uvicorn's
``capture_signals`` does): a host program that runs the daemon on its own loop
(``serve_local``, an embedding) keeps its own SIGTERM and SIGINT handlers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a child interpreter: Server.run changes process-wide state (the session
# keyring, malloc tuning) that the test runner must not inherit.
_HOST = textwrap.dedent(
    """
    import asyncio, signal, sys
    from execserver.config import ServerConfig
    from execserver.server.runner import Server

    def host_handler(signum, frame):
        pass

    signal.signal(signal.SIGTERM, host_handler)
    signal.signal(signal.SIGINT, host_handler)

    async def main():
        server = Server(ServerConfig(listen="ws://127.0.0.1:0", startup_probe=False))
        running = asyncio.get_running_loop().create_task(server.run())
        while server.url is None:
            await asyncio.sleep(0.01)
        during = signal.getsignal(signal.SIGTERM) is host_handler
        server.stop()
        status = await running
        return during, status

    during, status = asyncio.run(main())
    after = [signal.getsignal(s) is host_handler for s in (signal.SIGTERM, signal.SIGINT)]
    print("RESULT", during, status, *after, file=sys.stderr)
    """
)


def test_run_restores_the_signal_handlers_it_replaced() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HOST], capture_output=True, text=True, timeout=60, check=False
    )
    result = [line for line in done.stderr.splitlines() if line.startswith("RESULT")]
    assert result, done.stderr
    # While serving the daemon's handlers run; afterwards the host's are back.
    assert result[0].split()[1:] == ["False", "0", "True", "True"]
