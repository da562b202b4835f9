"""The sandboxed fs helper program: the one program that runs fs operations
inside a sandbox, started and spoken to by ``execserver.fs.sandboxed.helper``.

``python -m execserver.fs.sandboxed.program serve <private dir>`` is a helper
on the private runtime (``execserver/sandbox/fs_helper/runtime.py``, which
runs the module as ``-m`` does without importing runpy:
``execserver/sandbox/fs_helper/as_main.py``): it sees exactly its policy's
mount view. Start-up order is the security argument:

1. import everything it will ever run (the interpreter and this package are
   reachable only under ``<private dir>``, read-only binds that are not part
   of the policy's view). That is little on purpose, one interpreter per
   policy: the standard library's ``os``, ``struct``, ``select``, ``errno``,
   ``stat``, ``_thread`` and ``ctypes``, pybase64, and the fs modules, none of
   them importing typing, dataclasses, re, threading or msgspec at run time
   (the protocol's msgpack is ``msgpack_lite``, in pure Python;
   tests/unit/test_fs_helper_imports.py keeps the list short);
2. ``chmod 000 <private dir>``: the helper owns that directory, and with every
   capability dropped (``--cap-drop ALL``) not even uid 0 may traverse a mode
   000 directory — from now on no path a request names, symlinks included,
   reaches the runtime;
3. check that the lock holds (fail closed: exit 1 otherwise), then serve;
4. before and after each operation, check that every mount of the view is
   still attached (``MountWatch``): the host can detach a mask by renaming a
   file over the masked one. Once one is gone no result leaves the helper, and
   every request is answered ``STALE`` (the daemon retires it and runs the call
   in a fresh helper).

``python -m execserver.fs.sandboxed.program confined <view as JSON>`` is a
helper started with the interpreter, this package and ``:minimal`` readable
(``execserver/sandbox/fs_helper/launch.py`` ``confined_plan``: any sandbox
mechanism, any policy). Before each operation it confines itself to the
policy's view (``execserver/sandbox/fs_helper/confine.py``: paths outside it
are missing, and Landlock then refuses them for the rest of its life). The
daemon uses it for one call and closes the channel.

Either way the kernel does every access check (EROFS outside writable roots,
EACCES on denied files, symlinks resolved inside the view), the protocol is
``execserver.fs.sandboxed.protocol`` and only the operations in the table it
is given exist (``OPERATIONS`` for the fs service): a request cannot name code
to import.
"""

from __future__ import annotations

import _thread
import os
import sys

from execserver.fs.operations import FS_OPERATIONS
from execserver.fs.sandboxed.msgpack_lite import DecodeError, decode, encode_int, encode_into
from execserver.fs.sandboxed.protocol import (
    FAILED,
    HEADER,
    MAX_FRAME,
    OK,
    OS_ERROR,
    READY_ID,
    RPC_ERROR,
    STALE,
)
from execserver.priority import NICE_ENV, lower_self, nice_from_env
from execserver.sandbox.fs_helper.confine import confine
from execserver.sandbox.fs_helper.mount_watch import MountWatch
from execserver.wire.errors import RpcError

# What the helper imports is what it costs, once per sandbox policy: no typing,
# threading, msgspec or re at run time (tests/unit/test_fs_helper_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, BinaryIO, Final, Protocol

    Operations = Mapping[str, Callable[..., Any]]

    class ViewWatch(Protocol):
        """Whether the helper's view is still the one it started with (``MountWatch``)."""

        broken: str | None

        def intact(self) -> bool: ...

    # Run before each operation; raises what the operation would (OSError, RpcError).
    Check = Callable[["Request"], None]


__all__ = [
    "OPERATIONS",
    "Request",
    "Response",
    "decode_request",
    "frame",
    "lock_runtime",
    "main",
    "run",
    "serve",
]

# What the fs service runs in the helper, by the name its requests give.
OPERATIONS: Final[Operations] = {op.name: op.helper_function for op in FS_OPERATIONS}
# Enough for a blocked operation (a fifo, a hung network mount) not to stall the
# rest; a new helper is cheap compared with an unbounded thread count.
_WORKERS: Final = 4


class Request:
    """``[id, op, args]`` (``protocol.py``), as the helper reads it."""

    __slots__ = ("args", "id", "op")
    id: int
    op: str
    args: dict[str, Any]

    def __init__(self, id: int, op: str, args: dict[str, Any]) -> None:
        self.id = id
        self.op = op
        self.args = args

    def __repr__(self) -> str:
        return f"Request({self.id!r}, {self.op!r}, {self.args!r})"


class Response:
    """``[id, kind, value, code, message]`` (``protocol.py``), as the helper writes it."""

    __slots__ = ("code", "id", "kind", "message", "value")
    id: int
    kind: int
    value: Any
    code: int
    message: str

    def __init__(
        self, id: int, kind: int, value: Any = None, code: int = 0, message: str = ""
    ) -> None:
        self.id = id
        self.kind = kind
        self.value = value
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return (
            f"Response({self.id!r}, {self.kind!r}, {self.value!r}, "
            f"code={self.code!r}, message={self.message!r})"
        )


def decode_request(body: bytes) -> Request:
    """A request's body; DecodeError for anything but ``[int, str, {str: ...}]``."""
    value = decode(body)
    if type(value) is not list or len(value) != 3:
        raise DecodeError("an fs helper request is the array [id, op, args]")
    request_id, op, args = value
    if type(request_id) is not int or type(op) is not str or type(args) is not dict:
        raise DecodeError("an fs helper request is [int, str, map]")
    for name in args:
        if type(name) is not str:
            raise DecodeError("an fs helper request's arguments are named by strings")
    return Request(request_id, op, args)


def frame(response: Response) -> bytes:
    """``response`` framed (``protocol.HEADER`` and its msgpack body)."""
    # The frame's header (below), then a fixarray of 5.
    parts = [b"", b"\x95", encode_int(response.id), encode_int(response.kind)]
    encode_into(response.value, parts)
    parts.append(encode_int(response.code))
    # The message is UTF-8 (protocol.py): a file name's undecodable bytes in it
    # become U+FFFD.
    message = response.message
    if not message.isascii():
        message = message.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    encode_into(message, parts)
    size = sum(map(len, parts))
    if size > MAX_FRAME:
        raise ValueError(f"fs helper frame too large ({size} bytes)")
    parts[0] = HEADER.pack(size)
    return b"".join(parts)


def _no_check(request: Request) -> None:
    """A helper on the private runtime: its mount view is the policy's already."""


def run(
    request: Request, operations: Operations = OPERATIONS, check: Check = _no_check
) -> Response:
    """One request answered: its operation's result, or its error in the one
    encoding the daemon decodes (``protocol``)."""
    func = operations.get(request.op)
    if func is None:
        return Response(request.id, FAILED, message=f"unknown fs helper operation {request.op!r}")
    try:
        check(request)
        return Response(request.id, OK, func(**request.args))
    except RpcError as exc:
        return Response(request.id, RPC_ERROR, code=exc.code, message=exc.message)
    except OSError as exc:
        return Response(request.id, OS_ERROR, code=exc.errno or 0, message=exc.strerror or "")
    except Exception as exc:
        return Response(request.id, FAILED, message=f"{type(exc).__name__}: {exc}")


class _Output:
    """Whole frames to fd 1 from any worker thread. Plain write(2): with the
    network filter, send(2) is the blocked sendto syscall."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = _thread.allocate_lock()

    def send(self, response: Response) -> None:
        data = memoryview(frame(response))
        with self._lock:
            while data:
                data = data[os.write(self._fd, data) :]


def lock_runtime(private_dir: str) -> None:
    os.chmod(private_dir, 0)
    try:
        os.listdir(private_dir)
    except PermissionError:
        return
    raise SystemExit(f"fs helper: cannot hide its runtime at {private_dir} (capabilities left?)")


def serve(
    in_fd: int = 0,
    out_fd: int = 1,
    watch: ViewWatch | None = None,
    operations: Operations = OPERATIONS,
    check: Check = _no_check,
) -> None:
    """Say it is ready, then answer requests until the daemon closes the pipe, on
    ``_WORKERS`` threads.

    Each thread reads one request itself and runs it (leader/followers): no
    thread pool, so the helper does not import ``concurrent.futures`` (and
    ``logging`` with it), ~10 ms of every helper's start, nor ``threading``
    (``_thread``'s threads and locks are all it needs). While one thread
    reads, the others run their operations or wait their turn to read; a stuck
    operation holds only its own thread. A frame that cannot be read or decoded
    ends the helper once the running operations have answered (the daemon fails
    the calls still in flight and starts a new helper for the next one)."""
    reader = _Reader(os.fdopen(in_fd, "rb", closefd=False))
    output = _Output(out_fd)
    seen = watch or MountWatch()
    # Up, and reading from now on (protocol.py): the daemon sends nothing before this.
    output.send(Response(READY_ID, OK))

    def answer(request: Request) -> Response:
        return run(request, operations, check)

    # One lock per thread, held until its loop ends: serve() returns once it
    # has taken them all (the threads' join).
    finished = [_thread.allocate_lock() for _ in range(_WORKERS - 1)]
    for done in finished:
        done.acquire()
        _thread.start_new_thread(_follow_until_done, (reader, output, seen, answer, done))
    try:
        _follow(reader, output, seen, answer)
    finally:
        for done in finished:
            done.acquire()
    if reader.error is not None:
        raise reader.error


class _Reader:
    """The request pipe, read by one thread at a time; once it ends (closed, cut
    short or undecodable) every thread stops reading."""

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self._turn = _thread.allocate_lock()
        self._ended = False
        self.error: BaseException | None = None

    def next_request(self) -> Request | None:
        with self._turn:
            if self._ended:
                return None
            try:
                request = self._read()
            except BaseException as exc:
                self.error = exc
                request = None
            if request is None:
                self._ended = True
            return request

    def _read(self) -> Request | None:
        header = self._source.read(HEADER.size)
        if len(header) < HEADER.size:
            return None  # the daemon closed the pipe: exit quietly
        (size,) = HEADER.unpack(header)
        body = self._source.read(size)
        if len(body) < size:
            return None
        return decode_request(body)


def _follow(
    reader: _Reader, output: _Output, watch: ViewWatch, answer: Callable[[Request], Response]
) -> None:
    while (request := reader.next_request()) is not None:
        # Checked after the operation too: a read that raced a detach must not
        # leave with what it read.
        response = answer(request) if watch.intact() else None
        if response is None or not watch.intact():
            response = Response(request.id, STALE, message=watch.broken or "")
        output.send(response)


def _follow_until_done(
    reader: _Reader,
    output: _Output,
    watch: ViewWatch,
    answer: Callable[[Request], Response],
    done: _thread.LockType,
) -> None:
    try:
        _follow(reader, output, watch, answer)
    finally:
        done.release()


class _Unwatched:
    broken: str | None = None

    def intact(self) -> bool:
        return True


def _view(text: str) -> dict[str, list[str]]:
    """The confined helper's view (``launch.policy_view``, as JSON)."""
    # Here only: the confined helper is not locked out of its interpreter, and
    # the persistent one never needs json (which imports re).
    import json

    view = json.loads(text)
    if not isinstance(view, dict) or not all(
        isinstance(paths, list) and all(isinstance(path, str) for path in paths)
        for paths in view.values()
    ):
        raise ValueError(f"fs helper: not a view: {text!r}")
    return view


def main(operations: Operations = OPERATIONS, argv: list[str] | None = None) -> int:
    """``serve <private runtime dir>`` or ``confined <view as JSON>``. A test may run
    its own operations through the same program (its module calls ``main``)."""
    args = sys.argv[1:] if argv is None else argv
    # Below the daemon's event loop, as its commands are (execserver/priority.py).
    lower_self(nice_from_env(os.environ.get(NICE_ENV)))
    if len(args) != 2 or args[0] not in ("serve", "confined"):
        sys.stderr.write("usage: serve <private runtime dir> | confined <view as JSON>\n")
        return 2
    if args[0] == "serve":
        # Before anything is served: no /proc, no helper (the view cannot be checked).
        watch = MountWatch()
        lock_runtime(args[1])
        serve(watch=watch, operations=operations)
        return 0
    view = _view(args[1])
    # Used for one call: no long-lived namespace whose masks the host could
    # detach in between, so no mount watch (and no need for /proc).
    serve(
        watch=_Unwatched(),
        operations=operations,
        check=lambda request: confine(view, request.args),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
