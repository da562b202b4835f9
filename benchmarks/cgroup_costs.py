"""What placing one process in its own cgroup costs, step by step, on this host.

A spawn with a cgroup (``--process-*-max``, or a tenant's quota with ``--tenants``)
makes one directory per hierarchy, moves the new process into each (a write of
its pid to ``cgroup.procs``, which exec-as does before exec) and removes the
directories after the process has gone. This measures each step separately with
a real short-lived child, so the spawn benchmark's figures can be read:
``python -m benchmarks.cgroup_costs [--rounds N] [--out FILE]``. Needs root and a
writable cgroup hierarchy (v1: the controllers the daemon uses; v2: the root).

On a cgroup v1 host the first move of a round is the expensive one: it takes the
kernel's cgroup_threadgroup_rwsem for writing, which waits for an RCU grace
period unless another writer held it a moment earlier (the hierarchy is mounted
without ``favordynmods``); the moves into the other hierarchies right after it
are cheap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from execserver.containment.host import probe_host

__all__ = ["main"]

_V1 = ("pids", "cpu", "memory", "cpuacct", "freezer")


def _hierarchies() -> list[Path]:
    # The daemon's own choice: v2 when it offers the controllers, else v1.
    host = probe_host("/sys/fs/cgroup")
    if host.v2_usable({"pids"}) and host.v2_dir is not None:
        return [Path(host.v2_dir)]
    return [Path(host.v1_dirs[name]) for name in _V1 if name in host.v1_dirs]


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def measure(rounds: int) -> dict[str, object]:
    parents = [h / f"execserver-bench-{os.getpid()}" for h in _hierarchies()]
    for parent in parents:
        parent.mkdir(exist_ok=True)
    mkdir: list[float] = []
    first_move: list[float] = []
    other_moves: list[float] = []
    rmdir: list[float] = []
    try:
        for n in range(rounds):
            leaves = [parent / f"p{n}" for parent in parents]
            started = time.perf_counter()
            for leaf in leaves:
                leaf.mkdir()
            mkdir.append(time.perf_counter() - started)
            child = subprocess.Popen(["sleep", "0.05"])
            for i, leaf in enumerate(leaves):
                started = time.perf_counter()
                (leaf / "cgroup.procs").write_text(str(child.pid))
                (first_move if i == 0 else other_moves).append(time.perf_counter() - started)
            child.wait()
            started = time.perf_counter()
            for leaf in leaves:
                leaf.rmdir()
            rmdir.append(time.perf_counter() - started)
            # Spawns a few hundred milliseconds apart, as an agent's commands are:
            # no other writer keeps the kernel's fast path open for the next round.
            time.sleep(0.2)
    finally:
        for parent in parents:
            for leaf in parent.glob("p*"):
                with contextlib.suppress(OSError):
                    leaf.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "p50_ms": _ms(statistics.median(ordered)),
            "max_ms": _ms(ordered[-1]),
        }

    return {
        "hierarchies": [str(p.parent) for p in parents],
        "rounds": rounds,
        "mkdir_all": summary(mkdir),
        "first_move": summary(first_move),
        "each_later_move": summary(other_moves) if other_moves else None,
        "rmdir_all": summary(rmdir),
        "kernel": os.uname().release,
        "loadavg": Path("/proc/loadavg").read_text().strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", help="also write the figures (JSON) here")
    args = parser.parse_args()
    figures = measure(args.rounds)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
