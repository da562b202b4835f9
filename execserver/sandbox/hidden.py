"""The daemon's private directory: host state no sandbox may reach by path.

The sockets of the per-process network proxies (and of the loopback bridges)
live here. A sandboxed child that could connect to *another* child's proxy
socket would get that proxy's domain policy instead of its own (and, before
the daemon's own listener was refused by every proxy, a way to its
websocket). So every bwrap view masks this directory with an empty mode-000
tmpfs, and a proxy-routed sandbox's bridge reaches exactly its own socket
directory, through a descriptor the daemon opened (``proxy_routed``). A
tenant's socket directory and sockets are its account's (0700): its bwrap and
bridge run as that account (netproxy ``give_socket_dir``).

The directory is created once per daemon (0700, random name) on first use and
removed at exit. With ``--state-dir`` it is ``STATE_DIR/private`` instead
(``use_private_dir``): the same for every daemon of that state directory, so a
kept process's proxy sockets (netproxy/kept.py) stay masked in a restarted
daemon's sandboxes, and not removed at exit (their keepers remove them).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

__all__ = ["NotPrivateError", "claim_private", "is_private", "private_dir", "use_private_dir"]

_lock = threading.Lock()
_private: str | None = None


def private_dir() -> str:
    """The daemon-wide private directory (created on first call)."""
    global _private
    with _lock:
        if _private is None or not os.path.isdir(_private):
            _private = os.path.realpath(tempfile.mkdtemp(prefix="execserver-private-"))
            atexit.register(shutil.rmtree, _private, True)
        return _private


class NotPrivateError(RuntimeError):
    """A directory that must be this user's alone is something else (a link,
    another user's); the command line says so in one line."""


def claim_private(path: str) -> None:
    """``path`` made 0700 if missing; it must be a directory of this uid, not a
    link (else NotPrivateError), and is left 0700."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise NotPrivateError(f"{path}: cannot be made a directory: {exc.strerror}") from None
    if not os.path.isdir(path) or os.path.islink(path) or info.st_uid != os.getuid():
        raise NotPrivateError(f"{path}: not a directory owned by this user")
    os.chmod(path, 0o700)


def use_private_dir(path: str) -> None:
    """This daemon's private directory is ``path`` (``claim_private``), kept at
    exit. Called at start-up, before any sandbox or proxy is built."""
    global _private
    claim_private(path)
    with _lock:
        _private = os.path.realpath(path)


def is_private(path: str) -> bool:
    """True when ``path`` (made absolute and normalised, not resolved) lies in it."""
    private = private_dir()
    normal = os.path.normpath(os.path.abspath(path))
    return normal == private or normal.startswith(private + os.sep)
