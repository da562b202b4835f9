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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["RequestMeter"]

_bisect_left = bisect.bisect_left


class _MethodRow:
    """One method's histogram, and its count of ``ok`` answers (the common result, kept
    here so that counting it takes no dict lookup of a (method, result) key)."""

    __slots__ = ("buckets", "created", "ok", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # observations per bucket (not cumulative; last is +Inf)
        self.sum = 0.0
        self.created = time.time()
        self.ok = 0


class RequestMeter:
    """execserver_requests_total{method,result}, execserver_request_duration_seconds{method}
    and execserver_transport_bytes_total{direction}, exposed as prometheus_client would.
    A collector a prometheus_client registry accepts (it only calls ``collect``);
    prometheus_client itself is imported by the first ``collect``, at a scrape."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self._bounds = tuple(float(b) for b in buckets)
        self._labels = [*(repr(b) for b in self._bounds), "+Inf"]  # "0.0005", "1.0"
        # Every (method, result) seen, in first-seen order, with when it was first seen.
        self._count_created: dict[tuple[str, str], float] = {}
        # Counts of results other than "ok" ("ok" is counted in the method's row).
        self._counts: dict[tuple[str, str], int] = {}
        self._rows: dict[str, _MethodRow] = {}
        self._created = time.time()
        # Bytes of JSON-RPC frames, by direction (the transports add to these directly).
        self.inbound_bytes = 0
        self.outbound_bytes = 0

    def observe(self, method: str, result: str, seconds: float) -> None:
        row = self._rows.get(method)
        if row is None:
            row = self._rows[method] = _MethodRow(len(self._bounds) + 1)
        if result == "ok":
            if not row.ok:
                self._count_created[(method, result)] = time.time()
            row.ok += 1
        else:
            key = (method, result)
            count = self._counts.get(key)
            if count is None:
                self._count_created[key] = time.time()
                count = 0
            self._counts[key] = count + 1
        # A bucket counts the observations <= its bound, as prometheus_client's observe().
        row.buckets[_bisect_left(self._bounds, seconds)] += 1
        row.sum += seconds

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        requests = CounterMetricFamily(
            "execserver_requests",
            "JSON-RPC requests answered, by method and result (ok or the error code).",
            labels=["method", "result"],
        )
        for key, created in self._count_created.items():
            method, result = key
            count = self._rows[method].ok if result == "ok" else self._counts[key]
            requests.add_metric(list(key), count, created=created)
        yield requests
        seconds = HistogramMetricFamily(
            "execserver_request_duration_seconds",
            "Time from receiving a request to queueing its answer.",
            labels=["method"],
        )
        for method, row in self._rows.items():
            cumulative, total = [], 0
            for label, count in zip(self._labels, row.buckets, strict=True):
                total += count
                cumulative.append((label, float(total)))
            seconds.add_metric([method], cumulative, row.sum)
            seconds.add_sample(
                "execserver_request_duration_seconds_created",
                {"method": method},
                row.created,
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
