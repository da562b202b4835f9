"""What the fs handlers receive: params checked the way the reference checks them
while decoding (URI syntax, the sandbox's shape, base64 of fs/writeBlock), before
the lifecycle check, with the decoded parts kept so nothing is decoded twice.

Numbers (u64 members) and ``fs/open``'s ``mode`` are already typed and checked by
the params decoder (wire/decode.py); a non-local ``file://host/`` is refused
later, by ``native_path`` in the handler, as the reference does.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import msgspec

from execserver.fs.paths import validate_path_uri
from execserver.wire.errors import RpcError
from execserver.wire.fs import CopyParams, WatchMissingParams, WriteBlockParams
from execserver.wire.rust.base64 import Base64Error, decode_base64
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_param

__all__ = [
    "BlockWrite",
    "PathRequest",
    "check_copy",
    "check_path",
    "check_watch",
    "decode_block",
]


class _PathParams(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def sandbox(self) -> msgspec.Raw: ...


class _SandboxParams(Protocol):
    @property
    def sandbox(self) -> msgspec.Raw: ...


P = TypeVar("P", bound=_PathParams)
S = TypeVar("S", bound=_SandboxParams)


# msgspec Structs: built once per request, and a third of a frozen dataclass's cost.
class PathRequest(msgspec.Struct, Generic[S], frozen=True, gc=False):
    """fs params with their sandbox decoded (``None``: no sandbox)."""

    params: S
    sandbox: FileSystemSandboxContext | None


class BlockWrite(msgspec.Struct, frozen=True, gc=False):
    """fs/writeBlock params with the chunk decoded."""

    params: WriteBlockParams
    data: bytes


def check_path(params: P) -> PathRequest[P]:
    validate_path_uri(params.path)
    return PathRequest(params, decode_sandbox_param(params.sandbox))


def check_copy(params: CopyParams) -> PathRequest[CopyParams]:
    validate_path_uri(params.source_path)
    validate_path_uri(params.destination_path)
    return PathRequest(params, decode_sandbox_param(params.sandbox))


def decode_block(params: WriteBlockParams) -> BlockWrite:
    try:
        return BlockWrite(params, decode_base64(params.chunk))
    except Base64Error as exc:
        raise RpcError.invalid_params(str(exc)) from None


def check_watch(params: WatchMissingParams) -> WatchMissingParams:
    for uri in params.missing:
        validate_path_uri(uri)
    if params.present is not None:
        validate_path_uri(params.present)
    return params
