"""``execserver doctor``: what this host can enforce, before a client finds out.

Prints the sandbox backends (bubblewrap, user namespaces, Landlock ABI,
seccomp), cgroup delegation and resource limits, then one line per sandbox
policy shape (read-only, workspace-write, deny-read, network-restricted,
managed-network) saying whether it is enforceable and by which mechanism --
each found by running that shape for real (``execserver.sandbox.shapes``).
Exits 1 when a check named with ``--require`` fails, so a container
entrypoint, the systemd unit or a CI job can gate on it. ``sandbox`` means
what Codex sends by default, workspace-write, is enforceable.

The report is a list of sections (``Report``) so further host facts get a
section of their own without touching the others.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Final

from execserver import REFERENCE_VERSION, __version__
from execserver.config import DEFAULT_CGROUP_ROOT, LimitsConfig, SandboxConfig

if TYPE_CHECKING:
    from execserver.sandbox.backend import SandboxBackend
    from execserver.sandbox.shapes import ShapeResult

__all__ = ["CHECK_NAMES", "SHAPE_NAMES", "add_doctor_parser", "build_report", "shape_lines"]

CHECK_NAMES: Final = ("bwrap", "userns", "landlock", "seccomp", "cgroup", "sandbox")
# Policy shapes, as probed by execserver.sandbox.shapes (kept literal so that
# `execserver --help` does not import the sandbox).
SHAPE_NAMES: Final = (
    "read-only",
    "workspace-write",
    "deny-read",
    "network-restricted",
    "managed-network",
)
REQUIRE_NAMES: Final = (*CHECK_NAMES, *SHAPE_NAMES)


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


def check_cgroup(root: str) -> Check:
    """The per-process limits: the verdict of the same probe that ``serve`` uses for
    ``--process-*-max`` (cgroup v2 delegated, or writable v1 controllers), so
    ``--require cgroup`` passes exactly where those flags would work."""
    from execserver.containment import describe_host

    rows = {name: (ok, detail) for name, ok, detail in describe_host(root)}
    ok, detail = rows["limits"]
    return Check("cgroup", ok, detail)


def _show_rlimit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def _limit(name: str, which: int) -> str:
    soft, hard = resource.getrlimit(which)
    return f"{name} {_show_rlimit(soft)}/{_show_rlimit(hard)}"


@dataclass
class Report:
    checks: list[Check]
    shapes: list[ShapeResult]
    info: dict[str, str]
    # Further sections (title -> lines), rendered after the policy shapes.
    extra_sections: dict[str, list[str]] = field(default_factory=dict)

    def status(self, name: str) -> bool:
        """Whether the check or policy shape ``name`` passed."""
        for check in self.checks:
            if check.name == name:
                return check.ok
        for shape in self.shapes:
            if shape.name == name:
                return shape.enforceable
        raise KeyError(name)


def backend_checks(
    backend: SandboxBackend, shapes: list[ShapeResult], cgroup_root: str
) -> list[Check]:
    from execserver.sandbox.backend import find_bwrap
    from execserver.sandbox.shapes import DEFAULT_SHAPE

    default = next(s for s in shapes if s.name == DEFAULT_SHAPE)
    if default.enforceable:
        sandbox = Check("sandbox", True, f"{DEFAULT_SHAPE} enforced by {default.mechanism}")
    else:
        sandbox = Check("sandbox", False, f"{DEFAULT_SHAPE} would be refused: {default.detail}")
    if backend.bwrap is not None:
        bwrap_detail = f"{backend.bwrap} usable"
    else:
        bwrap_detail = backend.bwrap_error or f"{find_bwrap()} unusable"
        if backend.bwrap_remedy:
            bwrap_detail += f"; fix: {backend.bwrap_remedy}"
    return [
        Check("bwrap", backend.bwrap is not None, bwrap_detail),
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
        check_cgroup(cgroup_root),
        sandbox,
    ]


def _full_access(backend: SandboxBackend) -> str:
    if backend.launcher_namespaces:
        return "own user, mount, pid and cgroup namespaces (nested mount/unshare work)"
    return (
        f"capability drop + seccomp only ({backend.namespaces_error}); "
        "refused while per-process limits are set"
    )


def build_report(backend: SandboxBackend, cgroup_root: str = DEFAULT_CGROUP_ROOT) -> Report:
    """Probe the policy shapes now (blocking: spawns sandboxes) on ``backend``,
    the daemon's start-up probe or ``probe_backend`` with the same settings."""
    # Imported here: the probe runs bwrap, which `execserver --help` should not pay for.
    from execserver.sandbox.shapes import probe_shapes

    shapes = probe_shapes(backend)
    enforceable = [s.name for s in shapes if s.enforceable]
    info = {
        "version": __version__,
        "protocol": REFERENCE_VERSION,
        "python": sys.version.split()[0],
        "backend": backend.kind,
        # The line `serve` logs at start-up ("sandbox backend: ...").
        "backendDetail": backend.describe(),
        # How commands whose policy does not restrict the filesystem are held.
        "fullAccess": _full_access(backend),
        # Fail closed for a shape = that shape is refused; "yes" = every one is.
        "failClosed": "yes" if not enforceable else "no",
        "limits": ", ".join(
            [
                _limit("nofile", resource.RLIMIT_NOFILE),
                _limit("nproc", resource.RLIMIT_NPROC),
                _limit("as", resource.RLIMIT_AS),
            ]
        ),
    }
    return Report(backend_checks(backend, shapes, cgroup_root), shapes, info)


def shape_lines(
    shapes: list[ShapeResult], required: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """The policy-shape table; also what `serve` logs at start-up."""
    lines = []
    for shape in shapes:
        if shape.enforceable:
            mark = "ok"
        else:
            mark = "MISSING" if shape.name in required else "refused"
        by = f"by {shape.mechanism}" if shape.enforceable else ""
        lines.append(f"  {shape.name:18s} {mark:8s} {by:14s} {shape.detail}".rstrip())
    return lines


def render_text(report: Report, required: set[str]) -> str:
    info = report.info
    lines = [
        f"execserver {info['version']} (codex exec-server protocol {info['protocol']}, "
        f"python {info['python']})"
    ]
    for check in report.checks:
        mark = "ok" if check.ok else ("MISSING" if check.name in required else "no")
        lines.append(f"  {check.name:9s} {mark:8s} {check.detail}")
    lines.append(f"  limits    {info['limits']}")
    lines.append(f"sandbox backend: {info['backendDetail']}")
    lines.append(f"unrestricted/external policies: {info['fullAccess']}")
    lines.append("policy shapes (each run for real under the sandbox):")
    # `sandbox` is the gate on Codex's default shape: mark that shape too.
    marked = required | ({"workspace-write"} if "sandbox" in required else set())
    lines += shape_lines(report.shapes, marked)
    for title, section in report.extra_sections.items():
        lines.append(f"{title}:")
        lines += section
    refused = [s.name for s in report.shapes if not s.enforceable]
    if info["failClosed"] == "yes":
        lines.append("fail closed: yes - every sandboxed request would be refused")
    elif refused:
        lines.append(
            f"fail closed: partly - requests of these shapes are refused: {', '.join(refused)}"
        )
    else:
        lines.append(f"fail closed: no - every policy shape is enforced ({info['backend']})")
    return "\n".join(lines) + "\n"


def cgroup_checks(root: str) -> list[Check]:
    """Which cgroup controllers the --process-*-max limits could use here."""
    from execserver.containment import describe_host

    return [Check(name, ok, detail) for name, ok, detail in describe_host(root)]


def _built_check(name: str, program: str | None, with_it: str, without_it: str) -> Check:
    """Whether one of the C programs `make` builds is there, and what that means."""
    if program is not None:
        return Check(name, True, f"{program}: {with_it}")
    return Check(name, False, f"not built (make needs a C compiler): {without_it}")


def exec_as_check() -> Check:
    """Whether limited and tenants' spawns keep the vfork path (exec-as is built)."""
    from execserver.processes.exec_as import EXEC_AS_PROGRAM

    return _built_check(
        "exec-as",
        EXEC_AS_PROGRAM,
        "limited and tenants' spawns keep the vfork path",
        "limited and tenants' spawns fork (slower)",
    )


def orphan_guard_check() -> Check:
    """Whether a SIGKILLed daemon's processes die with it (orphan-guard is built)."""
    from execserver.processes.orphan_guard import ORPHAN_GUARD_PROGRAM

    return _built_check(
        "orphan-guard",
        ORPHAN_GUARD_PROGRAM,
        "a SIGKILLed daemon's processes die with it",
        "a SIGKILLed daemon's processes outlive it",
    )


GUARD_SECTION = "a daemon killed without --state-dir"
CGROUP_SECTION = "per-process limits (--process-memory-max, --process-pids-max, --process-cpu-max)"


def cgroup_lines(checks: list[Check]) -> list[str]:
    return [f"  {c.name:9s} {'ok' if c.ok else 'no':8s} {c.detail}" for c in checks]


def cmd_doctor(args: argparse.Namespace) -> int:
    """``args.sandbox`` (SandboxConfig) and ``args.cgroup_root``: the settings
    ``serve`` would use, resolved by cli.py."""
    from execserver.sandbox.backend import probe_backend

    root: str = args.cgroup_root
    sandbox: SandboxConfig = args.sandbox
    backend = probe_backend(bwrap=sandbox.bwrap, allow_landlock=sandbox.landlock)
    report = build_report(backend, cgroup_root=root)
    cgroups = cgroup_checks(root)
    exec_as = exec_as_check()
    report.extra_sections[CGROUP_SECTION] = cgroup_lines([*cgroups, exec_as])
    guard = orphan_guard_check()
    report.extra_sections[GUARD_SECTION] = [
        f"  {guard.name} {'ok' if guard.ok else 'no':8s} {guard.detail}"
    ]
    if getattr(args, "tenants", None):
        from execserver.tenancy.report import TenantsFileError, load_for_report, principal_lines

        try:
            table = load_for_report(args.tenants)
        except TenantsFileError as exc:
            sys.stderr.write(f"Error: {exc}\n")
            return 1
        report.extra_sections["principals (--tenants)"] = principal_lines(table, _limits(args))
    required = set(args.require or [])
    missing = sorted(name for name in required if not report.status(name))
    if args.json:
        doc = {
            **report.info,
            "checks": [asdict(c) for c in report.checks],
            "shapes": [asdict(s) for s in report.shapes],
            **({"sections": report.extra_sections} if report.extra_sections else {}),
            "cgroups": [asdict(c) for c in cgroups],
            "execAs": asdict(exec_as),
            "orphanGuard": asdict(guard),
            "missingRequirements": missing,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report, required))
        if missing:
            sys.stdout.write(f"missing requirements: {', '.join(missing)}\n")
    return 1 if missing else 0


def _limits(args: argparse.Namespace) -> LimitsConfig:
    """The daemon-wide limits the tenants' shares divide, as ``serve`` would have
    them (``0``: unlimited)."""
    defaults = LimitsConfig()
    values: dict[str, int | None] = {}
    for name in ("max_connections", "max_concurrent_http_requests"):
        given = getattr(args, name, None)
        values[name] = getattr(defaults, name) if given is None else (given or None)
    return dataclasses.replace(defaults, **values)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_doctor_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    p = subparsers.add_parser("doctor", help="report the sandbox backends this host offers")
    p.add_argument(
        "--require",
        action="append",
        choices=REQUIRE_NAMES,
        metavar="CHECK",
        help=(
            "exit 1 unless this check passes or this policy shape is enforceable "
            f"(repeatable; one of {', '.join(REQUIRE_NAMES)}; 'sandbox' = workspace-write)"
        ),
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--tenants",
        metavar="PATH",
        help="also check this tenants file and print each principal and what it may do",
    )
    for flag, what in (
        ("--max-connections", "websocket connections"),
        ("--max-concurrent-http-requests", "http/request calls in flight"),
    ):
        p.add_argument(
            flag,
            type=_non_negative,
            metavar="N",
            help=f"with --tenants: the daemon-wide limit of {what} serve will have, "
            "which each tenant gets a share of (default: serve's default; 0: unlimited)",
        )
    p.set_defaults(func=cmd_doctor)
    return p
