"""``python -m tests.support.loop_watch_serve SECONDS [serve flags]``: ``execserver serve``
on an event loop in debug mode whose ``slow_callback_duration`` is SECONDS.

Every callback or task step that holds the loop longer is logged by asyncio
("Executing <...> took 0.123 seconds") on the daemon's stderr: a real
measurement of the running server's loop, for tests that must show a request
never stalls it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import uvloop

from execserver.cli import build_parser, config_from_args
from execserver.server.auth import startup_checks
from execserver.server.logs import configure_logging
from execserver.server.runner import Server

SLOW_CALLBACK_MARK = "Executing"


def command(slow_callback_s: float) -> list[str]:
    """The ``serve`` argv for tests.support.servers.start_server."""
    return [sys.executable, "-m", "tests.support.loop_watch_serve", str(slow_callback_s)]


def main(argv: Sequence[str]) -> int:
    threshold, flags = float(argv[0]), argv[1:]
    args = build_parser().parse_args(["serve", *flags])
    configure_logging(args.log_level, args.log_format)
    config = config_from_args(args)
    startup_checks(config)

    async def serve() -> int:
        asyncio.get_running_loop().slow_callback_duration = threshold
        return await Server(config).run()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop, debug=True) as runner:
        return runner.run(serve())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
