"""Which sandbox policy shapes this host can really enforce, found by running them.

A backend that exists is not a backend that works for every policy: bubblewrap
may be installed but unable to create user namespaces (a container's default
seccomp profile), and the Landlock fallback refuses writable roots (their
``.git``/``.codex``/``.agents``/``.aws`` carve-outs cannot be expressed). So
``execserver doctor`` and ``serve``'s start-up log do not infer: they plan each
shape the reference supports through the same planner ``process/start`` uses,
spawn it, and check from the inside that the policy holds (a permitted write
lands, a forbidden one is refused, a denied file stays unreadable, no socket
reaches the network, the managed proxy is the only way out).

Synchronous and blocking (it spawns sandboxes): call it from a thread inside
the daemon.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.plan import LaunchPlan
from execserver.sandbox.planner import plan_process_launch
from execserver.sandbox.proxy_routed import ProxyRoutes
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_context

__all__ = ["DEFAULT_SHAPE", "ShapeResult", "probe_shapes"]

_RUN_TIMEOUT_S: Final = 20.0
_RELEASE_TIMEOUT_S: Final = 10.0
# The shape Codex sends by default (workspace-write); what `--require sandbox` gates on.
DEFAULT_SHAPE: Final = "workspace-write"
_PROTECTED: Final = (".git", ".codex", ".agents", ".aws")


@dataclass(frozen=True)
class ShapeResult:
    name: str
    enforceable: bool
    mechanism: str  # "bwrap" | "landlock" | "seccomp" | "-" when refused
    detail: str


@dataclass(frozen=True)
class _Dirs:
    ws: Path
    outside: Path
    secret: Path
    home: Path
    sock: Path


def _special(kind: str) -> dict[str, Any]:
    return {"type": "special", "value": {"kind": kind}}


def _path(path: Path) -> dict[str, Any]:
    return {"type": "path", "path": "file://" + str(path)}


def _context(entries: list[tuple[dict[str, Any], str]]) -> FileSystemSandboxContext:
    return decode_sandbox_context(
        {
            "permissions": {
                "type": "managed",
                "file_system": {
                    "type": "restricted",
                    "entries": [{"path": p, "access": a} for p, a in entries],
                },
                "network": "restricted",
            },
            "windowsSandboxLevel": "disabled",
        }
    )


def _run(plan: LaunchPlan, cwd: Path) -> tuple[int, str]:
    try:
        done = subprocess.run(
            plan.argv,
            env=plan.env,
            pass_fds=plan.pass_fds,
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            timeout=_RUN_TIMEOUT_S,
            check=False,
        )
    finally:
        plan.close()
    plan.wait_released(_RELEASE_TIMEOUT_S)
    return done.returncode, done.stdout.decode(errors="replace").strip()


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


# Each check script exits 0 when the policy held, else 10+ naming what leaked, so the
# detail says which promise failed rather than "exit 1".
_WRITE_CHECKS: Final = {
    "read-only": (
        'echo x > "$WS/probe" 2>/dev/null && exit 10; exit 0',
        {10: "a write inside the read-only workspace succeeded"},
    ),
    "workspace-write": (
        'echo x > "$WS/probe" || exit 10; '
        + "".join(
            f'(echo x > "$WS/{name}/probe") 2>/dev/null && exit {11 + i}; '
            for i, name in enumerate(_PROTECTED)
        )
        + 'echo x > "$OUTSIDE/probe" 2>/dev/null && exit 15; exit 0',
        {
            10: "a write inside the writable root was refused",
            **{
                11 + i: f"a write under the protected {name} succeeded"
                for i, name in enumerate(_PROTECTED)
            },
            15: "a write outside the writable root succeeded",
        },
    ),
    "deny-read": (
        'cat "$WS/probe.txt" >/dev/null || exit 10; cat "$SECRET/s.txt" 2>/dev/null && exit 11; '
        "exit 0",
        {10: "a readable file could not be read", 11: "a denied file was readable"},
    ),
}

_NETWORK_CHECK: Final = (
    "import socket, sys\n"
    "try:\n"
    "    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
    "except OSError:\n"
    "    sys.exit(0)\n"
    "sys.exit(10)\n"
)

_MANAGED_CHECK: Final = (
    "import os, socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(os.environ['DIRECT_PORT'])), timeout=5)\n"
    "    sys.exit(11)\n"
    "except OSError:\n"
    "    pass\n"
    "port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])\n"
    "s = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
    "s.sendall(b'execserver-probe')\n"
    "sys.exit(0 if s.recv(2) == b'ok' else 10)\n"
)


def _shape_contexts(d: _Dirs) -> dict[str, FileSystemSandboxContext]:
    root_read = (_special("root"), "read")
    return {
        "read-only": _context([root_read]),
        "workspace-write": _context([root_read, (_path(d.ws), "write")]),
        "deny-read": _context([root_read, (_path(d.secret), "none")]),
        # Full disk access, network cut: no namespace needed, only the seccomp filter.
        "network-restricted": _context([(_special("root"), "write")]),
        "managed-network": _context([root_read, (_path(d.ws), "write")]),
    }


def _env(d: _Dirs) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(d.home),
        "LANG": "C.UTF-8",
        "WS": str(d.ws),
        "OUTSIDE": str(d.outside),
        "SECRET": str(d.secret),
    }


def _outcome(
    name: str, plan: LaunchPlan, code: int, output: str, meanings: dict[int, str]
) -> ShapeResult:
    if plan.mechanism == "refused":
        return ShapeResult(name, False, "-", _last_line(output))
    if code == 0:
        return ShapeResult(name, True, plan.mechanism, "enforced (checked from inside)")
    if plan.setup_failed():
        return ShapeResult(
            name, False, "-", f"{plan.mechanism} could not start: {_last_line(output)}"
        )
    why = meanings.get(code) or f"exit status {code}: {_last_line(output)}"
    return ShapeResult(name, False, "-", f"{plan.mechanism}: {why}")


def _probe_script(
    name: str, ctx: FileSystemSandboxContext, d: _Dirs, backend: SandboxBackend
) -> ShapeResult:
    script, meanings = _WRITE_CHECKS[name]
    sh = shutil.which("sh") or "/bin/sh"
    plan = plan_process_launch(
        ctx, argv=[sh, "-c", script], cwd=str(d.ws), env=_env(d), tty=False, backend=backend
    )
    code, output = _run(plan, d.ws)
    return _outcome(name, plan, code, output, meanings)


def _probe_network(ctx: FileSystemSandboxContext, d: _Dirs, backend: SandboxBackend) -> ShapeResult:
    plan = plan_process_launch(
        ctx,
        argv=[sys.executable, "-I", "-S", "-c", _NETWORK_CHECK],
        cwd=str(d.ws),
        env=_env(d),
        tty=False,
        backend=backend,
    )
    code, output = _run(plan, d.ws)
    return _outcome(
        "network-restricted", plan, code, output, {10: "an inet socket could be created"}
    )


def _probe_managed(ctx: FileSystemSandboxContext, d: _Dirs, backend: SandboxBackend) -> ShapeResult:
    """The child's only way out is the proxy's unix socket, through the in-sandbox
    bridge: a byte it sends to the proxy port must arrive at our listener."""
    sock_path = str(d.sock / "http.sock")
    received: list[bytes] = []
    # A host port the child must NOT reach (its loopback is its own namespace's).
    with (
        socket.create_server(("127.0.0.1", 0)) as direct,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener,
    ):
        listener.bind(sock_path)
        listener.listen(1)
        # Short accept timeouts, so the thread sees ``stop`` soon after the probe
        # ends (closing or shutting down a unix listener does not wake an accept).
        listener.settimeout(0.1)
        stop = threading.Event()

        def accept() -> None:
            deadline = time.monotonic() + _RUN_TIMEOUT_S
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                with conn:
                    conn.settimeout(5)
                    with contextlib.suppress(OSError):
                        received.append(conn.recv(64))
                        # Answer, so the child exits only after the relay delivered.
                        conn.sendall(b"ok")
                return

        acceptor = threading.Thread(target=accept, name="doctor-managed-probe", daemon=True)
        acceptor.start()
        try:
            # The port is only a name inside the sandbox's own network namespace.
            port = 3128
            env = {
                **_env(d),
                "HTTP_PROXY": f"http://127.0.0.1:{port}",
                "DIRECT_PORT": str(direct.getsockname()[1]),
            }
            plan = plan_process_launch(
                ctx,
                argv=[sys.executable, "-I", "-S", "-c", _MANAGED_CHECK],
                cwd=str(d.ws),
                env=env,
                tty=False,
                enforce_managed_network=True,
                backend=backend,
                proxy_routes=ProxyRoutes(routes=((port, sock_path),)),
            )
            code, output = _run(plan, d.ws)
        finally:
            # Joined before the probe returns: a connection it took ends within
            # its own 5 s timeout, a wait for one within the accept timeout.
            stop.set()
            acceptor.join()
    result = _outcome(
        "managed-network",
        plan,
        code,
        output,
        {
            10: "the proxy's answer did not come back",
            11: "a host port was reachable without the proxy",
        },
    )
    if result.enforceable and received != [b"execserver-probe"]:
        return ShapeResult(
            "managed-network", False, "-", "the proxy never saw the sandboxed connection"
        )
    return result


def _make_dirs(base: Path) -> _Dirs:
    d = _Dirs(base / "ws", base / "outside", base / "secret", base / "home", base / "sock")
    for path in (d.ws, d.outside, d.secret, d.home, d.sock):
        path.mkdir()
    (d.ws / ".git").mkdir()
    (d.ws / "probe.txt").write_text("readable\n")
    (d.secret / "s.txt").write_text("secret\n")
    return d


SHAPES: Final = (
    "read-only",
    "workspace-write",
    "deny-read",
    "network-restricted",
    "managed-network",
)


def probe_shapes(backend: SandboxBackend) -> list[ShapeResult]:
    """Run every policy shape in ``SHAPES`` under ``backend`` and report each."""
    results: list[ShapeResult] = []
    with tempfile.TemporaryDirectory(prefix="execserver-doctor-") as tmp:
        d = _make_dirs(Path(tmp).resolve())
        contexts = _shape_contexts(d)
        probes: dict[str, Callable[[FileSystemSandboxContext], ShapeResult]] = {
            "read-only": lambda c: _probe_script("read-only", c, d, backend),
            "workspace-write": lambda c: _probe_script("workspace-write", c, d, backend),
            "deny-read": lambda c: _probe_script("deny-read", c, d, backend),
            "network-restricted": lambda c: _probe_network(c, d, backend),
            "managed-network": lambda c: _probe_managed(c, d, backend),
        }
        for name in SHAPES:
            try:
                results.append(probes[name](contexts[name]))
            except RpcError as exc:  # the planner refused: what a client would get
                results.append(ShapeResult(name, False, "-", exc.message))
            except (OSError, subprocess.SubprocessError) as exc:
                results.append(ShapeResult(name, False, "-", f"probe failed: {exc}"))
    return results
