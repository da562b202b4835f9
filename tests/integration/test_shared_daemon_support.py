"""The suite's shared daemon (tests/support/shared_daemon.py) is started again when
it died before a test, however shortly before: a test must never be handed a dead
daemon, whose failure would then be blamed on that test."""

from __future__ import annotations

import os
import signal

from tests.support.shared_daemon import SharedDaemon


def test_a_daemon_killed_just_before_a_test_is_started_again() -> None:
    daemon = SharedDaemon()
    try:
        first = daemon.get()
        os.kill(first.process.pid, signal.SIGKILL)
        second = daemon.get()
        assert second.process.pid != first.process.pid
        assert second.process.returncode is None
    finally:
        daemon.close()
