"""fs/* requests, results and notifications.

Paths are ``file:`` URIs (strings here; converted by wire.uri). ``sandbox``
stays raw JSON and is decoded by execserver.sandbox with its own error texts.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from execserver.wire.base import U64, WireStruct, absent_raw

__all__ = [
    "CanonicalizeParams",
    "CanonicalizeResponse",
    "CloseParams",
    "CopyParams",
    "CreateDirectoryParams",
    "DirectoryEntry",
    "FileMetadata",
    "GetMetadataParams",
    "MissingChangedNotification",
    "OpenMode",
    "OpenParams",
    "OpenResponse",
    "ReadBlockParams",
    "ReadBlockResponse",
    "ReadDirectoryParams",
    "ReadDirectoryResponse",
    "ReadFileParams",
    "ReadFileResponse",
    "RemoveParams",
    "WalkOptions",
    "WalkOutcome",
    "WalkParams",
    "WatchMissingParams",
    "WatchMissingResponse",
    "WriteBlockParams",
    "WriteFileParams",
]

_NO_SANDBOX: msgspec.Raw = msgspec.field(default_factory=absent_raw)

# A serde unit-variant enum: "read", or the map form {"read": null} (wire.decode).
OpenMode = Literal["read", "replace"]


class ReadFileParams(WireStruct):
    path: str
    sandbox: msgspec.Raw = _NO_SANDBOX
    follow_symlinks: bool = True


class ReadFileResponse(WireStruct):
    data_base64: bytes


class WriteFileParams(WireStruct):
    path: str
    data_base64: str  # decoded by wire.rust.base64 (-32600 on bad input, as the reference)
    sandbox: msgspec.Raw = _NO_SANDBOX
    follow_symlinks: bool = True


class CreateDirectoryParams(WireStruct):
    path: str
    recursive: bool | None = None  # None means true
    sandbox: msgspec.Raw = _NO_SANDBOX
    follow_symlinks: bool = True


class GetMetadataParams(WireStruct):
    path: str
    sandbox: msgspec.Raw = _NO_SANDBOX
    follow_symlinks: bool = True


class FileMetadata(WireStruct):
    is_directory: bool
    is_file: bool
    is_symlink: bool
    size: int
    created_at_ms: int
    modified_at_ms: int


class CanonicalizeParams(WireStruct):
    path: str
    sandbox: msgspec.Raw = _NO_SANDBOX


class CanonicalizeResponse(WireStruct):
    path: str


class ReadDirectoryParams(WireStruct):
    path: str
    sandbox: msgspec.Raw = _NO_SANDBOX


class DirectoryEntry(WireStruct):
    file_name: str
    is_directory: bool
    is_file: bool


class ReadDirectoryResponse(WireStruct):
    entries: list[DirectoryEntry]


class WalkOptions(WireStruct):
    max_depth: U64
    max_directories: U64
    max_entries: U64
    follow_directory_symlinks: bool
    prune_hidden_directories: bool = False


class WalkParams(WireStruct):
    path: str
    options: WalkOptions
    sandbox: msgspec.Raw = _NO_SANDBOX


class WalkEntry(WireStruct):
    path: str
    kind: Literal["directory", "file"]


class WalkError(WireStruct):
    path: str
    message: str


class WalkOutcome(WireStruct):
    entries: list[WalkEntry]
    errors: list[WalkError]
    truncated: bool


class RemoveParams(WireStruct):
    path: str
    recursive: bool | None = None  # None means true
    force: bool | None = None  # None means true
    sandbox: msgspec.Raw = _NO_SANDBOX
    follow_symlinks: bool = True


class CopyParams(WireStruct):
    source_path: str
    destination_path: str
    recursive: bool
    sandbox: msgspec.Raw = _NO_SANDBOX


class OpenParams(WireStruct):
    handle_id: str
    path: str
    mode: OpenMode = "read"
    sandbox: msgspec.Raw = _NO_SANDBOX


class OpenResponse(WireStruct):
    handle_id: str


class ReadBlockParams(WireStruct):
    handle_id: str
    offset: U64
    len: U64


class ReadBlockResponse(WireStruct):
    chunk: bytes
    eof: bool


class WriteBlockParams(WireStruct):
    handle_id: str
    offset: U64
    chunk: str  # base64, decoded by wire.rust.base64 (-32602 on bad input)


class CloseParams(WireStruct):
    handle_id: str


class WatchMissingParams(WireStruct):
    watch_id: U64
    missing: list[str]
    present: str | None = None


class WatchMissingResponse(WireStruct):
    watching: bool


class MissingChangedNotification(WireStruct):
    watch_id: U64
