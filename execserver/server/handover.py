"""Upgrade without downtime: one daemon hands its listening sockets and its keepers
to the next (``--state-dir`` + ``--take-over``), and systemd socket activation.

The running daemon serves ``STATE_DIR/control.sock`` (a unix stream socket,
0600, in the 0700 state directory; a peer of another uid is refused from its
SO_PEERCRED even when the modes were loosened, and so is any process a keeper
holds: every command a daemon started). It speaks JSON lines:

    new -> old   {"op": "take-over", "pid": ..., "version": ...}
    old -> new   {"op": "listeners", "pid": ..., "count": N}   + N fds (SCM_RIGHTS)
    old -> new   {"op": "released"}                            (keepers let go)

or ``{"op": "refused", "reason": ...}``. Between the two answers the old daemon
stops accepting (the sockets stay open in the new daemon, which does not accept
yet: clients that connect meanwhile wait in the kernel's backlog), finishes
the requests it has read, closes its websockets with 1012 and lets go of its
keepers. Only then does the new daemon re-adopt the sessions and accept.

Everything here is stdlib: the old daemon's side runs on its event loop, the
new daemon's is a few blocking calls run in a thread before it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from execserver.aio.tasks import TaskSet
from execserver.keeper.program import held_by_a_keeper

__all__ = [
    "CONTROL_NAME",
    "ControlServer",
    "ControlSocketBusy",
    "HandoverError",
    "Inherited",
    "SuccessorLink",
    "control_path",
    "serving_pid",
    "systemd_listeners",
    "take_over",
]

log = logging.getLogger(__name__)

CONTROL_NAME = "control.sock"
# The most listening sockets one daemon has (one per address family of its host).
MAX_LISTENERS = 16
# How long the new daemon waits for the old one's "released": its drain of the
# requests in flight is bounded by the shutdown grace, the keepers' release is quick.
RELEASE_TIMEOUT_S = 60.0
# The first answer (the listeners) comes at once, unless the old daemon is stuck.
ANSWER_TIMEOUT_S = 10.0
_LINE_LIMIT = 64 * 1024
# sd_listen_fds(3): the first passed fd.
SD_LISTEN_FDS_START = 3
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class HandoverError(RuntimeError):
    """A start-up that must not go on (another daemon serves this state directory)."""


def control_path(state_dir: str) -> str:
    return os.path.join(state_dir, CONTROL_NAME)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of a unix socket's peer, as the kernel recorded them at connect."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def _line(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body).encode() + b"\n"


# ---- the running daemon's side -------------------------------------------------------


@dataclass
class SuccessorLink:
    """The running daemon's link to the daemon taking over from it: its listeners go
    over it, then the word that the keepers are released."""

    sock: socket.socket

    def released(self) -> None:
        """The keepers are let go: the new daemon may adopt them (best effort: a new
        daemon that went away meanwhile adopts nothing anyway)."""
        with contextlib.suppress(OSError):
            self.sock.setblocking(True)
            self.sock.settimeout(5)
            self.sock.sendall(_line({"op": "released"}))
        self.sock.close()


# Called with the link to the daemon taking over, once its request is accepted: the
# running daemon sends it the listeners (send_listeners), then hands over. False:
# it could not (it is stopping, the successor went away); the link is closed here
# and a later take-over may try again.
HandoverRequested = Callable[[SuccessorLink, Mapping[str, Any]], Awaitable[bool]]


class ControlServer:
    """The control socket of a running daemon: one take-over, from a peer of our uid."""

    def __init__(self, state_dir: str, on_take_over: HandoverRequested) -> None:
        self.path = control_path(state_dir)
        self._on_take_over = on_take_over
        self._sock: socket.socket | None = None
        self._tasks = TaskSet("control socket", logger=log)
        self.taken = False

    def open(self) -> None:
        """Bind beside the final name and rename over it: a predecessor's socket file
        (it does not unlink it when handing over) is replaced in one step, and the
        path never names a socket with looser modes than 0600."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            old_umask = os.umask(0o177)
            try:
                sock.bind(tmp)
            finally:
                os.umask(old_umask)
            os.chmod(tmp, 0o600)
            sock.listen(4)
            os.rename(tmp, self.path)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        sock.setblocking(False)
        self._sock = sock
        self._tasks.spawn(self._accept_loop(), name="accept")

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            conn, _ = await loop.sock_accept(self._sock)
            try:
                await self._serve(conn)
            except Exception as exc:  # one bad peer must not end the control socket
                log.warning("control socket: %s", exc)
                conn.close()

    async def _serve(self, conn: socket.socket) -> None:
        pid, uid, _ = peer_credentials(conn)
        if uid != os.getuid():
            # Defence in depth: the 0600 mode already keeps other users out.
            log.warning("control socket: refused pid %d of uid %d (not ours)", pid, uid)
            with contextlib.suppress(OSError):
                conn.send(_line({"op": "refused", "reason": "peer uid is not the daemon's"}))
            conn.close()
            return
        if held_by_a_keeper(pid):
            # A command of this daemon's (a sandboxed one included: a non-root
            # daemon's commands have its uid and may see the state directory)
            # would get the listening sockets and every keeper.
            log.warning("control socket: refused pid %d (a process a keeper holds)", pid)
            with contextlib.suppress(OSError):
                conn.send(_line({"op": "refused", "reason": "peer is a process a keeper holds"}))
            conn.close()
            return
        conn.setblocking(False)
        loop = asyncio.get_running_loop()
        data = b""
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            while b"\n" not in data and len(data) < _LINE_LIMIT:
                chunk = await loop.sock_recv(conn, 4096)
                if not chunk:
                    break
                data += chunk
        try:
            request = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            request = None
        if not isinstance(request, dict) or request.get("op") != "take-over":
            conn.close()
            return
        if self.taken:
            with contextlib.suppress(OSError):
                conn.send(_line({"op": "refused", "reason": "a take-over is under way"}))
            conn.close()
            return
        self.taken = True
        log.info("control socket: pid %d takes over (version %s)", pid, request.get("version"))
        if not await self._on_take_over(SuccessorLink(conn), request):
            conn.close()
            self.taken = False

    async def aclose(self, *, unlink: bool) -> None:
        """Stop serving; ``unlink``: remove the path too (a plain shutdown; after a
        handover the path is the successor's)."""
        await self._tasks.aclose()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            if unlink:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)


def send_listeners(successor: SuccessorLink, fds: list[int]) -> None:
    """The listening sockets, passed to the new daemon (it gets its own copies)."""
    body = _line({"op": "listeners", "pid": os.getpid(), "count": len(fds)})
    successor.sock.setblocking(True)
    successor.sock.settimeout(5)
    socket.send_fds(successor.sock, [body], fds)


# ---- the new daemon's side -----------------------------------------------------------


@dataclass
class Inherited:
    """What a take-over got: the old daemon's listening sockets (not yet accepting here)."""

    sockets: list[socket.socket]
    predecessor_pid: int


class ControlSocketBusy(Exception):
    """A daemon listens on the control socket but has not accepted for a while (its
    backlog stays full): alive, shutting down or overloaded; who it is is unknown."""


def serving_pid(state_dir: str, timeout: float = 2.0) -> int | None:
    """The pid of the daemon serving ``state_dir`` now (its control socket accepts;
    SO_PEERCRED says who), or None: no socket, or one a killed daemon left. A
    listener whose backlog stays full for ``timeout`` raises ControlSocketBusy.
    Other errors (a socket we may not reach) are raised: they are not "nobody"."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(timeout)
            sock.connect(control_path(state_dir))
            pid, _, _ = peer_credentials(sock)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
                return None
            # A Unix socket's connect with a timeout does not wait for room in a
            # full backlog (EAGAIN): a daemon that stopped accepting while it shuts
            # down, polled by `execserver supervise` every 0.1 s, filled its four
            # places, and the supervisor died of the BlockingIOError.
            if exc.errno != errno.EAGAIN:
                raise
            if time.monotonic() >= deadline:
                raise ControlSocketBusy(control_path(state_dir)) from None
            time.sleep(0.02)
            continue
        finally:
            sock.close()
        return pid


def take_over(state_dir: str, version: str) -> Inherited | None:
    """Ask the daemon serving ``state_dir`` for its listeners and wait until it has
    let go of its keepers. None when no daemon answers there (a plain start).
    Blocking: run it in a thread, before serving."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            sock.connect(control_path(state_dir))
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        _, uid, _ = peer_credentials(sock)
        if uid != os.getuid():
            raise HandoverError(f"the control socket of {state_dir} is served by uid {uid}")
        sock.sendall(_line({"op": "take-over", "pid": os.getpid(), "version": version}))
        data, fds, _, _ = socket.recv_fds(sock, _LINE_LIMIT, MAX_LISTENERS)
        sockets = [socket.socket(fileno=fd) for fd in fds]
        first, _, rest = data.partition(b"\n")
        try:
            answer = json.loads(first) if first else {}
        except ValueError:
            answer = {}
        if answer.get("op") != "listeners" or not sockets:
            for each in sockets:
                each.close()
            reason = answer.get("reason") or "no listening socket came"
            raise HandoverError(f"the daemon serving {state_dir} refused the take-over: {reason}")
        for each in sockets:
            os.set_inheritable(each.fileno(), False)
        pid = int(answer.get("pid") or 0)
        log.info("take-over: %d listening socket(s) from pid %d", len(sockets), pid)
        # Then its keepers: adopting one it still holds would race its last acks.
        sock.settimeout(RELEASE_TIMEOUT_S)
        buffered = rest
        while b"\n" not in buffered:
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                log.warning("take-over: pid %d did not say it released; adopting anyway", pid)
                break
            if not chunk:
                # It went away without saying so (killed mid-way): its keepers
                # accept our links all the same, dropping its own.
                log.warning("take-over: pid %d left without saying it released", pid)
                break
            buffered += chunk
        return Inherited(sockets, pid)
    finally:
        sock.close()


# ---- systemd socket activation -------------------------------------------------------


def systemd_listeners(environ: MutableMapping[str, str]) -> list[socket.socket]:
    """sd_listen_fds(3): the listening sockets systemd passed (LISTEN_PID is ours,
    LISTEN_FDS of them from fd 3 on), the variables unset so that no child
    mistakes them for its own. Empty when the daemon was not socket-activated."""
    pid_text = environ.get("LISTEN_PID", "")
    count_text = environ.get("LISTEN_FDS", "")
    if not pid_text or not count_text:
        return []
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(name, None)
    try:
        pid, count = int(pid_text), int(count_text)
    except ValueError:
        return []
    if pid != os.getpid() or count <= 0:
        return []
    found: list[socket.socket] = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
        os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
        if sock.type != socket.SOCK_STREAM or sock.family not in (
            socket.AF_INET,
            socket.AF_INET6,
        ):
            sock.detach()
            raise HandoverError(f"socket activation: fd {fd} is not a TCP socket")
        found.append(sock)
    return found
