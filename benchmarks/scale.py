"""Cost curves with the number of agents: N simulated agents (N = 1, 10, 100,
1,000) against execserver and the reference codex exec-server, side by side in
the same run, interleaved (a fresh server per level, the order alternating from
level to level).

Each agent is its own websocket session doing an agent's mix in a loop
(benchmarks/scale_agent.py) for a bounded time. Per level and server: p50/p99
of each operation, throughput, server CPU per 1,000 operations, server RSS and
RSS per session, fds, and the event-loop lag seen from outside (an
``initialize`` round trip every 100 ms on a connection of its own: both
servers answer it at once with the same error, so it measures how long a new
request waits for the server's loop; the probe is a process of its own,
benchmarks/scale_probe.py, so that the agents' event loop does not delay it).
Then, in the same run: 32 concurrent clients' spawns and idle RSS
(benchmarks/figures.py), and a profile of execserver at the knee
(benchmarks/scale_profile.py).

    python -m benchmarks.scale [--smoke] [--agents 1 10 100 1000] [--duration S]

Writes benchmarks/results/scale.json (scale_smoke.json with --smoke) and the
PNG curves next to it (benchmarks/scale_plot.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks import figures, machine_noise, scale_plot, scale_profile
from benchmarks.committed_tree import daemon_tree
from benchmarks.figures import WORK, pct
from benchmarks.proc_tree import memory_tree, niced_executor, sample_tree
from benchmarks.scale_agent import OPERATIONS, prepare_workspace
from benchmarks.server_cgroup import cpu_cgroup_of, make_server_cgroup
from benchmarks.server_cpu import tree_cpu_split
from scripts.servers import PROJECT_ROOT, RunningServer, start_server

__all__ = ["main", "run", "run_level"]

RESULTS = Path(__file__).resolve().parent / "results"
SERVERS = ("execserver", "reference")
# The agents' own commands (benchmarks/scale_agent.py): a server's tree minus
# these is the server (its process and its helpers).
AGENT_COMMANDS = frozenset({"sh", "sleep", "cat", "true", "seq"})
# execserver's limits, lifted so that both servers run unlimited (the reference
# has no such limits).
OUR_FLAGS = [
    "--log-level",
    "warning",
    "--max-connections",
    "0",
    "--max-inflight-requests",
    "0",
    "--max-processes-per-session",
    "0",
]
PROBE_INTERVAL_S = 0.1
SAMPLE_INTERVAL_S = 0.5
# The agents' processes' nice value (benchmarks/scale_crowd.py says why 0).
AGENTS_NICE = 0
# The harness's own sampling threads (RSS, fds, PSS): below everyone, as they only
# watch (benchmarks/proc_tree.py).
SAMPLER_NICE = 10
# Before each level the machine settles: the last level's processes (at N = 1,000,
# the reference's thousand helpers and agents) can keep the CPUs busy for a minute
# after it ends, and the next level would pay for them. At most --settle seconds (120;
# none with --smoke, whose levels are small and which runs on busy CI machines) until a
# one-second sample finds the CPUs at most SETTLE_CPU_PERCENT busy.
SETTLE_CPU_PERCENT = 25.0
# How long an operation under way when the window closes may still take. The
# agents are out of step (benchmarks/scale_agent.py Agent._stagger), so an agent's
# one whole pass inside the level can start up to a pass after the window opened;
# at N = 1,000 a pass takes ~26 s and its patch ~23 s, and with 30 s here 754 of
# execserver's 1,176 patches were cut off (counted as lower bounds).
GRACE_S = 60.0
# A p99 from fewer samples than this is the largest of them, not a 99th percentile:
# the targets name such comparisons (at N = 1,000 the reference's agents may finish
# ten polls in a level; docs/scale.md).
MIN_P99_SAMPLES = 100


def autogroup_enabled() -> bool:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as flag:
            return flag.read().strip() == "1"
    except OSError:
        return False


def raise_fd_limit() -> int:
    """The soft fd limit up to the hard one; the servers inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@contextlib.asynccontextmanager
async def server(
    kind: str, tree: str | None, in_cgroup: bool = True
) -> AsyncIterator[RunningServer]:
    """A fresh server of ``kind``; with ``in_cgroup``, in a CPU cgroup of its own
    where one can be made (benchmarks/server_cgroup.py says why)."""
    cg = make_server_cgroup(f"bench-{kind}") if in_cgroup else "off"
    wrapper = [] if isinstance(cg, str) else cg.wrapper
    extra = OUR_FLAGS if kind == "execserver" else []
    try:
        if kind == "execserver" and tree is not None:
            env = {**os.environ, "PYTHONPATH": tree}
            started = start_server(kind, extra=extra, env=env, cwd=tree, wrapper=wrapper)
        else:
            started = start_server(kind, extra=extra, wrapper=wrapper)
        async with started as running:
            yield running
    finally:
        if not isinstance(cg, str):
            # Off the loop: it waits for the server's last processes to go.
            await asyncio.to_thread(cg.remove)


def sample_servers(pids: list[int]) -> dict[str, float]:
    """RSS and fds of the servers' own processes (without the agents' commands),
    and of their root processes alone, summed over the servers."""
    samples = [sample_tree(pid, AGENT_COMMANDS) for pid in pids]
    return {key: sum(sample[key] for sample in samples) for key in samples[0]}


def memory_now(pids: list[int]) -> dict[str, float]:
    """The servers' RSS and PSS at one moment (PSS: shared pages split between the
    processes that map them; benchmarks/proc_tree.py ``memory_tree``)."""
    trees = [memory_tree(pid, AGENT_COMMANDS) for pid in pids]
    return {key: sum(tree[key] for tree in trees) for key in ("rss_MB", "pss_MB")}


async def memory_mid_window(pids: list[int], after: float) -> dict[str, float]:
    """``memory_now`` ``after`` seconds into the window, read at the samplers' priority."""
    await asyncio.sleep(after)
    with niced_executor(SAMPLER_NICE) as reader:
        return await asyncio.get_running_loop().run_in_executor(reader, memory_now, pids)


def _timed_sample(pids: list[int]) -> tuple[dict[str, float], float]:
    """A sample, and the CPU seconds it took."""
    started = time.thread_time()
    sample = sample_servers(pids)
    return sample, time.thread_time() - started


async def probe_loop(
    url: str, lags: list[float], stop: asyncio.Event, probe_info: dict[str, Any]
) -> None:
    """The loop-lag probe (benchmarks/scale_probe.py) in a process of its own, for
    as long as ``stop`` is unset; its round trips go into ``lags``, whether it ran
    with a real-time class into ``probe_info``."""
    probe = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.scale_probe",
        url,
        str(PROBE_INTERVAL_S),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    assert probe.stdin is not None
    try:
        await stop.wait()
    finally:
        probe.stdin.close()
        out, _ = await probe.communicate()
    if probe.returncode != 0:
        raise RuntimeError(f"the loop-lag probe failed (status {probe.returncode})")
    result = json.loads(out)
    lags.extend(result["lags"])
    probe_info["realtime"] = result["realtime"]


async def sample_loop(
    pids: list[int], samples: list[dict[str, float]], stop: asyncio.Event
) -> None:
    loop = asyncio.get_running_loop()
    # At a low priority, and spaced so that it takes at most a tenth of a CPU
    # (benchmarks/proc_tree.py says why).
    with niced_executor(SAMPLER_NICE) as sampler:
        while not stop.is_set():
            sample, spent = await loop.run_in_executor(sampler, _timed_sample, pids)
            samples.append(sample)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(SAMPLE_INTERVAL_S, 10 * spent))


class Crowd:
    """One shard of the agents: a benchmarks/scale_crowd.py process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, spec: dict[str, Any]) -> Crowd:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.scale_crowd",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=PROJECT_ROOT,
            # The statistics come as one JSON line, megabytes at N = 1,000.
            limit=1 << 30,
            # A session of its own, whose CPU priority it lowers (scale_crowd.py).
            start_new_session=True,
        )
        crowd = cls(process)
        crowd.send(json.dumps(spec))
        return crowd

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")

    async def read(self) -> str:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            await self.process.wait()
            raise RuntimeError(f"an agents' process ended (status {self.process.returncode})")
        return line.decode()

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


def shards_for(agents: int, wanted: int | None) -> int:
    """Agents' processes: one per 250 agents, at most one per CPU."""
    if wanted:
        return max(1, min(wanted, agents))
    return max(1, min(os.cpu_count() or 1, agents // 250))


async def run_level(
    kind: str,
    agents: int,
    duration: float,
    think: float,
    tree: str | None,
    on_window: Any = None,
    warmup: float = 120.0,
    grace: float = GRACE_S,
    nice: int = AGENTS_NICE,
    shards: int | None = None,
    daemons: int = 1,
    in_cgroup: bool = True,
) -> dict[str, Any]:
    """One level: ``agents`` agents for ``duration`` seconds against a fresh server,
    after a warm-up of at most ``warmup`` seconds; passes under way when the
    window ends get ``grace`` seconds more. The agents run in ``shards``
    processes at ``nice`` (benchmarks/scale_crowd.py says why).
    ``on_window(pid)``: an async context manager entered for the measured window
    (the profiler). ``daemons``: that many servers side by side, shard ``i``
    talking to server ``i % daemons`` (benchmarks/scale_workers.py); their
    figures are summed (CPU, RSS, fds) or pooled (the probes' lags).
    ``in_cgroup``: each server in a CPU cgroup of its own where one can be made
    (benchmarks/server_cgroup.py)."""
    base = WORK / "execserver-scale" / kind
    secret = WORK / "execserver-scale" / "secret"
    secret.mkdir(parents=True, exist_ok=True)
    (secret / "key").write_text("not for the sandbox\n")
    workspaces = [base / f"a{i}" for i in range(agents)]
    for workspace in workspaces:
        prepare_workspace(workspace)
    # Every server gets a shard of its own.
    count = min(agents, max(shards_for(agents, shards), daemons))
    async with contextlib.AsyncExitStack() as servers:
        running = [
            await servers.enter_async_context(server(kind, tree, in_cgroup)) for _ in range(daemons)
        ]
        pids = [each.process.pid for each in running]
        cgroups = [cpu_cgroup_of(pid) for pid in pids]
        await asyncio.sleep(0.2)
        idle = sample_servers(pids)
        idle_memory = memory_now(pids)
        crowds: list[Crowd] = []
        setup_start = time.perf_counter()
        try:
            for shard in range(count):
                indices = list(range(shard, agents, count))
                spec = {
                    "url": running[shard % daemons].url,
                    "workspaces": [str(workspaces[i]) for i in indices],
                    "indices": indices,
                    "secret": str(secret),
                    "think": think,
                    "warmup": warmup,
                    "duration": duration,
                    "grace": grace,
                    "nice": nice,
                }
                crowds.append(await Crowd.start(spec))
            warm = 0
            for crowd in crowds:
                word, number = (await crowd.read()).split()
                assert word == "warm", word
                warm += int(number)
            setup_s = time.perf_counter() - setup_start
            lags: list[list[float]] = [[] for _ in running]
            samples: list[dict[str, float]] = []
            stop = asyncio.Event()
            probe_info: dict[str, Any] = {}
            watchers: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(probe_loop(each.url, own, stop, probe_info))
                for each, own in zip(running, lags, strict=True)
            ]
            watchers.append(asyncio.ensure_future(sample_loop(pids, samples, stop)))
            try:
                window_cm = on_window(pids[0]) if on_window else contextlib.nullcontext()
                async with contextlib.AsyncExitStack() as stack:
                    if on_window:
                        await stack.enter_async_context(window_cm)
                    cpu0 = [sum(tree_cpu_split(pid)) for pid in pids]
                    main0 = [main_thread_schedstat(pid) for pid in pids]
                    machine0 = await asyncio.to_thread(machine_noise.snapshot)
                    start = time.perf_counter()
                    for crowd in crowds:
                        crowd.send("go")
                    middle = asyncio.ensure_future(memory_mid_window(pids, duration / 2))
                    watchers.append(middle)
                    results = [json.loads(await crowd.read()) for crowd in crowds]
                    elapsed = time.perf_counter() - start
                    main1 = [main_thread_schedstat(pid) for pid in pids]
                    machine1 = await asyncio.to_thread(machine_noise.snapshot)
                    cpu1 = [sum(tree_cpu_split(pid)) for pid in pids]
            finally:
                stop.set()
                # Every watcher ends (the probes and the sampler on `stop`, the memory
                # reading on its own) before a failure of one is raised.
                ended = await asyncio.gather(*watchers, return_exceptions=True)
            for outcome in ended:
                if isinstance(outcome, BaseException):
                    raise outcome
            mid_memory = middle.result()
        finally:
            await asyncio.gather(*(c.stop() for c in crowds), return_exceptions=True)
    stats = [agent for result in results for agent in result["agents"]]
    own_lags = [lag for result in results for lag in result.get("own_lags", ())]
    all_lags = [lag for own in lags for lag in own]
    report = summarise(stats, idle, samples, all_lags, elapsed, setup_s, sum(cpu1) - sum(cpu0))
    report["warmed_agents"] = warm
    # Where the servers ran: a cgroup of their own, or the root ("/"), where
    # autogroup (if on) makes each of their commands a scheduling group.
    report["server_cpu_cgroups"] = cgroups
    report["autogroup_enabled"] = autogroup_enabled()
    # RSS counts a page shared by k processes k times, PSS once: both at the
    # window's middle, against before the agents connected.
    report["memory_mid_window"] = mid_memory
    report["memory_idle"] = idle_memory
    report["pss_per_session_MB"] = (mid_memory["pss_MB"] - idle_memory["pss_MB"]) / agents
    report["rss_per_session_mid_window_MB"] = (
        mid_memory["rss_MB"] - idle_memory["rss_MB"]
    ) / agents
    # The agents' own processes' loop lag over the window (benchmarks/scale_crowd.py):
    # every latency the agents measured includes a wait of this size.
    report["agents_loop_lag_p50_ms"] = statistics.median(own_lags) * 1e3 if own_lags else None
    report["agents_loop_lag_p99_ms"] = pct(own_lags, 0.99) * 1e3 if own_lags else None
    report["agent_processes"] = count
    report["agents_nice"] = nice
    report["agents_autogroup_niced"] = all(r.get("autogroup_niced") for r in results)
    report["probe_realtime"] = probe_info.get("realtime")
    # What else ran meanwhile (kernel threads, system daemons), in CPUs: the
    # harness's own tree (servers, agents, probes) left out.
    report["machine_other_cpu"] = machine_noise.other_cpu(
        machine0, machine1, elapsed, [os.getpid()]
    )
    shares = [
        {
            "running_share": (after[0] - before[0]) / 1e9 / elapsed,
            "waiting_for_cpu_share": (after[1] - before[1]) / 1e9 / elapsed,
        }
        for before, after in zip(main0, main1, strict=True)
    ]
    # One server's main thread, or the mean of the servers' (each is one loop).
    report["main_thread"] = {
        key: statistics.fmean(share[key] for share in shares) for key in shares[0]
    }
    if daemons > 1:
        report["daemons"] = daemons
        report["main_thread_by_daemon"] = shares
        report["loop_lag_p99_ms_by_daemon"] = [
            pct(own, 0.99) * 1e3 if own else None for own in lags
        ]
    return report


def main_thread_schedstat(pid: int) -> tuple[int, int]:
    """Nanoseconds the server's main thread (its event loop) ran, and waited
    runnable for a CPU (/proc/PID/schedstat). How busy the loop was, and how
    long the machine kept it from running."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            running, waiting, _ = f.read().split()
    except OSError:
        return 0, 0
    return int(running), int(waiting)


def summarise(
    stats: list[dict[str, Any]],
    idle: dict[str, float],
    samples: list[dict[str, float]],
    lags: list[float],
    elapsed: float,
    setup_s: float,
    cpu_s: float,
) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    total = 0
    errors = 0
    unfinished_total = 0
    for name in OPERATIONS:
        times = [t for a in stats for t in a["latencies"][name]]
        cut = [t for a in stats for t in a["unfinished"][name]]
        failed = sum(a["errors"][name] for a in stats)
        total += len(times)
        errors += failed
        unfinished_total += len(cut)
        # An unfinished operation's time so far is a lower bound of its
        # latency: it takes part in the percentiles, which then are lower
        # bounds too (flagged).
        bounded = times + cut
        ops[name] = {
            "count": len(times),
            "errors": failed,
            "unfinished": len(cut),
            "p50_ms": statistics.median(bounded) * 1e3 if bounded else None,
            "p99_ms": pct(bounded, 0.99) * 1e3 if bounded else None,
            "percentiles_are_lower_bounds": bool(cut),
        }
    peak = {k: max(s[k] for s in samples) for k in samples[0]} if samples else idle
    first_errors = [e for a in stats for e in a["first_errors"]][:5]
    stuck = [e for a in stats for e in a["stuck_in_warmup"]]
    return {
        "agents": len(stats),
        "window_s": elapsed,
        "setup_s": setup_s,
        "operations": ops,
        "ops_total": total,
        "errors_total": errors,
        "unfinished_total": unfinished_total,
        "first_errors": first_errors,
        # Not in the figures (started before the window), failures all the same.
        "warmup_errors_total": sum(a["warmup_errors"] for a in stats),
        "stuck_in_warmup": stuck[:5],
        "stuck_in_warmup_total": len(stuck),
        "throughput_ops_per_s": total / elapsed,
        "server_cpu_s": cpu_s,
        "server_cpu_share": cpu_s / elapsed,
        "server_cpu_s_per_1k_ops": cpu_s / total * 1000 if total else None,
        "idle": idle,
        "peak": peak,
        "rss_per_session_MB": (peak["rss_MB"] - idle["rss_MB"]) / len(stats),
        "loop_lag_p50_ms": statistics.median(lags) * 1e3 if lags else None,
        "loop_lag_p99_ms": pct(lags, 0.99) * 1e3 if lags else None,
        "loop_lag_max_ms": max(lags) * 1e3 if lags else None,
        "probes": len(lags),
    }


def ratios(ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in OPERATIONS:
        for key in ("p50_ms", "p99_ms"):
            a, b = ours["operations"][name][key], ref["operations"][name][key]
            if a is not None and b:
                out[f"{name}_{key}"] = a / b
    for key in (
        "throughput_ops_per_s",
        "server_cpu_s_per_1k_ops",
        "rss_per_session_MB",
        "loop_lag_p99_ms",
    ):
        a, b = ours.get(key), ref.get(key)
        if a is not None and b:
            out[key] = a / b
    a, b = ours["peak"]["rss_MB"], ref["peak"]["rss_MB"]
    if b:
        out["rss_MB"] = a / b
    return out


def knee(levels: dict[str, dict[str, Any]], kind: str) -> int | None:
    """The first level where the server saturates: its throughput per agent fell
    below half of one agent's, or its loop lag p99 passed 50 ms."""
    ordered = sorted(levels.items(), key=lambda item: int(item[0]))
    if not ordered:
        return None
    single = ordered[0][1][kind]
    per_agent = single["throughput_ops_per_s"] / single["agents"]
    for n, entry in ordered:
        level = entry[kind]
        if (
            level["throughput_ops_per_s"] / level["agents"] < 0.5 * per_agent
            or (level["loop_lag_p99_ms"] or 0) > 50
        ):
            return int(n)
    return None


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets at the largest level."""
    top = str(max(int(n) for n in report["levels"]))
    entry = report["levels"][top]
    ours, ratio = entry["execserver"], entry.get("ratio", {})
    p99 = {name: ratio.get(f"{name}_p99_ms") for name in OPERATIONS}
    # Our p99 taken from unfinished operations is only a lower bound: no claim.
    ours_bounded = [
        name for name in OPERATIONS if ours["operations"][name]["percentiles_are_lower_bounds"]
    ]
    extra = report.get("figures", {})
    spawns = extra.get("concurrent_spawns_32", {}).get("ratio", {}).get("spawns_per_s")
    idle = extra.get("idle_rss", {}).get("ratio", {}).get("idle_rss_MB")
    return {
        "at_agents": int(top),
        "p99_ratio_per_operation": p99,
        "p99_le_half_reference": not ours_bounded
        and all(v is not None and v <= 0.5 for v in p99.values()),
        "p99_ours_lower_bounds": ours_bounded,
        "p99_reference_lower_bounds": [
            name
            for name in OPERATIONS
            if entry["reference"]["operations"][name]["percentiles_are_lower_bounds"]
        ],
        "p99_reference_few_samples": [
            name
            for name in OPERATIONS
            if entry["reference"]["operations"][name]["count"] < MIN_P99_SAMPLES
        ],
        "rss_per_session_ratio": ratio.get("rss_per_session_MB"),
        "rss_per_session_le_reference": (ratio.get("rss_per_session_MB") or 99) <= 1.0,
        "errors": ours["errors_total"],
        "warmup_errors": ours["warmup_errors_total"],
        "stuck_in_warmup": ours["stuck_in_warmup_total"],
        "unfinished": ours["unfinished_total"],
        "loop_lag_p99_ms": ours["loop_lag_p99_ms"],
        "loop_lag_p99_lt_50ms": (ours["loop_lag_p99_ms"] or 99) < 50,
        "concurrent_spawns_32_ratio": spawns,
        "concurrent_spawns_32_ge_3x": spawns is not None and spawns >= 3,
        "idle_rss_ratio": idle,
        "idle_rss_le_reference": idle is not None and idle <= 1.0,
    }


async def side_figures(
    tree: str | None, rounds: int, smoke: bool, in_cgroup: bool = True
) -> dict[str, Any]:
    """32 concurrent clients' spawns and idle RSS, interleaved, medians over ``rounds``."""
    out: dict[str, Any] = {}
    named: dict[str, Callable[[RunningServer], Awaitable[dict[str, float]]]] = {
        "concurrent_spawns_32": lambda srv: figures.concurrent_spawns(
            srv.url, 32, 2 if smoke else 10
        ),
        "idle_rss": lambda srv: figures.idle_rss(srv.url, srv.process.pid),
    }
    for name, run_figure in named.items():
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in SERVERS}
        for r in range(rounds):
            for kind in SERVERS if r % 2 == 0 else tuple(reversed(SERVERS)):
                async with server(kind, tree, in_cgroup) as running:
                    result = await run_figure(running)
                result.pop("ops", None)
                samples[kind].append(result)
        entry: dict[str, Any] = {
            kind: {k: statistics.median(s[k] for s in samples[kind]) for k in samples[kind][0]}
            for kind in SERVERS
        }
        entry["ratio"] = {
            k: entry["execserver"][k] / entry["reference"][k]
            for k in entry["execserver"]
            if entry["reference"].get(k)
        }
        out[name] = entry
        print(f"{name}: {json.dumps(entry)}", flush=True)
    return out


async def settle(most_s: float) -> dict[str, float]:
    """Wait for a quiet machine (see SETTLE_CPU_PERCENT), at most ``most_s`` seconds;
    how long it took, and the CPU use of the last sample (in the level's JSON)."""
    if most_s <= 0:
        return {"waited_s": 0.0}
    start = time.perf_counter()
    while True:
        busy = await asyncio.to_thread(psutil.cpu_percent, 1.0)
        waited = time.perf_counter() - start
        if busy <= SETTLE_CPU_PERCENT or waited >= most_s:
            return {"waited_s": round(waited, 1), "cpu_percent": busy}


def _load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1_5_15": [one, five, fifteen], "cpu_percent": psutil.cpu_percent(0.5)}


async def run(args: argparse.Namespace, tree: str | None, commit: str) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": {
            "cpus": psutil.cpu_count(),
            "memory_GB": round(psutil.virtual_memory().total / 1e9, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "fd_limit": raise_fd_limit(),
            "page_fault_us": round(machine_noise.page_fault_us(), 2),
        },
        "mode": "smoke" if args.smoke else "full",
        "daemon_commit": commit,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "settings": {
            "agents": args.agents,
            "duration_s": args.duration,
            "think_s": args.think,
            "warmup_max_s": args.warmup,
            "grace_s": args.grace,
            "settle_max_s": args.settle,
            "probe_interval_s": PROBE_INTERVAL_S,
            "operations": list(OPERATIONS),
            "servers_in_own_cpu_cgroup": args.server_cgroup,
        },
        "load_before": _load(),
        "levels": {},
    }
    for index, n in enumerate(args.agents):
        order = SERVERS if index % 2 == 0 else tuple(reversed(SERVERS))
        entry: dict[str, Any] = {"order": list(order)}
        for kind in order:
            settled = await settle(args.settle)
            entry[kind] = await run_level(
                kind,
                n,
                args.duration,
                args.think,
                tree,
                warmup=args.warmup,
                grace=args.grace,
                in_cgroup=args.server_cgroup,
            )
            entry[kind]["settled_before"] = settled
            entry[kind]["load_after"] = _load()
            print_level(kind, entry[kind])
        entry["ratio"] = ratios(entry["execserver"], entry["reference"])
        report["levels"][str(n)] = entry
    report["figures"] = await side_figures(
        tree, 1 if args.smoke else 3, args.smoke, args.server_cgroup
    )
    report["knee"] = {kind: knee(report["levels"], kind) for kind in SERVERS}
    report["targets"] = targets(report)
    if args.profile:
        at = report["knee"]["execserver"] or max(args.agents)
        report["profile"] = await scale_profile.profile_at(
            at,
            args.duration,
            args.think,
            lambda pid_window: run_level(
                "execserver",
                at,
                args.duration,
                args.think,
                tree,
                pid_window,
                in_cgroup=args.server_cgroup,
            ),
            # Next to the JSON (a test's run writes its own directory, not the tree's).
            args.out.with_name(args.out.stem + "_profile.txt"),
        )
    report["load_after"] = _load()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return report


def print_level(kind: str, level: dict[str, Any]) -> None:
    ops = " ".join(
        f"{name}={o['p50_ms'] or 0:.1f}/{o['p99_ms'] or 0:.1f}ms"
        for name, o in level["operations"].items()
    )
    print(
        f"N={level['agents']:5} {kind:10} {level['throughput_ops_per_s']:8.1f} ops/s "
        f"errors={level['errors_total']} unfinished={level['unfinished_total']} "
        f"warm-up errors={level['warmup_errors_total']} "
        f"stuck={level['stuck_in_warmup_total']} "
        f"warm={level['warmed_agents']} lag99={level['loop_lag_p99_ms'] or 0:.1f}ms "
        f"agents-lag99={level.get('agents_loop_lag_p99_ms') or 0:.1f}ms "
        f"rss={level['peak']['rss_MB']:.0f}MB/session={level['rss_per_session_MB']:.2f}MB "
        f"pss/session={level.get('pss_per_session_MB') or 0:.2f}MB "
        f"fds={level['peak']['fds']:.0f} "
        f"cpu/1k={level['server_cpu_s_per_1k_ops'] or 0:.2f}s "
        f"others={_others(level)} | {ops}",
        flush=True,
    )


def _others(level: dict[str, Any]) -> str:
    """The machine's other CPU use, e.g. ``0.71(kdamond.0:0.58,kworker:0.07)``."""
    other = level.get("machine_other_cpu") or {}
    named = ",".join(
        f"{name}:{cpus:.2f}" for name, cpus in list(other.get("by_name", {}).items())[:3]
    )
    return f"{other.get('total', 0.0):.2f}({named})"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="N = 1 and 10, 3 s each")
    parser.add_argument("--agents", type=int, nargs="*", default=None)
    parser.add_argument("--duration", type=float, default=None, help="seconds per level")
    parser.add_argument("--think", type=float, default=0.5, help="mean pause between iterations")
    parser.add_argument(
        "--warmup", type=float, default=120.0, help="at most this many seconds of warm-up per level"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=GRACE_S,
        help="seconds an operation under way at the window's end may take to finish",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="at most this many seconds of waiting for quiet CPUs before a level "
        "(default 120, 0 with --smoke)",
    )
    parser.add_argument("--out", type=Path, default=None, help="the JSON (PNGs next to it)")
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument(
        "--no-server-cgroup",
        dest="server_cgroup",
        action="store_false",
        help="run the servers where the harness runs, not each in a CPU cgroup of its own",
    )
    parser.add_argument(
        "--working-tree",
        action="store_true",
        help="serve the working tree's execserver, not the committed one",
    )
    args = parser.parse_args(argv)
    if args.agents is None:
        args.agents = [1, 10] if args.smoke else [1, 10, 100, 1000]
    if args.duration is None:
        args.duration = 3.0 if args.smoke else 20.0
    if args.settle is None:
        args.settle = 0.0 if args.smoke else 120.0
    if args.out is None:
        args.out = RESULTS / ("scale_smoke.json" if args.smoke else "scale.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_fd_limit()
    with daemon_tree(args.working_tree) as (tree, commit):
        report = asyncio.run(run(args, tree, commit))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for image in scale_plot.plot(report, args.out.with_suffix("")):
        print(f"wrote {image}", flush=True)
    print(f"wrote {args.out}", flush=True)
    print(json.dumps(report["targets"], indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
