"""Worker processes, measured before built: N agents against K execserver daemons
side by side against the same N against one, interleaved (benchmarks/scale.py's
levels, execserver alone).

Several worker processes behind one listening socket, each session pinned to one
of them, is the usual answer when one event loop is the limit. Its best case is K
independent daemons, each serving its share of the agents: no routing, nothing
shared between them (the agents' processes, one per daemon at least, each talk
to one daemon). If that best case does not beat one daemon on the figures that
matter, the real thing (a listener handing each session to a worker, and a
resumed session to the same one; the tenants' limits and the metrics shared)
will not either.

    python -m benchmarks.scale_workers [--agents 1000] [--daemons 2] [--rounds 2]

Writes benchmarks/results/scale_workers.json; docs/scale.md has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.committed_tree import daemon_tree
from benchmarks.scale import GRACE_S, RESULTS, raise_fd_limit, run_level, settle

__all__ = ["main"]

# What a level's line and the JSON's summary keep (benchmarks/scale.py has them all).
KEPT = (
    "throughput_ops_per_s",
    "loop_lag_p50_ms",
    "loop_lag_p99_ms",
    "loop_lag_p99_ms_by_daemon",
    "agents_loop_lag_p99_ms",
    "server_cpu_share",
    "server_cpu_s_per_1k_ops",
    "rss_per_session_MB",
    "pss_per_session_MB",
    "errors_total",
    "unfinished_total",
    "warmed_agents",
    "main_thread",
)


def brief(level: dict[str, Any]) -> dict[str, Any]:
    kept = {key: level.get(key) for key in KEPT}
    kept["p99_ms"] = {name: op["p99_ms"] for name, op in level["operations"].items()}
    return kept


def medians(levels: list[dict[str, Any]]) -> dict[str, float]:
    """The median over rounds of each figure that is one number."""
    keys = [k for k, v in levels[0].items() if isinstance(v, int | float)]
    return {k: statistics.median(level[k] for level in levels) for k in keys}


async def run(args: argparse.Namespace, tree: str | None, commit: str) -> dict[str, Any]:
    layouts = (args.daemons, 1)
    levels: dict[str, list[dict[str, Any]]] = {str(k): [] for k in layouts}
    for round_ in range(args.rounds):
        order = layouts if round_ % 2 == 0 else tuple(reversed(layouts))
        for daemons in order:
            await settle(args.settle)
            level = await run_level(
                "execserver",
                args.agents,
                args.duration,
                args.think,
                tree,
                warmup=args.warmup,
                grace=args.grace,
                daemons=daemons,
            )
            kept = brief(level)
            levels[str(daemons)].append(kept)
            print(f"daemons={daemons} {json.dumps(kept)}", flush=True)
    return {
        "daemon_commit": commit,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "settings": {
            "agents": args.agents,
            "daemons": args.daemons,
            "rounds": args.rounds,
            "duration_s": args.duration,
            "think_s": args.think,
        },
        "levels": levels,
        "medians": {k: medians(v) for k, v in levels.items()},
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--daemons", type=int, default=2, help="K, against one daemon")
    parser.add_argument("--rounds", type=int, default=2, help="levels of each layout")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per level")
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--grace", type=float, default=GRACE_S)
    parser.add_argument("--settle", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale_workers.json")
    parser.add_argument(
        "--working-tree",
        action="store_true",
        help="serve the working tree's execserver, not the committed one",
    )
    args = parser.parse_args(argv)
    if args.daemons < 2:
        parser.error("--daemons: at least 2 (it is compared with one)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_fd_limit()
    with daemon_tree(args.working_tree) as (tree, commit):
        report = asyncio.run(run(args, tree, commit))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["medians"], indent=2), flush=True)
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
