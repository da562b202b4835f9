"""Shared fixtures: real servers on 127.0.0.1 (ours and the reference)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from execserver.sandbox.policy import PROTECTED_NAMES
from tests.support.ordering import longest_first
from tests.support.procinfo import command_line, live_descendant_pids
from tests.support.servers import (
    ReferenceUnavailable,
    RunningServer,
    reference_binary,
    start_server,
)
from tests.support.shared_daemon import SharedDaemon, helper_subtrees
from tests.support.state_dir import end_keepers

# ---- ^C reaches the commands the tests interrupt ------------------------------
#
# A shell starts a background job (`make test &`, nohup, a CI runner's step) with
# SIGINT ignored, and an ignored signal stays ignored across fork and exec. Every
# command a test spawns would then inherit the ignore, and the tests that press
# ^C on `execserver run`/`patch` would wait out their command's timeout instead
# (exit 255 after CONNECT_TIMEOUT, not 130): the commands rightly honour an
# inherited ignore, as every POSIX tool does, so the suite restores the default
# for itself and its children. A handled signal is reset to the default by exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# ---- the commands the tests start read no one's startup files -------------------
#
# Under the network filter bash takes a `bash -c` for an rsh login and sources
# ~/.bashrc (as it does under codex: execserver/sandbox/seccomp.py says why), and
# a login shell reads ~/.profile. The output the tests compare would then carry
# whatever the developer's startup files print: a pyenv `init` in ~/.bashrc wrote
# "pyenv: cannot rehash: ... isn't writable" from inside read-only sandboxes and
# failed seven unified-exec tests in one run. So the suite, the daemons it starts
# and their commands get an empty HOME of their own (one per pytest process); the
# caches stay where they were, so the reference is not installed again.
_REAL_HOME = os.path.expanduser("~")
os.environ.setdefault("XDG_CACHE_HOME", os.path.join(_REAL_HOME, ".cache"))
os.environ.setdefault("npm_config_cache", os.path.join(_REAL_HOME, ".npm"))
_SUITE_HOME = tempfile.TemporaryDirectory(prefix="execserver-test-home-")
os.environ["HOME"] = _SUITE_HOME.name

# ---- the daemons the tests start skip the start-up sandbox report -----------------
#
# `execserver serve` runs the doctor's policy-shape probe in the background at every
# start (sandboxes spawned for each shape): ~90 ms of CPU a daemon, and the suite
# starts hundreds of daemons on a CPU-bound 2-core budget. scripts/servers.py's
# start_server already turns it off; this does the same for the daemons the CLI,
# serve_local() and the survival tests start. The tests of the report itself
# (tests/unit/test_doctor.py) set EXECSERVER_STARTUP_PROBE=1 for their daemons.
os.environ.setdefault("EXECSERVER_STARTUP_PROBE", "0")

# ---- the protected names under /tmp exist for the whole run -----------------------
#
# Sandboxes that make /tmp writable keep /tmp/.git, /tmp/.codex, /tmp/.agents and
# /tmp/.aws read-only; where one is missing, a daemon makes an empty directory there
# as a mount point for the sandbox's time and removes it after. Between execserver
# daemons that is coordinated (execserver/sandbox/mounts.py: a mark and a lock), but
# the reference, which this suite runs side by side with ours, takes no part in it:
# a reference daemon can make /tmp/.codex, one of ours find it (unmarked: a directory
# of the host's, to bind read-only), and the reference remove it before our bwrap
# binds it: "Can't find source path /tmp/.codex" failed a test in a loaded `make
# test` run (tests/interop groups the codex CLI's runs for the same race). So the names exist
# as the host's own directories while the suite runs, as /tmp/.git does on many
# machines: no daemon makes or removes them. Made when this file is first imported
# (by the xdist controller, before its workers start), removed when the run ends, if
# still empty, by the process that made them.
_TMP_PROTECTED: list[Path] = []
for _name in PROTECTED_NAMES:
    _path = Path("/tmp") / _name
    try:
        _path.mkdir()
    except OSError:
        continue  # already there (the host's, or a running suite's), or /tmp read-only
    _TMP_PROTECTED.append(_path)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the protected-name directories this process made (see above), if empty.
    Only the controller (or a run without xdist): a worker ends before the run does."""
    if hasattr(config, "workerinput"):
        return
    for path in _TMP_PROTECTED:
        with contextlib.suppress(OSError):  # not empty: something of the host's now
            path.rmdir()


# ---- the reference binary: resolved once, its absence is one skip reason ---------
#
# A test needs the reference when it is marked `interop` or `needs_reference`,
# uses the `reference` fixture, or is parametrized with "reference" (the
# `any_server`-style fixtures: only their reference half needs it). Without it
# those tests are skipped, all under the single reason below, and everything
# else runs. CI sets EXECSERVER_REQUIRE_REFERENCE=1, which makes the absence an
# error instead, so the comparison with the reference can never silently vanish.

REQUIRE_REFERENCE = os.environ.get("EXECSERVER_REQUIRE_REFERENCE") == "1"
_unavailable: list[str] = []  # the one reason, once known


def _mentions_reference(value: object) -> bool:
    if isinstance(value, str):
        return value == "reference"
    if isinstance(value, tuple | list):
        return any(_mentions_reference(v) for v in value)
    return False


def _needs_reference(item: pytest.Item) -> bool:
    if item.get_closest_marker("interop") or item.get_closest_marker("needs_reference"):
        return True
    if "reference" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(_mentions_reference(v) for v in callspec.params.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the longest tests first (tests/support/ordering.py says
    why). Then install or find the reference once, before any test (outside test
    timeouts)."""
    if hasattr(config, "workerinput"):
        longest_first(items)
    if not any(_needs_reference(item) for item in items):
        return
    try:
        reference_binary()
    except ReferenceUnavailable as exc:
        if REQUIRE_REFERENCE:
            raise pytest.UsageError(
                f"EXECSERVER_REQUIRE_REFERENCE=1 but the reference is unavailable: {exc}"
            ) from None
        _unavailable.append(str(exc))


def _reference_skip_reason() -> str:
    return _unavailable[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _unavailable and _needs_reference(item):
        pytest.skip(_reference_skip_reason())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    """Every reference skip is reported from one place with one reason, so the
    summary folds them into one line; a test that reached for the reference
    without being recognised above is skipped the same way (not under
    EXECSERVER_REQUIRE_REFERENCE=1: then it fails)."""
    report: pytest.TestReport = yield
    excinfo = call.excinfo
    if excinfo is None:
        return report
    if excinfo.errisinstance(ReferenceUnavailable) and not REQUIRE_REFERENCE:
        if not _unavailable:
            _unavailable.append(str(excinfo.value))
        report.outcome = "skipped"
    elif not (report.skipped and _unavailable and _reference_skip_reason() in str(excinfo.value)):
        return report
    report.longrepr = (__file__, _SKIP_LINE, f"Skipped: {_reference_skip_reason()}")
    return report


_SKIP_LINE = pytest_runtest_setup.__code__.co_firstlineno


# ---- the daemons: one shared per worker, or a fresh one per test --------------
#
# `execserver` (and the execserver half of `any_server`) is the worker's shared
# daemon (tests/support/shared_daemon.py says why that isolates a test and what
# it changes), unless the test is marked `fresh_daemon`: then it gets a daemon of
# its own, started for it and stopped after it.

FRESH_DAEMON_MARKER = "fresh_daemon"
_shared_daemon = SharedDaemon()


def _wants_fresh_daemon(item: pytest.Item) -> bool:
    return item.get_closest_marker(FRESH_DAEMON_MARKER) is not None


@pytest.fixture(scope="session")
def shared_daemon() -> Iterator[SharedDaemon]:
    """The worker's shared daemon, stopped when the session ends."""
    try:
        yield _shared_daemon
    finally:
        _shared_daemon.close()


@pytest.fixture
def _shared_execserver(
    request: pytest.FixtureRequest, shared_daemon: SharedDaemon
) -> Iterator[RunningServer | None]:
    """The shared daemon for this test, or None when the test gets its own (marked
    `fresh_daemon`, or `any_server`'s reference half). Synchronous: the shared
    daemon's loop runs outside the test's."""
    callspec = getattr(request.node, "callspec", None)
    kind = callspec.params.get("any_server", "execserver") if callspec else "execserver"
    if kind != "execserver" or _wants_fresh_daemon(request.node):
        yield None
        return
    yield shared_daemon.get()
    shared_daemon.check_alive()


@pytest.fixture
async def execserver(_shared_execserver: RunningServer | None) -> AsyncIterator[RunningServer]:
    """An execserver daemon (real subprocess): the worker's shared one, or, for a
    test marked `fresh_daemon`, one started for this test."""
    if _shared_execserver is not None:
        yield _shared_execserver
        return
    async with start_server("execserver") as server:
        yield server


@pytest.fixture
async def reference() -> AsyncIterator[RunningServer]:
    """A fresh reference `codex exec-server` 0.169.0 for this test."""
    async with start_server("reference") as server:
        yield server


@pytest.fixture(params=["execserver", "reference"])
async def any_server(
    request: pytest.FixtureRequest, _shared_execserver: RunningServer | None
) -> AsyncIterator[RunningServer]:
    """Runs the test once against execserver (as the `execserver` fixture) and once
    against a fresh reference."""
    if _shared_execserver is not None:
        yield _shared_execserver
        return
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
    """This process's live (not zombie) descendants, with the start of each one's
    command line. From our own subtree (tests/support/procinfo.py,
    live_descendant_pids), or psutil's sweep of every process where the kernel cannot
    list a task's children."""
    pids = live_descendant_pids(os.getpid())
    if pids is None:
        return _descendants_by_psutil()
    return {pid: command_line(pid) for pid in pids}


def _descendants_by_psutil() -> dict[int, str]:
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

    if not {"integration", "reliability", "security", "survival"} & set(request.node.path.parts):
        yield
        return
    before = set(_descendants())
    yield
    leftover: dict[int, str] = {}
    for _ in range(100):  # up to ~10 s for servers and their children to wind down
        leftover = {pid: cmd for pid, cmd in _descendants().items() if pid not in before}
        if leftover:
            # The shared daemon (started by a test's fixture, so not in `before`) and
            # its fs helpers are the worker's, not the test's; whatever else it runs
            # (a command of the test's session) must be gone.
            shared = _shared_daemon.pid
            if shared is not None:
                for pid in {shared} | helper_subtrees(shared):
                    leftover.pop(pid, None)
        if not leftover:
            break
        await asyncio.sleep(0.1)
    assert not leftover, f"processes left behind by the test: {leftover}"


@pytest.fixture
async def state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    """A ``--state-dir`` for the test's daemons (not made: the daemon makes it); the
    keepers it names are ended afterwards, as their TTL would (tree killed, files
    removed), before the leftover check looks."""
    path = tmp_path / "state"
    try:
        yield path
    finally:
        await end_keepers(path)
