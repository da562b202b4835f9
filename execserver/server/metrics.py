"""Prometheus metrics of one daemon (served on ``GET /metrics`` with ``--metrics``).

Each runtime has its own registry rather than prometheus-client's global one,
so several servers in one process (tests) never share counters. Services
never touch these objects: they report events to ``ctx.server.telemetry``
(execserver.server.telemetry), which counts them here.
"""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from execserver import REFERENCE_VERSION, __version__
from execserver.server.request_meter import RequestMeter

__all__ = ["CONTENT_TYPE", "UNKNOWN_METHOD", "Metrics"]

# Requests range from sub-millisecond fs calls to long-poll reads of many seconds.
_REQUEST_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
_PROCESS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_CPU_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60, 300, 3600)
_MEMORY_BUCKETS = tuple(float(1 << n) for n in range(20, 36, 2))  # 1 MiB .. 16 GiB

# Method label for names that are not in the method table: clients must not be
# able to create unbounded label values.
UNKNOWN_METHOD = "unknown"

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        # The same count as execserver_processes_live, readable without the registry
        # (a drain waits for it to reach 0).
        self.live_processes = 0
        self.no_live_processes = asyncio.Event()
        self.no_live_processes.set()
        # execserver_build_info{version,protocol,python} 1: which build answers here.
        self.build = Info("execserver_build", "The running execserver build.", registry=r)
        self.build.info(
            {
                "version": __version__,
                "protocol": REFERENCE_VERSION,
                "python": platform.python_version(),
            }
        )
        self.connections = Gauge("execserver_connections", "Open client connections.", registry=r)
        self.connections_opened = Counter(
            "execserver_connections_opened", "Client connections accepted.", registry=r
        )
        self.connections_rejected = Counter(
            "execserver_connections_rejected",
            "WebSocket upgrades refused, by reason (auth, limit).",
            ["reason"],
            registry=r,
        )
        self.auth_failures = Counter(
            "execserver_auth_failures",
            "Rejected websocket credentials, by 401 body.",
            ["reason"],
            registry=r,
        )
        # Requests answered (count and duration) and frame bytes: updated on every
        # request, so counted in plain numbers and exported on scrape (request_meter.py).
        self.requests = RequestMeter(_REQUEST_BUCKETS)
        r.register(self.requests)
        self.limit_rejections = Counter(
            "execserver_limit_rejections",
            "Requests or connections refused by a configured limit.",
            ["limit"],
            registry=r,
        )
        self.sessions = Gauge("execserver_sessions", "Sessions (attached or detached).", registry=r)
        # A gauge read from the audit log's own count (it only grows): records dropped
        # because its writer fell QUEUE_RECORDS behind (server/audit.py).
        self.audit_records_dropped = Gauge(
            "execserver_audit_records_dropped",
            "Audit records dropped since start because the audit log's writer was too far behind.",
            registry=r,
        )
        self.sessions_opened = Counter(
            "execserver_sessions_opened", "Sessions created by initialize.", registry=r
        )
        self.sessions_resumed = Counter(
            "execserver_sessions_resumed", "Sessions re-attached with resumeSessionId.", registry=r
        )
        self.sessions_expired = Counter(
            "execserver_sessions_expired", "Detached sessions closed after their TTL.", registry=r
        )
        self.processes_live = Gauge(
            "execserver_processes_live", "Child processes currently running.", registry=r
        )
        self.processes_started = Counter(
            "execserver_processes_started", "Child processes started.", registry=r
        )
        self.process_seconds = Histogram(
            "execserver_process_duration_seconds",
            "Wall-clock lifetime of child processes.",
            buckets=_PROCESS_BUCKETS,
            registry=r,
        )
        self.sandbox_denials = Counter(
            "execserver_sandbox_denials",
            "Process exits classified as sandbox denials (sandboxDenied).",
            registry=r,
        )
        self.bytes_streamed = Counter(
            "execserver_bytes_streamed",
            "Bytes produced for clients, by stream (stdout, stderr, pty, http).",
            ["stream"],
            registry=r,
        )

        self.process_cpu_seconds = Histogram(
            "execserver_process_cpu_seconds",
            "CPU time of each exited process tree (its cgroup with per-process limits, "
            "else the direct child).",
            buckets=_CPU_BUCKETS,
            registry=r,
        )
        self.process_peak_memory = Histogram(
            "execserver_process_peak_memory_bytes",
            "Peak memory of each exited process tree (from its cgroup; only with "
            "per-process limits).",
            buckets=_MEMORY_BUCKETS,
            registry=r,
        )
        self.process_limit_events = Counter(
            "execserver_process_limit_events",
            "Per-process limit enforcement, by limit: memory = processes killed by "
            "--process-memory-max, pids = forks refused by --process-pids-max.",
            ["limit"],
            registry=r,
        )

    def track_sessions(self, count: Callable[[], int]) -> None:
        self.sessions.set_function(lambda: float(count()))

    def track_audit_drops(self, count: Callable[[], int]) -> None:
        self.audit_records_dropped.set_function(lambda: float(count()))

    def observe_request(self, method: str, result: str, seconds: float) -> None:
        self.requests.observe(method, result, seconds)

    def process_started(self) -> None:
        self.processes_started.inc()
        self.processes_live.inc()
        self.live_processes += 1
        self.no_live_processes.clear()

    def process_exited(self, wall_s: float, sandbox_denied: bool) -> None:
        self.processes_live.dec()
        self.live_processes -= 1
        if self.live_processes <= 0:
            self.no_live_processes.set()
        self.process_seconds.observe(wall_s)
        if sandbox_denied:
            self.sandbox_denials.inc()

    def process_usage(
        self, cpu_s: float, peak_memory_bytes: int | None, oom_kills: int, pids_refused: int
    ) -> None:
        self.process_cpu_seconds.observe(cpu_s)
        if peak_memory_bytes is not None:
            self.process_peak_memory.observe(peak_memory_bytes)
        if oom_kills:
            self.process_limit_events.labels("memory").inc(oom_kills)
        if pids_refused:
            self.process_limit_events.labels("pids").inc(pids_refused)

    def render(self) -> bytes:
        return generate_latest(self.registry)
