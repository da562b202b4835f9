"""`execserver doctor`: reports every check, and exits 1 only when a required one fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from execserver.doctor import CHECK_NAMES


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "execserver", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def report(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = doctor("--json", *args, env=env)
    return done.returncode, json.loads(done.stdout)


# No usable bwrap and Landlock switched off: nothing can enforce a sandbox here.
NO_BACKEND = {"EXECSERVER_BWRAP": "/nonexistent/bwrap", "EXECSERVER_SANDBOX_NO_LANDLOCK": "1"}


def test_report_lists_every_check_and_exits_zero_without_requirements() -> None:
    code, doc = report()
    assert code == 0
    assert [c["name"] for c in doc["checks"]] == list(CHECK_NAMES)
    assert doc["failClosed"] == ("yes" if doc["backend"] == "none" else "no")
    assert doc["missingRequirements"] == []


def test_missing_required_backend_exits_one_and_says_it_fails_closed() -> None:
    code, doc = report("--require", "sandbox", "--require", "bwrap", env=NO_BACKEND)
    assert code == 1
    assert doc["backend"] == "none" and doc["failClosed"] == "yes"
    assert doc["missingRequirements"] == ["bwrap", "sandbox"]
    checks = {c["name"]: c for c in doc["checks"]}
    assert "/nonexistent/bwrap" in checks["bwrap"]["detail"]
    assert checks["landlock"]["ok"] is False


def test_a_satisfied_requirement_exits_zero() -> None:
    _, doc = report()
    passing = [c["name"] for c in doc["checks"] if c["ok"]]
    assert passing, "this host offers none of the checks"
    code, again = report("--require", passing[0])
    assert code == 0 and again["missingRequirements"] == []


def test_text_report_names_the_missing_requirement() -> None:
    done = doctor("--require", "sandbox", env=NO_BACKEND)
    assert done.returncode == 1
    assert "fail closed: yes" in done.stdout
    assert "missing requirements: sandbox" in done.stdout


def test_cgroup_section_reports_usable_controllers_and_what_is_missing(tmp_path: Any) -> None:
    _, doc = report()
    assert [c["name"] for c in doc["cgroups"]] == ["v2", "v1", "limits"]
    _, none = report(env={"EXECSERVER_CGROUP_ROOT": str(tmp_path)})
    rows = {c["name"]: c for c in none["cgroups"]}
    assert not any(c["ok"] for c in none["cgroups"])
    assert rows["v2"]["detail"] == f"no cgroup v2 mounted at {tmp_path}"
    assert "Delegate=yes" in rows["limits"]["detail"]
    done = doctor(env={"EXECSERVER_CGROUP_ROOT": str(tmp_path)})
    assert "per-process limits (--process-memory-max" in done.stdout
