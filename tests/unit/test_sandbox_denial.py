"""is_sandbox_denied: the reference's sandboxDenied rule.

Every row was observed on codex 0.169.0 for a process started with a sandbox."""

from __future__ import annotations

import pytest

from execserver.sandbox import is_sandbox_denied

OBSERVED = [
    (1, "touch: cannot touch '/x/t': Read-only file system", True),
    (1, "", False),
    (1, "Permission denied", True),
    (0, "Operation not permitted", False),
    (2, "Permission denied", True),
    (126, "Permission denied", True),
    (127, "Permission denied", True),
    (159, "", True),
    (137, "", False),
    (1, "PermissionError: [Errno 1] Operation not permitted", True),
    (1, "bash: socket: Operation not permitted", True),
    (101, "thread 'main' panicked at linux-sandbox/src/linux_run_main.rs: Failed to execvp", True),
    (
        1,
        "bwrap: No permissions to create new namespace, likely because the kernel does not "
        "allow non-privileged user namespaces.",
        False,
    ),
    (2, "ls: cannot access '/x/other': No such file or directory", False),
    (126, "", False),
    (127, "bash: foo: command not found", False),
    (1, "SECCOMP violation", True),
    (1, "landlock refused", True),
    (1, "error: failed to write file", True),
]


@pytest.mark.parametrize(("exit_code", "output", "expected"), OBSERVED)
def test_denial_rule_matches_reference(exit_code: int, output: str, expected: bool) -> None:
    assert is_sandbox_denied(exit_code, output.encode()) is expected


def test_invalid_utf8_output_is_still_classified() -> None:
    assert is_sandbox_denied(1, b"\xff\xfe Read-only file system") is True
