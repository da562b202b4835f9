"""benchmarks/scale.py ``targets`` (here, not in tests/unit: the harness imports the bench
stack, matplotlib included, which the fresh-clone check does not install): the N = 1,000
verdicts read from a report, and which of the reference's p99s rest on too few samples
to be a 99th percentile."""

from __future__ import annotations

from typing import Any

from benchmarks.scale import MIN_P99_SAMPLES, targets
from benchmarks.scale_agent import OPERATIONS


def operations(count: int, bounded: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        name: {"count": count, "percentiles_are_lower_bounds": name in bounded}
        for name in OPERATIONS
    }


def level(reference_counts: dict[str, int]) -> dict[str, Any]:
    reference = operations(MIN_P99_SAMPLES)
    for name, count in reference_counts.items():
        reference[name]["count"] = count
    return {
        "execserver": {
            "operations": operations(1000),
            "errors_total": 0,
            "warmup_errors_total": 0,
            "stuck_in_warmup_total": 0,
            "unfinished_total": 0,
            "loop_lag_p99_ms": 40.0,
        },
        "reference": {"operations": reference},
        "ratio": {
            **{f"{name}_p99_ms": 0.25 for name in OPERATIONS},
            "rss_per_session_MB": 0.9,
        },
    }


def test_reference_p99s_from_too_few_samples_are_named() -> None:
    report = {
        "levels": {"100": level({}), "1000": level({"poll": 10, "patch10": 0})},
        "figures": {},
    }
    verdict = targets(report)
    assert verdict["at_agents"] == 1000
    assert verdict["p99_reference_few_samples"] == ["poll", "patch10"]
    # Named, not excused: the ratios still decide the verdict.
    assert verdict["p99_le_half_reference"] is True
    assert verdict["loop_lag_p99_lt_50ms"] is True


def test_a_reference_with_enough_samples_names_none() -> None:
    report = {"levels": {"1000": level({})}, "figures": {}}
    assert targets(report)["p99_reference_few_samples"] == []
