"""The per-request and per-frame metrics, counted in plain Python numbers.

Every request and every frame on every connection updates these, so they sit
on the daemon's hottest path. prometheus_client's Counter and Histogram take a
threading lock per update (five lock round trips per request: two frames, the
request count, the histogram's bucket and sum) — about a tenth of the
daemon's CPU per ``process/read`` poll, measured with py-spy. Everything here
runs on the event loop's thread, so plain numbers are exact; the registry
turns them into the usual counter and histogram families when /metrics is
scraped (``collect``).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["RequestMeter"]


class RequestMeter(Collector):
    """execserver_requests_total{method,result}, execserver_request_duration_seconds{method}
    and execserver_transport_bytes_total{direction}, exposed as prometheus_client would."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self._bounds = tuple(float(b) for b in buckets)
        self._labels = [*(repr(b) for b in self._bounds), "+Inf"]  # "0.0005", "1.0"
        self._counts: dict[tuple[str, str], int] = {}
        self._count_created: dict[tuple[str, str], float] = {}
        # Per method: observations per bucket (not cumulative; the last is +Inf), their sum.
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._histogram_created: dict[str, float] = {}
        self._created = time.time()
        # Bytes of JSON-RPC frames, by direction (the transports add to these directly).
        self.inbound_bytes = 0
        self.outbound_bytes = 0

    def observe(self, method: str, result: str, seconds: float) -> None:
        key = (method, result)
        count = self._counts.get(key)
        if count is None:
            self._count_created[key] = time.time()
            count = 0
        self._counts[key] = count + 1
        row = self._buckets.get(method)
        if row is None:
            row = self._buckets[method] = [0] * (len(self._bounds) + 1)
            self._sums[method] = 0.0
            self._histogram_created[method] = time.time()
        # A bucket counts the observations <= its bound, as prometheus_client's observe().
        row[bisect.bisect_left(self._bounds, seconds)] += 1
        self._sums[method] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "execserver_requests",
            "JSON-RPC requests answered, by method and result (ok or the error code).",
            labels=["method", "result"],
        )
        for key, count in self._counts.items():
            requests.add_metric(list(key), count, created=self._count_created[key])
        yield requests
        seconds = HistogramMetricFamily(
            "execserver_request_duration_seconds",
            "Time from receiving a request to queueing its answer.",
            labels=["method"],
        )
        for method, row in self._buckets.items():
            cumulative, total = [], 0
            for label, count in zip(self._labels, row, strict=True):
                total += count
                cumulative.append((label, float(total)))
            seconds.add_metric([method], cumulative, self._sums[method])
            seconds.add_sample(
                "execserver_request_duration_seconds_created",
                {"method": method},
                self._histogram_created[method],
            )
        yield seconds
        frames = CounterMetricFamily(
            "execserver_transport_bytes",
            "JSON-RPC message bytes on client connections, by direction.",
            labels=["direction"],
        )
        frames.add_metric(["inbound"], self.inbound_bytes, created=self._created)
        frames.add_metric(["outbound"], self.outbound_bytes, created=self._created)
        yield frames
