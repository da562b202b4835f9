"""The daemon's side of the keepers: the zygote, spawn requests, reconnection.

Blocking calls, made on the event loop on purpose: a spawn is answered by the
keeper once its child was exec'ed (about as long as ``Popen`` takes in the
daemon without keepers), and ``ProcessTable.start`` must register the process
with no await between the fork and the registration.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from execserver.keeper.program import FRAME, KIND_INFO, REQUEST_HEAD, SOCKET_NAME, short_path

__all__ = ["PROGRAM", "KeeperGone", "Zygote", "connect_keeper", "read_answer", "send_line"]

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "program.py")
# How long a keeper may take to answer (its child exec'ed, or why not).
ANSWER_TIMEOUT_S = 10.0


class KeeperGone(OSError):
    """The keeper (or the zygote) is not there, or hung up before answering."""


def read_answer(sock: socket.socket, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
    """The keeper's first frame on a new link (seq 0, kind info): blocking, bounded."""
    sock.settimeout(timeout)
    try:
        head = _recv_exactly(sock, FRAME.size)
        seq, kind, length = FRAME.unpack(head)
        if seq != 0 or kind != KIND_INFO:
            raise KeeperGone("the keeper's first frame is not its answer")
        answer: dict[str, Any] = json.loads(_recv_exactly(sock, length))
        return answer
    except TimeoutError:
        raise KeeperGone("the keeper did not answer") from None
    finally:
        sock.setblocking(False)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise KeeperGone("the keeper hung up")
        data += chunk
    return data


class Zygote:
    """The one ``python -I -S program.py zygote`` process, started with the daemon,
    and the warm keeper it forked ahead of the next spawn: handing a request to a
    warm keeper costs a message; forking one from the zygote about a millisecond
    (and a fresh interpreter ~15 ms)."""

    def __init__(self, log_path: str | None = None, nice: int = 0) -> None:
        """``log_path``: where the zygote and its keepers write why one of them
        failed (appended, 0600; they outlive the daemon, so not its stderr).
        ``nice``: steps below the daemon for the keepers and what they run."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = subprocess.DEVNULL
        if log_path is not None:
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-I", "-S", PROGRAM, "zygote", str(theirs.fileno()), str(nice)],
                pass_fds=(theirs.fileno(),),
                # Not the daemon's stdout/stderr: keepers outlive it, and its pipes
                # (a supervisor's, a test's) must end with it.
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={},
                start_new_session=True,
            )
        finally:
            theirs.close()
            if log != subprocess.DEVNULL:
                os.close(log)
        self._ctl = mine
        self.pid = self._popen.pid
        self._warm: socket.socket | None = None
        with contextlib.suppress(KeeperGone):
            self._warm = self._fork_warm()

    def _fork_warm(self) -> socket.socket:
        """A link to a keeper the zygote forks now; it waits there for its request."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self._ctl, [b"warm"], [theirs.fileno()])
        except OSError as exc:
            mine.close()
            raise KeeperGone(f"the keeper zygote is gone: {exc}") from None
        finally:
            theirs.close()
        return mine

    def spawn(self, request: dict[str, Any], pass_fds: Sequence[int]) -> socket.socket:
        """A keeper running ``request``'s plan: the warm one, given the request (it
        may still be forking: the request waits in its link). Its link; the keeper
        answers on it. The caller forks the next (``warm_up``) once it has the
        answer: the zygote's fork would otherwise compete for a CPU with this
        keeper's start of its child, on the spawn's path."""
        payload = json.dumps(request).encode()
        message = REQUEST_HEAD.pack(len(payload)) + payload
        for _attempt in range(2):
            link = self._warm if self._warm is not None else self._fork_warm()
            self._warm = None
            try:
                link.setblocking(True)
                sent = socket.send_fds(link, [message], list(pass_fds))
                if sent < len(message):
                    link.sendall(message[sent:])
            except OSError:
                link.close()  # a warm keeper that died (killed): fork another once
                continue
            return link
        raise KeeperGone("the keeper zygote's keepers do not take requests")

    def warm_up(self) -> None:
        """Fork the keeper the next spawn will use, unless one is waiting."""
        if self._warm is None:
            with contextlib.suppress(KeeperGone):
                self._warm = self._fork_warm()

    def close(self) -> None:
        """The zygote exits, and so does the warm keeper (keepers it forked live on)."""
        if self._warm is not None:
            self._warm.close()
            self._warm = None
        self._ctl.close()
        try:
            self._popen.wait(5)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


def connect_keeper(directory: str) -> socket.socket:
    """A link to the keeper of the process in ``directory`` (a previous daemon's)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with short_path(directory, SOCKET_NAME) as path:
            sock.connect(path)
    except OSError as exc:
        sock.close()
        raise KeeperGone(str(exc)) from None
    sock.setblocking(False)
    return sock


def send_line(sock: socket.socket, message: dict[str, Any]) -> None:
    """A small command, sent whole on the (non-blocking) link: at once when it fits,
    as it nearly always does, else blocking briefly for the rest. (Switching the
    socket to blocking for every command cost three system calls per acknowledgement
    on the output's hot path.)"""
    data = json.dumps(message).encode() + b"\n"
    try:
        sent = sock.send(data)
    except BlockingIOError:
        sent = 0
    except OSError:
        return  # the keeper is gone: the link's reader sees it
    if sent == len(data):
        return
    sock.setblocking(True)
    try:
        with contextlib.suppress(OSError):
            sock.sendall(data[sent:])
    finally:
        sock.setblocking(False)
