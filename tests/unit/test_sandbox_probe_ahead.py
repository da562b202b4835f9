"""``probing_ahead`` (execserver/sandbox/backend.py): ``serve`` starts the sandbox
probe before it imports the daemon, and the daemon's ``probe_backend`` call takes
that result instead of probing again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from execserver.sandbox import backend
from execserver.sandbox.backend import probe_backend, probing_ahead


@pytest.fixture
def counting_bwrap(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in bwrap that succeeds and appends a line per run to a log: how many
    times the host was probed."""
    log = tmp_path / "runs"
    log.touch()
    script = tmp_path / "bwrap"
    script.write_text(f"#!/bin/sh\necho run >> {log}\nexit 0\n")
    script.chmod(0o755)
    return str(script), log


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines())


def _wait_for_runs(log: Path, at_least: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _runs(log) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)


needs_seccomp = pytest.mark.skipif(
    not backend._seccomp_ok(), reason="bwrap is probed only where seccomp filters work"
)


@needs_seccomp
def test_the_probe_started_ahead_is_the_one_probe_backend_returns(
    counting_bwrap: tuple[str, Path],
) -> None:
    bwrap, log = counting_bwrap
    with probing_ahead(bwrap=bwrap, allow_landlock=False):
        _wait_for_runs(log, 1)  # it started without anyone asking
        assert _runs(log) == 1
        found = probe_backend(bwrap=bwrap, allow_landlock=False)
        assert found.bwrap == bwrap
        assert _runs(log) == 1  # taken, not probed again
        # Taken once: the next call probes afresh.
        probe_backend(bwrap=bwrap, allow_landlock=False)
        assert _runs(log) == 2


@needs_seccomp
def test_other_arguments_and_calls_after_the_block_probe_afresh(
    counting_bwrap: tuple[str, Path],
) -> None:
    bwrap, log = counting_bwrap
    with probing_ahead(bwrap=bwrap, allow_landlock=False):
        _wait_for_runs(log, 1)
        probe_backend(bwrap=bwrap, allow_landlock=True)  # not what was started
        assert _runs(log) == 2
    probe_backend(bwrap=bwrap, allow_landlock=False)  # the unclaimed one was dropped
    assert _runs(log) == 3
