"""``make test`` runs the suite with ``--dist loadgroup``, and some modules need all
their tests on one worker (``xdist_group``): the container image is built and its
container started once (tests/container), the codex CLI's sandboxes must not race
on /tmp/.codex (tests/interop). With pytest 9.2 and pytest-xdist 3.8 the group was
silently dropped (pytest-dev/pytest-xdist#1386): the image was built on all three
workers at once. A two-worker session of a grouped module, run here for real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    pass
"""

LOOSE = """
import pytest


@pytest.mark.parametrize("n", range(6))
def test_loose(n):
    pass
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_loose.py").write_text(LOOSE)
    xdist = ["-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *xdist, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED (\S+)", done.stdout)
    grouped = {worker for worker, test in ran if "test_grouped" in test}
    loose = {worker for worker, test in ran if "test_loose" in test}
    assert len(ran) == 12, done.stdout[-3000:]
    # Both workers ran something (the check is not vacuous), the group only one.
    assert grouped | loose == {"gw0", "gw1"}, ran
    assert len(grouped) == 1, f"the group's tests ran on {sorted(grouped)}: {ran}"
