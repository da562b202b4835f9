"""`execserver doctor`: reports every check, and exits 1 only when a required one fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from execserver import __version__
from execserver.doctor import CHECK_NAMES, SHAPE_NAMES
from execserver.processes import exec_as
from execserver.processes.native_programs import runs_here
from execserver.processes.orphan_guard import ORPHAN_GUARD_PROGRAM
from tests.support.sandbox import masked_proc_bwrap, without_user_namespaces


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
    assert doc["backend"] == "none"
    # Every shape that restricts the file system is refused; a full-disk-access policy
    # that only cuts the network needs nothing but seccomp, so it still runs.
    enforced = [s["name"] for s in doc["shapes"] if s["enforceable"]]
    assert enforced == ["network-restricted"]
    assert doc["failClosed"] == "no"
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
    assert (
        "fail closed: partly - requests of these shapes are refused: "
        "read-only, workspace-write, deny-read, managed-network"
    ) in done.stdout
    assert "missing requirements: sandbox" in done.stdout


# ---- policy shapes: each one really run under the sandbox ----------------------

# bwrap present but unable to sandbox (a container's default seccomp profile
# refuses its user namespaces): only the Landlock fallback is left.
BWRAP_BROKEN = {"EXECSERVER_BWRAP": "/bin/false"}


def shapes_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in doc["shapes"]}


def test_every_policy_shape_is_reported_with_its_mechanism() -> None:
    code, doc = report()
    assert code == 0
    shapes = shapes_of(doc)
    assert list(shapes) == list(SHAPE_NAMES)
    for shape in shapes.values():
        if shape["enforceable"]:
            assert shape["mechanism"] in ("bwrap", "landlock", "seccomp")
        else:
            assert shape["mechanism"] == "-" and shape["detail"]


def test_broken_bwrap_makes_workspace_write_unenforceable_and_require_fails() -> None:
    for requirement in ("sandbox", "workspace-write"):
        code, doc = report("--require", requirement, env=BWRAP_BROKEN)
        assert code == 1, requirement
        assert doc["missingRequirements"] == [requirement]
    shapes = shapes_of(doc)
    ws = shapes["workspace-write"]
    assert ws["enforceable"] is False
    assert "writable roots need read-only .git/.codex/.agents/.aws carve-outs" in ws["detail"]
    assert shapes["deny-read"]["enforceable"] is False
    assert shapes["managed-network"]["enforceable"] is False
    # Seccomp alone still cuts the network of a full-disk-access policy.
    assert shapes["network-restricted"] == {
        "name": "network-restricted",
        "enforceable": True,
        "mechanism": "seccomp",
        "detail": "enforced (checked from inside)",
    }
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["sandbox"]["ok"] is False
    assert doc["failClosed"] == "no"  # read-only still runs (Landlock)
    if checks["landlock"]["ok"]:
        assert shapes["read-only"]["mechanism"] == "landlock"
        assert shapes["read-only"]["enforceable"] is True


def test_broken_bwrap_text_report_says_which_shapes_are_refused() -> None:
    done = doctor("--require", "sandbox", env=BWRAP_BROKEN)
    assert done.returncode == 1
    assert "workspace-write would be refused" in done.stdout
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("workspace-write"))
    assert "MISSING" in line
    assert "fail closed: partly" in done.stdout
    assert "workspace-write" in done.stdout.splitlines()[-2]


def test_with_working_bwrap_every_shape_is_enforced_by_it() -> None:
    from execserver.sandbox.backend import probe_backend

    backend = probe_backend()
    if backend.bwrap is None:
        pytest.skip(f"bubblewrap cannot sandbox on this host: {backend.bwrap_error}")
    code, doc = report("--require", "sandbox", "--require", "workspace-write")
    assert code == 0
    mechanisms = {name: s["mechanism"] for name, s in shapes_of(doc).items()}
    assert mechanisms == {
        "read-only": "bwrap",
        "workspace-write": "bwrap",
        "deny-read": "bwrap",
        "network-restricted": "seccomp",
        "managed-network": "bwrap",
    }


def test_the_probe_catches_a_policy_that_leaks(tmp_path: Path) -> None:
    """The check scripts really check: handed a policy that lets .git be written
    (full disk write), the workspace-write probe reports the leak instead of ok."""
    from execserver.sandbox import shapes
    from execserver.sandbox.backend import probe_backend

    dirs = shapes._make_dirs(tmp_path.resolve())
    leaky = shapes._context([(shapes._special("root"), "write")])
    result = shapes._probe_script("workspace-write", leaky, dirs, probe_backend())
    assert result.enforceable is False
    assert "a write under the protected .git succeeded" in result.detail
    open_read = shapes._context([(shapes._special("root"), "read")])
    result = shapes._probe_script("deny-read", open_read, dirs, probe_backend())
    assert result == shapes.ShapeResult(
        "deny-read", False, "-", f"{result.detail.split(':')[0]}: a denied file was readable"
    )


def test_serve_logs_the_shape_table_and_its_version_at_start_up() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "execserver", "serve", "--listen", "ws://127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **BWRAP_BROKEN, "EXECSERVER_STARTUP_PROBE": "1"},
    ) as proc:
        assert proc.stderr is not None
        seen: list[str] = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if line.startswith("  managed-network"):
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = "".join(seen)
    assert f"execserver {__version__} (codex exec-server protocol" in text
    assert "WARNING" in text and "workspace-write WILL BE REFUSED" in text
    ws_line = next(ln for ln in seen if ln.startswith("  workspace-write"))
    assert "refused" in ws_line


def masked_proc_env(tmp_path: Path) -> dict[str, str]:
    return {"EXECSERVER_BWRAP": masked_proc_bwrap(tmp_path)}


def test_a_refused_proc_mount_names_the_container_options_that_fix_it(tmp_path: Path) -> None:
    done = doctor("--require", "sandbox", env=masked_proc_env(tmp_path))
    assert done.returncode == 1
    bwrap_line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("bwrap"))
    assert "bwrap cannot mount a private /proc" in bwrap_line
    for option in ("unmask=/proc/*", "systempaths=unconfined", "procMount: Unmasked"):
        assert option in bwrap_line, bwrap_line
    # Another cause of an unusable bwrap gets no /proc advice.
    plain = doctor(env=BWRAP_BROKEN)
    bwrap_line = next(ln for ln in plain.stdout.splitlines() if ln.strip().startswith("bwrap"))
    assert "unmask" not in bwrap_line


def test_serve_start_up_warning_names_the_proc_remedy(tmp_path: Path) -> None:
    env = {**os.environ, **masked_proc_env(tmp_path), "EXECSERVER_STARTUP_PROBE": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "execserver", "serve", "--listen", "ws://127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stderr is not None
        seen: list[str] = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if "to use bubblewrap:" in line or len(seen) > 200:
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = "".join(seen)
    assert "workspace-write WILL BE REFUSED" in text
    assert "to use bubblewrap: run the container with an unmasked /proc" in text
    assert "securityContext.procMount: Unmasked with hostUsers: false" in text


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


def test_the_report_says_whether_exec_as_keeps_limited_spawns_on_vfork() -> None:
    _, doc = report()
    assert doc["execAs"]["ok"] is (exec_as.EXEC_AS_PROGRAM is not None)
    assert exec_as.EXEC_AS_PROGRAM is not None, "make builds exec-as: the suite runs with it"
    assert doc["execAs"]["detail"].startswith(exec_as.EXEC_AS_PROGRAM)
    assert f"exec-as   ok       {exec_as.EXEC_AS_PROGRAM}" in doctor().stdout


def test_the_report_says_whether_a_sigkilled_daemons_processes_die_with_it() -> None:
    _, doc = report()
    assert ORPHAN_GUARD_PROGRAM is not None, "make builds orphan-guard: the suite runs with it"
    assert doc["orphanGuard"] == {
        "name": "orphan-guard",
        "ok": True,
        "detail": f"{ORPHAN_GUARD_PROGRAM}: a SIGKILLed daemon's processes die with it",
    }
    assert f"orphan-guard ok       {ORPHAN_GUARD_PROGRAM}" in doctor().stdout


def test_an_exec_as_of_another_architecture_is_not_used(tmp_path: Path) -> None:
    assert exec_as.EXEC_AS_PROGRAM is not None
    foreign = tmp_path / "exec-as"
    header = bytearray(Path(exec_as.EXEC_AS_PROGRAM).read_bytes()[:64])
    header[18:20] = (0x1234).to_bytes(2, "little")  # no such machine
    foreign.write_bytes(bytes(header))
    foreign.chmod(0o755)
    assert not runs_here(str(foreign))
    assert runs_here(exec_as.EXEC_AS_PROGRAM)


def test_require_cgroup_follows_the_limits_verdict(tmp_path: Any) -> None:
    """``--require cgroup`` passes exactly where ``serve --process-*-max`` would
    start: the same probe (v2 delegated or writable v1), not a v2-only check."""
    for env in ({}, {"EXECSERVER_CGROUP_ROOT": str(tmp_path)}):
        code, doc = report("--require", "cgroup", env=env)
        limits = next(c for c in doc["cgroups"] if c["name"] == "limits")
        check = next(c for c in doc["checks"] if c["name"] == "cgroup")
        assert check["ok"] is limits["ok"]
        assert check["detail"] == limits["detail"]
        assert code == (0 if limits["ok"] else 1)
    # An empty root offers no controller at all: the requirement must fail there.
    assert code == 1


def test_report_says_how_full_access_policies_are_held() -> None:
    _, here = report()
    assert here["fullAccess"].startswith("own user, mount, pid and cgroup namespaces")
    text = doctor().stdout
    assert f"unrestricted/external policies: {here['fullAccess']}" in text
    done = subprocess.run(
        without_user_namespaces([sys.executable, "-m", "execserver", "doctor", "--json"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    detail = json.loads(done.stdout)["fullAccess"]
    assert detail.startswith("capability drop + seccomp only (")
    assert detail.endswith("refused while per-process limits are set")
