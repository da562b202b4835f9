"""``execserver run`` and ``execserver shell``: a person's way to drive an exec-server.

This module only declares their arguments and turns errors into one line; what
they do once connected is :mod:`execserver.client.cli_remote`, imported when a
command actually runs, so that ``--help`` and usage errors never load the
network stack (measured: README, Performance).

Exit codes: see :mod:`execserver.client.cli_errors`.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Awaitable, Callable, Sequence

from execserver.client.cli_errors import EXIT_TIMEOUT, UsageError, explain, report
from execserver.client.cli_options import add_token_option, add_verbose_option
from execserver.client.errors import ExecServerError
from execserver.client.limits import STDIN_STAGING_LIMIT
from execserver.client.url import check_url


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` and ``shell`` to the ``execserver`` command line."""
    run = subparsers.add_parser(
        "run",
        help="run a command on an exec-server and stream its output",
        description="Run ARGV on the exec-server at URL; exits with the remote exit code "
        "(127 program not found, 126 not executable, 125 could not start, 255 connection "
        "or authentication failure, 2 usage error).",
    )
    common_options(run)
    run.add_argument("--tty", action="store_true", help="run under a remote pseudo-terminal")
    run.add_argument(
        "--stdin",
        action="store_true",
        help="give local stdin to the command: with --tty it is typed into the remote "
        "terminal, ending with ^D; without, it is read to its end first (at most "
        f"{STDIN_STAGING_LIMIT // (1024 * 1024)} MiB) and staged as a file on the executor",
    )
    run.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="terminate the remote command (its whole process tree) after SECONDS and "
        f"exit {EXIT_TIMEOUT}, as timeout(1) does",
    )
    run.add_argument("argv", nargs="+", help="the command, after --")
    run.set_defaults(func=_cmd_run)

    shell = subparsers.add_parser(
        "shell",
        help="open an interactive shell on an exec-server",
        description="Attach an interactive remote PTY running the server's shell (or ARGV).",
    )
    common_options(shell)
    shell.add_argument("argv", nargs="*", help="program to run instead of the login shell")
    shell.set_defaults(func=_cmd_shell)


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="ws://HOST:PORT of the exec-server")
    parser.add_argument("--cwd", help="remote working directory, absolute (default: the server's)")
    add_token_option(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in the remote environment (repeatable)",
    )
    add_verbose_option(parser)


def _cmd_run(args: argparse.Namespace) -> int:
    def start() -> Awaitable[int]:
        cwd, env = remote_cwd(args.cwd), parse_env(args.env)
        from execserver.client.cli_remote import run_command

        return run_command(
            args.url,
            args.argv,
            token=args.token,
            cwd=cwd,
            tty=args.tty,
            forward_stdin=args.stdin or args.tty,
            env=env,
            timeout=args.timeout,
        )

    return guarded("execserver run", args.url, args.verbose, start)


def _cmd_shell(args: argparse.Namespace) -> int:
    def start() -> Awaitable[int]:
        cwd, env = remote_cwd(args.cwd), parse_env(args.env)
        from execserver.client.cli_remote import run_shell

        return run_shell(args.url, args.argv, token=args.token, cwd=cwd, env=env)

    return guarded("execserver shell", args.url, args.verbose, start)


def guarded(prog: str, url: str, verbose: bool, start: Callable[[], Awaitable[int]]) -> int:
    """Check ``url``, call ``start`` (which checks the other arguments, then imports
    what connecting needs: a usage error never loads the network stack) and run
    the awaitable it returns; any error becomes one line and an exit code."""
    try:
        check_url(url)
        main = start()
        import asyncio

        async def run() -> int:
            return await main

        return asyncio.run(run())
    except KeyboardInterrupt:
        # ^C before the command started (while connecting): nothing to interrupt
        # remotely; exit as a shell does for SIGINT, without a traceback.
        return 128 + signal.SIGINT
    except (ExecServerError, OSError, UsageError, ValueError) as exc:
        code, message = explain(exc, url=url, verbose=verbose)
        report(prog, message)
        return code


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def remote_cwd(cwd: str | None) -> str | None:
    if cwd is not None and not cwd.startswith("/"):
        raise UsageError(
            f"--cwd must be an absolute path on the executor, got {cwd!r} "
            "(relative paths would be resolved against a directory you cannot see)"
        )
    return cwd


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


__all__ = [
    "add_token_option",
    "add_verbose_option",
    "common_options",
    "guarded",
    "parse_env",
    "register",
    "remote_cwd",
]
