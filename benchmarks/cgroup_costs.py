"""What placing one process in its own cgroup costs, step by step, on this host.

A spawn with a cgroup (``--process-*-max``, or a tenant's quota with ``--tenants``)
makes one directory per hierarchy, moves the new process into each (the child
writes ``0`` into each hierarchy's placement file before exec, as exec-as does)
and removes the directories after the process has gone. This measures each step
separately with a real short-lived child, so the spawn benchmark's figures can
be read:
``python -m benchmarks.cgroup_costs [--rounds N] [--out FILE]``. Needs root and a
writable cgroup hierarchy (v1: the controllers the daemon uses; v2: the root).

Through ``cgroup.procs`` the first move of a round is the expensive one: it
takes the kernel's cgroup_threadgroup_rwsem for writing, which waits for an RCU
grace period unless another writer held it a moment earlier (the hierarchy is
mounted without ``favordynmods``); the moves into the other hierarchies right
after it are cheap. On v1 the single-threaded child can write ``tasks`` instead,
which skips that lock (what the daemon does, see
execserver/containment/process_cgroup.py); both routes are measured, round by
round alternately.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
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


def _placed_child(fds: list[int]) -> list[float]:
    """Forks a child that enters the cgroups as the daemon's children do (writing
    ``0`` into each open placement file before it would exec); returns the time of
    each write, measured in the child."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        taken = []
        for fd in fds:
            started = time.perf_counter()
            os.write(fd, b"0")
            taken.append(time.perf_counter() - started)
        os.write(write_end, json.dumps(taken).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as report:
        times: list[float] = json.loads(report.read())
    os.waitpid(pid, 0)
    return times


def measure(rounds: int) -> dict[str, object]:
    hierarchies = _hierarchies()
    v1 = (hierarchies[0] / "tasks").exists()
    # v1: both routes, alternating round by round; v2 has only cgroup.procs.
    routes = ("tasks", "cgroup.procs") if v1 else ("cgroup.procs",)
    parents = [h / f"execserver-bench-{os.getpid()}" for h in hierarchies]
    for parent in parents:
        parent.mkdir(exist_ok=True)
    mkdir: list[float] = []
    first_move: dict[str, list[float]] = {route: [] for route in routes}
    other_moves: dict[str, list[float]] = {route: [] for route in routes}
    rmdir: list[float] = []
    try:
        for n in range(rounds * len(routes)):
            route = routes[n % len(routes)]
            leaves = [parent / f"p{n}" for parent in parents]
            started = time.perf_counter()
            for leaf in leaves:
                leaf.mkdir()
            mkdir.append(time.perf_counter() - started)
            fds = [os.open(leaf / route, os.O_WRONLY | os.O_CLOEXEC) for leaf in leaves]
            try:
                times = _placed_child(fds)
            finally:
                for fd in fds:
                    os.close(fd)
            first_move[route].append(times[0])
            other_moves[route].extend(times[1:])
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
        "rounds_per_route": rounds,
        "mkdir_all": summary(mkdir),
        "first_move": {route: summary(first_move[route]) for route in routes},
        "each_later_move": {
            route: summary(other_moves[route]) for route in routes if other_moves[route]
        },
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
