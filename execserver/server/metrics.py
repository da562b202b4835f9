"""Prometheus metrics of one daemon (served on ``GET /metrics`` with ``--metrics``).

Each runtime has its own registry rather than prometheus-client's global one,
so several servers in one process (tests) never share counters. Services
never touch these objects: they report events to ``ctx.server.telemetry``
(execserver.server.telemetry), which counts them here.
"""

from __future__ import annotations

import asyncio
import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from execserver import REFERENCE_VERSION, __version__
from execserver.server.request_meter import RequestMeter

__all__ = ["CONTENT_TYPE", "UNKNOWN_METHOD", "Metrics", "PrincipalSeries"]

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

# A per-principal figure of a --tenants daemon, read when scraped: principal -> count.
Figures = Callable[[], Mapping[str, int]]


class _PrincipalCounts:
    __slots__ = ("created", "refused", "started")

    def __init__(self) -> None:
        self.created = time.time()
        self.started = 0
        self.refused = 0


# started, refused (counters); live processes, sessions (gauges)
_PrincipalFamilies = tuple[
    CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily, GaugeMetricFamily
]


class PrincipalSeries(Collector):
    """With --tenants, per principal: execserver_tenant_processes_started_total,
    execserver_tenant_refusals_total, execserver_tenant_processes_live and
    execserver_tenant_sessions, each labelled ``principal``.

    The label's values come only from the tenants file (a credential names a
    principal at the upgrade; nothing a client sends can make one), and a scrape
    shows the principals of the current table plus those a reload removed that
    still have a session or a process; once a removed principal has neither, its
    series and its counts go, so reloads cannot grow the output without bound.
    The live figures are read when scraped from the daemon's own tables (the
    process quota's count, the session registry), so they cannot drift from what
    the quotas enforce."""

    def __init__(self, principals: Callable[[], Iterable[str]], live: Figures, sessions: Figures):
        self._principals = principals
        self._live = live
        self._sessions = sessions
        self._counts: dict[str, _PrincipalCounts] = {}

    def _row(self, principal: str) -> _PrincipalCounts:
        row = self._counts.get(principal)
        if row is None:
            row = self._counts[principal] = _PrincipalCounts()
        return row

    def process_started(self, principal: str) -> None:
        self._row(principal).started += 1

    def refused(self, principal: str) -> None:
        self._row(principal).refused += 1

    def _families(self) -> _PrincipalFamilies:
        return (
            CounterMetricFamily(
                "execserver_tenant_processes_started",
                "Child processes started, by principal (--tenants).",
                labels=["principal"],
            ),
            CounterMetricFamily(
                "execserver_tenant_refusals",
                "Requests refused by the principal's profile (tenant.refuse records), "
                "by principal.",
                labels=["principal"],
            ),
            GaugeMetricFamily(
                "execserver_tenant_processes_live",
                "Processes of the principal not yet closed, as its max_processes counts them.",
                labels=["principal"],
            ),
            GaugeMetricFamily(
                "execserver_tenant_sessions",
                "Sessions (attached or detached) of the principal, as its max_sessions "
                "counts them.",
                labels=["principal"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        # Registration asks for the names only: the daemon's tables need not exist yet.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        live, sessions = self._live(), self._sessions()
        shown = set(self._principals())
        shown.update(name for name, count in live.items() if count > 0)
        shown.update(name for name, count in sessions.items() if count > 0)
        # A principal removed by a reload, with nothing left: forget it.
        for gone in self._counts.keys() - shown:
            del self._counts[gone]
        started, refused, live_family, session_family = self._families()
        for name in sorted(shown):
            row = self._row(name)
            started.add_metric([name], row.started, created=row.created)
            refused.add_metric([name], row.refused, created=row.created)
            live_family.add_metric([name], live.get(name, 0))
            session_family.add_metric([name], sessions.get(name, 0))
        yield from (started, refused, live_family, session_family)


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
        # With --tenants only (track_principals).
        self.principals: PrincipalSeries | None = None

    def track_principals(
        self, principals: Callable[[], Iterable[str]], live: Figures, sessions: Figures
    ) -> None:
        """--tenants: the per-principal series (PrincipalSeries). Not called without
        it, so a single-tenant daemon's /metrics has none of them."""
        self.principals = PrincipalSeries(principals, live, sessions)
        self.registry.register(self.principals)

    def principal_process_started(self, principal: str | None) -> None:
        if self.principals is not None and principal is not None:
            self.principals.process_started(principal)

    def principal_refused(self, principal: str) -> None:
        if self.principals is not None:
            self.principals.refused(principal)

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
