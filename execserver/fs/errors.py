"""How fs/* reports OS errors, plus the fs-specific texts."""

from __future__ import annotations

import errno

from execserver.wire.errors import RpcError, os_error_text, rpc_error_from_os_error

__all__ = ["contains_symlink", "fs_error", "not_a_file", "not_a_regular_file"]


def fs_error(exc: OSError) -> RpcError:
    """The reference's code and message for an OSError of an fs operation.

    Rust reports EINVAL as ``InvalidInput``, which the reference maps to
    -32600 like permission errors (seen on fs/readBlock past 2^63).
    """
    if exc.errno == errno.EINVAL:
        return RpcError.invalid_request(os_error_text(errno.EINVAL))
    return rpc_error_from_os_error(exc)


def not_a_file(path: str) -> RpcError:
    return RpcError.invalid_request(f"path `{path}` is not a file")


def not_a_regular_file() -> RpcError:
    # The no-follow variant of fs/readFile words it without the path.
    return RpcError.invalid_request("path is not a regular file")


def contains_symlink() -> RpcError:
    return RpcError.invalid_request("path contains a symbolic link")
