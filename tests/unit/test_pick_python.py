"""scripts/pick-python, which names the interpreter the Makefile makes its
virtualenv from: the newest of /usr/bin/python3 and the first python3 on PATH
that is 3.11 or newer and can make a virtualenv, /usr/bin/python3 on a tie.

The python3 on PATH is a stand-in script that answers the script's probe with a
chosen version (or fails it); /usr/bin/python3 is this machine's own, so each
expectation is computed from what it answers here."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pick-python"
SYSTEM = "/usr/bin/python3"
PROBE = "import sys, ensurepip\nif sys.version_info < (3, 11):\n    sys.exit(1)\n"


def system_version() -> int | None:
    """/usr/bin/python3's answer to the script's probe, as the script ranks it;
    None when it does not qualify (missing, too old, no ensurepip)."""
    if not os.access(SYSTEM, os.X_OK):
        return None
    done = subprocess.run(
        [SYSTEM, "-c", PROBE + 'print("%d%03d" % sys.version_info[:2])'],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout) if done.returncode == 0 else None


def pick(tmp_path: Path, path_python: str | None) -> str:
    """Run the script with a PATH whose python3 answers ``path_python`` (a
    ranked version such as "3099"), or fails the probe when None."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    body = f"echo {path_python}" if path_python is not None else "exit 1"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        [str(SCRIPT)], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    return done.stdout.strip()


def test_a_newer_python3_on_path_wins(tmp_path: Path) -> None:
    assert pick(tmp_path, "3099") == "python3"


def test_the_distribution_build_wins_a_tie(tmp_path: Path) -> None:
    version = system_version()
    if version is None:
        # Nothing to tie with: the PATH one is the only candidate.
        assert pick(tmp_path, "3011") == "python3"
    else:
        assert pick(tmp_path, str(version)) == SYSTEM


def test_a_python3_that_fails_the_probe_is_passed_over(tmp_path: Path) -> None:
    expected = SYSTEM if system_version() is not None else "python3"
    assert pick(tmp_path, None) == expected
