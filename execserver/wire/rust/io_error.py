"""Rust's ``std::io::Error`` display text for an OS error."""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["os_error_text"]

# The reference prints OS errors the way Rust's std::io::Error does:
# "<strerror text> (os error N)". Rust's strerror texts differ from glibc's in
# a few places, so the common ones are spelled here as Rust spells them.
_RUST_OS_ERROR_TEXT: Final[dict[int, str]] = {
    errno.ENOENT: "No such file or directory",
    errno.EACCES: "Permission denied",
    errno.EPERM: "Operation not permitted",
    errno.EROFS: "Read-only file system",
    errno.EEXIST: "File exists",
    errno.ENOTDIR: "Not a directory",
    errno.EISDIR: "Is a directory",
    errno.ENOTEMPTY: "Directory not empty",
    errno.ELOOP: "Symbolic link loop",
    errno.EBADF: "Bad file descriptor",
    errno.EINVAL: "Invalid argument",
    errno.ENOSPC: "No space left on device",
    errno.EXDEV: "Invalid cross-device link",
    errno.ENAMETOOLONG: "File name too long",
    errno.ETXTBSY: "Text file busy",
    errno.ENOEXEC: "Exec format error",
    errno.E2BIG: "Argument list too long",
    errno.EMFILE: "Too many open files",
    errno.ENOMEM: "Out of memory",
    errno.EAGAIN: "Resource temporarily unavailable",
}


def os_error_text(err: int) -> str:
    """``"No such file or directory (os error 2)"`` for errno 2, as Rust prints it."""
    text = _RUST_OS_ERROR_TEXT.get(err) or os.strerror(err)
    return f"{text} (os error {err})"
