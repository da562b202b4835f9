"""The request meter (plain numbers on the hot path) exposes what prometheus_client's
own Counter and Histogram would for the same observations, in the same order."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from execserver.server.request_meter import RequestMeter

BUCKETS = (0.0005, 0.001, 0.01, 0.1, 1.0)

OBSERVATIONS = [
    ("process/read", "-32600", 0.0001),  # an error seen before the method's first ok
    ("process/read", "ok", 0.0004),
    ("fs/getMetadata", "ok", 0.0005),  # exactly on a bound: counted in that bucket
    ("process/read", "ok", 0.02),
    ("unknown", "-32601", 3.0),  # above every bound: +Inf only
    ("fs/getMetadata", "-32602", 0.002),
    ("process/read", "ok", 0.0),
    ("fs/getMetadata", "ok", 0.5),
]


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


def test_the_meter_renders_as_prometheus_client_counters_and_histograms() -> None:
    ours = CollectorRegistry()
    meter = RequestMeter(BUCKETS)
    ours.register(meter)
    theirs = CollectorRegistry()
    requests = Counter(
        "execserver_requests",
        "JSON-RPC requests answered, by method and result (ok or the error code).",
        ["method", "result"],
        registry=theirs,
    )
    seconds = Histogram(
        "execserver_request_duration_seconds",
        "Time from receiving a request to queueing its answer.",
        ["method"],
        buckets=BUCKETS,
        registry=theirs,
    )
    transport_bytes = Counter(
        "execserver_transport_bytes",
        "JSON-RPC message bytes on client connections, by direction.",
        ["direction"],
        registry=theirs,
    )
    for method, result, duration in OBSERVATIONS:
        meter.observe(method, result, duration)
        requests.labels(method, result).inc()
        seconds.labels(method).observe(duration)
    for direction in ("inbound", "outbound"):
        transport_bytes.labels(direction)
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))
