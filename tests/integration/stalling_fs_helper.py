"""A helper program of the tests' own: the sandboxed fs helper program
(execserver/fs/sandboxed/program.py), except that a helper which finds a stall
token in its view takes it and never comes up (it sleeps before ``main``, so it
sends no ready frame), as the helpers seen under load did.

The tokens are files ``token-*`` in a writable root named ``stall-tokens``
(found through the helper's own mount table: the test's tmp dir is nowhere
else): one token, one helper that never starts. Runs both ways the daemon
starts a helper (``serve`` on the private runtime, ``confined``).
"""

from __future__ import annotations

import os
import time

from execserver.fs.sandboxed import program

TOKEN_DIR = "stall-tokens"


def _token_dir() -> str | None:
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            mount_point = line.split()[4]
            if os.path.basename(mount_point) == TOKEN_DIR:
                return mount_point
    return None


def _take_token() -> bool:
    directory = _token_dir()
    if directory is None:
        return False
    # The sandbox adds mount points of its own there (.git, .codex, ...).
    for name in sorted(n for n in os.listdir(directory) if n.startswith("token-")):
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            continue  # another helper took it first
        return True
    return False


if __name__ == "__main__":
    if _take_token():
        time.sleep(3600)
    raise SystemExit(program.main())
