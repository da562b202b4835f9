"""Prometheus metrics of one daemon (served on ``GET /metrics`` with ``--metrics``).

Counted in plain Python numbers, as prometheus_client's Counter, Gauge and
Histogram would count them, and turned into its metric families only when
/metrics is scraped. Two reasons: prometheus_client (with the exposition
modules it imports: http.server, wsgiref, gzip, ...) took ~25 ms of every
daemon's start, most of which never serves /metrics (it is off by default);
and its objects take a threading lock per update, while everything here runs
on the event loop's thread. tests/unit/test_metrics_plain.py holds the output
to what prometheus_client's own objects render for the same events.

Each runtime has its own registry rather than prometheus-client's global one,
so several servers in one process (tests) never share counters. Services
never touch these objects: they report events to ``ctx.server.telemetry``
(execserver.server.telemetry), which counts them here.
"""

from __future__ import annotations

import asyncio
import bisect
import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from execserver import REFERENCE_VERSION, __version__
from execserver.server.request_meter import RequestMeter

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = ["UNKNOWN_METHOD", "Metrics", "PrincipalSeries"]

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
    "CounterMetricFamily", "CounterMetricFamily", "GaugeMetricFamily", "GaugeMetricFamily"
]


class PrincipalSeries:
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
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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


class Count:
    """A counter without labels (prometheus_client's Counter): its value, and when it
    was made (the ``_created`` sample)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class CountsByLabel:
    """A counter with one label: one ``Count`` per value, made on first use and shown
    from then on (as prometheus_client's ``labels()`` makes a child)."""

    __slots__ = ("children", "doc", "label", "name")

    def __init__(self, name: str, doc: str, label: str) -> None:
        self.name, self.doc, self.label = name, doc, label
        self.children: dict[str, Count] = {}

    def labels(self, value: str) -> Count:
        child = self.children.get(value)
        if child is None:
            child = self.children[value] = Count()
        return child

    def family(self) -> CounterMetricFamily:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.doc, labels=[self.label])
        for value, child in self.children.items():
            family.add_metric([value], child.value, created=child.created)
        return family


class Level:
    """A gauge: set by ``inc``/``dec``, or read from ``set_function`` when scraped."""

    __slots__ = ("_read", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self._read: Callable[[], float] | None = None

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set_function(self, read: Callable[[], float]) -> None:
        self._read = read

    def get(self) -> float:
        return float(self._read()) if self._read is not None else self.value


class Distribution:
    """A histogram without labels: observations per bucket (an observation counts in
    the first bucket whose bound is >= it, the last one being +Inf), and their sum."""

    __slots__ = ("bounds", "buckets", "created", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.buckets = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class Metrics:
    def __init__(self) -> None:
        # execserver_processes_live, also what a drain waits on to reach 0.
        self.live_processes = 0
        self.no_live_processes = asyncio.Event()
        self.no_live_processes.set()
        # execserver_build_info{version,protocol,python} 1: which build answers here.
        self.build = {
            "version": __version__,
            "protocol": REFERENCE_VERSION,
            "python": platform.python_version(),
        }
        self.connections = Level()
        self.connections_opened = Count()
        self.connections_rejected = CountsByLabel(
            "execserver_connections_rejected",
            "WebSocket upgrades refused, by reason (auth, limit).",
            "reason",
        )
        self.auth_failures = CountsByLabel(
            "execserver_auth_failures", "Rejected websocket credentials, by 401 body.", "reason"
        )
        # Requests answered (count and duration) and frame bytes: their own meter,
        # updated on every request.
        self.requests = RequestMeter(_REQUEST_BUCKETS)
        self.limit_rejections = CountsByLabel(
            "execserver_limit_rejections",
            "Requests or connections refused by a configured limit.",
            "limit",
        )
        self.sessions = Level()
        # A gauge read from the audit log's own count (it only grows): records dropped
        # because its writer fell QUEUE_RECORDS behind (server/audit.py).
        self.audit_records_dropped = Level()
        self.sessions_opened = Count()
        self.sessions_resumed = Count()
        self.sessions_expired = Count()
        self.processes_started = Count()
        self.process_seconds = Distribution(_PROCESS_BUCKETS)
        self.sandbox_denials = Count()
        self.bytes_streamed = CountsByLabel(
            "execserver_bytes_streamed",
            "Bytes produced for clients, by stream (stdout, stderr, pty, http).",
            "stream",
        )
        self.process_cpu_seconds = Distribution(_CPU_BUCKETS)
        self.process_peak_memory = Distribution(_MEMORY_BUCKETS)
        self.process_limit_events = CountsByLabel(
            "execserver_process_limit_events",
            "Per-process limit enforcement, by limit: memory = processes killed by "
            "--process-memory-max, pids = forks refused by --process-pids-max.",
            "limit",
        )
        # With --tenants only (track_principals).
        self.principals: PrincipalSeries | None = None
        self._registry: CollectorRegistry | None = None

    def track_principals(
        self, principals: Callable[[], Iterable[str]], live: Figures, sessions: Figures
    ) -> None:
        """--tenants: the per-principal series (PrincipalSeries). Not called without
        it, so a single-tenant daemon's /metrics has none of them."""
        self.principals = PrincipalSeries(principals, live, sessions)

    def principal_process_started(self, principal: str | None) -> None:
        if self.principals is not None and principal is not None:
            self.principals.process_started(principal)

    def principal_refused(self, principal: str) -> None:
        if self.principals is not None:
            self.principals.refused(principal)

    def track_sessions(self, count: Callable[[], int]) -> None:
        self.sessions.set_function(count)

    def track_audit_drops(self, count: Callable[[], int]) -> None:
        self.audit_records_dropped.set_function(count)

    def observe_request(self, method: str, result: str, seconds: float) -> None:
        self.requests.observe(method, result, seconds)

    def process_started(self) -> None:
        self.processes_started.value += 1
        self.live_processes += 1
        self.no_live_processes.clear()

    def process_exited(self, wall_s: float, sandbox_denied: bool) -> None:
        self.live_processes -= 1
        if self.live_processes <= 0:
            self.no_live_processes.set()
        self.process_seconds.observe(wall_s)
        if sandbox_denied:
            self.sandbox_denials.value += 1

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

    # ---- exposition: prometheus_client is imported from here on, at the first scrape

    @property
    def registry(self) -> CollectorRegistry:
        """A registry holding every family below, made at first use."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry(auto_describe=True)
            self._registry.register(self)
        return self._registry

    def describe(self) -> Iterator[Metric]:
        # Asked at registration for names to refuse duplicates: this registry holds
        # nothing else, and collecting then would read the daemon's tables too early.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        """The families, in the order and form prometheus_client's objects give them."""
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

        yield InfoMetricFamily(
            "execserver_build", "The running execserver build.", value=self.build
        )
        yield GaugeMetricFamily(
            "execserver_connections", "Open client connections.", value=self.connections.get()
        )
        yield _counter(
            "execserver_connections_opened", "Client connections accepted.", self.connections_opened
        )
        yield self.connections_rejected.family()
        yield self.auth_failures.family()
        yield from self.requests.collect()
        yield self.limit_rejections.family()
        yield GaugeMetricFamily(
            "execserver_sessions", "Sessions (attached or detached).", value=self.sessions.get()
        )
        yield GaugeMetricFamily(
            "execserver_audit_records_dropped",
            "Audit records dropped since start because the audit log's writer was too far behind.",
            value=self.audit_records_dropped.get(),
        )
        yield _counter(
            "execserver_sessions_opened", "Sessions created by initialize.", self.sessions_opened
        )
        yield _counter(
            "execserver_sessions_resumed",
            "Sessions re-attached with resumeSessionId.",
            self.sessions_resumed,
        )
        yield _counter(
            "execserver_sessions_expired",
            "Detached sessions closed after their TTL.",
            self.sessions_expired,
        )
        yield GaugeMetricFamily(
            "execserver_processes_live",
            "Child processes currently running.",
            value=self.live_processes,
        )
        yield _counter(
            "execserver_processes_started", "Child processes started.", self.processes_started
        )
        yield _histogram(
            "execserver_process_duration_seconds",
            "Wall-clock lifetime of child processes.",
            self.process_seconds,
        )
        yield _counter(
            "execserver_sandbox_denials",
            "Process exits classified as sandbox denials (sandboxDenied).",
            self.sandbox_denials,
        )
        yield self.bytes_streamed.family()
        yield _histogram(
            "execserver_process_cpu_seconds",
            "CPU time of each exited process tree (its cgroup with per-process limits, "
            "else the direct child).",
            self.process_cpu_seconds,
        )
        yield _histogram(
            "execserver_process_peak_memory_bytes",
            "Peak memory of each exited process tree (from its cgroup; only with "
            "per-process limits).",
            self.process_peak_memory,
        )
        yield self.process_limit_events.family()
        if self.principals is not None:
            yield from self.principals.collect()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    @staticmethod
    def content_type() -> str:
        from prometheus_client import CONTENT_TYPE_LATEST

        return str(CONTENT_TYPE_LATEST)


def _counter(name: str, doc: str, count: Count) -> Metric:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name, doc, value=count.value, created=count.created)


def _histogram(name: str, doc: str, distribution: Distribution) -> Metric:
    from prometheus_client.core import HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    family = HistogramMetricFamily(name, doc)
    cumulative: list[tuple[str, float]] = []
    total = 0
    bounds = [*distribution.bounds, float("inf")]
    for bound, count in zip(bounds, distribution.buckets, strict=True):
        total += count
        cumulative.append((floatToGoString(bound), float(total)))  # type: ignore[no-untyped-call]
    family.add_metric([], cumulative, distribution.sum)
    family.add_sample(f"{name}_created", {}, distribution.created)
    return family
