"""The registry of the daemon's own helper processes (execserver/sandbox/helper_pids.py)."""

from __future__ import annotations

import subprocess

from execserver.sandbox.helper_pids import (
    helper_pids,
    is_helper,
    register_helper,
    unregister_helper,
)


def test_a_helper_is_registered_until_it_is_unregistered() -> None:
    helper = subprocess.Popen(["sleep", "30"])
    try:
        register_helper(helper.pid)
        assert helper.pid in helper_pids() and is_helper(helper.pid)
        helper.kill()
        helper.wait()  # reaped: its pid may now be anyone's
        assert is_helper(helper.pid)  # look-ups read no /proc files
        unregister_helper(helper.pid)
        assert not is_helper(helper.pid) and helper.pid not in helper_pids()
    finally:
        helper.kill()
        helper.wait()


def test_a_helper_gone_unsaid_is_pruned_once_the_registry_has_doubled() -> None:
    """A helper whose exit nobody reported is dropped by a later registration; not
    at each one (each pruning reads every helper's stat), but once the registry
    has grown to twice its size after the last pruning."""
    first = subprocess.Popen(["sleep", "30"])
    others: list[subprocess.Popen[bytes]] = []
    try:
        register_helper(first.pid)
        first.kill()
        first.wait()
        for _ in range(200):
            others.append(subprocess.Popen(["sleep", "30"]))
            register_helper(others[-1].pid)
            if not is_helper(first.pid):
                break
        assert not is_helper(first.pid), "200 registrations later"
        assert len(others) > 1, "pruned at the very next registration"
        assert all(is_helper(p.pid) for p in others)
    finally:
        for process in [first, *others]:
            process.kill()
            process.wait()
            unregister_helper(process.pid)


def test_a_pid_that_is_already_gone_is_not_registered() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    register_helper(gone.pid)
    assert gone.pid not in helper_pids()
