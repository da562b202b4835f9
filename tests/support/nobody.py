"""Running a small stdlib script as the unprivileged account ``nobody`` (an attacker
of another uid in the security tests): the system interpreter, ``-I -S``, since
the project's virtualenv need not be readable by that account."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

__all__ = ["NOBODY_PYTHON", "run_as_nobody"]

NOBODY_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run_as_nobody(source: str, *args: str, timeout: float = 60) -> str:
    """Run ``source`` with ``args`` as nobody (its own group, no supplementary
    groups, cwd /); its stdout, stripped. Fails the test when it fails."""
    done = subprocess.run(
        [NOBODY_PYTHON, "-I", "-S", "-c", source, *args],
        user="nobody",
        group=pwd.getpwnam("nobody").pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
