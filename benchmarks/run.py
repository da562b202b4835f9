"""Side-by-side benchmarks: execserver vs the reference codex exec-server 0.169.0.

Each figure runs against both servers in the same run, interleaved A B A B
(a fresh server per measurement), and reports medians and the ratio
execserver / reference. ``--smoke`` runs everything small, once (CI keeps the
code from rotting; no pass/fail on timings).

    python -m benchmarks.run [--smoke] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks import figures, physical, sandboxed_fs
from benchmarks.placement import pinned
from benchmarks.server_cpu import tree_cpu_split
from scripts.servers import RunningServer, start_server

RESULTS = Path(__file__).resolve().parent / "results"
SERVERS = ("execserver", "reference")


@dataclass
class Figure:
    name: str
    run: Callable[[RunningServer], Awaitable[dict[str, float]]]
    higher_is_better: bool
    # benchmarks/placement.py: "same" or "split" pins server and client for the
    # figure; None leaves them to the scheduler.
    placement: str | None = None


def build_figures(smoke: bool) -> list[Figure]:
    s = smoke
    return [
        Figure(
            "spawn_true", lambda srv: figures.spawn_latency(srv.url, 20 if s else 200, False), False
        ),
        Figure(
            "spawn_true_sandboxed",
            lambda srv: figures.spawn_latency(srv.url, 10 if s else 100, True),
            False,
        ),
        # Starts while CPU-bound commands run: the latency of a start and how long
        # another session's request waits meanwhile (the loop lag).
        Figure(
            "spawn_among_busy_commands",
            lambda srv: figures.spawn_among_busy_commands(
                srv.url, 4 if s else 16, 10 if s else 100
            ),
            False,
        ),
        Figure(
            "concurrent_spawns_32",
            lambda srv: figures.concurrent_spawns(srv.url, 32, 2 if s else 10),
            True,
        ),
        Figure(
            "output_throughput",
            lambda srv: figures.output_throughput(srv.url, 16 if s else 200),
            True,
        ),
        # 20 000 reads: the server's CPU is counted in 10 ms clock ticks, and 5 000
        # reads (~0.3 s of CPU) left the CPU ratio a few ticks, +-3%, from a tie.
        Figure(
            "read_polling", lambda srv: figures.read_polling(srv.url, 200 if s else 20000), True
        ),
        Figure(
            "pipelined_getMetadata",
            lambda srv: figures.pipelined_metadata(srv.url, 1000 if s else 20000, 64),
            True,
        ),
        # The same two round-trip figures driven by the callback-only picows client
        # (benchmarks/fast_client.py), so the Python client's own cost stays out.
        Figure(
            "read_polling_lean",
            lambda srv: figures.read_polling_lean(srv.url, 200 if s else 20000),
            True,
        ),
        Figure(
            "pipelined_getMetadata_lean",
            lambda srv: figures.pipelined_metadata_lean(srv.url, 1000 if s else 20000, 64),
            True,
        ),
        # Polling with server and client pinned to one CPU, then to two: left to
        # the scheduler the figure above measures where they landed as much as
        # the server (benchmarks/placement.py).
        Figure(
            "read_polling_lean_same_cpu",
            lambda srv: figures.read_polling_lean(srv.url, 200 if s else 20000),
            True,
            placement="same",
        ),
        Figure(
            "read_polling_lean_split_cpus",
            lambda srv: figures.read_polling_lean(srv.url, 200 if s else 20000),
            True,
            placement="split",
        ),
        Figure("read_file", lambda srv: figures.read_file(srv.url, 5 if s else 50), True),
        # 8 MiB: its base64 (11.2 MB) in one frame stays inside the reference's
        # 16 MiB frame limit (a 43 MB frame made it drop the connection).
        Figure("write_file", lambda srv: figures.write_file(srv.url, 2 if s else 8), True),
        Figure("small_files", lambda srv: figures.small_files(srv.url, 20 if s else 300), False),
        Figure(
            "live_processes",
            lambda srv: figures.many_processes(srv.url, srv.process.pid, 50 if s else 500),
            False,
        ),
        Figure(
            "sandboxed_fs",
            lambda srv: sandboxed_fs.sandboxed_fs(srv.url, 10 if s else 60),
            False,
        ),
        Figure(
            "sandboxed_patch_10_files",
            lambda srv: sandboxed_fs.patch_composite(srv.url, 1 if s else 5),
            False,
        ),
        Figure("idle_rss", lambda srv: figures.idle_rss(srv.url, srv.process.pid), False),
        Figure(
            "slow_reader_rss",
            lambda srv: figures.slow_reader_rss(srv.url, srv.process.pid, 32 if s else 1024),
            False,
        ),
    ]


async def measure(figure: Figure, kind: str) -> dict[str, float] | str:
    try:
        async with start_server(
            kind, extra=["--log-level", "warning"] if kind == "execserver" else []
        ) as server:
            with pinned(server.process.pid, figure.placement):
                user_before, system_before = tree_cpu_split(server.process.pid)
                result = await figure.run(server)
                user_after, system_after = tree_cpu_split(server.process.pid)
            user, system = user_after - user_before, system_after - system_before
    except Exception as exc:  # a figure that fails is reported, not fatal
        traceback.print_exc(file=sys.stderr)
        return f"error: {type(exc).__name__}: {exc}"[:200]
    # "ops" is how many operations the figure performed, not a measurement: it
    # turns the server tree's CPU time into CPU seconds per 1,000 operations.
    ops = result.pop("ops", None)
    if ops:
        result["server_cpu_s_per_1k_ops"] = (user + system) / ops * 1000
        result["server_user_cpu_s_per_1k_ops"] = user / ops * 1000
    return result


def _spread(samples: list[dict[str, float]]) -> dict[str, float]:
    spread: dict[str, float] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        middle = statistics.median(values)
        if middle:
            spread[key] = (max(values) - min(values)) / middle
    return spread


def _median_dicts(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = samples[0].keys()
    return {k: statistics.median(s[k] for s in samples) for k in keys}


def _interpreter() -> dict[str, str]:
    """The Python that runs the daemon, and which build of it: a distribution's
    optimised build and a plain source build of the same version give different
    figures (scripts/pick-python)."""
    return {
        "python": platform.python_version(),
        "python_executable": os.path.realpath(sys.executable),
        "python_build": " ".join(platform.python_build()),
    }


async def run(smoke: bool, only: list[str], rounds: int) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": {
            "cpus": psutil.cpu_count(),
            "memory_GB": round(psutil.virtual_memory().total / 1e9, 1),
            "platform": platform.platform(),
            **_interpreter(),
        },
        "mode": "smoke" if smoke else "full",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "physical": {
            "fork_exec_true_ms": physical.fork_exec_true_ms(20 if smoke else 200),
            "pipe_MB_per_s": physical.pipe_bandwidth_mb_s(32 if smoke else 512),
        },
        "figures": {},
    }
    for figure in build_figures(smoke):
        if only and figure.name not in only:
            continue
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in SERVERS}
        errors: dict[str, str] = {}
        for r in range(rounds):
            order = SERVERS if r % 2 == 0 else tuple(reversed(SERVERS))
            for kind in order:
                result = await measure(figure, kind)
                if isinstance(result, str):
                    errors[kind] = result
                else:
                    samples[kind].append(result)
        entry: dict[str, Any] = {"higher_is_better": figure.higher_is_better}
        for kind in SERVERS:
            entry[kind] = _median_dicts(samples[kind]) if samples[kind] else errors.get(kind)
        # Run-to-run noise: (max - min) / median over the rounds, per server and metric.
        entry["spread"] = {
            kind: _spread(samples[kind]) for kind in SERVERS if len(samples[kind]) > 1
        }
        ours, ref = entry["execserver"], entry["reference"]
        if isinstance(ours, dict) and isinstance(ref, dict):
            entry["ratio"] = {k: ours[k] / ref[k] for k in ours if ref.get(k)}
        report["figures"][figure.name] = entry
        print_row(figure.name, entry)
    return report


def print_row(name: str, entry: dict[str, Any]) -> None:
    ours, ref = entry["execserver"], entry["reference"]
    if not isinstance(ours, dict) or not isinstance(ref, dict):
        print(f"{name:30} execserver={ours} reference={ref}", flush=True)
        return
    for key in ours:
        ratio = entry.get("ratio", {}).get(key)
        shown = f"{ratio:6.2f}x" if ratio is not None else "   n/a"
        print(
            f"{name:30} {key:20} {ours[key]:12.2f} {ref.get(key, float('nan')):12.2f} {shown}",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    print(f"{'figure':30} {'metric':20} {'execserver':>12} {'reference':>12}  ratio", flush=True)
    report = asyncio.run(run(args.smoke, args.only, rounds))
    print(
        f"physical: fork/exec true {report['physical']['fork_exec_true_ms']:.2f} ms, "
        f"pipe {report['physical']['pipe_MB_per_s']:.0f} MB/s",
        flush=True,
    )
    RESULTS.mkdir(exist_ok=True)
    # Only a complete full run replaces latest.json (the README's table comes from it).
    name = "smoke.json" if args.smoke else ("partial.json" if args.only else "latest.json")
    (RESULTS / name).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
