"""The control master of :mod:`execserver.client.control`: one connection to an
exec-server, lent to the commands that reach the master over its Unix socket.

The master is started as ``python -m <module> URL SOCKET PERSIST READY_FD`` by
the first command that needs it, with the bearer token as the one line of its
stdin (empty: none); ``<module>`` calls :func:`serve_master` with the handler
for its requests. It connects, starts listening, writes ``ready`` (or ``error
<exit code> <message>``) to READY_FD and serves one JSON request per socket
connection, each answered with one JSON object. It ends PERSIST seconds after
its last request, or when the connection to the exec-server is lost (it never
reconnects: a later command starts a new master and so sees a fresh
connection's errors), and removes its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from execserver.aio.tasks import TaskSet
from execserver.client.cli_errors import explain
from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError

__all__ = ["Handler", "serve_master"]

Handler = Callable[[ExecServerClient, dict[str, Any]], Awaitable[dict[str, Any]]]

# A request carries a whole patch; bound it as a command line's stdin would be.
_REQUEST_LIMIT: Final = 1 << 30
_EXIT_FAILED: Final = 125


def _tell(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, line.encode() + b"\n")
    with contextlib.suppress(OSError):
        os.close(fd)


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class _Master:
    def __init__(self, client: ExecServerClient, handler: Handler, persist: float) -> None:
        self._client = client
        self._handler = handler
        self._persist = persist
        self._active = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._ending = asyncio.Event()
        self._idle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._idle = asyncio.get_running_loop().call_later(self._persist, self._ending.set)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # Once ending, a request is not taken (no "+"): the command starts a
            # new master. The directory is private already; a peer of another
            # user is refused anyway.
            if self._ending.is_set() or _peer_uid(writer) != os.getuid():
                return
            self._active += 1
            self._quiet.clear()
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            try:
                await self._serve_one(reader, writer)
            finally:
                self._active -= 1
                if not self._active:
                    self._quiet.set()
                    if not self._ending.is_set():
                        self._arm()
        except (ConnectionError, OSError):
            pass  # the command went away; nothing to tell it
        finally:
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readuntil(b"\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return  # not taken: no "+"
        # "+": the request is taken. A command that sees no "+" knows nothing was
        # done and may hand the request to a new master; after it, never.
        writer.write(b"+")
        reply = await self._answer(line)
        writer.write(json.dumps(reply).encode())
        await writer.drain()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as exc:
            return {"error": {"exit": 2, "message": f"bad request to the control master: {exc}"}}
        try:
            return await self._handler(self._client, request)
        except (ExecServerError, OSError, ValueError) as exc:
            verbose = bool(request.get("verbose"))
            code, message = explain(exc, url=self._client.url or "", verbose=verbose)
            return {"error": {"exit": code, "message": message}}
        except Exception as exc:  # never leave the command without an answer
            return {"error": {"exit": _EXIT_FAILED, "message": f"control master failed: {exc!r}"}}

    async def until_ending(self) -> None:
        """Until the idle time has passed or the exec-server connection is lost."""
        connection = self._client.connection
        assert connection is not None
        # Both waiters end with this call: whichever is left is cancelled on the way out.
        waiters = TaskSet("execserver-control-master")
        lost = waiters.spawn(connection.wait_lost(), name="lost")
        ending = waiters.spawn(self._ending.wait(), name="ending")
        try:
            await asyncio.wait({lost, ending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._ending.set()
            await waiters.aclose()

    async def until_quiet(self) -> None:
        """Until the requests already taken have been answered."""
        await self._quiet.wait()


async def _serve(
    url: str,
    token: str | None,
    path: str,
    persist: float,
    ready_fd: int,
    handler: Handler,
    client_name: str,
) -> int:
    try:
        client = await ExecServerClient.connect(
            url,
            token=token,
            client_name=client_name,
            auto_reconnect=False,
        )
    except (ExecServerError, OSError, ValueError) as exc:
        code, message = explain(exc, url=url)
        _tell(ready_fd, f"error {code} {' '.join(message.split())}")
        return 1
    async with client:
        master = _Master(client, handler, persist)
        try:
            server = await asyncio.start_unix_server(master.accept, path, limit=_REQUEST_LIMIT)
            inode = os.stat(path).st_ino
        except OSError as exc:  # e.g. a path longer than a Unix socket address allows
            _tell(ready_fd, f"error 2 cannot listen on {path}: {exc}")
            return 1
        try:
            os.chmod(path, 0o600)
            _tell(ready_fd, "ready")
            await master.until_ending()
        finally:
            # Only our own socket: a successor may already have replaced it.
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            server.close()
        await master.until_quiet()
    return 0


def serve_master(argv: Sequence[str], handler: Handler, client_name: str) -> int:
    """The master's main: ``argv`` is ``URL SOCKET PERSIST READY_FD``."""
    url, path, persist, ready_fd = argv
    token = sys.stdin.readline().rstrip("\n") or None
    # The master may outlive the directory its first command ran in; it needs none
    # (commands send absolute paths) and must not keep one busy.
    os.chdir("/")
    return asyncio.run(
        _serve(url, token, path, float(persist), int(ready_fd), handler, client_name)
    )
