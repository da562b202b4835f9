"""Shared fixtures: real servers on 127.0.0.1 (ours and the reference)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.servers import RunningServer, start_server


@pytest.fixture
async def execserver() -> AsyncIterator[RunningServer]:
    """A fresh execserver daemon (real subprocess) for this test."""
    async with start_server("execserver") as server:
        yield server


@pytest.fixture
async def reference() -> AsyncIterator[RunningServer]:
    """A fresh reference `codex exec-server` 0.169.0 for this test."""
    async with start_server("reference") as server:
        yield server


@pytest.fixture(params=["execserver", "reference"])
async def any_server(request: pytest.FixtureRequest) -> AsyncIterator[RunningServer]:
    """Runs the test once against execserver and once against the reference."""
    async with start_server(request.param) as server:
        yield server


# ---- no orphans: every integration test must leave no process behind -----------

_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Orphaned grandchildren (setsid escapees included) are re-parented to the
    test runner instead of init, so the leak check below can see them."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


_become_subreaper()


def _descendants() -> dict[int, str]:
    import psutil

    out: dict[int, str] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out[child.pid] = " ".join(child.cmdline()[:4])
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.fixture(autouse=True)
async def no_leftover_processes(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """After each integration test, no process it started may survive."""
    import asyncio

    if not {"integration", "reliability", "security"} & set(request.node.path.parts):
        yield
        return
    before = set(_descendants())
    yield
    leftover: dict[int, str] = {}
    for _ in range(100):  # up to ~10 s for servers and their children to wind down
        leftover = {pid: cmd for pid, cmd in _descendants().items() if pid not in before}
        if not leftover:
            break
        await asyncio.sleep(0.1)
    assert not leftover, f"processes left behind by the test: {leftover}"
