"""One configuration object, built from the command line and passed down.

Every setting of the daemon is a typed field here, resolved once by ``cli.py``
(flags, and the ``EXECSERVER_*`` environment variables listed in
``ENVIRONMENT_SETTINGS``); nothing below the command line reads a setting from
the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "DEFAULT_CHILD_NICE",
    "DEFAULT_EXITED_RETENTION_S",
    "DEFAULT_GLOB_SCAN_LIMIT",
    "DEFAULT_HTTP_HEAD_TIMEOUT_S",
    "DEFAULT_LISTEN",
    "DEFAULT_PROCESS_DRAIN_TIMEOUT_S",
    "DEFAULT_RETAINED_BYTES",
    "DEFAULT_SESSION_TTL_S",
    "DEFAULT_WS_MAX_CLOCK_SKEW_S",
    "ENVIRONMENT_SETTINGS",
    "PING_INTERVAL_S",
    "LimitsConfig",
    "ProcessLimitsConfig",
    "SandboxConfig",
    "ServerConfig",
    "WsAuthConfig",
]

DEFAULT_LISTEN = "ws://127.0.0.1:0"

# The reference keeps detached sessions and exited processes for about 80 s.
DEFAULT_SESSION_TTL_S = 80.0
DEFAULT_EXITED_RETENTION_S = 80.0
# Output kept per process for process/read: the reference keeps roughly the last 1 MiB.
DEFAULT_RETAINED_BYTES = 1024 * 1024
# A daemonised grandchild holding the pipes must not delay process/closed forever.
DEFAULT_PROCESS_DRAIN_TIMEOUT_S = 5.0
# Directory entries one sandbox deny-glob may read while it is expanded.
DEFAULT_GLOB_SCAN_LIMIT = 200_000
# Inbound limits of the reference: < 16 MiB per frame, 64 MiB per reassembled message.
MAX_INBOUND_MESSAGE_BYTES = 64 * 1024 * 1024
PING_INTERVAL_S = 30.0
# How long a client has to send a complete HTTP request head: a connection's first
# (websocket upgrade or plain request) from its start, each later one on a kept-alive
# plain connection from the previous answer (server/http_plain_heads.py).
DEFAULT_HTTP_HEAD_TIMEOUT_S = 30.0


# What the daemon starts (commands, fs helpers, keepers) runs this many nice steps
# below its event loop (execserver/priority.py says why); 0 keeps them at
# the daemon's own, as the reference does. Five: a third of the loop's weight.
DEFAULT_CHILD_NICE = 5

# --ws-max-clock-skew-seconds default of the reference.
DEFAULT_WS_MAX_CLOCK_SKEW_S = 30


@dataclass(frozen=True)
class WsAuthConfig:
    """WebSocket authentication flags as given; validated and loaded by
    ``execserver.server.auth``. ``max_clock_skew_s`` is None when the flag was not given,
    because the reference rejects it (even at its default value) in capability-token mode."""

    mode: str | None = None  # "capability-token" | "signed-bearer-token"
    token_file: str | None = None
    token_sha256: str | None = None
    shared_secret_file: str | None = None
    issuer: str | None = None
    audience: str | None = None
    max_clock_skew_s: int | None = None


@dataclass(frozen=True)
class LimitsConfig:
    """Resource limits (None = unlimited). Refusals name the limit (execserver.kernel.limits).
    The defaults are far above what one agent uses, so they only stop runaways."""

    max_connections: int | None = 1024
    max_inflight_requests: int | None = 1024  # per connection
    max_frame_bytes: int | None = None  # below the transport's 64 MiB hard limit
    max_processes_per_session: int | None = 1024
    # fs/open handles per connection, below the protocol's own cap of 128.
    max_open_files: int | None = None
    max_concurrent_http_requests: int | None = 64  # server-wide http/request


# Where the cgroup file systems are mounted (pure v2 here, or v1 hierarchies plus
# ``unified`` on hybrid hosts).
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class ProcessLimitsConfig:
    """Limits applied to every started process tree (None = not limited), enforced with
    one cgroup per tree (execserver.containment). Any limit set makes the daemon refuse
    to start when the host does not delegate the needed cgroup controllers."""

    memory_max_bytes: int | None = None  # --process-memory-max
    pids_max: int | None = None  # --process-pids-max
    cpu_max_cores: float | None = None  # --process-cpu-max
    cgroup_root: str = DEFAULT_CGROUP_ROOT

    @property
    def requested(self) -> bool:
        return any(
            v is not None for v in (self.memory_max_bytes, self.pids_max, self.cpu_max_cores)
        )


@dataclass(frozen=True)
class SandboxConfig:
    """How sandboxes are made on this host (probed once at start-up with these)."""

    bwrap: str | None = None  # --bwrap / $EXECSERVER_BWRAP; None: bwrap on PATH, the wheel's
    landlock: bool = True  # --no-landlock / $EXECSERVER_SANDBOX_NO_LANDLOCK=1 turns it off
    glob_scan_limit: int = DEFAULT_GLOB_SCAN_LIMIT  # $EXECSERVER_SANDBOX_GLOB_SCAN_LIMIT
    # fs/* under a sandbox in a persistent helper per policy ($EXECSERVER_FS_HELPER=oneshot:
    # a fresh helper per call).
    persistent_fs_helper: bool = True
    # At most this many persistent helpers live ($EXECSERVER_FS_HELPERS_MAX): one per
    # policy in use, so about one per agent workspace; beyond it the least recently
    # used one is retired and the next call of its policy starts a new one (~85 ms).
    # None: as many as a quarter of the memory holds (fs/sandboxed/capacity.py).
    fs_helpers_max: int | None = None
    # At most this many sandboxed fs calls at once, daemon-wide ($EXECSERVER_FS_CONCURRENCY);
    # past it a call waits its session's turn (kernel/fair_gate.py). None: sixteen per CPU.
    fs_concurrency: int | None = None


@dataclass(frozen=True)
class ServerConfig:
    listen: str = DEFAULT_LISTEN
    concurrent_requests: int = 1
    exit_on_stdin_close: bool = False
    session_ttl_s: float = DEFAULT_SESSION_TTL_S
    exited_process_retention_s: float = DEFAULT_EXITED_RETENTION_S
    process_retained_bytes: int = DEFAULT_RETAINED_BYTES
    process_drain_timeout_s: float = DEFAULT_PROCESS_DRAIN_TIMEOUT_S
    max_message_bytes: int = MAX_INBOUND_MESSAGE_BYTES
    ping_interval_s: float = PING_INTERVAL_S
    http_head_timeout_s: float = DEFAULT_HTTP_HEAD_TIMEOUT_S
    outbound_queue_messages: int = 1024
    ws_auth: WsAuthConfig = field(default_factory=WsAuthConfig)
    # Listening on a non-loopback address without --ws-auth needs this explicit opt-in.
    allow_unauthenticated: bool = False
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    audit_log: str | None = None  # JSON-lines audit file (execserver.server.audit)
    log_format: str = "text"  # "text" | "json"
    metrics: bool = False  # serve Prometheus text on GET /metrics
    # --metrics-token-file: with --tenants, the one bearer token /metrics accepts (the
    # operator's scrape job); a tenant's credential gets 403 there.
    metrics_token_file: str | None = None
    process_limits: ProcessLimitsConfig = field(default_factory=ProcessLimitsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    # Run the doctor's policy-shape probe at start-up and log its table.
    startup_probe: bool = True
    # SIGTERM drains first (no new sessions; running processes get this long).
    drain_timeout_s: float = 0.0
    # --tenants: the tenants file (TOML; execserver.tenancy). None: one tenant, the
    # daemon's own uid, every token equal (the single-tenant behaviour).
    tenants_file: str | None = None
    # --child-nice: nice steps below the daemon for what it starts.
    child_nice: int = DEFAULT_CHILD_NICE
    # --state-dir: where sessions and process keepers' journals live so that
    # processes outlive the daemon (execserver.keeper). None: they die with it.
    state_dir: str | None = None
    # --take-over: with --state-dir, take the listening sockets and the keepers over
    # from the daemon serving that state directory (execserver.server.handover).
    take_over: bool = False
    # Test hook, settable only by code that constructs the config (no flag, no
    # environment variable): name -> address for the managed-network proxy's
    # resolver, exclusive (no DNS) and exempt from the local-address block.
    netproxy_host_overrides: Mapping[str, str] | None = None


# The environment variables ``cli.py`` maps onto settings (variable -> what it sets).
ENVIRONMENT_SETTINGS: Mapping[str, str] = {
    "EXECSERVER_LISTEN": "--listen default",
    "EXECSERVER_LOG": "--log-level default",
    "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE": "--exit-on-stdin-close default",
    "EXECSERVER_CGROUP_ROOT": "ProcessLimitsConfig.cgroup_root",
    "EXECSERVER_STARTUP_PROBE": "ServerConfig.startup_probe (0/false/no: off)",
    "EXECSERVER_BWRAP": "SandboxConfig.bwrap (--bwrap default)",
    "EXECSERVER_SANDBOX_NO_LANDLOCK": "SandboxConfig.landlock (1/true/yes: off)",
    "EXECSERVER_SANDBOX_GLOB_SCAN_LIMIT": "SandboxConfig.glob_scan_limit",
    "EXECSERVER_FS_HELPER": "SandboxConfig.persistent_fs_helper (oneshot: off)",
    "EXECSERVER_FS_HELPERS_MAX": "SandboxConfig.fs_helpers_max",
    "EXECSERVER_FS_CONCURRENCY": "SandboxConfig.fs_concurrency",
}
