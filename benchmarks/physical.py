"""Physical limits of this machine, printed beside the figures."""

from __future__ import annotations

import statistics
import subprocess
import time


def fork_exec_true_ms(n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(["true"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def pipe_bandwidth_mb_s(megabytes: int) -> float:
    start = time.perf_counter()
    subprocess.run(
        f"head -c {megabytes * 1024 * 1024} /dev/zero | cat > /dev/null", shell=True, check=True
    )
    return megabytes * 1024 * 1024 / (time.perf_counter() - start) / 1e6
