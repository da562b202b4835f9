"""A --state-dir that is not a private directory of the daemon's user (a file, a
link) stops ``serve`` with one line naming it, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVE = [sys.executable, "-m", "execserver", "serve", "--listen", "ws://127.0.0.1:0"]


def _serve(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVE, "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "EXECSERVER_STARTUP_PROBE": "0"},
    )


def test_a_state_dir_that_is_a_link_or_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    afile = tmp_path / "file"
    afile.write_text("")
    for state in (link, afile):
        done = _serve(state)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and str(state) in errors[0], done.stderr
