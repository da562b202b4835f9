"""A shared connection for short-lived commands, as ssh's ControlMaster and
ControlPersist: ``execserver patch --persist SECONDS``.

The first such command starts a small background process, the *control master*
(a module the command names, e.g. :mod:`execserver.core.apply_patch.control_master`),
which connects to the exec-server
once and listens on a Unix socket in a directory only its user can enter. Later
commands with the same URL and token hand their work to it over that socket
instead of loading asyncio, the client and a websocket of their own: what is
left of them is the interpreter and this module (measured:
docs/performance.md). The master exits SECONDS after its last request, or at once when
its connection to the exec-server is lost; the next command then starts a new one.

This side is imported by every command that uses a master, so it loads nothing
beyond the standard library's lightest modules.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from typing import Any, Final

from execserver.client.cli_options import CONTROL_DIR_ENV, TOKEN_ENV

__all__ = [
    "CONTROL_PROTOCOL",
    "ControlError",
    "control_socket_path",
    "run_through_master",
]

# The shape of requests and answers on the socket; part of the socket's name, so a
# command never hands a request to a master that reads another shape (one left
# running by an older execserver). Bump it when either changes.
CONTROL_PROTOCOL: Final = 1
# Exit code when the master cannot be reached or started (as the CLI's
# connection failures, see execserver.client.cli_errors).
_EXIT_CONNECTION: Final = 255
_REPLY_LIMIT: Final = 1 << 31


class ControlError(Exception):
    """The master could not be started or answered nothing; ``exit_code`` is
    what the command exits with."""

    def __init__(self, message: str, exit_code: int = _EXIT_CONNECTION) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _private_directory(base: str | None) -> str:
    """``base`` (the command line's $EXECSERVER_CONTROL_DIR), else a directory of
    our own named after the uid in $XDG_RUNTIME_DIR, else $TMPDIR or /tmp."""
    if not base:
        parent = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
        base = os.path.join(parent, f"execserver-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    # Whoever can enter the directory can use the master's connection (and its
    # token): it must be ours alone, and not a link someone else planted.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ControlError(
            f"{base} must be a directory owned by uid {os.getuid()} with mode 0700 "
            f"(set ${CONTROL_DIR_ENV} to use another)",
            2,
        )
    return base


def control_socket_path(url: str, token: str | None, directory: str | None = None) -> str:
    """The master's socket for this URL and token: one master per pair, so a
    command never borrows a connection made with another token. The token is
    only hashed into the name."""
    text = f"{CONTROL_PROTOCOL}\0{url}\0{token or ''}"
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    return os.path.join(_private_directory(directory), f"{key}.sock")


def _ask(path: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """Send one request to the master at ``path``; None when no master took it
    (none listens there, or it is ending: it did not answer "+"), so handing it
    to a new master is safe. After the "+" the master owns it: a lost answer is
    an error, never a retry."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            taken = sock.recv(1)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            return None
        if taken != b"+":
            return None
        chunks: list[bytes] = []
        size = 0
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > _REPLY_LIMIT:
                raise ControlError("the control master's answer is too large")
    except OSError as exc:
        raise ControlError(f"lost the control master at {path}: {exc}") from exc
    finally:
        sock.close()
    if not chunks:
        raise ControlError(f"the control master at {path} ended without an answer")
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise ControlError(f"the control master at {path} answered something that is not JSON")
    return reply


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Held while a master is looked for and started: two commands starting at
    once share one master instead of each starting its own."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start_master(module: str, url: str, token: str | None, persist: float, path: str) -> None:
    """Start the master detached (own session, stdout and stderr on /dev/null)
    and wait for its one line on a pipe: ``ready``, or ``error <exit code>
    <message>``. The token is the one line of its stdin: never on its command
    line, which ps shows to everyone."""
    token_read, token_write = os.pipe()
    os.write(token_write, (token or "").encode() + b"\n")
    os.close(token_write)
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    argv = [sys.executable, "-m", module, url, path, repr(persist), str(write_end)]
    try:
        os.posix_spawn(
            sys.executable,
            argv,
            # The token reaches the master on its stdin only: /proc/PID/environ
            # would show it for the master's whole life.
            {name: value for name, value in os.environ.items() if name != TOKEN_ENV},
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, token_read, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except OSError as exc:
        os.close(read_end)
        raise ControlError(f"cannot start the control master: {exc}") from exc
    finally:
        os.close(write_end)
        os.close(token_read)
    with os.fdopen(read_end, "rb") as pipe:
        line = pipe.read().decode("utf-8", "replace").strip()
    if line == "ready":
        return
    word, _, rest = line.partition(" ")
    code, _, message = rest.partition(" ")
    if word == "error" and code.isdigit():
        raise ControlError(message, int(code))
    raise ControlError("the control master exited before it was ready")


def run_through_master(
    module: str,
    url: str,
    token: str | None,
    persist: float,
    request: dict[str, Any],
    *,
    directory: str | None = None,
) -> dict[str, Any]:
    """Have the master for ``url`` and ``token`` carry out ``request`` and
    return its answer. When none listens, ``python -m module URL SOCKET PERSIST
    READY_FD`` is started as the master (see :func:`serve_master`'s callers)."""
    path = control_socket_path(url, token, directory)
    reply = _ask(path, request)
    if reply is not None:
        return reply
    with _locked(path + ".lock"):
        reply = _ask(path, request)  # another command may have started one meanwhile
        if reply is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a dead master's socket; nothing listens on it
            _start_master(module, url, token, persist, path)
            reply = _ask(path, request)
    if reply is None:
        raise ControlError(f"the control master at {path} is not listening")
    return reply
