"""The daemon's metrics are counted in plain numbers and rendered through
prometheus_client only at a scrape: the text is what prometheus_client's own
Counter, Gauge, Histogram and Info objects give for the same events, and a
daemon that is never scraped never imports prometheus_client."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import generate_latest

from execserver import REFERENCE_VERSION, __version__
from execserver.server.metrics import (
    _CPU_BUCKETS,
    _MEMORY_BUCKETS,
    _PROCESS_BUCKETS,
    _REQUEST_BUCKETS,
    Metrics,
)
from tests.support.servers import PROJECT_ROOT


class _Twin:
    """What the daemon rendered before its metrics were plain numbers: the same
    families as prometheus_client objects, registered in the same order."""

    def __init__(self, sessions: Callable[[], int], dropped: Callable[[], int]) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        build = Info("execserver_build", "The running execserver build.", registry=r)
        build.info({"version": __version__, "protocol": REFERENCE_VERSION, "python": _python()})
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
        self.requests = Counter(
            "execserver_requests",
            "JSON-RPC requests answered, by method and result (ok or the error code).",
            ["method", "result"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "execserver_request_duration_seconds",
            "Time from receiving a request to queueing its answer.",
            ["method"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.transport_bytes = Counter(
            "execserver_transport_bytes",
            "JSON-RPC message bytes on client connections, by direction.",
            ["direction"],
            registry=r,
        )
        for direction in ("inbound", "outbound"):  # the meter shows both from the start
            self.transport_bytes.labels(direction)
        self.limit_rejections = Counter(
            "execserver_limit_rejections",
            "Requests or connections refused by a configured limit.",
            ["limit"],
            registry=r,
        )
        Gauge("execserver_sessions", "Sessions (attached or detached).", registry=r).set_function(
            lambda: float(sessions())
        )
        Gauge(
            "execserver_audit_records_dropped",
            "Audit records dropped since start because the audit log's writer was too far behind.",
            registry=r,
        ).set_function(lambda: float(dropped()))
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


def _python() -> str:
    import platform

    return platform.python_version()


def _lines(text: bytes) -> list[str]:
    """The rendered lines, each ``_created`` value blanked (a time of creation)."""
    return [
        line.rpartition(" ")[0] + " <time>" if "_created" in line and line[0] != "#" else line
        for line in text.decode().splitlines()
    ]


def test_the_plain_metrics_render_as_prometheus_client_objects_would() -> None:
    sessions, dropped = [3], [0]
    ours, theirs = Metrics(), _Twin(lambda: sessions[0], lambda: dropped[0])
    ours.track_sessions(lambda: sessions[0])
    ours.track_audit_drops(lambda: dropped[0])
    # Before anything happened: empty families, zero counters, empty histograms.
    assert _lines(ours.render()) == _lines(generate_latest(theirs.registry))

    for metrics in (ours.connections, theirs.connections):
        metrics.inc()
        metrics.inc()
        metrics.dec()
    ours.connections_opened.inc()
    theirs.connections_opened.inc()
    for reason in ("limit", "auth", "limit"):
        ours.connections_rejected.labels(reason).inc()
        theirs.connections_rejected.labels(reason).inc()
    ours.auth_failures.labels("expired").inc()
    theirs.auth_failures.labels("expired").inc()
    for method, result, seconds in (("process/read", "ok", 0.002), ("fs/stat", "-32600", 0.5)):
        ours.observe_request(method, result, seconds)
        theirs.requests.labels(method, result).inc()
        theirs.request_seconds.labels(method).observe(seconds)
    ours.requests.inbound_bytes += 120
    theirs.transport_bytes.labels("inbound").inc(120)
    ours.limit_rejections.labels("max_connections").inc()
    theirs.limit_rejections.labels("max_connections").inc()
    for ours_count, their_count in (
        (ours.sessions_opened, theirs.sessions_opened),
        (ours.sessions_resumed, theirs.sessions_resumed),
        (ours.sessions_expired, theirs.sessions_expired),
    ):
        ours_count.inc()
        their_count.inc()
    # Three processes: one denied, lifetimes on, between and past the bounds.
    exits = ((0.05, False), (0.07, True), (7200.0, False))
    for _ in exits:
        ours.process_started()
        theirs.processes_started.inc()
        theirs.processes_live.inc()
    assert ours.live_processes == 3 and not ours.no_live_processes.is_set()
    for wall, denied in exits:
        ours.process_exited(wall, denied)
        theirs.processes_live.dec()
        theirs.process_seconds.observe(wall)
        if denied:
            theirs.sandbox_denials.inc()
    assert ours.live_processes == 0 and ours.no_live_processes.is_set()
    ours.process_usage(0.25, 3 << 20, oom_kills=1, pids_refused=0)
    ours.process_usage(0.001, None, oom_kills=0, pids_refused=4)
    theirs.process_cpu_seconds.observe(0.25)
    theirs.process_peak_memory.observe(3 << 20)
    theirs.process_limit_events.labels("memory").inc(1)
    theirs.process_cpu_seconds.observe(0.001)
    theirs.process_limit_events.labels("pids").inc(4)
    for stream, count in (("stdout", 10), ("pty", 4), ("stdout", 5)):
        ours.bytes_streamed.labels(stream).inc(count)
        theirs.bytes_streamed.labels(stream).inc(count)
    sessions[0], dropped[0] = 1, 7

    rendered = _lines(ours.render())
    assert rendered == _lines(generate_latest(theirs.registry))
    # (the memory histogram's bounds are where a hand-made label would differ)
    assert 'execserver_process_peak_memory_bytes_bucket{le="4.194304e+06"} 1.0' in rendered
    assert "execserver_sessions 1.0" in rendered and "execserver_processes_live 0.0" in rendered


def test_a_daemon_never_scraped_never_imports_prometheus_client() -> None:
    script = (
        "import sys\n"
        "import execserver.server.runner\n"
        "from execserver.server.metrics import Metrics\n"
        "m = Metrics(); m.process_started(); m.bytes_streamed.labels('stdout').inc(3)\n"
        "assert 'prometheus_client' not in sys.modules, 'imported at start-up'\n"
        "assert b'execserver_bytes_streamed_total{stream=\"stdout\"} 3.0' in m.render()\n"
        "assert 'prometheus_client' in sys.modules\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
