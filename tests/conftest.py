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
