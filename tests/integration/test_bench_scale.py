"""`make bench-scale --smoke` run for real, at N = 1 and 4 agents against execserver
and the reference (4, not the smoke's default 10: the reference starts a helper
process per sandboxed call, ~2 CPU-seconds per agent's pass, and the suite's time
is CPU-bound): the JSON's shape, the profile at the knee, and every operation of
every agent succeeded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scale_agent import OPERATIONS
from benchmarks.scale_profile import py_spy

pytestmark = [pytest.mark.needs_reference, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def test_bench_scale_smoke_measures_every_operation_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "scale_smoke.json"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.scale", "--smoke", "--agents", "1", "4"),
            *("--duration", "2", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "smoke"
    assert sorted(report["levels"], key=int) == ["1", "4"]
    for n, entry in report["levels"].items():
        assert entry["ratio"], n
        for kind in ("execserver", "reference"):
            level = entry[kind]
            assert level["agents"] == int(n) and level["warmed_agents"] == int(n)
            assert level["unfinished_total"] == 0, (n, kind)
            assert level["errors_total"] == 0, (n, kind, level["first_errors"])
            assert level["warmup_errors_total"] == 0, (n, kind, level["first_errors"])
            assert level["stuck_in_warmup_total"] == 0, (n, kind, level["stuck_in_warmup"])
            for name in OPERATIONS:
                op = level["operations"][name]
                assert op["count"] >= int(n), (n, kind, name, op)
                assert 0 < op["p50_ms"] <= op["p99_ms"], (n, kind, name, op)
            assert level["throughput_ops_per_s"] > 0
            assert level["probes"] > 0 and level["loop_lag_p99_ms"] > 0
            assert level["peak"]["rss_MB"] > 0 and level["peak"]["fds"] > 0
            # What else the machine ran (tests/unit/test_bench_machine_noise.py
            # checks what it counts; here the suite's other workers are in it).
            other = level["machine_other_cpu"]
            assert other["total"] >= sum(other["by_name"].values()) - 0.01, other
    for figure in ("concurrent_spawns_32", "idle_rss"):
        assert report["figures"][figure]["ratio"], figure
    assert set(report["targets"]) >= {"p99_le_half_reference", "loop_lag_p99_lt_50ms"}
    # The profile at the knee: py-spy's samples of the daemon, written next to the JSON
    # (py-spy comes with the bench extra, which `make test` does not install).
    profile = report["profile"]
    if py_spy() is None:
        assert profile == {"skipped": "py-spy is not installed (pip install py-spy)"}
    else:
        assert profile["samples"] > 0 and profile["self"], profile
        assert (tmp_path / profile["raw"]).stat().st_size > 0
    for image in ("scale_smoke_latency.png", "scale_smoke_resources.png"):
        assert (tmp_path / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
