"""A sandboxed fs helper that never comes up: its callers are not held for
good. It is killed at its start timeout, its process tree is logged, and the
call runs in a fresh helper (a persistent one) or fails with -32603 naming the
timeout. Real bwrap helpers, stalled before their ready frame by the tests'
own helper program (stalling_fs_helper.py). And a helper whose bwrap exits
while something in its process group still holds its sockets ends with bwrap."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from pathlib import Path

import pytest

from execserver.fs.sandboxed.client import SandboxedFs
from execserver.fs.sandboxed.helper import FsHelper
from execserver.fs.sandboxed.pool import HelperPool
from execserver.sandbox.fs_helper.launch import spawn_helper_process
from execserver.sandbox.plan import LaunchPlan
from execserver.sandbox.policy import ResolvedPolicy, resolve_policy
from execserver.wire.errors import INTERNAL_ERROR, RpcError
from tests.integration.stalling_fs_helper import TOKEN_DIR
from tests.support.procinfo import wait_until
from tests.support.sandbox import ROOT_READ, context, entry, host_backend, managed

MODULE = "tests.integration.stalling_fs_helper"
HELPER_LOG = "execserver.fs.sandboxed.helper"


def stalling_setup(tmp_path: Path, tokens: int) -> tuple[ResolvedPolicy, Path]:
    """A policy whose view holds ``tokens`` stall tokens, and a file to read."""
    token_dir = tmp_path / TOKEN_DIR
    token_dir.mkdir()
    for n in range(tokens):
        (token_dir / f"token-{n}").write_text("")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f").write_text("served")
    ctx = context(managed([ROOT_READ, entry(token_dir, "write"), entry(tmp_path / "ws", "read")]))
    return resolve_policy(ctx, fallback_cwd=None), tmp_path / "ws" / "f"


def helpers_of_this_test() -> list[int]:
    """Live processes running the stalling program (its module is in the command line)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if MODULE.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def stalled_reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == HELPER_LOG and "did not start within" in r.getMessage()
    ]


@pytest.mark.xdist_group("fs-helper-stall")
async def test_a_helper_that_never_starts_is_replaced_and_the_call_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy, target = stalling_setup(tmp_path, tokens=1)
    pool = HelperPool(module=MODULE, start_timeout=3.0)
    caplog.set_level(logging.WARNING, logger=HELPER_LOG)
    try:
        started = time.monotonic()
        served, data = await pool.call(policy, host_backend(), "read_file", {"path": str(target)})
        assert (served, data) == (True, b"served")
        assert time.monotonic() - started >= 3.0  # the first helper was waited for, then killed
        assert list((tmp_path / TOKEN_DIR).glob("token-*")) == []  # it took the token
        # Logged once its processes were looked at (in a thread), before it was killed.
        assert await wait_until(lambda: len(stalled_reports(caplog)) == 1, timeout=10)
        (report,) = stalled_reports(caplog)
        assert "did not start within 3 s" in report
        # Its tree, from bwrap down to the stalled program, with where each thread sleeps.
        assert "(bwrap)" in report and report.count("\npid ") >= 1 and " in " in report
        (helper,) = pool.live()
        assert helper.process.returncode is None
        # Only the serving helper is left: the stalled one was killed, bwrap and all.
        assert await wait_until(lambda: len(helpers_of_this_test()) <= 2, timeout=10)
    finally:
        await pool.aclose()
    assert await wait_until(lambda: helpers_of_this_test() == [], timeout=10)


@pytest.mark.xdist_group("fs-helper-stall")
async def test_helpers_that_never_start_fail_the_call_with_the_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy, target = stalling_setup(tmp_path, tokens=3)
    pool = HelperPool(module=MODULE, start_timeout=1.0)
    caplog.set_level(logging.WARNING, logger=HELPER_LOG)
    try:
        with pytest.raises(RpcError) as info:
            await pool.call(policy, host_backend(), "read_file", {"path": str(target)})
        assert (info.value.code, info.value.message) == (
            INTERNAL_ERROR,
            "fs sandbox helper did not start within 1 s",
        )
        # One fresh helper per attempt, each reported.
        assert await wait_until(lambda: len(stalled_reports(caplog)) == 3, timeout=10)
        assert pool.live() == []
        # Tokens gone: the next call's helper comes up.
        served, data = await pool.call(policy, host_backend(), "read_file", {"path": str(target)})
        assert (served, data) == (True, b"served")
    finally:
        await pool.aclose()
    assert await wait_until(lambda: helpers_of_this_test() == [], timeout=10)


@pytest.mark.xdist_group("fs-helper-stall")
async def test_a_one_call_helper_that_never_starts_fails_the_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, target = stalling_setup(tmp_path, tokens=1)
    fs = SandboxedFs(host_backend(), persistent=False, module=MODULE, start_timeout=1.0)
    caplog.set_level(logging.WARNING, logger=HELPER_LOG)
    ctx = context(
        managed([ROOT_READ, entry(tmp_path / TOKEN_DIR, "write"), entry(tmp_path / "ws", "read")])
    )
    try:
        with pytest.raises(RpcError) as info:
            await fs.call(ctx, "read_file", {"path": str(target)})
        assert (info.value.code, info.value.message) == (
            INTERNAL_ERROR,
            "fs sandbox helper did not start within 1 s",
        )
        assert await wait_until(lambda: len(stalled_reports(caplog)) == 1, timeout=10)
        assert await wait_until(lambda: helpers_of_this_test() == [], timeout=10)
        assert await fs.call(ctx, "read_file", {"path": str(target)}) == b"served"
    finally:
        await fs.aclose()


def group_members(pgid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(name))
    return members


async def test_a_helper_ends_with_its_bwrap_even_when_its_group_holds_the_sockets() -> None:
    """As when bwrap fails after creating its child and before writing the child's
    uid map: the child stays, blocked, with the helper's sockets. Here the
    "bwrap" is a shell that leaves a sleep behind in its group, holding stdout (the
    responses) and stderr, and exits before any ready frame."""
    plan = LaunchPlan(
        argv=["sh", "-c", "sleep 300 & echo 'bwrap: setting up uid map: gone' >&2; exit 1"],
        env={"PATH": "/usr/bin:/bin"},
    )
    helper = FsHelper(await spawn_helper_process(plan), start_timeout=120.0)
    try:
        started = time.monotonic()
        with pytest.raises(RpcError) as info:
            await asyncio.wait_for(helper.call("read_file", {"path": "/etc/hostname"}), 60)
        # Failed as a helper that died (the reference's text), long before the timeout.
        assert time.monotonic() - started < 60
        assert (info.value.code, info.value.message) == (
            INTERNAL_ERROR,
            "fs sandbox helper failed with status exit status: 1: bwrap: setting up uid map: gone",
        )
        assert await wait_until(lambda: group_members(helper.process.pid) == [], timeout=10)
    finally:
        helper.kill()
        await helper.aclose()


async def test_a_helper_whose_sockets_are_held_outside_its_group_ends_all_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever else holds the helper's end of its sockets once bwrap has exited
    and its group was killed, the daemon closes its own ends, and names the
    holder in its log."""
    moved = tmp_path / "moved"  # written once the sleep is in a session of its own
    script = (
        'setsid sh -c \'echo moved > "$0"; exec sleep 301\' "$0" & '
        'while [ ! -s "$0" ]; do sleep 0.01; done; '
        "echo 'bwrap: gone' >&2; exit 1"
    )
    plan = LaunchPlan(argv=["sh", "-c", script, str(moved)], env={"PATH": "/usr/bin:/bin"})
    caplog.set_level(logging.WARNING, logger=HELPER_LOG)
    helper = FsHelper(await spawn_helper_process(plan), start_timeout=120.0)
    holders: list[int] = []
    try:
        started = time.monotonic()
        with pytest.raises(RpcError) as info:
            await asyncio.wait_for(helper.call("read_file", {"path": "/etc/hostname"}), 60)
        assert time.monotonic() - started < 60
        assert info.value.message.startswith("fs sandbox helper failed with status exit status: 1:")
        (report,) = [r.getMessage() for r in caplog.records if "still open in" in r.getMessage()]
        # The sleep holds both sockets (stdout, stderr): named once for each.
        holders = sorted({int(pid) for pid in re.findall(r"(\d+) \(sleep\) fd \d+", report)})
        assert len(holders) == 1 and report.count(f"{holders[0]} (sleep) fd") >= 2, report
    finally:
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        helper.kill()
        await helper.aclose()
