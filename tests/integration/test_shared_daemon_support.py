"""The suite's shared daemon (tests/support/shared_daemon.py) is started again when
it died before a test, however shortly before: a test must never be handed a dead
daemon, whose failure would then be blamed on that test."""

from __future__ import annotations

import os
import signal

from tests.support.procinfo import is_zombie_or_gone, wait_until_blocking
from tests.support.shared_daemon import SharedDaemon


def test_a_daemon_killed_just_before_a_test_is_started_again() -> None:
    daemon = SharedDaemon()
    try:
        first = daemon.get()
        os.kill(first.process.pid, signal.SIGKILL)
        # Dead for the kernel (a zombie: its parent's loop has not reaped it), as a
        # daemon killed by an earlier test is by the time the next test asks.
        dead = wait_until_blocking(lambda: is_zombie_or_gone(first.process.pid), 30)
        assert dead, "SIGKILL did not end the daemon in 30 s"
        second = daemon.get()
        assert second.process.pid != first.process.pid
        assert second.process.returncode is None
    finally:
        daemon.close()
