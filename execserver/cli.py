"""Command line: ``execserver serve | run | shell``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from execserver import __version__
from execserver.config import DEFAULT_LISTEN, DEFAULT_SESSION_TTL_S, ServerConfig
from execserver.server.listen import ListenError, parse_listen


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..")
    return value


def add_serve_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="run the exec-server daemon")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help="ws://IP:PORT (port 0 picks a free port), stdio or stdio:// (default %(default)s)",
    )
    p.add_argument(
        "--concurrent-requests",
        type=_positive_int,
        default=1,
        metavar="COUNT",
        help="requests of one connection processed at the same time (default %(default)s)",
    )
    p.add_argument(
        "--exit-on-stdin-close",
        action="store_true",
        default=os.environ.get("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", "") not in ("", "0"),
        help="exit when the parent-owned stdin pipe closes",
    )
    p.add_argument(
        "--session-ttl",
        type=float,
        default=DEFAULT_SESSION_TTL_S,
        metavar="SECONDS",
        help="how long a detached session can be resumed (default %(default)s)",
    )
    p.add_argument("--log-level", default=os.environ.get("EXECSERVER_LOG", "INFO"))
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        parse_listen(args.listen)
    except ListenError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    config = ServerConfig(
        listen=args.listen,
        concurrent_requests=args.concurrent_requests,
        exit_on_stdin_close=args.exit_on_stdin_close,
        session_ttl_s=args.session_ttl,
    )
    return run_server(config)


def run_server(config: ServerConfig) -> int:
    from execserver.server.runner import Server

    async def main() -> int:
        return await Server(config).run()

    return _run_async(main)


def _run_async(main: object) -> int:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(main())  # type: ignore[operator]
    return int(result)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="execserver", description=__doc__)
    parser.add_argument("--version", action="version", version=f"execserver {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(subparsers)
    from execserver.client.cli_tools import register as register_client_tools

    register_client_tools(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))
