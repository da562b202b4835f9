"""bwrap's status pipes are read by one watcher thread (sandbox/plan.py), not by a
thread per sandboxed launch: sandboxes alive at once still cost one thread, and each
one's mount points are released when its bwrap exits."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.support.sandbox import ROOT_READ, context, make_tree, managed, run_sandboxed


def _status_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "sandbox-status")


async def test_sandboxes_alive_at_once_share_one_status_watcher(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([ROOT_READ]))
    seen: list[int] = []

    async def one(index: int) -> int:
        # Alive long enough for all six to overlap; the count is taken meanwhile.
        launched = asyncio.ensure_future(run_sandboxed(ctx, "sleep 0.5; echo ok", tree))
        await asyncio.sleep(0.3)
        seen.append(_status_threads())
        out = await launched
        assert out.exit_code == 0 and out.output == "ok\n", out.output
        return index

    assert sorted(await asyncio.gather(*(one(i) for i in range(6)))) == list(range(6))
    assert max(seen) == 1
