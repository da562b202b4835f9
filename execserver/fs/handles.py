"""Connection-scoped random-access file handles (fs/open ... fs/close).

At most 128 per connection, ids up to 32 bytes. A handle's fd is closed when
the handle is closed, when the connection ends (``aclose``), or — as the
reference does — when a readBlock on it fails. Block I/O runs in worker
threads; a handle in use by a worker is closed only once the worker is done,
so a concurrent fs/close can never make a worker touch a recycled fd.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from execserver.wire.errors import RpcError

__all__ = ["FileHandles"]

MAX_HANDLES = 128
MAX_HANDLE_ID_BYTES = 32


@dataclass
class OpenFile:
    fd: int
    users: int = 0
    closed: bool = False

    def close_when_idle(self) -> None:
        self.closed = True
        if self.users == 0 and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def unknown_handle(handle_id: str) -> RpcError:
    return RpcError.not_found(f"unknown file handle `{handle_id}`")


class FileHandles:
    def __init__(self) -> None:
        # None marks an id reserved by an fs/open still opening its file.
        self._files: dict[str, OpenFile | None] = {}

    def __len__(self) -> int:
        return len(self._files)

    def reserve(self, handle_id: str) -> None:
        if len(handle_id.encode("utf-8", errors="surrogatepass")) > MAX_HANDLE_ID_BYTES:
            raise RpcError.invalid_request("file handle ID must not exceed 32 bytes")
        if handle_id in self._files:
            raise RpcError.invalid_request(f"file handle `{handle_id}` already exists")
        if len(self._files) >= MAX_HANDLES:
            raise RpcError.invalid_request(
                f"at most {MAX_HANDLES} file handles may be open per connection"
            )
        self._files[handle_id] = None

    def install(self, handle_id: str, fd: int) -> None:
        self._files[handle_id] = OpenFile(fd)

    def unreserve(self, handle_id: str) -> None:
        if handle_id in self._files and self._files[handle_id] is None:
            del self._files[handle_id]

    def acquire(self, handle_id: str) -> OpenFile:
        handle = self._files.get(handle_id)
        if handle is None:
            raise unknown_handle(handle_id)
        handle.users += 1
        return handle

    def release(self, handle: OpenFile) -> None:
        handle.users -= 1
        if handle.closed:
            handle.close_when_idle()

    def discard(self, handle_id: str, handle: OpenFile | None = None) -> None:
        """Forget a handle (fs/close, or a failed read); unknown ids are fine."""
        current = self._files.get(handle_id)
        if current is None or (handle is not None and current is not handle):
            return
        del self._files[handle_id]
        current.close_when_idle()

    async def aclose(self) -> None:
        # Request tasks are cancelled and awaited before connection state closes,
        # and they release their handles only once their workers are done.
        for handle_id in list(self._files):
            self.discard(handle_id)
        self._files.clear()
