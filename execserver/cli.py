"""Command line: ``execserver serve | doctor | run | shell | patch``."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from execserver import __version__

__all__ = [
    "CGROUP_ROOT_ENV",
    "build_parser",
    "cgroup_root_from",
    "config_from_args",
    "main",
    "run_server",
    "sandbox_config_from",
    "serve",
]

# What `execserver --help` says above the subcommands (the docstring is for readers
# of the code, in reST).
_DESCRIPTION = (
    "The exec-server daemon (serve, or supervise serve: started again when it dies), "
    "what this host's sandbox can do (doctor), and clients for a running exec-server "
    "(run, shell, patch)."
)

# The daemon's configuration (execserver.config) is imported by the functions that
# build it: the client subcommands never need it.
if TYPE_CHECKING:
    from execserver.config import SandboxConfig, ServerConfig

    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
EXIT_USAGE = 2


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, which argparse asks for each time it
    makes a help formatter (``add_argument`` makes one), without importing shutil:
    shutil brings bz2, lzma and zlib, ~3 ms of every command's start."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    if stdout is None:
        return 80
    try:
        return os.get_terminal_size(stdout.fileno()).columns or 80
    except (ValueError, OSError):
        return 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own, with the default width found by ``_terminal_columns``."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2  # as argparse's own default
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (with where to look), exit code 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Subcommand parsers are made with only the keywords add_parser is given.
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; use one of {', '.join(LOG_LEVELS)}"
        )
    return level


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):  # NaN neither
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not in 0..")
    return value


def _size(text: str) -> int:
    from execserver.containment import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cores(text: str) -> float:
    value = float(text)
    if not value >= 0.01:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a CPU count >= 0.01")
    return value


# Where the cgroup file systems are looked for; tests point it at an empty directory
# to play a host that delegates nothing.
CGROUP_ROOT_ENV = "EXECSERVER_CGROUP_ROOT"
_FALSE_WORDS = ("0", "false", "no")
_TRUE_WORDS = ("1", "true", "yes")


def cgroup_root_from(environ: Mapping[str, str]) -> str:
    from execserver.config import DEFAULT_CGROUP_ROOT

    return environ.get(CGROUP_ROOT_ENV) or DEFAULT_CGROUP_ROOT


def sandbox_config_from(environ: Mapping[str, str]) -> SandboxConfig:
    """The sandbox settings from the ``EXECSERVER_*`` variables (config.ENVIRONMENT_SETTINGS):
    the only place they are read, for ``serve`` and ``doctor`` alike."""
    from execserver.config import SandboxConfig

    defaults = SandboxConfig()
    try:
        glob_limit = max(
            1, int(environ.get("EXECSERVER_SANDBOX_GLOB_SCAN_LIMIT", defaults.glob_scan_limit))
        )
    except ValueError:
        glob_limit = defaults.glob_scan_limit
    helpers_max: int | None = None  # as the memory allows
    try:
        helpers_max = max(1, int(environ["EXECSERVER_FS_HELPERS_MAX"]))
    except (KeyError, ValueError):
        pass
    fs_concurrency: int | None = None  # sixteen per CPU
    try:
        fs_concurrency = max(1, int(environ["EXECSERVER_FS_CONCURRENCY"]))
    except (KeyError, ValueError):
        pass
    return SandboxConfig(
        bwrap=environ.get("EXECSERVER_BWRAP") or None,
        landlock=environ.get("EXECSERVER_SANDBOX_NO_LANDLOCK", "") not in _TRUE_WORDS,
        glob_scan_limit=glob_limit,
        persistent_fs_helper=environ.get("EXECSERVER_FS_HELPER", "persistent") != "oneshot",
        fs_helpers_max=helpers_max,
        fs_concurrency=fs_concurrency,
    )


def _add_process_limit_flags(p: argparse.ArgumentParser) -> None:
    """Per-process-tree resource limits, enforced with cgroups (server-side policy)."""
    p.add_argument(
        "--process-memory-max",
        type=_size,
        metavar="SIZE",
        help="memory limit of each started process tree, e.g. 2G (OOM kill: exit 137)",
    )
    p.add_argument(
        "--process-pids-max",
        type=_positive_int,
        metavar="N",
        help="process/thread limit of each started process tree, e.g. 512",
    )
    p.add_argument(
        "--process-cpu-max",
        type=_cores,
        metavar="CORES",
        help="CPU limit of each started process tree in cores, e.g. 1.5",
    )


def _add_auth_flags(p: argparse.ArgumentParser) -> None:
    """The reference's websocket auth flags."""
    from execserver.server.auth import AUTH_MODES

    p.add_argument("--ws-auth", choices=AUTH_MODES, metavar="MODE", help="websocket auth mode")
    p.add_argument("--ws-token-file", metavar="PATH", help="capability token file")
    p.add_argument("--ws-token-sha256", metavar="HEX", help="SHA-256 of the capability token")
    p.add_argument("--ws-shared-secret-file", metavar="PATH", help="HS256 secret (>= 32 bytes)")
    p.add_argument("--ws-issuer", metavar="ISSUER", help="required JWT iss")
    p.add_argument("--ws-audience", metavar="AUDIENCE", help="required JWT aud")
    p.add_argument(
        "--ws-max-clock-skew-seconds",
        type=_non_negative_int,
        metavar="SECONDS",
        help="JWT exp/nbf leeway (default 30)",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a non-loopback address without --ws-auth (anyone who connects runs commands)",
    )


def _add_ops_flags(p: argparse.ArgumentParser) -> None:
    """Limits (0 = unlimited), audit log, log format, metrics, children's priority."""
    from execserver.config import DEFAULT_CHILD_NICE, LimitsConfig
    from execserver.kernel.limits import LIMIT_FLAGS

    defaults = LimitsConfig()

    for name, flag in LIMIT_FLAGS.items():
        default = getattr(defaults, name)
        p.add_argument(
            flag,
            dest=name,
            type=_non_negative_int,
            default=0 if default is None else default,
            metavar="N",
            help="0 = unlimited (default %(default)s)",
        )
    p.add_argument("--audit-log", metavar="PATH", help="append JSON-lines audit records here")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--metrics", action="store_true", help="serve Prometheus metrics on /metrics")
    p.add_argument(
        "--metrics-token-file",
        metavar="PATH",
        help="with --tenants (required with --metrics there): the bearer token /metrics "
        "accepts, the operator's; tenants' tokens get 403",
    )
    p.add_argument(
        "--tenants",
        metavar="PATH",
        help="tenants file (TOML): each tenant's credential, Unix account and ceilings; "
        "reloaded on SIGHUP (implies token authentication)",
    )
    p.add_argument(
        "--state-dir",
        metavar="PATH",
        help="keep sessions and process output here so that processes outlive the daemon "
        "(a restarted daemon re-adopts them)",
    )
    p.add_argument(
        "--take-over",
        action="store_true",
        help="with --state-dir: take the listening socket, the sessions and their processes "
        "over from the daemon serving that state directory, which then exits (an upgrade "
        "without downtime); with none running there, start as usual",
    )
    p.add_argument(
        "--child-nice",
        type=_child_nice,
        default=DEFAULT_CHILD_NICE,
        metavar="STEPS",
        help=(
            "run the commands and helpers the daemon starts STEPS nice steps below it, "
            f"so that its event loop answers first when they keep the CPUs busy (0-19, "
            f"default {DEFAULT_CHILD_NICE}; 0: at the daemon's priority, as the reference)"
        ),
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=(
            "on SIGTERM, first drain: refuse new sessions (resumes still work, /readyz "
            "answers 503) and wait up to SECONDS for running processes to exit "
            "(default 0: stop at once)"
        ),
    )


def _child_nice(text: str) -> int:
    from execserver.priority import MAX_NICE

    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if not 0 <= steps <= MAX_NICE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of nice steps from 0 to {MAX_NICE}"
        )
    return steps


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ServerConfig:
    """``serve``'s flags + the environment variables it honours -> the one config."""
    from execserver.config import LimitsConfig, ProcessLimitsConfig, ServerConfig, WsAuthConfig
    from execserver.kernel.limits import LIMIT_FLAGS

    env = os.environ if environ is None else environ
    limits = {name: getattr(args, name) or None for name in LIMIT_FLAGS}
    return ServerConfig(
        listen=args.listen,
        concurrent_requests=args.concurrent_requests,
        exit_on_stdin_close=args.exit_on_stdin_close,
        session_ttl_s=args.session_ttl,
        exited_process_retention_s=args.exited_process_retention,
        ping_interval_s=args.ping_interval,
        http_head_timeout_s=args.http_head_timeout,
        ws_auth=WsAuthConfig(
            mode=args.ws_auth,
            token_file=args.ws_token_file,
            token_sha256=args.ws_token_sha256,
            shared_secret_file=args.ws_shared_secret_file,
            issuer=args.ws_issuer,
            audience=args.ws_audience,
            max_clock_skew_s=args.ws_max_clock_skew_seconds,
        ),
        allow_unauthenticated=args.allow_unauthenticated,
        limits=LimitsConfig(**limits),
        audit_log=args.audit_log,
        log_format=args.log_format,
        metrics=args.metrics,
        metrics_token_file=args.metrics_token_file,
        process_limits=ProcessLimitsConfig(
            memory_max_bytes=args.process_memory_max,
            pids_max=args.process_pids_max,
            cpu_max_cores=args.process_cpu_max,
            cgroup_root=cgroup_root_from(env),
        ),
        sandbox=sandbox_config_from(env),
        drain_timeout_s=max(0.0, args.drain_timeout),
        child_nice=args.child_nice,
        tenants_file=args.tenants,
        state_dir=args.state_dir,
        take_over=args.take_over,
        # The start-up sandbox report spawns a few sandboxes right after listening;
        # harnesses that count the daemon's fds or children switch it off.
        startup_probe=env.get("EXECSERVER_STARTUP_PROBE", "1") not in _FALSE_WORDS,
    )


def add_serve_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from execserver.config import (
        DEFAULT_EXITED_RETENTION_S,
        DEFAULT_HTTP_HEAD_TIMEOUT_S,
        DEFAULT_LISTEN,
        DEFAULT_SESSION_TTL_S,
        PING_INTERVAL_S,
    )

    p = subparsers.add_parser("serve", help="run the exec-server daemon")
    p.add_argument(
        "--listen",
        # From the environment too: the container image sets it once, for the daemon
        # and its HEALTHCHECK alike.
        default=os.environ.get("EXECSERVER_LISTEN") or DEFAULT_LISTEN,
        help=(
            "ws://IP:PORT (port 0 picks a free port), stdio or stdio:// "
            "(default $EXECSERVER_LISTEN, else %(default)s)"
        ),
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
    p.add_argument(
        "--ping-interval",
        type=float,
        default=PING_INTERVAL_S,
        metavar="SECONDS",
        help="websocket ping interval, as the reference's 30 s (default %(default)s)",
    )
    p.add_argument(
        "--http-head-timeout",
        type=_positive_float,
        default=DEFAULT_HTTP_HEAD_TIMEOUT_S,
        metavar="SECONDS",
        help=(
            "close a connection whose HTTP request head is not complete within SECONDS: "
            "the first from the connection's start, each later one from the previous "
            "answer (default %(default)s)"
        ),
    )
    p.add_argument(
        "--exited-process-retention",
        type=float,
        default=DEFAULT_EXITED_RETENTION_S,
        metavar="SECONDS",
        help="how long an exited process stays readable and its id reserved (default %(default)s)",
    )
    p.add_argument(
        "--log-level",
        type=_log_level,
        default=os.environ.get("EXECSERVER_LOG", "INFO"),
        help=f"{', '.join(LOG_LEVELS)} (default $EXECSERVER_LOG or %(default)s)",
    )
    _add_auth_flags(p)
    _add_ops_flags(p)
    _add_process_limit_flags(p)
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    return serve(args, config_from_args(args))


def serve(args: argparse.Namespace, config: ServerConfig) -> int:
    """Run ``serve`` with ``config`` (from ``config_from_args``, possibly adjusted
    by code that embeds the daemon, e.g. a test hook): one line per error."""
    from execserver.containment import ContainmentError
    from execserver.server.audit import AuditLogError
    from execserver.server.auth import startup_checks
    from execserver.server.handover import HandoverError
    from execserver.server.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    try:
        # Listen URL and auth flags, in the reference's order and with its texts.
        startup_checks(config)
    except ValueError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    from execserver.sandbox.backend import probing_ahead
    from execserver.sandbox.hidden import NotPrivateError

    try:
        # The sandbox probe (bwrap and launcher runs) goes on while the daemon's
        # modules are imported, instead of after: start-up is that much shorter.
        with probing_ahead(bwrap=config.sandbox.bwrap, allow_landlock=config.sandbox.landlock):
            return run_server(config)
    except (AuditLogError, ContainmentError, HandoverError, NotPrivateError) as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        sys.stderr.write(
            f"execserver serve: cannot listen on {config.listen}: address already in use "
            "(another server running?); stop it or pick another port, e.g. "
            "--listen ws://127.0.0.1:0 for a free one\n"
        )
        return EXIT_USAGE


def run_server(config: ServerConfig) -> int:
    from execserver.server.runner import Server

    async def main() -> int:
        return await Server(config).run()

    return _run_async(main)


def _run_async(main: object) -> int:
    import asyncio

    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(main())  # type: ignore[operator]
    return int(result)


def _register_doctor(subparsers: _Subparsers) -> None:
    from execserver.doctor import add_doctor_parser

    doctor = add_doctor_parser(subparsers)
    # The settings `serve` would use, so the doctor probes what the daemon would.
    doctor.set_defaults(
        sandbox=sandbox_config_from(os.environ), cgroup_root=cgroup_root_from(os.environ)
    )


def _register_client_tools(subparsers: _Subparsers) -> None:
    from execserver.client.cli_tools import register

    register(subparsers)


def _register_supervise(subparsers: _Subparsers) -> None:
    from execserver.supervise import add_supervise_parser

    add_supervise_parser(subparsers)


def _register_patch(subparsers: _Subparsers) -> None:
    from execserver.core.apply_patch.cli import register

    register(subparsers)


# Subcommand -> what registers it. A command line names one subcommand, and only
# its module is imported: `execserver patch` is a short-lived client whose start
# is most of its wall time, so it must not load the daemon (aiohttp.web, jwt,
# prometheus_client) or the other tools (measured: docs/performance.md).
_SUBCOMMANDS: dict[str, Callable[[_Subparsers], None]] = {
    "serve": add_serve_parser,
    "doctor": _register_doctor,
    "run": _register_client_tools,
    "shell": _register_client_tools,
    "patch": _register_patch,
    "supervise": _register_supervise,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``command`` alone (the others are then
    unknown to it: call it with the subcommand the command line names)."""
    # Typed as the base class: the subcommand parsers (of class _Parser at run
    # time) are registered by functions that take plain ArgumentParsers.
    parser: argparse.ArgumentParser = _Parser(prog="execserver", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"execserver {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    registrars = [_SUBCOMMANDS[command]] if command in _SUBCOMMANDS else _SUBCOMMANDS.values()
    for register in dict.fromkeys(registrars):  # run and shell share one
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # The subcommand is the first word (the top-level parser has no option that takes
    # a value); anything else (--help, a typo) gets the parser of every subcommand.
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    return int(args.func(args))
