"""What a persistent sandboxed fs helper costs: memory, start, a warm call.

``python -m benchmarks.fs_helper_cost [--helpers 20] [--calls 500]`` drives the
daemon's own sandboxed-fs client (``SandboxedFs``: the pool, the real bwrap
helpers on the private runtime) in this process, one workspace-write policy
per helper (each its own workspace, as agents have), and prints JSON:

- ``start_ms``: the first ``read_file`` of each new policy (the helper's start
  and the call), p50 and max over ``--helpers``;
- ``pss_mb``: PSS (``/proc/<pid>/smaps_rollup``) of each helper's process tree
  (bwrap and the interpreter) with all ``--helpers`` alive, mean; of its
  interpreter alone; and of the tree of the helper that then served the calls
  below (``tree_after_use``);
- ``warm_us``: a 4 KiB ``read_file`` through one warm helper, ``--calls``
  sequential calls, p50 and p99; ``pipelined_us``: the same, 16 in flight, the
  wall time per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.sandboxed_fs import deny_read_context
from execserver.fs.sandboxed.client import SandboxedFs
from execserver.sandbox.backend import probe_backend
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context


def _context(ws: Path, secret: Path) -> FileSystemSandboxContext:
    # The scale agents' context: workspace-write plus one deny-read entry.
    return decode_sandbox_context(deny_read_context(ws, secret))


def _pss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _tree_pss(pid: int) -> tuple[int, int]:
    """(PSS of the whole tree, PSS of its Python interpreters), in kB."""
    root = psutil.Process(pid)
    total = interpreters = 0
    for process in [root, *root.children(recursive=True)]:
        kb = _pss_kb(process.pid)
        total += kb
        if "python" in " ".join(process.cmdline()):
            if process.name() != "bwrap":
                interpreters += kb
    return total, interpreters


async def _run(helpers: int, calls: int) -> dict[str, Any]:
    client = SandboxedFs(probe_backend(), max_helpers=helpers + 8)
    with tempfile.TemporaryDirectory(prefix="fs-helper-cost-") as base:
        root = Path(base)
        secret = root / "secret"
        secret.mkdir()
        contexts = []
        for n in range(helpers):
            ws = root / f"ws{n}"
            ws.mkdir()
            (ws / "f.txt").write_bytes(os.urandom(4096))
            contexts.append((_context(ws, secret), str(ws / "f.txt")))
        try:
            starts = []
            for box, path in contexts:
                began = time.perf_counter()
                data = await client.call(box, "read_file", {"path": path})
                starts.append((time.perf_counter() - began) * 1e3)
                assert len(data) == 4096
            live = client.pool.live()
            assert len(live) == helpers, len(live)
            pss = [_tree_pss(helper.process.pid) for helper in live]
            box, path = contexts[0]
            for _ in range(50):
                await client.call(box, "read_file", {"path": path})
            warm = []
            for _ in range(calls):
                began = time.perf_counter()
                await client.call(box, "read_file", {"path": path})
                warm.append((time.perf_counter() - began) * 1e6)
            began = time.perf_counter()
            semaphore = asyncio.Semaphore(16)

            async def one() -> None:
                async with semaphore:
                    await client.call(box, "read_file", {"path": path})

            await asyncio.gather(*(one() for _ in range(calls)))
            pipelined = (time.perf_counter() - began) * 1e6 / calls
            # The helper that served them all (on its four threads), after use.
            used = _tree_pss(live[0].process.pid)
        finally:
            await client.aclose()
    warm.sort()
    return {
        "helpers": helpers,
        "start_ms": {"p50": statistics.median(starts), "max": max(starts)},
        "pss_mb": {
            "tree": statistics.mean(t for t, _ in pss) / 1024,
            "interpreter": statistics.mean(i for _, i in pss) / 1024,
            "tree_after_use": used[0] / 1024,
        },
        "warm_us": {"p50": statistics.median(warm), "p99": warm[int(len(warm) * 0.99)]},
        "pipelined_us": pipelined,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helpers", type=int, default=20)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    json.dump(asyncio.run(_run(args.helpers, args.calls)), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
