"""The registry of the daemon's own helper processes (execserver/sandbox/helper_pids.py)."""

from __future__ import annotations

import subprocess

from execserver.sandbox.helper_pids import helper_pids, register_helper


def test_a_helper_is_registered_until_a_later_registration_finds_it_gone() -> None:
    first = subprocess.Popen(["sleep", "30"])
    second: subprocess.Popen[bytes] | None = None
    try:
        register_helper(first.pid)
        assert first.pid in helper_pids()
        first.kill()
        first.wait()  # reaped: its pid may now be anyone's
        assert first.pid in helper_pids()  # look-ups read no /proc files
        second = subprocess.Popen(["sleep", "30"])
        register_helper(second.pid)
        assert first.pid not in helper_pids()
        assert second.pid in helper_pids()
    finally:
        first.kill()
        first.wait()
        if second is not None:
            second.kill()
            second.wait()


def test_a_pid_that_is_already_gone_is_not_registered() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    register_helper(gone.pid)
    assert gone.pid not in helper_pids()
