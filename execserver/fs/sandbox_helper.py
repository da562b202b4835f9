"""The persistent fs helper program (runs inside the sandbox; ``python -m
execserver.fs.sandbox_helper <private dir>``), started and spoken to by
``execserver.sandbox.fs_helper``.

Start-up order is the security argument:

1. import everything it will ever run (the interpreter and this package are
   reachable only under ``<private dir>``, read-only binds that are not part
   of the policy's view);
2. ``chmod 000 <private dir>``: the helper owns that directory, and with every
   capability dropped (``--cap-drop ALL``) not even uid 0 may traverse a mode
   000 directory — from now on no path a request names, symlinks included,
   reaches the runtime;
3. check that the lock holds (fail closed: exit 1 otherwise), then serve.

So what a request can reach is exactly the policy's mount view. The kernel
does every access check (EROFS outside writable roots, EACCES on denied
files, symlinks resolved inside the view), as in the one-shot helper.

Protocol: see ``execserver.sandbox.fs_helper.protocol``. Only the operations
in ``OPERATIONS`` exist; the request cannot name code to import.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from execserver.fs import handle_io, ops_read, ops_write, walk
from execserver.sandbox.fs_helper.protocol import (
    FAILED,
    HEADER,
    OK,
    OS_ERROR,
    RPC_ERROR,
    Request,
    Response,
    frame,
    request_decoder,
)
from execserver.wire.errors import RpcError

__all__ = ["OPERATIONS", "run"]

OPERATIONS: Final[dict[str, Callable[..., Any]]] = {
    "read_file": ops_read.read_file_bytes,
    "get_metadata": ops_read.get_metadata,
    "canonicalize": ops_read.canonicalize,
    "read_directory": ops_read.read_directory,
    "walk": walk.walk,
    "write_file": ops_write.write_file_bytes,
    "create_directory": ops_write.create_directory,
    "remove": ops_write.remove,
    "copy": ops_write.copy,
    "open_for_handle": handle_io.open_for_handle,
}
# Enough for a blocked operation (a fifo, a hung network mount) not to stall the
# rest; a new helper is cheap compared with an unbounded thread count.
_WORKERS: Final = 4


def run(request: Request) -> Response:
    func = OPERATIONS.get(request.op)
    if func is None:
        return Response(request.id, FAILED, message=f"unknown fs helper operation {request.op!r}")
    try:
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
        self._lock = threading.Lock()

    def send(self, response: Response) -> None:
        data = memoryview(frame(response))
        with self._lock:
            while data:
                data = data[os.write(self._fd, data) :]


def _answer(output: _Output, request: Request) -> None:
    output.send(run(request))


def lock_runtime(private_dir: str) -> None:
    os.chmod(private_dir, 0)
    try:
        os.listdir(private_dir)
    except PermissionError:
        return
    raise SystemExit(f"fs helper: cannot hide its runtime at {private_dir} (capabilities left?)")


def serve(in_fd: int = 0, out_fd: int = 1) -> None:
    source = os.fdopen(in_fd, "rb", closefd=False)
    output = _Output(out_fd)
    with ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="fs-helper") as pool:
        while True:
            header = source.read(HEADER.size)
            if len(header) < HEADER.size:
                return  # the daemon closed the pipe: exit quietly
            (size,) = HEADER.unpack(header)
            body = source.read(size)
            if len(body) < size:
                return
            pool.submit(_answer, output, request_decoder.decode(body))


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write("usage: serve <private runtime dir>\n")
        return 2
    lock_runtime(sys.argv[1])
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
