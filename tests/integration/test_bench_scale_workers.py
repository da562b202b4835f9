"""benchmarks/scale_workers.py run for real, small: 4 agents against two daemons side
by side and against one, every operation of every agent succeeding, and both
daemons measured (each answered its own loop-lag probe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scale_agent import OPERATIONS

pytestmark = [pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_two_daemons_and_one_serve_every_operation(tmp_path: Path) -> None:
    out = tmp_path / "scale_workers.json"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.scale_workers", "--working-tree"),
            *("--agents", "4", "--daemons", "2", "--rounds", "1", "--duration", "2"),
            *("--settle", "0", "--warmup", "60", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert sorted(report["levels"]) == ["1", "2"]
    for daemons, levels in report["levels"].items():
        (level,) = levels
        assert level["errors_total"] == 0 and level["unfinished_total"] == 0, (daemons, level)
        assert level["warmed_agents"] == 4, (daemons, level)
        assert level["throughput_ops_per_s"] > 0
        for name in OPERATIONS:
            assert level["p99_ms"][name] > 0, (daemons, name, level)
    two = report["levels"]["2"][0]["loop_lag_p99_ms_by_daemon"]
    assert len(two) == 2 and all(lag is not None and lag > 0 for lag in two), two
    assert report["levels"]["1"][0]["loop_lag_p99_ms_by_daemon"] is None
    assert set(report["medians"]) == {"1", "2"}
