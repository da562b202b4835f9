"""``execserver doctor``: what this host can enforce, before a client finds out.

Prints the sandbox backends (bubblewrap, user namespaces, Landlock ABI,
seccomp), cgroup delegation and resource limits, and whether the daemon would
fail closed (refuse every sandboxed request). Exits 1 when a check named with
``--require`` fails, so a container entrypoint or a CI job can gate on it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from dataclasses import asdict, dataclass
from typing import Final

from execserver import REFERENCE_VERSION, __version__

CHECK_NAMES: Final = ("bwrap", "userns", "landlock", "seccomp", "cgroup", "sandbox")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def check_userns() -> Check:
    """Unprivileged user namespaces: what bwrap needs without setuid."""
    max_ns = _read("/proc/sys/user/max_user_namespaces")
    if max_ns is not None and max_ns == "0":
        return Check("userns", False, "user.max_user_namespaces = 0")
    clone = _read("/proc/sys/kernel/unprivileged_userns_clone")  # Debian/Ubuntu knob
    if clone == "0" and os.geteuid() != 0:
        return Check("userns", False, "kernel.unprivileged_userns_clone = 0")
    apparmor = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if apparmor == "1" and os.geteuid() != 0:
        return Check("userns", False, "AppArmor restricts unprivileged user namespaces")
    return Check("userns", True, f"max_user_namespaces = {max_ns or 'unknown'}")


def check_cgroup() -> Check:
    """cgroup v2 with a delegated subtree lets the daemon cap children's memory and pids."""
    if _read("/sys/fs/cgroup/cgroup.controllers") is None:
        return Check("cgroup", False, "cgroup v2 is not mounted at /sys/fs/cgroup (v1 or none)")
    own = ""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        if line.startswith("0::"):
            own = line[3:]
    directory = os.path.join("/sys/fs/cgroup", own.lstrip("/"))
    if os.access(os.path.join(directory, "cgroup.subtree_control"), os.W_OK) and os.access(
        directory, os.W_OK
    ):
        return Check("cgroup", True, f"delegated: {directory} is writable")
    return Check("cgroup", False, f"not delegated: {directory} is not writable by this user")


def _show_rlimit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def _limit(name: str, which: int) -> str:
    soft, hard = resource.getrlimit(which)
    return f"{name} {_show_rlimit(soft)}/{_show_rlimit(hard)}"


def run_checks() -> tuple[list[Check], dict[str, str]]:
    # Imported here: the probe runs bwrap, which `execserver --help` should not pay for.
    from execserver.sandbox.backend import find_bwrap, probe_backend

    backend = probe_backend()
    path = find_bwrap()
    checks = [
        Check(
            "bwrap",
            backend.bwrap is not None,
            f"{backend.bwrap} usable" + ("" if backend.proc_ok else " (without /proc)")
            if backend.bwrap is not None
            else (backend.bwrap_error or f"{path} unusable"),
        ),
        check_userns(),
        Check(
            "landlock",
            backend.landlock_abi > 0,
            f"ABI {backend.landlock_abi}" if backend.landlock_abi else "unavailable or disabled",
        ),
        Check(
            "seccomp",
            backend.seccomp_ok,
            "filters available" if backend.seccomp_ok else "unavailable",
        ),
        check_cgroup(),
        Check("sandbox", backend.kind != "none", backend.describe()),
    ]
    info = {
        "version": __version__,
        "protocol": REFERENCE_VERSION,
        "backend": backend.kind,
        "failClosed": "yes" if backend.kind == "none" else "no",
        "limits": ", ".join(
            [
                _limit("nofile", resource.RLIMIT_NOFILE),
                _limit("nproc", resource.RLIMIT_NPROC),
                _limit("as", resource.RLIMIT_AS),
            ]
        ),
    }
    return checks, info


def render_text(checks: list[Check], info: dict[str, str], required: set[str]) -> str:
    lines = [f"execserver {info['version']} (codex exec-server protocol {info['protocol']})"]
    for check in checks:
        mark = "ok" if check.ok else ("MISSING" if check.name in required else "no")
        lines.append(f"  {check.name:9s} {mark:8s} {check.detail}")
    lines.append(f"  limits    {info['limits']}")
    if info["failClosed"] == "yes":
        lines.append("fail closed: yes - every sandboxed request would be refused")
    else:
        lines.append(f"fail closed: no - sandboxed requests run under {info['backend']}")
    return "\n".join(lines) + "\n"


def cgroup_checks() -> list[Check]:
    """Which cgroup controllers the --process-*-max limits could use here."""
    from execserver.cli import CGROUP_ROOT_ENV
    from execserver.config import DEFAULT_CGROUP_ROOT
    from execserver.containment import describe_host

    root = os.environ.get(CGROUP_ROOT_ENV) or DEFAULT_CGROUP_ROOT
    return [Check(name, ok, detail) for name, ok, detail in describe_host(root)]


def render_cgroups(checks: list[Check]) -> str:
    lines = ["per-process limits (--process-memory-max, --process-pids-max, --process-cpu-max):"]
    lines += [f"  {c.name:9s} {'ok' if c.ok else 'no':8s} {c.detail}" for c in checks]
    return "\n".join(lines) + "\n"


def cmd_doctor(args: argparse.Namespace) -> int:
    checks, info = run_checks()
    cgroups = cgroup_checks()
    required = set(args.require or [])
    missing = sorted(c.name for c in checks if c.name in required and not c.ok)
    if args.json:
        doc = {
            **info,
            "checks": [asdict(c) for c in checks],
            "cgroups": [asdict(c) for c in cgroups],
            "missingRequirements": missing,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(checks, info, required))
        sys.stdout.write(render_cgroups(cgroups))
        if missing:
            sys.stdout.write(f"missing requirements: {', '.join(missing)}\n")
    return 1 if missing else 0


def add_doctor_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("doctor", help="report the sandbox backends this host offers")
    p.add_argument(
        "--require",
        action="append",
        choices=CHECK_NAMES,
        metavar="CHECK",
        help=f"exit 1 unless this check passes (repeatable; one of {', '.join(CHECK_NAMES)})",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)
