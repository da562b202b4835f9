"""Spawn latency (unsandboxed and sandboxed) and output throughput with and
without ``--state-dir`` (process keepers: every process, sandboxed or not, is a
keeper's child), side by side in one run, and the reference's when it is
installed, with each figure's ratio to the reference's.
Throughput is measured unsandboxed and sandboxed (workspace-write), read by
benchmarks/fast_client.py's client, which outpaces both servers.
``python -m benchmarks.keeper [--spawns N] [--megabytes M] [--rounds R]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import tempfile
from typing import Any

from benchmarks import figures
from benchmarks.fast_client import stream_throughput
from scripts.servers import ReferenceUnavailable, start_server

__all__ = ["main"]


async def _measure(kind: str, extra: list[str], spawns: int, megabytes: int) -> dict[str, Any]:
    async with start_server(
        kind, extra=[*extra, "--log-level", "warning"] if kind == "execserver" else extra
    ) as srv:
        spawn = await figures.spawn_latency(srv.url, spawns, False)
        boxed = await figures.spawn_latency(srv.url, spawns, True)
        out = await _throughput(srv.url, megabytes, sandboxed=False)
        boxed_out = await _throughput(srv.url, megabytes, sandboxed=True)
        return {
            "spawn_p50_ms": spawn["p50_ms"],
            "spawn_p99_ms": spawn["p99_ms"],
            "sandboxed_spawn_p50_ms": boxed["p50_ms"],
            "sandboxed_spawn_p99_ms": boxed["p99_ms"],
            "MB_per_s": out["MB_per_s"],
            "sandboxed_MB_per_s": boxed_out["MB_per_s"],
        }


async def _throughput(url: str, megabytes: int, *, sandboxed: bool) -> dict[str, float]:
    """``head -c`` of ``megabytes`` MiB, read by fast_client.stream_throughput (the lean
    aiohttp client of figures.output_throughput is the bottleneck at ~225 MB/s
    here, whichever server it reads: see fast_client.stream_throughput)."""
    size = megabytes * 1024 * 1024
    params: dict[str, Any] = {
        "processId": "out",
        "argv": ["head", "-c", str(size), "/dev/zero"],
        "cwd": figures.CWD,
        "env": figures.ENV,
        "tty": False,
    }
    if sandboxed:
        params["sandbox"] = figures.WORKSPACE_WRITE
    return await stream_throughput(url, params, size)


def _end_keepers(state: str) -> None:
    for root, _, files in os.walk(state):
        if "meta.json" in files:
            with contextlib.suppress(OSError, ValueError, KeyError):
                with open(os.path.join(root, "meta.json")) as handle:
                    os.kill(json.load(handle)["keeper"], signal.SIGTERM)


async def _round(spawns: int, megabytes: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with contextlib.suppress(ReferenceUnavailable):
        results["reference"] = await _measure("reference", [], spawns, megabytes)
    results["execserver"] = await _measure("execserver", [], spawns, megabytes)
    with tempfile.TemporaryDirectory() as state:
        try:
            results["execserver --state-dir"] = await _measure(
                "execserver", ["--state-dir", state, "--session-ttl", "5"], spawns, megabytes
            )
        finally:
            _end_keepers(state)
    return results


async def run(spawns: int, megabytes: int, rounds: int = 3) -> dict[str, Any]:
    """``rounds`` rounds, each server measured once per round in turn (so a load
    that comes and goes weighs on all of them alike); each figure is its median."""
    measured = [await _round(spawns, megabytes) for _ in range(rounds)]
    results: dict[str, Any] = {
        name: {key: statistics.median(r[name][key] for r in measured) for key in measured[0][name]}
        for name in measured[0]
    }
    results["rounds"] = rounds
    reference = results.get("reference")
    if reference is not None:
        results["ratios_to_reference"] = {
            name: {key: round(value / reference[key], 3) for key, value in figures_.items()}
            for name, figures_ in results.items()
            if name not in ("reference", "rounds")
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spawns", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.spawns, args.megabytes, args.rounds)), indent=2))


if __name__ == "__main__":
    main()
